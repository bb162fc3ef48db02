"""test_packaging -- `pip install ./python` works offline (no index, no
build isolation needed: setup.cfg with Debian's setuptools) and the
installed package finds the library through $WEIGHTSTORE_LIB."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")


def test_offline_pip_install(tmp_path):
    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode != 0:
        pytest.skip("pip is not installed for this interpreter")
    src = tmp_path / "src"  # a copy: the build must not write into the shared source tree
    shutil.copytree(PYTHON_DIR, src, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--quiet",
                        "--target", str(target), str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    code = ("import weightstore, weightstore._lib as l; "
            "print(weightstore.__file__); print(l.load().path)")
    env = dict(os.environ, PYTHONPATH=str(target))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    where, lib = r.stdout.split()
    assert where.startswith(str(target))
    assert os.path.samefile(lib, os.environ["WEIGHTSTORE_LIB"])

"""test_quickstart -- the Quickstart code block of python/README.md, and its
copy in the project's README ("From Python"), run as written against a fresh
master (only its address, the literal
127.0.0.1:7600 of `make run`, is replaced by the test master's) and prints
what it says it does."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
READMES = {  # file -> the heading the block sits under
    os.path.join(ROOT, "python", "README.md"): "## Quickstart",
    os.path.join(ROOT, "README.md"): "### From Python",
}
DEFAULT_ADDRESS = '"127.0.0.1:7600"'


def quickstart_code(readme: str) -> str:
    with open(readme) as f:
        text = f.read()
    heading = READMES[readme]
    assert heading in text, f"{readme} has no {heading}"
    section = text.split(heading, 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks, f"{readme} has no python block under {heading}"
    return blocks[0]


@pytest.mark.parametrize("readme", sorted(READMES))
def test_readme_quickstart_runs(fresh_master, tmp_path, readme):
    code = quickstart_code(readme)
    assert DEFAULT_ADDRESS in code
    script = tmp_path / "quickstart.py"
    script.write_text(code.replace(DEFAULT_ADDRESS, f'"{fresh_master.address}"'))
    python_dir = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")
    env = dict(os.environ, PYTHONPATH=python_dir)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "llm/tiny/py@1 READY HOT" in out
    assert "layers.0.o_proj.weight F32 (256, 64) zero-copy" in out
    assert "embed.weight F32 (256, 256) zero-copy" in out
    assert "layers.0.norm.weight F32 (256,) zero-copy" in out
    assert "migration SUCCEEDED" in out
    assert "refused: STALE_GENERATION" in out
    assert out.rstrip().splitlines()[-1] in ("DELETING", "DELETED")

"""test_quickstart -- the Quickstart code block of python/README.md runs as
written against a fresh master (only its address, the literal
127.0.0.1:7600 of `make run`, is replaced by the test master's) and prints
what it says it does."""
from __future__ import annotations

import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python", "README.md")
DEFAULT_ADDRESS = '"127.0.0.1:7600"'


def quickstart_code() -> str:
    with open(README) as f:
        text = f.read()
    section = text.split("## Quickstart", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks, "python/README.md has no python block under ## Quickstart"
    return blocks[0]


def test_readme_quickstart_runs(fresh_master, tmp_path):
    code = quickstart_code()
    assert DEFAULT_ADDRESS in code
    script = tmp_path / "quickstart.py"
    script.write_text(code.replace(DEFAULT_ADDRESS, f'"{fresh_master.address}"'))
    python_dir = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")
    env = dict(os.environ, PYTHONPATH=python_dir)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "llm/tiny/v1@1 READY HOT" in out
    assert "layers.0.o_proj.weight F32 (256, 64) zero-copy" in out
    assert "embed.weight F32 (256, 256) zero-copy" in out
    assert "migration SUCCEEDED" in out
    assert "refused: STALE_GENERATION" in out
    assert out.rstrip().splitlines()[-1] in ("DELETING", "DELETED")

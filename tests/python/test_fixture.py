"""test_fixture -- the test master itself: it leaves nothing behind (no
process, no data or /dev/shm directory) after stop(), and a master that
refuses its config is reported with its log and cleaned up too."""
from __future__ import annotations

import os

import pytest

from master import Master


def test_stop_leaves_nothing_behind():
    m = Master().start()
    pid, dirs = m.proc.pid, (m.dir, m.shm_dir)
    assert os.path.exists(m.segment_path)
    m.stop()
    assert not any(os.path.exists(d) for d in dirs)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_refused_config_is_reported_and_cleaned_up():
    m = Master(extra="no_such_key: 1\n")
    with pytest.raises(RuntimeError, match="no_such_key"):
        m.start()
    assert not os.path.exists(m.dir) and not os.path.exists(m.shm_dir)


def test_embedded_node_registers_when_the_master_picks_its_port():
    """listen.tcp on port 0: the embedded node dials the port the master
    bound (it was handed ":0" and never registered)."""
    m = Master(port=0).start(timeout=15.0)
    try:
        assert not m.address.endswith(":0")
        assert os.path.exists(m.segment_path)
    finally:
        m.stop()

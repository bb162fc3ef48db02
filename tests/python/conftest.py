"""conftest -- fixtures of the Python tests: a real store_master per test
module (`master`), a fresh one per test (`fresh_master`), and a WeightStore
on the module's master (`store`). The package is imported from python/ in
this checkout, so the tests need no install; the library comes from
$WEIGHTSTORE_LIB, and the master from $BUILD_DIR (see master.py)."""
from __future__ import annotations

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, HERE)

from master import Master  # noqa: E402

import weightstore  # noqa: E402


@pytest.fixture(scope="module")
def master():
    m = Master()
    m.start()
    yield m
    m.stop()


@pytest.fixture
def fresh_master():
    m = Master()
    m.start()
    yield m
    m.stop()


@pytest.fixture
def store(master):
    with weightstore.WeightStore(master.address) as s:
        yield s

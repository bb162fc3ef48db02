"""master -- a real store_master for the Python tests (and the bench).

A Master writes its own config into a fresh temporary directory -- control
RPC on a free 127.0.0.1 port (found by binding port 0; the master's own
port-0 support cannot be used: its embedded node dials the configured
address, port 0, and never registers), admin
HTTP on 127.0.0.1:0, its own data_dir, the real weight_mgmt.so, and an
embedded node whose segment file lives in its own directory under /dev/shm
with a node id unique to this process -- starts BUILD_DIR/bin/store_master,
waits until its "serving:" line names the ports, the node's segment shows
in /metrics (store_memory_capacity_bytes) and a WeightStore can answer a call, and on stop() sends SIGTERM (SIGKILL after a grace period) and
removes both directories. The child gets PR_SET_PDEATHSIG, so it never
outlives the test process even when that is killed.
"""
from __future__ import annotations

import ctypes
import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request

_seq = itertools.count()


def build_dir() -> str:
    """BUILD_DIR, or the build tree $WEIGHTSTORE_LIB lies in."""
    d = os.environ.get("BUILD_DIR")
    if d:
        return d
    lib = os.environ.get("WEIGHTSTORE_LIB")
    if lib:
        return os.path.dirname(os.path.dirname(os.path.abspath(lib)))
    raise RuntimeError("set BUILD_DIR (or WEIGHTSTORE_LIB) to the CMake build directory")


class _PortTaken(Exception):
    pass


def free_port() -> int:
    """A loopback TCP port nobody listens on right now (bind port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Master:
    """One store_master with an embedded node (see the module comment).
    segment_bytes: the node's memory segment. residency: the cluster's
    default preferred residency ("hot" keeps revisions in the segment)."""

    def __init__(self, segment_bytes: int = 64 << 20, residency: str = "hot", extra: str = "",
                 port: int | None = None):
        self.build = build_dir()
        self.dir = tempfile.mkdtemp(prefix="wm-py-")
        self.shm_dir = tempfile.mkdtemp(prefix="wm-py-seg-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        self.node_id = f"py{os.getpid()}-{next(_seq)}"
        self.segment_path = os.path.join(self.shm_dir, self.node_id + ".seg")
        self.config = os.path.join(self.dir, "config.yaml")
        self.log = os.path.join(self.dir, "master.log")
        self.proc = None
        self.address = None
        self.admin = None
        self._settings = (segment_bytes, residency, extra)
        self._port = port  # None: a free port chosen here; 0: the master's choice

    def _write_config(self) -> None:
        segment_bytes, residency, extra = self._settings
        with open(self.config, "w") as f:
            f.write(
                "listen:\n"
                f"  tcp: \"127.0.0.1:{free_port() if self._port is None else self._port}\"\n"
                "  unix: \"\"\n"
                "  admin: \"127.0.0.1:0\"\n"
                f"data_dir: \"{self.dir}/data\"\n"
                "node:\n"
                "  embedded: true\n"
                f"  id: \"{self.node_id}\"\n"
                f"  segment_dir: \"{self.shm_dir}\"\n"
                f"  segment_bytes: {segment_bytes}\n"
                "cluster:\n"
                f"  default_weight_preferred_residency: {residency}\n"
                "plugins:\n"
                f"  - path: \"{self.build}/lib/weight_mgmt.so\"\n"
                + extra
            )

    def start(self, timeout: float = 30.0) -> "Master":
        """Start and wait until the master serves with its node registered
        (a port taken between its choice and the master's bind is chosen
        again, up to three times). Raises RuntimeError with the master's log
        when it does not serve."""
        for _ in range(3):
            try:
                return self._start_once(timeout)
            except _PortTaken:
                continue
        self.stop()
        raise RuntimeError("store_master could not bind a free port in three attempts")

    def _start_once(self, timeout: float) -> "Master":
        self._write_config()
        logf = open(self.log, "wb")  # this attempt's log only
        self.proc = subprocess.Popen([os.path.join(self.build, "bin", "store_master"), "--config", self.config],
                                     stdout=logf, stderr=logf, stdin=subprocess.DEVNULL,
                                     preexec_fn=_die_with_parent)
        logf.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                if "in use" in self.read_log().lower():
                    self._terminate()
                    raise _PortTaken()
                log, status = self.read_log(), self.proc.returncode
                self.stop()
                raise RuntimeError(f"store_master exited with {status}:\n{log}")
            m = re.findall(r"serving: rpc tcp port (\d+), unix \S+, admin port (\d+)", self.read_log())
            if m:
                self.address = f"127.0.0.1:{m[-1][0]}"
                self.admin = f"127.0.0.1:{m[-1][1]}"
                if self._segment_registered() and self._answers():
                    return self
            time.sleep(0.02)
        log = self.read_log()
        self.stop()
        raise RuntimeError(f"store_master did not serve within {timeout} s:\n{log}")

    def metrics(self) -> str:
        """The admin endpoint's /metrics text."""
        no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, never a proxy
        with no_proxy.open(f"http://{self.admin}/metrics", timeout=5) as r:
            return r.read().decode()

    def _segment_registered(self) -> bool:
        try:
            m = re.search(r"^store_memory_capacity_bytes (\d+)", self.metrics(), re.M)
        except OSError:
            return False
        return bool(m) and int(m.group(1)) > 0

    def _answers(self) -> bool:
        import weightstore
        try:
            with weightstore.WeightStore(self.address) as s:
                s.weight_list(limit=1)
            return True
        except weightstore.WeightStoreError:
            return False

    def read_log(self) -> str:
        try:
            with open(self.log, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM, SIGKILL after 10 s; then remove the directories."""
        self._terminate()
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(self.shm_dir, ignore_errors=True)

    def _terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> "Master":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

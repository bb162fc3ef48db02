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

With tls=True the Master makes a CA and certificates in its directory
(make_certs, the openssl CLI) and serves its TCP port, its embedded node's
data port and its admin endpoint with TLS 1.3 (tls.cert, tls.key and
tls.ca; with verify_clients=True also tls.verify_clients). The harness then
speaks TLS itself: metrics() over HTTPS trusting the CA (presenting the
client certificate when clients are verified), and its readiness call
through a WeightStore given store_tls().
"""
from __future__ import annotations

import ctypes
import itertools
import os
import re
import shutil
import ssl
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request

_seq = itertools.count()


def build_dir() -> str:
    """BUILD_DIR (made absolute: the master runs in its own directory),
    or the build tree $WEIGHTSTORE_LIB lies in."""
    d = os.environ.get("BUILD_DIR")
    if d:
        return os.path.abspath(d)
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


def make_certs(directory: str) -> dict:
    """Make a test CA (ca.pem), a server certificate it signs for 127.0.0.1
    and localhost (server.pem / server.key), a client certificate it signs
    (client.pem / client.key) and an unrelated CA (other-ca.pem) in
    directory, with the openssl CLI (as tests/integration/harness.c
    hx_make_certs). Returns {name: path} of those files; raises
    subprocess.CalledProcessError with openssl's output when it fails."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    with open(os.path.join(directory, "san.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    steps = [
        ["req", "-x509", *ec, "-days", "2", "-subj", "/CN=py-test-ca", "-keyout", "ca.key", "-out", "ca.pem"],
        ["req", *ec, "-subj", "/CN=127.0.0.1", "-keyout", "server.key", "-out", "server.csr"],
        ["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
         "-days", "2", "-extfile", "san.ext", "-out", "server.pem"],
        ["req", *ec, "-subj", "/CN=client", "-keyout", "client.key", "-out", "client.csr"],
        ["x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
         "-days", "2", "-out", "client.pem"],
        ["req", "-x509", *ec, "-days", "2", "-subj", "/CN=other-ca", "-keyout", "other.key",
         "-out", "other-ca.pem"],
    ]
    for args in steps:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)
    files = {"ca": "ca.pem", "server": "server.pem", "server_key": "server.key", "client": "client.pem",
             "client_key": "client.key", "other_ca": "other-ca.pem"}
    return {k: os.path.join(directory, v) for k, v in files.items()}


def _die_with_parent():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def own_dir(path: str) -> None:
    """Mark a directory this process made as its own, as the C harness does
    (tests/integration/hx_leftovers.c): an owner file naming the pid and the
    process's start time, so that the next C test process removes the
    directory should this one be killed before stop()."""
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tmp = os.path.join(path, ".owner.tmp")
    with open(tmp, "w") as f:
        f.write(f"{os.getpid()} {fields[19]}\n")
    os.rename(tmp, os.path.join(path, ".owner"))


class Master:
    """One store_master with an embedded node (see the module comment).
    segment_bytes: the node's memory segment. residency: the cluster's
    default preferred residency ("hot" keeps revisions in the segment)."""

    def __init__(self, segment_bytes: int = 64 << 20, residency: str = "hot", extra: str = "",
                 port: int | None = None, tls: bool = False, verify_clients: bool = False):
        self.build = build_dir()
        self.dir = tempfile.mkdtemp(prefix="wm-py-")
        self.shm_dir = tempfile.mkdtemp(prefix="wm-py-seg-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        own_dir(self.dir)
        own_dir(self.shm_dir)
        self.node_id = f"py{os.getpid()}-{next(_seq)}"
        self.segment_path = os.path.join(self.shm_dir, self.node_id + ".seg")
        self.config = os.path.join(self.dir, "config.yaml")
        self.log = os.path.join(self.dir, "master.log")
        self.proc = None
        self.address = None
        self.admin = None
        self._settings = (segment_bytes, residency, extra)
        self._port = port  # None: a free port chosen here; 0: the master's choice
        self.certs = None  # with tls: make_certs' files
        if tls:
            try:
                os.mkdir(os.path.join(self.dir, "tls"))
                self.certs = make_certs(os.path.join(self.dir, "tls"))
            except BaseException:
                self.stop()
                raise
        self.verify_clients = verify_clients and tls

    def store_tls(self) -> dict:
        """The WeightStore keyword arguments that reach this master: its CA,
        and the client certificate when it verifies clients ({} without
        TLS)."""
        if self.certs is None:
            return {}
        kw = {"tls_ca": self.certs["ca"]}
        if self.verify_clients:
            kw.update(tls_cert=self.certs["client"], tls_key=self.certs["client_key"])
        return kw

    def _tls_config(self) -> str:
        if self.certs is None:
            return ""
        # tls.ca too: the embedded node dials the TCP port and must trust
        # the CA (alone, it would trust server.pem, which a CA signed, and
        # fail with "unknown ca")
        text = (f"tls:\n  cert: \"{self.certs['server']}\"\n  key: \"{self.certs['server_key']}\"\n"
                f"  ca: \"{self.certs['ca']}\"\n")
        if self.verify_clients:
            text += "  verify_clients: true\n"
        return text

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
                + self._tls_config()
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
        """The admin endpoint's /metrics text (over HTTPS, trusting the
        test CA, when the master serves TLS)."""
        handlers = [urllib.request.ProxyHandler({})]  # loopback, never a proxy
        scheme = "http"
        if self.certs is not None:
            ctx = ssl.create_default_context(cafile=self.certs["ca"])
            ctx.minimum_version = ssl.TLSVersion.TLSv1_3
            if self.verify_clients:
                ctx.load_cert_chain(self.certs["client"], self.certs["client_key"])
            handlers.append(urllib.request.HTTPSHandler(context=ctx))
            scheme = "https"
        with urllib.request.build_opener(*handlers).open(f"{scheme}://{self.admin}/metrics", timeout=5) as r:
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
            with weightstore.WeightStore(self.address, **self.store_tls()) as s:
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

#!/usr/bin/python3
"""bench_python_get.py -- Python weight_get of a HOT revision (numpy out),
next to the C client's weight_get of the same revision in the same run.

Starts a real store_master (tests/python/master.py: free loopback port, its
own data directory and /dev/shm segment directory) whose embedded node has
the default segment size, 1 GiB, and publishes one revision of BF16 tensors
of 64 MiB each: 1 GiB if the segment holds it, else the largest multiple of
64 MiB that fits (a 1 GiB segment also has to hold the manifest, so this is
normally 960 MiB; the line "revision:" says which). Then, each the best of
five runs after one warm-up:

  C client      weight_get of the whole revision by libweightclient into
                caller buffers that were touched beforehand (one ctypes call,
                no Python callback: placement NULL, bindings an array) --
                what bench_weight_get measures;
  zero-copy     WeightStore.weight_get (the default): numpy views of the
                segment, every object verified first (on the store's
                threads, as many as the C client's get uses), lease
                released at the end of the timing;
  bindings      WeightStore.weight_get(bindings=...) into pre-touched numpy
                arrays (the same copy the C client does);
  new arrays    WeightStore.weight_get(zero_copy=False): the library copies
                into fresh numpy arrays (their page faults count), compared
                with the C client into buffers allocated for the call.

Each Python line prints its GiB/s and the ratio to its C partner (the
target is >= 0.9 for the default path). Usage (not part of the test suite):

  WEIGHTSTORE_LIB=build/lib/libweightclient.so BUILD_DIR=build \\
      /usr/bin/python3 bench/bench_python_get.py
"""
from __future__ import annotations

import ctypes
import gc
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(REPO, "python"), os.path.join(REPO, "tests", "python")]

import numpy as np  # noqa: E402

import weightstore as ws  # noqa: E402
from master import Master  # noqa: E402
from weightstore import _lib  # noqa: E402

SEGMENT = 1 << 30          # the node's default segment_bytes
ROWS, COLS = 4096, 8192    # BF16: 64 MiB per tensor
TENSOR = ROWS * COLS * 2
RUNS = 5


def best(fn, runs=RUNS):
    """Seconds of the fastest of `runs` calls of fn, after one warm-up."""
    fn()
    times = []
    for _ in range(runs):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def publish(src):
    """A running master holding the largest revision of n 64 MiB tensors its
    segment takes, from 1 GiB down (each attempt on a fresh master: a failed
    import's space is given back asynchronously). Returns (master, identity, n)."""
    for n in range(SEGMENT // TENSOR, 0, -1):
        m = Master(segment_bytes=SEGMENT, residency="hot").start()
        ident = ws.WeightIdentity("bench", "python-get", "v1", 1)
        try:
            with ws.WeightStore(m.address) as store:
                store.weight_put(ident, {f"t{k}": (src[k], "BF16") for k in range(n)}).commit()
            return m, ident, n
        except ws.WeightStoreError as e:
            print(f"({n * TENSOR >> 20} MiB does not fit: {e.name})")
            m.stop()
    raise SystemExit("the segment holds not even one 64 MiB tensor")


def c_client_get(lib, store_ptr, ident, names, buffers):
    """libweightclient's weight_get into `buffers` (no Python in its loop)."""
    cid = ws.types._identity_to_c(ident)
    arr = (_lib.Binding * len(names))()
    for i, (n, b) in enumerate(zip(names, buffers)):
        arr[i] = _lib.Binding(n.encode(), b.ctypes.data, b.nbytes)
    bd = _lib.Bindings(arr, len(names), _lib.PROVIDE_FN(), None)
    stats = _lib.GetStats()

    def run():
        rc = lib.weight_get(store_ptr, cid, None, ctypes.byref(bd), ctypes.byref(stats))
        if rc < 0:
            raise SystemExit(f"weight_get: {lib.weight_error_name(rc).decode()}: "
                             f"{lib.weight_store_last_error(store_ptr).decode()}")
        return stats

    return run


def main():
    rng = np.random.default_rng(1)
    src = [rng.integers(0, 1 << 16, (ROWS, COLS), dtype=np.uint16) for _ in range(SEGMENT // TENSOR)]
    m, ident, n = publish(src)
    try:
        run(m, ident, n, src)
    finally:
        m.stop()


def run(m, ident, n, src):
    """The four measurements on master m holding revision ident of n tensors."""
    with ws.WeightStore(m.address) as store:
        total = n * TENSOR
        gib = total / (1 << 30)
        why = "" if n * TENSOR == SEGMENT else " (1 GiB does not fit: the 1 GiB segment also holds the manifest)"
        print(f"revision: {n} BF16 tensors of 64 MiB = {total >> 20} MiB{why}")
        names = [f"t{k}" for k in range(n)]

        # C client: the library alone, into touched buffers.
        cbuf = [np.ones((ROWS, COLS), np.uint16) for _ in range(n)]
        run_c = c_client_get(store._lib, store._h.ptr, ident, names, cbuf)
        t_c = best(run_c)
        st = run_c()
        assert st.local_bytes == total, "the C client did not read through the mapped segment"
        for k in (0, n - 1):
            assert np.array_equal(cbuf[k], src[k])
        print(f"C client     weight_get:             {gib / t_c:7.2f} GiB/s  ({t_c * 1e3:7.1f} ms)")

        # The C client into buffers allocated for the call (untouched): the
        # fair partner of Python's "new arrays" line.
        def c_fresh():
            fresh = [np.empty((ROWS, COLS), np.uint16) for _ in range(n)]
            c_client_get(store._lib, store._h.ptr, ident, names, fresh)()

        t_cf = best(c_fresh)
        print(f"C client     weight_get, new buffers: {gib / t_cf:7.2f} GiB/s  ({t_cf * 1e3:7.1f} ms)")

        def zero_copy():
            load = store.weight_get(ident)
            assert load.zero_copy
            load.close()  # the views die with it: the lease is released here

        t_z = best(zero_copy)
        load = store.weight_get(ident)
        for k in (0, n - 1):
            assert np.array_equal(load[f"t{k}"].array, src[k])
        del load

        pbuf = {name: np.ones((ROWS, COLS), np.uint16) for name in names}
        t_b = best(lambda: store.weight_get(ident, bindings=pbuf).close())
        assert np.array_equal(pbuf["t0"], src[0])

        t_n = best(lambda: store.weight_get(ident, zero_copy=False).close())

        for label, t, base in (("zero-copy    weight_get (default):", t_z, t_c),
                               ("into bindings weight_get:          ", t_b, t_c),
                               ("new arrays   weight_get:           ", t_n, t_cf)):
            which = "C client" if base is t_c else "C client, new buffers"
            print(f"Python {label} {gib / t:7.2f} GiB/s  ({t * 1e3:7.1f} ms)  x{base / t:5.2f} of the {which}")
        ratio = t_c / t_z
        print(f"target: Python (default path) >= 0.9x the C client: {'met' if ratio >= 0.9 else 'NOT met'} "
              f"(x{ratio:.2f})")
        # the line bench/run_all.sh gathers into its summary table
        print(f"summary | Python weight_get zero-copy, {total >> 20} MiB | {gib / t_z:.2f} GiB/s | "
              f"C client {gib / t_c:.2f} GiB/s | x{ratio:.2f} | >= 0.9x")


if __name__ == "__main__":
    main()

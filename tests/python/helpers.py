"""helpers -- small tools the Python tests share: model tensors, a
safetensors writer, waiting for an operation, and the address ranges at
which a file is mapped into this process."""
from __future__ import annotations

import itertools
import json
import struct
import time

import numpy as np

import weightstore as ws

_names = itertools.count()


def unique(prefix: str) -> str:
    """A resource name not used before in this process."""
    return f"{prefix}{next(_names)}"


def model(seed: int = 0):
    """A small model: tensors of several dtypes and ranks, sizes that do not
    divide by 4 (so TP splits are uneven), a BF16 and an F8 tensor as raw
    bits. Returns {name: (array, dtype name or None)}."""
    rng = np.random.default_rng(seed)
    return {
        "embed.weight": (rng.standard_normal((50, 24)).astype(np.float32), None),
        "layers.0.q_proj.weight": (rng.standard_normal((24, 24)).astype(np.float16), None),
        "layers.0.o_proj.weight": (rng.standard_normal((24, 30)).astype(np.float32), None),
        "layers.0.norm.weight": (rng.standard_normal(24).astype(np.float64), None),
        "layers.0.mlp.weight": (rng.integers(0, 65535, (37, 16), dtype=np.uint16), "BF16"),
        "layers.0.scale": (rng.integers(0, 255, (19, 8), dtype=np.uint8), "F8_E4M3"),
        "step": (np.array(7, dtype=np.int64), None),
    }


def put_model(store, ident, tensors, aliases=None, policy=None):
    src = {n: (a, d) if d else a for n, (a, d) in tensors.items()}
    return store.weight_put(ident, src, aliases=aliases, policy=policy).commit()


def write_safetensors(path, tensors, metadata=None):
    """Write {name: (array, dtype name or None)} as a .safetensors file."""
    header = {}
    blobs = []
    off = 0
    for name, (arr, dt) in tensors.items():
        arr = np.asarray(arr)  # tobytes() is C order; ascontiguousarray would make 0-d 1-d
        dt = ws.tensors.dtype_name(arr, dt)
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + arr.nbytes]}
        blobs.append(arr.tobytes())
        off += arr.nbytes
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def wait_operation(store, op_id, timeout=60.0):
    """Poll weight_get_operation until the operation is terminal (a liveness
    bound, not a performance threshold)."""
    deadline = time.monotonic() + timeout
    while True:
        op = store.weight_get_operation(op_id)
        if op.done or time.monotonic() > deadline:
            return op
        time.sleep(0.05)


def wait_for(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def mapped_ranges(path):
    """[(start, end)] of this process's mappings of file `path`."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].strip() == path:
                a, b = parts[0].split("-")
                out.append((int(a, 16), int(b, 16)))
    return out


def inside(ranges, address, nbytes):
    return any(a <= address and address + nbytes <= b for a, b in ranges)

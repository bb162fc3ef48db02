"""test_abi -- the ctypes structs of weightstore._lib have the sizes and
field offsets of client/weightclient.h: a probe compiled against the header
prints them and the test compares (skipped without a C compiler)."""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess

import pytest

from weightstore import _lib

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER_DIR = os.path.join(os.path.dirname(os.path.dirname(HERE)), "client")

STRUCTS = {
    "weight_identity": _lib.Identity, "weight_policy": _lib.Policy, "weight_metadata": _lib.Metadata,
    "weight_operation": _lib.Operation, "weight_tensor_info": _lib.TensorInfo,
    "weight_tensor_place": _lib.TensorPlace, "weight_placement": _lib.Placement,
    "weight_binding": _lib.Binding, "weight_bindings": _lib.Bindings, "weight_get_stats": _lib.GetStats,
    "weight_list_query": _lib.ListQuery, "weight_upsert_claim": _lib.UpsertClaim,
    "weight_mapped_tensor": _lib.MappedTensor, "weight_tls_options": _lib.TlsOptions,
}


def test_struct_layouts_match_the_header(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the layout probe")
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "weightclient.h"', "int main(void) {"]
    for cname, py in STRUCTS.items():
        lines.append(f'printf("{cname} %zu\\n", sizeof({cname}));')
        for field, _ in py._fields_:
            lines.append(f'printf("{cname}.{field} %zu\\n", offsetof({cname}, {field}));')
    lines += ["return 0;", "}"]
    src = tmp_path / "probe.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "probe"
    subprocess.run([cc, "-std=c11", "-I", HEADER_DIR, str(src), "-o", str(exe)], check=True)
    got = dict(line.rsplit(" ", 1) for line in subprocess.run([str(exe)], capture_output=True, text=True,
                                                              check=True).stdout.splitlines())
    want = {}
    for cname, py in STRUCTS.items():
        want[cname] = str(ctypes.sizeof(py))
        for field, _ in py._fields_:
            want[f"{cname}.{field}"] = str(getattr(py, field).offset)
    assert got == want

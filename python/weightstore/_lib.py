"""_lib -- the ctypes mirror of client/weightclient.h and the loading of
libweightclient.so.

Every struct here has the field order and C types of its counterpart in
weightclient.h (tests/python/test_abi.py compiles a probe against the header
and compares sizes and offsets). The library is found, in this order, at
$WEIGHTSTORE_LIB (the full path of libweightclient.so), next to a build tree
this package sits in (<repo>/build*/lib/libweightclient.so, for a checkout),
and by the system loader (libweightclient.so on the linker path). Nothing in
this module is public: weightstore.store wraps it.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import threading

LIB_ENV = "WEIGHTSTORE_LIB"

WEIGHT_ID_MAX = 256

c_u64 = ctypes.c_uint64
c_u32 = ctypes.c_uint32
c_int = ctypes.c_int
c_char_p = ctypes.c_char_p
c_void_p = ctypes.c_void_p
c_size_t = ctypes.c_size_t


class Identity(ctypes.Structure):
    _fields_ = [
        ("tenant_id", ctypes.c_char * (WEIGHT_ID_MAX + 1)),
        ("namespace_id", ctypes.c_char * (WEIGHT_ID_MAX + 1)),
        ("resource_id", ctypes.c_char * (WEIGHT_ID_MAX + 1)),
        ("revision", ctypes.c_char * (WEIGHT_ID_MAX + 1)),
        ("generation", c_u64),
    ]


class Policy(ctypes.Structure):
    _fields_ = [
        ("preferred", c_int),
        ("mixed_hot_ratio", ctypes.c_double),
        ("mode", c_int),
    ]


class TlsOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_u32),
        ("ca", c_char_p),
        ("cert", c_char_p),
        ("key", c_char_p),
        ("server_name", c_char_p),
    ]


class Metadata(ctypes.Structure):
    _fields_ = [
        ("identity", Identity),
        ("policy", Policy),
        ("availability", c_int),
        ("residency", c_int),
        ("observed_hot_ratio", ctypes.c_double),
        ("metadata_generation", c_u64),
        ("operation_id", c_u64),
        ("manifest_key", ctypes.c_char * 1025),
        ("manifest_sha256", ctypes.c_uint8 * 32),
        ("payload_count", c_u64),
        ("logical_bytes", c_u64),
        ("affinity_count", c_u64),
        ("created_ms", c_u64),
        ("updated_ms", c_u64),
        ("last_access_ms", c_u64),
        ("active_leases", c_u32),
    ]


class MetadataMore(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_u32),
        ("degraded_from", c_int),
        ("degraded_from_hot_ratio", ctypes.c_double),
    ]


class Operation(ctypes.Structure):
    _fields_ = [
        ("id", c_u64),
        ("identity", Identity),
        ("kind", c_int),
        ("target", c_int),
        ("target_hot_ratio", ctypes.c_double),
        ("state", c_int),
        ("members_done", c_u64),
        ("members_total", c_u64),
        ("bytes_done", c_u64),
        ("bytes_total", c_u64),
        ("error", ctypes.c_char * 256),
        ("attempts", c_u32),
        ("created_ms", c_u64),
        ("updated_ms", c_u64),
    ]


class TensorInfo(ctypes.Structure):
    _fields_ = [
        ("name", c_char_p),
        ("dtype", c_char_p),
        ("item_size", c_u32),
        ("ndim", c_u32),
        ("shape", ctypes.POINTER(c_u64)),
        ("alias_of", c_char_p),
        ("attachment", c_int),  # since attachments; weight_get offers them only when asked
    ]


class TensorPlace(ctypes.Structure):
    _fields_ = [("kind", c_int), ("dim", c_u32), ("parts", c_u32), ("rank", c_u32)]


PLACE_FN = ctypes.CFUNCTYPE(c_int, c_void_p, ctypes.POINTER(TensorInfo), ctypes.POINTER(TensorPlace))
PROVIDE_FN = ctypes.CFUNCTYPE(c_int, c_void_p, ctypes.POINTER(TensorInfo), ctypes.POINTER(TensorPlace),
                              ctypes.POINTER(c_u64), c_u64, ctypes.POINTER(c_void_p))


class Placement(ctypes.Structure):
    _fields_ = [("place", PLACE_FN), ("ctx", c_void_p)]


class Binding(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("data", c_void_p), ("bytes", c_u64)]


class Bindings(ctypes.Structure):
    _fields_ = [
        ("buffers", ctypes.POINTER(Binding)),
        ("n_buffers", c_size_t),
        ("provide", PROVIDE_FN),
        ("ctx", c_void_p),
    ]


class GetStats(ctypes.Structure):
    _fields_ = [
        ("bytes", c_u64),
        ("tensors", c_u64),
        ("objects", c_u64),
        ("local_bytes", c_u64),
        ("verified_bytes", c_u64),
        ("ticket_refreshes", c_u64),
        ("prefaulted_bytes", c_u64),
    ]


class ListQuery(ctypes.Structure):
    _fields_ = [
        ("namespace_id", c_char_p),
        ("resource_id", c_char_p),
        ("limit", c_u32),
        ("include_deleted", c_int),  # flags: WEIGHT_LIST_DELETED | WEIGHT_LIST_IMPORTING
    ]


class UpsertClaim(ctypes.Structure):
    _fields_ = [
        ("request_id", ctypes.c_char * 129),
        ("base", Identity),
        ("target", Identity),
        ("mode", c_int),
        ("phase", c_int),
        ("expected_metadata_generation", c_u64),
        ("committed_watermark", c_u64),
        ("error", ctypes.c_char * 256),
        ("created_ms", c_u64),
        ("updated_ms", c_u64),
    ]


class MappedTensor(ctypes.Structure):
    """weight_mapped_tensor: one tensor of a weight_get_mapped view."""
    _fields_ = [
        ("name", c_char_p),
        ("dtype", c_char_p),
        ("item_size", c_u32),
        ("ndim", c_u32),
        ("shape", ctypes.POINTER(c_u64)),
        ("alias_of", c_char_p),
        ("bytes", c_u64),
    ]


_P = ctypes.POINTER

# name: (restype, argtypes)
_PROTOTYPES = {
    "weight_error_name": (c_char_p, [c_int]),
    "weight_identity_set": (c_int, [_P(Identity), c_char_p, c_char_p, c_char_p, c_char_p, c_u64]),
    "weight_identity_parse": (c_int, [c_char_p, c_char_p, _P(Identity), _P(c_int)]),
    "weight_identity_format": (c_int, [_P(Identity), c_char_p, c_size_t]),
    "weight_store_open": (c_int, [c_char_p, c_char_p, _P(Policy), _P(c_void_p), c_char_p, c_size_t]),
    "weight_store_open_token": (c_int, [c_char_p, c_char_p, c_char_p, _P(Policy), _P(c_void_p),
                                        c_char_p, c_size_t]),
    "weight_store_open_tls": (c_int, [c_char_p, c_char_p, c_char_p, _P(TlsOptions), _P(Policy),
                                      _P(c_void_p), c_char_p, c_size_t]),
    "weight_store_close": (None, [c_void_p]),
    "weight_store_last_error": (c_char_p, [c_void_p]),
    "weight_store_set_option": (c_int, [c_void_p, c_int, c_u64]),
    "weight_store_cancel": (None, [c_void_p]),
    "weight_put_begin": (c_int, [c_void_p, _P(Identity), _P(Policy), _P(c_void_p)]),
    "weight_writer_add_tensor": (c_int, [c_void_p, c_char_p, c_char_p, c_u32, _P(c_u64), c_void_p]),
    "weight_writer_add_fragment": (c_int, [c_void_p, c_char_p, c_char_p, c_u32, _P(c_u64),
                                           _P(c_u64), _P(c_u64), c_void_p]),
    "weight_writer_alias": (c_int, [c_void_p, c_char_p, c_char_p]),
    "weight_writer_add_attachment": (c_int, [c_void_p, c_char_p, c_char_p, c_u64]),
    "weight_writer_commit": (c_int, [c_void_p, _P(Metadata)]),
    "weight_writer_abort": (None, [c_void_p]),
    "weight_get": (c_int, [c_void_p, _P(Identity), _P(Placement), _P(Bindings), _P(GetStats)]),
    "weight_is_exist": (c_int, [c_void_p, _P(Identity), _P(c_int)]),
    "weight_get_metadata": (c_int, [c_void_p, _P(Identity), _P(Metadata), _P(Operation)]),
    "weight_get_metadata_more": (c_int, [c_void_p, _P(Identity), _P(Metadata), _P(Operation),
                                         _P(MetadataMore)]),
    "weight_get_size": (c_int, [c_void_p, _P(Identity), _P(c_u64)]),
    "weight_list": (c_int, [c_void_p, _P(ListQuery), c_char_p, _P(_P(Metadata)), _P(c_size_t),
                            c_char_p, c_size_t]),
    "weight_list_free": (None, [_P(Metadata)]),
    "weight_update_policy": (c_int, [c_void_p, _P(Identity), _P(Policy), c_u64, _P(Metadata)]),
    "weight_migrate": (c_int, [c_void_p, _P(Identity), c_int, ctypes.c_double, c_u64, _P(Operation)]),
    "weight_get_operation": (c_int, [c_void_p, c_u64, _P(Operation)]),
    "weight_remove": (c_int, [c_void_p, _P(Identity), c_u64, _P(Metadata)]),
    "weight_repair": (c_int, [c_void_p, _P(Identity), c_u64, _P(Operation)]),
    "weight_upsert": (c_int, [c_void_p, _P(Identity), c_u64, c_int, c_char_p, c_u64, _P(Policy),
                              c_u64, _P(UpsertClaim), _P(c_void_p)]),
    "weight_upsert_status": (c_int, [c_void_p, _P(Identity), _P(UpsertClaim)]),
}

# Idempotent management calls (a request id per intended change); absent
# from an older library, in which case a request_id is refused.
_REQUEST_PROTOTYPES = {
    "weight_update_policy_request": (c_int, [c_void_p, _P(Identity), _P(Policy), c_u64, c_char_p,
                                             _P(Metadata)]),
    "weight_migrate_request": (c_int, [c_void_p, _P(Identity), c_int, ctypes.c_double, c_u64, c_char_p,
                                       _P(Operation)]),
    "weight_remove_request": (c_int, [c_void_p, _P(Identity), c_u64, c_char_p, _P(Metadata)]),
}

# The zero-copy view (weight_get_mapped); absent from an older library, in
# which case weight_get always copies.
_OPTIONAL_PROTOTYPES = {
    "weight_get_mapped": (c_int, [c_void_p, _P(Identity), _P(c_void_p)]),
    "weight_mapped_count": (c_size_t, [c_void_p]),
    "weight_mapped_get_tensor": (c_int, [c_void_p, c_size_t, _P(MappedTensor)]),
    "weight_mapped_data": (c_int, [c_void_p, c_size_t, _P(c_void_p)]),
    "weight_mapped_status": (c_int, [c_void_p]),
    "weight_mapped_release": (None, [c_void_p]),
}

# Verification of a view's objects ahead of use on several threads; absent
# from an older library, in which case each object is verified on first use.
_MAPPED_VERIFY_PROTOTYPES = {
    "weight_mapped_verify": (c_int, [c_void_p, _P(c_size_t), c_size_t]),
}


def _candidates():
    """Paths to try, in order (see the module comment)."""
    env = os.environ.get(LIB_ENV)
    if env:
        return [env], True
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    # python/weightstore/_lib.py -> <repo>/build*/lib/libweightclient.so
    repo = os.path.dirname(os.path.dirname(here))
    for d in ["build"] + sorted(os.path.basename(p) for p in glob.glob(os.path.join(repo, "build*"))):
        p = os.path.join(repo, d, "lib", "libweightclient.so")
        if os.path.exists(p) and p not in out:
            out.append(p)
    found = ctypes.util.find_library("weightclient")
    out.append(found or "libweightclient.so")
    return out, False


_lock = threading.Lock()
_lib = None


def _bind_optional(lib, prototypes) -> bool:
    """Set the prototypes of a group of functions a library may lack; True
    when it has every one of them."""
    has_all = True
    for name, (res, args) in prototypes.items():
        fn = getattr(lib, name, None)
        if fn is None:
            has_all = False
            continue
        fn.restype = res
        fn.argtypes = args
    return has_all


def load():
    """The loaded library with its prototypes set (loaded once per process).
    Raises OSError naming every path tried when none loads."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        paths, from_env = _candidates()
        errors = []
        for p in paths:
            try:
                lib = ctypes.CDLL(p)
                break
            except OSError as e:
                errors.append(f"{p}: {e}")
        else:
            hint = "" if from_env else f" (set ${LIB_ENV} to the path of build/lib/libweightclient.so)"
            raise OSError("weightstore: cannot load libweightclient.so" + hint + ": " + "; ".join(errors))
        for name, (res, args) in _PROTOTYPES.items():
            fn = getattr(lib, name)
            fn.restype = res
            fn.argtypes = args
        lib.has_mapped = _bind_optional(lib, _OPTIONAL_PROTOTYPES)
        lib.has_mapped_verify = _bind_optional(lib, _MAPPED_VERIFY_PROTOTYPES)
        lib.has_request_ids = _bind_optional(lib, _REQUEST_PROTOTYPES)
        lib.path = p
        _lib = lib
        return lib

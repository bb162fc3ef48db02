"""store -- WeightStore, the Python face of libweightclient.

WeightStore holds one weight_store handle of the C library (one connection
to the master, its segment mappings) and offers the RFC's eleven calls:
weight_put, weight_get, weight_is_exist, weight_get_metadata,
weight_get_size, weight_list, weight_update_policy, weight_upsert,
weight_migrate, weight_get_operation, weight_remove -- and weight_repair,
the C library's explicit repair (weightctl repair). Everything else here
(writers, loads, list pages) is what those calls return.

Concurrency: the C handle is used by one thread at a time, so every call
takes the store's lock. Mutations are fenced: weight_update_policy,
weight_migrate, weight_repair, weight_remove and weight_upsert require the
expected_metadata_generation the caller read; none of them reads the
current one on the caller's behalf.

Lifetimes: closing the store (or leaving its `with` block) closes the
connection once nothing of it is in use. A zero-copy load does not depend
on the store: it owns its lease and its renewal (weight_get_mapped in the C
library; the segment mappings are the library's, shared by all views), and
the numpy arrays it hands out keep it alive; it is released when the last
of them is gone.
"""
from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Mapping
from typing import Dict, Iterator, List, Optional

import numpy as np

from . import _lib
from .errors import ConflictError, InvalidArgumentError, NotFoundError, NotReadyError, error_for
from .tensors import (PLACE_REPLICATED, PLACE_SKIP, HuggingFaceCheckpoint, LoadedTensor,
                      PlacementLike, TensorPlacement, TensorSpec, box, dtype_name, iter_attachment_source,
                      iter_tensor_source, numpy_dtype, resolve_placement)
from .types import (IdentityLike, WeightIdentity, WeightMetadata, WeightMetadataView, WeightOperation,
                    WeightResidencyState, WeightStoragePolicy, WeightUpsertClaim, WeightUpsertMode, WeightUpsertPhase,
                    _as_identity, _claim_from_c, _degraded_from_c, _identity_to_c, _metadata_from_c,
                    _operation_from_c, _policy_to_c)

TRANSPORT_AUTO, TRANSPORT_LOCAL, TRANSPORT_REMOTE = 0, 1, 2
_OPT_PAYLOAD_BYTES, _OPT_THREADS, _OPT_TRANSPORT, _OPT_LEASE_TTL_MS = 1, 2, 3, 4
_OPT_ATTACHMENTS = 6
# How many times a read of the newest generation (text without "@GENERATION")
# is tried, resolving it again each time a replacement retired the one read.
_NEWEST_ATTEMPTS = 5


def _request_id(lib, request_id: Optional[str], call: str) -> Optional[bytes]:
    """request_id as the C call takes it (None: none)."""
    if request_id is None:
        return None
    if not isinstance(request_id, str) or not 1 <= len(request_id.encode()) <= 128:
        raise InvalidArgumentError(f"{call}: request_id must be 1 to 128 bytes of text")
    if not lib.has_request_ids:
        raise InvalidArgumentError(f"{call}: this libweightclient has no request ids (too old)")
    return request_id.encode()


def _fence(value, call: str) -> int:
    """expected_metadata_generation as given by the caller: an int >= 1
    (0 would make the C library read the current one, which the RFC's
    compare-and-set forbids doing behind the caller's back)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(f"{call}: expected_metadata_generation must be the metadata "
                                   f"generation the caller read (an int >= 1), not {value!r}")
    return value


class _Handle:
    """The C weight_store and the lock serializing its use. Closed once,
    by close() or when garbage-collected."""

    def __init__(self, lib, ptr):
        self.lib = lib
        self.ptr = ptr
        self.lock = threading.RLock()

    def close(self):
        with self.lock:
            if self.ptr:
                self.lib.weight_store_close(self.ptr)
                self.ptr = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class WeightStore:
    """A connection to a Store Master's weight service.

    master: "host:port" or a Unix socket path. tenant_id: the tenant of
    identities that leave theirs empty (None: "default"). default_policy:
    this store's default (fields None: the cluster default decides).
    payload_bytes, threads, transport (0 auto, 1 local only, 2 TCP only)
    and lease_ttl_ms tune the C library (None: its defaults). token: the
    credential presented to a master with auth on (None: $WEIGHT_TOKEN when
    set); with a token, tenant_id None is the token's tenant. tls_ca,
    tls_cert, tls_key: TLS 1.3 to the master and to nodes whose data port
    speaks TLS, trusting the CA file tls_ca and presenting the client
    certificate tls_cert / tls_key when given (None: $WM_TLS_CA,
    $WM_TLS_CERT, $WM_TLS_KEY); tls_server_name: the name the master's
    certificate must carry when it is not the host dialled (None: that
    host). A bad file raises InvalidArgumentError naming it before anything
    connects. Usable as a context manager (closed on exit)."""

    def __init__(self, master: str, *, tenant_id: Optional[str] = None,
                 default_policy: Optional[WeightStoragePolicy] = None,
                 payload_bytes: Optional[int] = None, threads: Optional[int] = None,
                 transport: Optional[int] = None, lease_ttl_ms: Optional[int] = None,
                 token: Optional[str] = None, tls_ca: Optional[str] = None,
                 tls_cert: Optional[str] = None, tls_key: Optional[str] = None,
                 tls_server_name: Optional[str] = None):
        lib = _lib.load()
        ptr = ctypes.c_void_p()
        err = ctypes.create_string_buffer(1024)
        pol = _policy_to_c(default_policy)
        tls = None
        if any(v is not None for v in (tls_ca, tls_cert, tls_key, tls_server_name)):
            enc = [os.fsencode(v) if v is not None else None for v in (tls_ca, tls_cert, tls_key)]
            tls = _lib.TlsOptions(ctypes.sizeof(_lib.TlsOptions), *enc,
                                  tls_server_name.encode() if tls_server_name is not None else None)
        rc = lib.weight_store_open_tls(master.encode(),
                                       tenant_id.encode() if tenant_id else None,
                                       token.encode() if token is not None else None,
                                       ctypes.byref(tls) if tls is not None else None,
                                       ctypes.byref(pol) if pol is not None else None,
                                       ctypes.byref(ptr), err, len(err))
        if rc < 0:
            raise error_for(rc, lib.weight_error_name(rc).decode(), err.value.decode(errors="replace"))
        self._lib = lib
        self._h = _Handle(lib, ptr)
        self.master = master
        self._transport = transport or 0
        for opt, v in ((_OPT_PAYLOAD_BYTES, payload_bytes), (_OPT_THREADS, threads),
                       (_OPT_TRANSPORT, transport), (_OPT_LEASE_TTL_MS, lease_ttl_ms)):
            if v is not None:
                self._check(lib.weight_store_set_option(ptr, opt, v))

    # -- plumbing ------------------------------------------------------------

    def close(self) -> None:
        """Close the connection. Zero-copy loads already made stay valid."""
        self._h.close()

    def __enter__(self) -> "WeightStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _ptr(self):
        if not self._h.ptr:
            raise InvalidArgumentError("the WeightStore is closed")
        return self._h.ptr

    def _check(self, rc: int) -> int:
        if rc >= 0:
            return rc
        msg = self._lib.weight_store_last_error(self._h.ptr).decode(errors="replace") if self._h.ptr else ""
        raise error_for(rc, self._lib.weight_error_name(rc).decode(), msg)

    def _resolve(self, identity: IdentityLike) -> WeightIdentity:
        """identity as given; "NAMESPACE/RESOURCE/REVISION" text without
        "@GENERATION" names the revision's newest live generation, as
        weightctl info / get / rm ... take it: the highest generation
        weight_list shows (READY, DEGRADED or DELETING; neither an IMPORTING
        one nor a tombstone). NotFoundError when there is none."""
        if not isinstance(identity, str) or "@" in identity:
            return _as_identity(identity)
        try:
            base = WeightIdentity.parse(identity + "@1")
        except InvalidArgumentError:
            raise InvalidArgumentError(f"{identity!r} is not NAMESPACE/RESOURCE/REVISION[@GENERATION]") from None
        best = 0
        for md in self.weight_list(base.namespace, base.resource_id).revisions():
            if md.identity.revision == base.revision:
                best = max(best, md.identity.weight_generation)
        if not best:
            raise NotFoundError(f"{identity}: no live generation of that revision")
        return base.with_generation(best)

    def _on_newest(self, identity: IdentityLike, call, retired=None):
        """call(WeightIdentity) on identity; for text without "@GENERATION"
        on its newest live generation (_resolve), resolved again and called
        again -- up to _NEWEST_ATTEMPTS calls in all -- when the generation
        it read was retired meanwhile: the call raised NotReadyError (fenced
        by a replacement, or DELETED) or NotFoundError, or returned a result
        retired(result) takes for one, and the newest live generation is now
        a higher one. A trainer upserting a lineage replaces the newest
        generation between the listing and the lease; a reader that asked
        for "the newest" follows it rather than fail. Anything else, an
        explicit generation, or no higher generation to follow: the call's
        own result or error."""
        if not isinstance(identity, str) or "@" in identity:
            return call(_as_identity(identity))
        ident = self._resolve(identity)
        for attempt in range(1, _NEWEST_ATTEMPTS + 1):
            failure: Optional[BaseException] = None
            try:
                result = call(ident)
                if retired is None or not retired(result):
                    return result
            except (NotReadyError, NotFoundError) as e:
                failure = e
            if attempt < _NEWEST_ATTEMPTS:
                try:
                    newer = self._resolve(identity)
                except NotFoundError:
                    newer = ident
                if newer.weight_generation > ident.weight_generation:
                    ident = newer
                    continue
            if failure is not None:
                raise failure
            return result
        raise AssertionError("unreachable")

    def weight_upsert_status(self, lineage: IdentityLike) -> WeightUpsertClaim:
        """The current or last replacement claim of a lineage (weightctl
        upsert status): "NAMESPACE/RESOURCE/REVISION" or any generation of it
        (the generation is ignored: a lineage has one claim at a time), so a
        restarted trainer can see whether its claim is open (phase), who made
        it (request_id) and why an ABORTED one ended (error). NotFoundError
        when the lineage never had a claim."""
        if isinstance(lineage, str) and "@" not in lineage:
            lineage = lineage + "@1"
        cid = _identity_to_c(lineage)
        c = _lib.UpsertClaim()
        with self._h.lock:
            self._check(self._lib.weight_upsert_status(self._ptr(), cid, ctypes.byref(c)))
        return _claim_from_c(c)

    # -- the eleven calls ---------------------------------------------------------

    def weight_put(self, identity: IdentityLike, tensors=None, *, aliases: Optional[Dict[str, str]] = None,
                   policy: Optional[WeightStoragePolicy] = None) -> "WeightWriter":
        """Begin publishing revision `identity` and return its writer: add
        tensors (weight_put_tensor / weight_put_fragment / weight_put_alias,
        or `tensors` and `aliases` here), then commit() -- or use it as a
        context manager, which commits on a clean exit and aborts on an
        exception. tensors: a mapping name -> numpy array (or (array,
        "BF16")-style pairs for dtypes numpy lacks), a .safetensors path, a
        Hugging Face checkpoint directory (model.safetensors.index.json and
        its shards), or a list of those. policy None: the store's default, then the
        cluster's. The revision is invisible (IMPORTING) until commit
        publishes it READY. Raises ConflictError when the identity exists in
        another state, InvalidArgumentError, ..."""
        ident = _as_identity(identity)
        cid = _identity_to_c(ident)
        pol = _policy_to_c(policy)
        if isinstance(tensors, (str, os.PathLike)) and os.path.isdir(tensors):
            tensors = HuggingFaceCheckpoint(tensors)  # read once: tensors and attachments
        source = _checked_source(tensors)  # bad input fails before an import is begun
        attachments = list(iter_attachment_source(tensors))
        w = ctypes.c_void_p()
        with self._h.lock:
            self._check(self._lib.weight_put_begin(self._ptr(), cid, ctypes.byref(pol) if pol else None,
                                                   ctypes.byref(w)))
        writer = WeightWriter(self, ident, w)
        try:
            writer._keep.append(tensors)
            for name, arr, dt in source:
                writer.weight_put_tensor(name, arr, dt)
            for name, target in (aliases or {}).items():
                writer.weight_put_alias(name, target)
            for name, data in attachments:
                writer.weight_put_attachment(name, data)
        except BaseException:
            writer.abort()
            raise
        return writer

    def weight_get(self, identity: IdentityLike, placement: PlacementLike = None,
                   bindings: Optional[Dict[str, np.ndarray]] = None, *, zero_copy: bool = True) -> "WeightLoad":
        """Load revision `identity` under a revision lease, resharded to
        `placement` (None: every tensor whole; a mapping name ->
        TensorPlacement, others skipped; or a callable TensorSpec ->
        TensorPlacement or None to skip; see tensor_parallel()).

        bindings: name -> writable C-contiguous numpy array of at least the
        box's bytes: those tensors are copied into the caller's arrays. The
        other placed tensors are, when zero_copy and the revision's bytes are
        in a shared-memory segment on this host (HOT, co-located), read-only
        numpy views straight into that memory -- no byte is copied, and the
        returned WeightLoad holds the lease until it and every such array
        are gone; otherwise they are copied once into new numpy arrays.
        Every byte handed out was verified against the manifest's checksums.

        Raises NotFoundError, NotReadyError, LeaseExpiredError,
        InvalidArgumentError (placement or binding), DigestMismatchError,
        BusyError, WeightTransportError. Without "@GENERATION" a generation
        retired by a replacement while it was being loaded is followed to
        the newer one (_on_newest)."""
        bindings = dict(bindings or {})
        for name, arr in bindings.items():
            if not isinstance(arr, np.ndarray) or not arr.flags.c_contiguous or not arr.flags.writeable:
                raise InvalidArgumentError(f"binding {name!r}: not a writable C-contiguous numpy array")
        return self._on_newest(identity, lambda ident: self._load(ident, placement, bindings, zero_copy))

    def _load(self, ident: WeightIdentity, placement: PlacementLike, bindings: Dict[str, np.ndarray],
              zero_copy: bool) -> "WeightLoad":
        """weight_get of the exact revision ident (bindings checked)."""
        cid = _identity_to_c(ident)
        tensors: Dict[str, LoadedTensor] = {}
        mapped = None
        copy_names = None  # None: every placed tensor goes through weight_get
        if zero_copy and self._lib.has_mapped and self._transport != TRANSPORT_REMOTE:
            mapped = self._get_mapped(cid)
            copy_names = set()
            views = []  # (index, spec, placement) to read in place
            for index, spec, nbytes in mapped.tensors():
                try:
                    p = resolve_placement(placement, spec)
                except BaseException:
                    mapped.release()  # the traceback would keep the lease alive
                    raise
                if p.kind == PLACE_SKIP:
                    continue
                if spec.name in bindings:
                    copy_names.add(spec.name)
                elif nbytes == 0:  # nothing to view or copy
                    tensors[spec.name] = LoadedTensor(spec.name, spec.dtype, mapped.array(spec, None, p),
                                                      False, p, spec.shape)
                else:
                    views.append((index, spec, p))
            mapped.verify([index for index, _, _ in views])
            for index, spec, p in views:
                data = mapped.data(index)
                if data is None:
                    copy_names.add(spec.name)
                    continue
                tensors[spec.name] = LoadedTensor(spec.name, spec.dtype, mapped.array(spec, data, p),
                                                  True, p, spec.shape)
            if not any(t.zero_copy for t in tensors.values()):
                mapped.release()
                mapped = None
        if copy_names is None or copy_names:
            try:
                tensors.update(self._get_copy(cid, placement, bindings, copy_names))
            except BaseException:
                if mapped is not None:
                    mapped.release()  # the traceback would keep the lease alive
                raise
        return WeightLoad(ident, tensors, mapped)

    def weight_get_attachments(self, identity: IdentityLike,
                               names: Optional[List[str]] = None) -> Dict[str, bytes]:
        """The files stored with revision `identity` besides its tensors
        (config.json, tokenizer files, ...: weight_put_attachment, or a
        Hugging Face directory's other files), as name -> bytes, each
        verified against the manifest's checksums like a tensor. names: only
        these (NotFoundError naming those the revision does not have); None:
        all of them ({} for a revision without attachments).

        Raises NotFoundError, NotReadyError, LeaseExpiredError,
        DigestMismatchError, BusyError, WeightTransportError. Without
        "@GENERATION" a generation retired meanwhile is followed (_on_newest)."""
        return self._on_newest(identity, lambda ident: self._attachments(ident, names))

    def _attachments(self, identity: WeightIdentity, names: Optional[List[str]]) -> Dict[str, bytes]:
        """weight_get_attachments of the exact revision identity."""
        cid = _identity_to_c(identity)
        wanted = None if names is None else set(names)
        owned: Dict[str, np.ndarray] = {}
        seen: set = set()
        failure: List[BaseException] = []

        def place(_ctx, ti, out):
            t = ti.contents
            name = t.name.decode()
            take = bool(t.attachment) and (wanted is None or name in wanted)
            if take:
                seen.add(name)
            out.contents.kind = PLACE_REPLICATED if take else PLACE_SKIP
            out.contents.dim, out.contents.parts, out.contents.rank = 0, 1, 0
            return 0

        def provide(_ctx, ti, tp, local_shape, nbytes, out):
            try:
                arr = np.empty(nbytes, dtype=np.uint8)
                owned[ti.contents.name.decode()] = arr
                out[0] = arr.ctypes.data if nbytes else None
                return 0
            except BaseException as e:  # noqa: BLE001 -- re-raised after the C call
                failure.append(e)
                return InvalidArgumentError.code

        place_fn, provide_fn = _lib.PLACE_FN(place), _lib.PROVIDE_FN(provide)
        pl = _lib.Placement(place_fn, None)
        bd = _lib.Bindings((_lib.Binding * 1)(), 0, provide_fn, None)
        stats = _lib.GetStats()
        with self._h.lock:
            self._check(self._lib.weight_store_set_option(self._ptr(), _OPT_ATTACHMENTS, 1))
            try:
                rc = self._lib.weight_get(self._ptr(), cid, ctypes.byref(pl), ctypes.byref(bd),
                                          ctypes.byref(stats))
            finally:
                self._lib.weight_store_set_option(self._ptr(), _OPT_ATTACHMENTS, 0)
            if failure:
                raise failure[0]
            self._check(rc)
        if wanted is not None and wanted - seen:
            missing = ", ".join(repr(n) for n in sorted(wanted - seen))
            raise NotFoundError(f"{_as_identity(identity)} has no attachment {missing}")
        return {name: owned[name].tobytes() if name in owned else b"" for name in seen}

    def weight_is_exist(self, identity: IdentityLike) -> bool:
        """True only when the exact revision is READY and readable ("NS/RES/REV"
        without "@GENERATION": its newest live generation, followed to a
        newer one when a replacement retired it meanwhile; none: False)."""
        def exists(ident: WeightIdentity) -> bool:
            out = ctypes.c_int(0)
            with self._h.lock:
                self._check(self._lib.weight_is_exist(self._ptr(), _identity_to_c(ident), ctypes.byref(out)))
            return bool(out.value)
        try:
            return self._on_newest(identity, exists, retired=lambda found: not found)
        except NotFoundError:
            return False

    def weight_get_metadata(self, identity: IdentityLike) -> WeightMetadataView:
        """Metadata of a revision (tombstones included) and its active
        operation, if any. NotFoundError when it never existed. Without
        "@GENERATION": of the newest live generation, followed to a newer one
        when a replacement removed it meanwhile (_on_newest)."""
        def metadata(ident: WeightIdentity) -> WeightMetadataView:
            md, op = _lib.Metadata(), _lib.Operation()
            more = _lib.MetadataMore(struct_size=ctypes.sizeof(_lib.MetadataMore))
            with self._h.lock:
                self._check(self._lib.weight_get_metadata_more(self._ptr(), _identity_to_c(ident), ctypes.byref(md),
                                                               ctypes.byref(op), ctypes.byref(more)))
            return WeightMetadataView(_metadata_from_c(md), _operation_from_c(op) if op.id else None,
                                      *_degraded_from_c(more))
        return self._on_newest(identity, metadata)

    def weight_get_size(self, identity: IdentityLike) -> int:
        """The logical payload bytes validated when the revision was committed
        (without "@GENERATION": of the newest live generation, as _on_newest)."""
        def size(ident: WeightIdentity) -> int:
            out = ctypes.c_uint64(0)
            with self._h.lock:
                self._check(self._lib.weight_get_size(self._ptr(), _identity_to_c(ident), ctypes.byref(out)))
            return int(out.value)
        return self._on_newest(identity, size)

    def weight_list(self, namespace: Optional[str] = None, resource_id: Optional[str] = None, *,
                    limit: int = 0, include_deleted: bool = False, include_importing: bool = False,
                    page_token: Optional[str] = None) -> "WeightListPage":
        """One page of the tenant's revisions (of one namespace, and
        resource), without reading manifests. limit 0: the master's page
        size. include_deleted: tombstones too; include_importing: IMPORTING
        revisions too (imports not committed: a put in progress, or one
        whose writer died). The page iterates over its revisions;
        page.next_page() fetches the next one and page.pages() / page.revisions() walk all that follow."""
        if resource_id and not namespace:
            raise InvalidArgumentError("weight_list: resource_id needs namespace")
        q = _lib.ListQuery(namespace.encode() if namespace else None,
                           resource_id.encode() if resource_id else None, limit,
                           (1 if include_deleted else 0) | (2 if include_importing else 0))
        out = ctypes.POINTER(_lib.Metadata)()
        n = ctypes.c_size_t(0)
        nxt = ctypes.create_string_buffer(4096)
        with self._h.lock:
            self._check(self._lib.weight_list(self._ptr(), ctypes.byref(q),
                                              page_token.encode() if page_token else None,
                                              ctypes.byref(out), ctypes.byref(n), nxt, len(nxt)))
        try:
            items = [_metadata_from_c(out[i]) for i in range(n.value)]
        finally:
            self._lib.weight_list_free(out)
        args = dict(namespace=namespace, resource_id=resource_id, limit=limit, include_deleted=include_deleted,
                    include_importing=include_importing)
        return WeightListPage(self, items, nxt.value.decode() or None, args)

    def weight_update_policy(self, identity: IdentityLike, policy: WeightStoragePolicy, *,
                             expected_metadata_generation: int, request_id: Optional[str] = None) -> WeightMetadata:
        """Replace the revision's policy (fields None keep their value),
        fenced by expected_metadata_generation. Returns the updated
        metadata. StaleGenerationError when the revision changed since.
        request_id (weight_update_policy, weight_migrate and weight_remove):
        an id the caller picks once per intended change and repeats on each
        retry of it -- a retry whose first reply was lost then answers the
        first result instead of StaleGenerationError; the same id with other
        arguments is ConflictError."""
        cid = _identity_to_c(self._resolve(identity))
        gen = _fence(expected_metadata_generation, "weight_update_policy")
        rid = _request_id(self._lib, request_id, "weight_update_policy")
        pol = _policy_to_c(policy)
        if pol is None:
            raise InvalidArgumentError("weight_update_policy: policy is required")
        md = _lib.Metadata()
        with self._h.lock:
            if rid is None:
                rc = self._lib.weight_update_policy(self._ptr(), cid, ctypes.byref(pol), gen, ctypes.byref(md))
            else:
                rc = self._lib.weight_update_policy_request(self._ptr(), cid, ctypes.byref(pol), gen, rid,
                                                            ctypes.byref(md))
            self._check(rc)
        return _metadata_from_c(md)

    def weight_upsert(self, target, *, replacing: IdentityLike, expected_metadata_generation: int,
                      mode: WeightUpsertMode = WeightUpsertMode.PUT_FIRST, request_id: Optional[str] = None,
                      policy: Optional[WeightStoragePolicy] = None, tensors=None,
                      aliases: Optional[Dict[str, str]] = None, wait_ms: int = 0) -> "WeightUpsert":
        """Replace revision `replacing` by a higher generation of its lineage.
        target: the new generation (int) or its full identity (same lineage).
        The claim is made durable first; the returned WeightUpsert is the
        target's writer (add tensors, then commit, or use `with`) -- with
        nothing to write when a retried request already got past its import.
        request_id None: derived from base, target, mode and the expected
        generation, so a retry is the same request. See the C header for the
        PUT_FIRST / DELETE_FIRST sequences. replacing: an identity, or
        "NAMESPACE/RESOURCE/REVISION" for its newest live generation.
        wait_ms (0: no wait): while another request's claim of the lineage
        is open (CLAIMED .. DELETING_BASE), wait up to wait_ms for it to end
        (COMMITTED or ABORTED), then try; still open after wait_ms:
        ConflictError. With DELETE_FIRST it also bounds the wait for the
        base's deletion (0: 120 s). Raises StaleGenerationError,
        ConflictError (another claim is open, or this one was ABORTED),
        BusyError, NotFoundError, NotReadyError, ..."""
        base = self._resolve(replacing)
        if isinstance(target, WeightIdentity):
            # Same lineage; an empty tenant stands for the store's on either side.
            same_tenant = not target.tenant_id or not base.tenant_id or target.tenant_id == base.tenant_id
            if not same_tenant or target.lineage[1:] != base.lineage[1:]:
                raise InvalidArgumentError(f"weight_upsert: {target} is not of the lineage of {base}")
            gen_target = target.weight_generation
        elif isinstance(target, int) and not isinstance(target, bool):
            gen_target = target
        else:
            raise InvalidArgumentError(f"weight_upsert: target must be a generation or an identity, not {target!r}")
        cid = _identity_to_c(base)
        gen = _fence(expected_metadata_generation, "weight_upsert")
        pol = _policy_to_c(policy)
        source = _checked_source(tensors)
        claim = _lib.UpsertClaim()
        w = ctypes.c_void_p()
        if not isinstance(wait_ms, int) or isinstance(wait_ms, bool) or wait_ms < 0:
            raise InvalidArgumentError(f"weight_upsert: wait_ms {wait_ms!r} is not a number of milliseconds >= 0")
        deadline = time.monotonic() + wait_ms / 1000.0
        ended = None  # another request's claim seen ended after a CONFLICT
        while True:
            try:
                with self._h.lock:
                    self._check(self._lib.weight_upsert(self._ptr(), cid, gen_target, int(mode),
                                                        request_id.encode() if request_id else None, gen,
                                                        ctypes.byref(pol) if pol else None, wait_ms,
                                                        ctypes.byref(claim), ctypes.byref(w)))
                break
            except ConflictError:
                # Another request's claim still open: wait (up to wait_ms) for it to end.
                # A claim of this request that was ABORTED is terminal: raised at once.
                if not wait_ms or time.monotonic() >= deadline:
                    raise
                try:
                    other = self.weight_upsert_status(base)
                except NotFoundError:
                    other = None
                if other is None:
                    raise
                if other.phase in (WeightUpsertPhase.COMMITTED, WeightUpsertPhase.ABORTED):
                    # It ended between the refusal and this read: try again at
                    # once. Our own claim aborted, or the same ended claim seen
                    # after a second CONFLICT (refused for another reason): raised.
                    seen = (other.request_id, other.phase)
                    if other.request_id == request_id or seen == ended:
                        raise
                    ended = seen
                    continue
                ended = None
                time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
        up = WeightUpsert(self, base.with_generation(gen_target), w, _claim_from_c(claim))
        try:
            up._keep.append(tensors)
            for name, arr, dt in source:
                up.weight_put_tensor(name, arr, dt)
            for name, tgt in (aliases or {}).items():
                up.weight_put_alias(name, tgt)
        except BaseException:
            up.abort()
            raise
        return up

    def weight_migrate(self, identity: IdentityLike, target: WeightResidencyState, *,
                       expected_metadata_generation: int, mixed_hot_ratio: Optional[float] = None,
                       request_id: Optional[str] = None) -> WeightOperation:
        """Start an explicit residency migration toward target (HOT, COLD,
        MIXED; mixed_hot_ratio None: the policy's). Returns the operation;
        follow it with weight_get_operation. request_id: see
        weight_update_policy."""
        cid = _identity_to_c(self._resolve(identity))
        gen = _fence(expected_metadata_generation, "weight_migrate")
        rid = _request_id(self._lib, request_id, "weight_migrate")
        ratio = float(mixed_hot_ratio or 0.0)
        op = _lib.Operation()
        with self._h.lock:
            if rid is None:
                rc = self._lib.weight_migrate(self._ptr(), cid, int(target), ratio, gen, ctypes.byref(op))
            else:
                rc = self._lib.weight_migrate_request(self._ptr(), cid, int(target), ratio, gen, rid,
                                                      ctypes.byref(op))
            self._check(rc)
        return _operation_from_c(op)

    def weight_repair(self, identity: IdentityLike, *, expected_metadata_generation: int) -> WeightOperation:
        """Start a repair now: a REPAIRING operation that restores the
        replicas the revision's recorded residency needs (memory from cold,
        cold from memory) -- or, after a repair that FAILED, what that one
        was restoring -- and brings a DEGRADED revision back to READY once
        every member is readable. The master starts one by itself when it
        sees a replica lost and gives up after its repair_max_attempts;
        this asks for a new one. Returns the operation; follow it with
        weight_get_operation. NotReadyError unless READY or DEGRADED,
        BusyError while an operation is active, StaleGenerationError when
        the revision moved past expected_metadata_generation (nothing
        changes on a refusal)."""
        cid = _identity_to_c(self._resolve(identity))
        gen = _fence(expected_metadata_generation, "weight_repair")
        op = _lib.Operation()
        with self._h.lock:
            self._check(self._lib.weight_repair(self._ptr(), cid, gen, ctypes.byref(op)))
        return _operation_from_c(op)

    def weight_get_operation(self, operation_id: int) -> WeightOperation:
        """An operation's target, progress and error (terminal ones too)."""
        op = _lib.Operation()
        with self._h.lock:
            self._check(self._lib.weight_get_operation(self._ptr(), int(operation_id), ctypes.byref(op)))
        return _operation_from_c(op)

    def weight_remove(self, identity: IdentityLike, *, expected_metadata_generation: int,
                      request_id: Optional[str] = None) -> WeightMetadata:
        """Delete the whole revision, keeping a queryable tombstone; returns
        the metadata after the call (DELETING or DELETED). BusyError while a
        lease or an operation is active. request_id: see weight_update_policy."""
        cid = _identity_to_c(self._resolve(identity))
        gen = _fence(expected_metadata_generation, "weight_remove")
        rid = _request_id(self._lib, request_id, "weight_remove")
        md = _lib.Metadata()
        with self._h.lock:
            if rid is None:
                rc = self._lib.weight_remove(self._ptr(), cid, gen, ctypes.byref(md))
            else:
                rc = self._lib.weight_remove_request(self._ptr(), cid, gen, rid, ctypes.byref(md))
            self._check(rc)
        return _metadata_from_c(md)

    # -- weight_get's two paths ----------------------------------------------------

    def _get_mapped(self, cid) -> "_MappedRevision":
        ptr = ctypes.c_void_p()
        with self._h.lock:
            self._check(self._lib.weight_get_mapped(self._ptr(), cid, ctypes.byref(ptr)))
        return _MappedRevision(self._lib, ptr)

    def _get_copy(self, cid, placement: PlacementLike, bindings: Dict[str, np.ndarray],
                  only: Optional[set]) -> Dict[str, LoadedTensor]:
        """weight_get into numpy arrays: the caller's bindings, or new arrays
        the C library writes into directly (one copy, from the segment or the
        network). only: the names to place (None: all the placement places)."""
        specs: Dict[str, tuple] = {}
        owned: Dict[str, np.ndarray] = {}
        failure: List[BaseException] = []

        def spec_of(ti) -> TensorSpec:
            t = ti.contents
            return TensorSpec(t.name.decode(), t.dtype.decode(), tuple(t.shape[i] for i in range(t.ndim)),
                              t.alias_of.decode() if t.alias_of else None)

        def place(_ctx, ti, out):
            try:
                spec = spec_of(ti)
                p = TensorPlacement(PLACE_SKIP) if only is not None and spec.name not in only \
                    else resolve_placement(placement, spec)
                out.contents.kind, out.contents.dim = p.kind, p.dim
                out.contents.parts, out.contents.rank = p.parts, p.rank
                specs[spec.name] = (spec, p)
                return 0
            except BaseException as e:  # noqa: BLE001 -- re-raised after the C call
                failure.append(e)
                return InvalidArgumentError.code

        def provide(_ctx, ti, tp, local_shape, nbytes, out):
            try:
                spec = spec_of(ti)
                shape = tuple(local_shape[i] for i in range(ti.contents.ndim))
                arr = np.empty(shape, dtype=numpy_dtype(spec.dtype))
                if arr.nbytes != nbytes:
                    raise InvalidArgumentError(f"{spec.name}: box of {nbytes} bytes, shape {shape}")
                owned[spec.name] = arr
                out[0] = arr.ctypes.data if nbytes else None
                return 0
            except BaseException as e:  # noqa: BLE001
                failure.append(e)
                return InvalidArgumentError.code

        keep = [(name.encode(), arr) for name, arr in bindings.items()]
        barr = (_lib.Binding * max(1, len(keep)))()
        for i, (name, arr) in enumerate(keep):
            barr[i] = _lib.Binding(name, arr.ctypes.data, arr.nbytes)
        place_fn, provide_fn = _lib.PLACE_FN(place), _lib.PROVIDE_FN(provide)
        pl = _lib.Placement(place_fn, None)
        bd = _lib.Bindings(barr, len(keep), provide_fn, None)
        stats = _lib.GetStats()
        with self._h.lock:
            rc = self._lib.weight_get(self._ptr(), cid, ctypes.byref(pl), ctypes.byref(bd), ctypes.byref(stats))
            if failure:
                raise failure[0]
            self._check(rc)
        out: Dict[str, LoadedTensor] = {}
        for name, (spec, p) in specs.items():
            if p.kind == PLACE_SKIP:
                continue
            if name in bindings:
                arr = bindings[name]  # the caller's array, as the caller shaped it
            else:
                arr = owned.get(name)
                if arr is None:  # an empty tensor: no buffer was asked for
                    want = tuple(len(range(*sl.indices(n))) for sl, n in zip(box(spec.shape, p), spec.shape))
                    arr = np.empty(want, dtype=numpy_dtype(spec.dtype))
            out[name] = LoadedTensor(name, spec.dtype, arr, False, p, spec.shape)
        return out


def _checked_source(tensors) -> List[tuple]:
    """[(name, array, dtype name)] of a put source (see weight_put), each
    dtype resolved -- so an unusable source is refused before the store
    is touched. None: []."""
    if tensors is None:
        return []
    return [(name, arr, dtype_name(arr, dt)) for name, arr, dt in iter_tensor_source(tensors)]


def _c_contiguous(tensor) -> np.ndarray:
    """tensor as a C-contiguous array (copied only when it is not one;
    np.ascontiguousarray would also turn a 0-d array into a 1-d one)."""
    arr = np.asarray(tensor)
    return arr if arr.flags.c_contiguous else np.require(arr, requirements="C")


class WeightWriter:
    """The writer of one weight_put: add tensors, then commit(). Arrays are
    borrowed (not copied) until commit returns. As a context manager it
    commits on a clean exit (the metadata is then in .metadata) and aborts
    on an exception."""

    def __init__(self, store: WeightStore, identity: WeightIdentity, ptr):
        self._store = store
        self._lib = store._lib
        self._ptr = ptr if ptr else None
        self._keep: List[object] = []
        self.identity = identity
        self.metadata: Optional[WeightMetadata] = None

    def _w(self):
        if not self._ptr:
            raise InvalidArgumentError(f"writer of {self.identity}: already committed or aborted")
        return self._ptr

    def weight_put_tensor(self, name: str, tensor, dtype: Optional[str] = None) -> None:
        """Add a whole tensor (any numpy array; made C-contiguous, which
        copies only when it is not). dtype: the safetensors name when the
        numpy dtype does not say it (e.g. "BF16" for uint16 bits)."""
        arr = _c_contiguous(tensor)
        dt = dtype_name(arr, dtype)
        shape = (ctypes.c_uint64 * max(1, arr.ndim))(*arr.shape)
        self._keep.append(arr)
        with self._store._h.lock:
            self._store._check(self._lib.weight_writer_add_tensor(self._w(), name.encode(), dt.encode(),
                                                                  arr.ndim, shape, arr.ctypes.data or None))

    def weight_put_fragment(self, name: str, tensor, *, global_shape, global_offset,
                            dtype: Optional[str] = None) -> None:
        """Add one fragment of a pre-sharded tensor (e.g. one TP rank's
        shard): its global shape and the fragment's global offset. The
        fragments of a name must cover the tensor exactly (checked at commit)."""
        arr = _c_contiguous(tensor)
        dt = dtype_name(arr, dtype)
        nd = arr.ndim
        if len(global_shape) != nd or len(global_offset) != nd:
            raise InvalidArgumentError(f"fragment of {name!r}: global_shape and global_offset need {nd} entries")
        U = ctypes.c_uint64 * max(1, nd)
        self._keep.append(arr)
        with self._store._h.lock:
            self._store._check(self._lib.weight_writer_add_fragment(
                self._w(), name.encode(), dt.encode(), nd, U(*global_shape), U(*global_offset),
                U(*arr.shape), arr.ctypes.data or None))

    def weight_put_alias(self, name: str, target: str) -> None:
        """Declare `name` a tied weight stored once, as `target`."""
        with self._store._h.lock:
            self._store._check(self._lib.weight_writer_alias(self._w(), name.encode(), target.encode()))

    def weight_put_attachment(self, name: str, data: bytes) -> None:
        """Add a small file of the model directory (config.json, tokenizer
        files, ...) to the revision: stored and verified with its tensors, at
        most ATTACHMENT_MAX_BYTES; `weightctl get --out DIR` writes it back.
        InvalidArgumentError for a name with '/' or a file over the cap."""
        data = bytes(data)
        self._keep.append(data)
        with self._store._h.lock:
            self._store._check(self._lib.weight_writer_add_attachment(self._w(), name.encode(), data,
                                                                      len(data)))

    def weight_put_tensors(self, source) -> None:
        """Add every tensor of a source (see WeightStore.weight_put), and the
        attachments of a Hugging Face checkpoint directory."""
        if isinstance(source, (str, os.PathLike)) and os.path.isdir(source):
            source = HuggingFaceCheckpoint(source)
        self._keep.append(source)
        for name, arr, dt in iter_tensor_source(source):
            self.weight_put_tensor(name, arr, dt)
        for name, data in iter_attachment_source(source):
            self.weight_put_attachment(name, data)

    def commit(self) -> WeightMetadata:
        """Write the payloads, the manifest last, and publish the revision
        READY (first HOT). The writer is spent whatever happens; on failure
        nothing is published and the error says why."""
        w = self._w()
        self._ptr = None
        md = _lib.Metadata()
        try:
            with self._store._h.lock:
                self._store._check(self._lib.weight_writer_commit(w, ctypes.byref(md)))
        finally:
            self._keep.clear()
        self.metadata = _metadata_from_c(md)
        return self.metadata

    def abort(self) -> None:
        """Abort the import (nothing is published). A no-op once spent."""
        if self._ptr:
            w, self._ptr = self._ptr, None
            with self._store._h.lock:
                self._lib.weight_writer_abort(w)
        self._keep.clear()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            if self._ptr:
                self.commit()
        else:
            self.abort()
        return False

    def __del__(self):
        try:
            self.abort()
        except Exception:
            pass


class WeightUpsert(WeightWriter):
    """The writer of a weight_upsert target. identity: the target; claim:
    the claim as the master answered. When the target is READY already (a
    retried request), there is nothing to write and commit() returns its
    metadata. status() re-reads the lineage's claim."""

    def __init__(self, store: WeightStore, identity: WeightIdentity, ptr, claim: WeightUpsertClaim):
        super().__init__(store, identity, ptr)
        self.claim = claim

    @property
    def needs_write(self) -> bool:
        return bool(self._ptr)

    def commit(self) -> WeightMetadata:
        if not self._ptr and self.metadata is None:
            self.metadata = self._store.weight_get_metadata(self.identity).metadata
            return self.metadata
        return super().commit()

    def status(self) -> WeightUpsertClaim:
        cid = _identity_to_c(self.identity)
        c = _lib.UpsertClaim()
        with self._store._h.lock:
            self._store._check(self._lib.weight_upsert_status(self._store._ptr(), cid, ctypes.byref(c)))
        self.claim = _claim_from_c(c)
        return self.claim


class WeightListPage:
    """One page of weight_list: iterates over its WeightMetadata."""

    def __init__(self, store: WeightStore, items: List[WeightMetadata], next_page_token: Optional[str], args):
        self._store = store
        self.items = items
        self.next_page_token = next_page_token
        self._args = args

    def __iter__(self) -> Iterator[WeightMetadata]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def next_page(self) -> Optional["WeightListPage"]:
        """The following page, or None after the last."""
        if not self.next_page_token:
            return None
        return self._store.weight_list(page_token=self.next_page_token, **self._args)

    def pages(self) -> Iterator["WeightListPage"]:
        """This page and every one after it."""
        page = self
        while page is not None:
            yield page
            page = page.next_page()

    def revisions(self) -> Iterator[WeightMetadata]:
        """Every revision of this page and the ones after it."""
        for page in self.pages():
            yield from page.items


class _MappedRevision:
    """A weight_get_mapped view: a held (and renewed) revision lease and per
    tensor a verified pointer into a read-only mapping of the segment holding
    it. Released when garbage-collected -- arrays made by array() keep it
    alive through their base.

    Fail closed: once the lease is lost (a renewal refused, or none got
    through before the TTL ran out) the library makes the view's pages
    inaccessible before the master can reuse them, so an array made by
    array() that is read afterwards kills the process with SIGSEGV rather
    than return another revision's bytes. Python cannot turn that fault into
    an exception (numpy reads the memory directly); the binding's own
    accessors check the lease first (WeightLoad.__getitem__, arrays(),
    check_lease()), and data() answers None."""

    def __init__(self, lib, ptr):
        self._lib = lib
        self._ptr = ptr
        self._lock = threading.Lock()

    def tensors(self):
        """(index, TensorSpec, bytes) per tensor of the revision."""
        n = self._lib.weight_mapped_count(self._ptr)
        t = _lib.MappedTensor()
        for i in range(n):
            if self._lib.weight_mapped_get_tensor(self._ptr, i, ctypes.byref(t)) < 0:
                continue
            spec = TensorSpec(t.name.decode(), t.dtype.decode(), tuple(t.shape[k] for k in range(t.ndim)),
                              t.alias_of.decode() if t.alias_of else None)
            yield i, spec, int(t.bytes)

    def verify(self, indices: List[int]) -> None:
        """Verify the payload objects behind tensors `indices` now, on the
        library's threads (the store's thread count), so that data() finds
        them verified. A library without weight_mapped_verify, or one out of
        memory, leaves each object to data()'s check on first use."""
        if indices and self._lib.has_mapped_verify:
            self._lib.weight_mapped_verify(self._ptr, (ctypes.c_size_t * len(indices))(*indices), len(indices))

    def data(self, index: int) -> Optional[int]:
        """The address of tensor `index` in the mapping (its payload object
        verified on first use), or None when it is not readable in place."""
        out = ctypes.c_void_p()
        if self._lib.weight_mapped_data(self._ptr, index, ctypes.byref(out)) < 0:
            return None
        return out.value

    def array(self, spec: TensorSpec, address: Optional[int], p: TensorPlacement) -> np.ndarray:
        """A read-only numpy view of placement p's box of the tensor at
        address (no copy; the box of a split is a strided view)."""
        dt = numpy_dtype(spec.dtype)
        count = int(np.prod(spec.shape, dtype=np.int64)) if spec.shape else 1
        if count == 0 or not address:
            whole = np.empty(spec.shape, dtype=dt)
        else:
            raw = (ctypes.c_uint8 * (count * dt.itemsize)).from_address(address)
            raw._weightstore_owner = self  # the lease and mapping live as long as the bytes are viewed
            whole = np.frombuffer(memoryview(raw).toreadonly(), dtype=dt).reshape(spec.shape)
        return whole[box(spec.shape, p)] if spec.shape else whole[...]  # [()] of 0-d is a scalar

    def lease_status(self) -> int:
        """0 while the lease holds, else the code its renewal failed with."""
        with self._lock:
            if not self._ptr:
                return 0
            return self._lib.weight_mapped_status(self._ptr)

    def release(self) -> None:
        with self._lock:
            if self._ptr:
                self._lib.weight_mapped_release(self._ptr)
                self._ptr = None

    def __del__(self):
        try:
            self.release()
        except Exception:
            pass


class WeightLoad(Mapping):
    """What weight_get returns: name -> LoadedTensor for every placed
    tensor. For a zero-copy load it holds the revision lease; close() (or
    the end of a `with` block) drops this object's hold, and the lease is
    released once no array of the load is alive either.

    A zero-copy load fails closed. If its lease is lost -- the revision was
    replaced (a PUT_FIRST upsert) or deleted, or this process could not
    renew it before its TTL ran out -- the master may put later generations'
    bytes where the arrays point, so the library makes those pages
    inaccessible first: reading a zero-copy array afterwards crashes the
    process with SIGSEGV (enable `faulthandler` to see where) instead of
    silently serving a mix of generations. Looking a tensor up through the
    load (`load[name]`, `arrays()`, `check_lease()`) raises
    LeaseExpiredError instead; a server that keeps arrays across requests
    calls check_lease() (or looks the tensors up again) per request and
    loads the revision anew when it raises. Pages a live zero-copy load of
    the process also reads stay readable (another store's load of the same
    revision protects them with its lease; a page shared at an end with
    another revision's tensor becomes a private copy, which still holds
    this load's own bytes)."""

    def __init__(self, identity: WeightIdentity, tensors: Dict[str, LoadedTensor], mapped):
        self.identity = identity
        self._tensors = tensors
        self._mapped = mapped

    def __getitem__(self, name: str) -> LoadedTensor:
        self.check_lease()  # a fenced array read would crash the process
        return self._tensors[name]

    def __iter__(self):
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    @property
    def zero_copy(self) -> bool:
        """True when every tensor is a view into shared memory."""
        return bool(self._tensors) and all(t.zero_copy for t in self._tensors.values())

    def arrays(self) -> Dict[str, np.ndarray]:
        """name -> numpy array. Raises LeaseExpiredError (...) when the
        lease of a zero-copy load was lost (see the class)."""
        self.check_lease()
        return {n: t.array for n, t in self._tensors.items()}

    def check_lease(self) -> None:
        """Raise the error the lease's renewal failed with (LeaseExpiredError,
        ...) if the master dropped it: the zero-copy arrays are then fenced
        (reading one crashes the process with SIGSEGV). A load without
        zero-copy arrays holds no lease: no-op."""
        if self._mapped is not None:
            rc = self._mapped.lease_status()
            if rc < 0:
                lib = self._mapped._lib
                raise error_for(rc, lib.weight_error_name(rc).decode(), "the revision lease was lost")

    def close(self) -> None:
        """Drop this load's hold on the lease (arrays still alive keep it)."""
        self._tensors = {}
        self._mapped = None

    def __enter__(self) -> "WeightLoad":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"WeightLoad({self.identity}, {len(self._tensors)} tensors, zero_copy={self.zero_copy})"

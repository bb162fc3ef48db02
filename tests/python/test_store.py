"""test_store -- the eleven weight_* calls of WeightStore (and weight_repair) on a real master,
and the RFC's errors each raised as its own exception with nothing changed."""
from __future__ import annotations

import gc
import threading
import time

import numpy as np
import pytest

import weightstore as ws
from helpers import model, put_model, unique, wait_for, wait_operation

R = ws.WeightResidencyState


def ident(resource, gen=1, revision="v1", namespace="llm"):
    return ws.WeightIdentity(namespace, resource, revision, gen)


def test_public_surface_is_the_eleven_calls_repair_and_attachments():
    calls = sorted(n for n in dir(ws.WeightStore) if n.startswith("weight_"))
    assert calls == sorted([
        "weight_put", "weight_get", "weight_is_exist", "weight_get_metadata", "weight_get_size",
        "weight_list", "weight_update_policy", "weight_upsert", "weight_migrate",
        "weight_get_operation", "weight_remove", "weight_repair", "weight_get_attachments",
        "weight_upsert_status"])
    public = {n for n in dir(ws.WeightStore) if not n.startswith("_")}
    assert public - set(calls) == {"close"}


def test_put_metadata_get_remove_path(store):
    """weight_put -> weight_get_metadata -> weight_get -> weight_remove, with
    weight_is_exist and weight_get_size along the way."""
    i = ident(unique("path"))
    src = model(1)
    md = put_model(store, i, src, aliases={"lm_head.weight": "embed.weight"})
    assert md.availability == ws.WeightAvailability.READY
    assert md.residency == R.HOT
    assert md.identity.namespace == "llm" and md.identity.weight_generation == 1
    assert md.identity.tenant_id == "default"
    assert md.manifest_key and len(md.manifest_sha256) == 32
    stored = sum(a.nbytes for a, _ in src.values())
    assert md.logical_bytes >= stored  # the tied copy is stored once: no second embed
    assert md.logical_bytes < stored + src["embed.weight"][0].nbytes

    view = store.weight_get_metadata(i)
    assert view.metadata.metadata_generation == md.metadata_generation
    assert view.metadata.manifest_sha256 == md.manifest_sha256
    assert view.operation is None
    assert view.degraded_from is None and view.degraded_from_hot_ratio == 0.0  # READY
    assert store.weight_is_exist(i) is True
    assert store.weight_get_size(i) == md.logical_bytes

    with store.weight_get(i) as load:
        assert set(load) == set(src) | {"lm_head.weight"}
        for name, (arr, dt) in src.items():
            t = load[name]
            assert t.dtype == (dt or ws.tensors.dtype_name(arr))
            assert t.array.dtype == arr.dtype and t.shape == arr.shape
            assert np.array_equal(t.array, arr), name
        assert np.array_equal(load["lm_head.weight"].array, src["embed.weight"][0])
        assert load["lm_head.weight"].zero_copy  # an alias views the target's bytes
    del load, t  # the last views: their lease goes with them
    gc.collect()
    assert store.weight_get_metadata(i).metadata.active_leases == 0

    gone = store.weight_remove(i, expected_metadata_generation=view.metadata.metadata_generation)
    assert gone.availability in (ws.WeightAvailability.DELETING, ws.WeightAvailability.DELETED)
    assert store.weight_is_exist(i) is False
    assert wait_for(lambda: store.weight_get_metadata(i).metadata.availability == ws.WeightAvailability.DELETED)
    tomb = store.weight_get_metadata(i).metadata
    assert tomb.residency == R.ABSENT
    with pytest.raises(ws.NotReadyError):
        store.weight_get(i)


def test_unknown_revision_raises_not_found(store):
    i = ident(unique("nothing"))
    assert store.weight_is_exist(i) is False
    with pytest.raises(ws.NotFoundError) as e:
        store.weight_get_metadata(i)
    assert e.value.code == -102 and e.value.name == "NOT_FOUND"
    with pytest.raises(ws.NotFoundError):
        store.weight_get(i)
    with pytest.raises(ws.NotFoundError):
        store.weight_get_size(i)
    with pytest.raises(ws.NotFoundError):
        store.weight_get_operation(987654321)


def test_invalid_identity_is_invalid_argument(store):
    with pytest.raises(ws.InvalidArgumentError):
        store.weight_is_exist(ws.WeightIdentity("", "r", "v", 1))
    with pytest.raises(ws.InvalidArgumentError):
        store.weight_get_metadata(ws.WeightIdentity("ns", "r" * 300, "v", 1))


def test_identity_text_form_round_trips():
    i = ws.WeightIdentity("llm", "a/b", "v@1", 3)
    assert ws.WeightIdentity.parse(str(i)) == i
    with pytest.raises(ws.InvalidArgumentError):
        ws.WeightIdentity.parse("llm/only-two")


def test_list_pages_and_filters(store):
    res = unique("list")
    for k in range(5):
        put_model(store, ident(res, revision=f"r{k}", namespace="listing"), {"w": (np.full(4, k, np.int32), None)})
    put_model(store, ident(unique("other"), namespace="listing"), {"w": (np.zeros(4, np.int32), None)})

    first = store.weight_list("listing", res, limit=2)
    sizes = [len(p) for p in first.pages()]
    assert sizes == [2, 2, 1]
    names = sorted(md.identity.revision for md in first.revisions())
    assert names == [f"r{k}" for k in range(5)]
    assert all(md.identity.resource_id == res for md in first.revisions())
    everything = [md.identity.resource_id for md in store.weight_list("listing").revisions()]
    assert len(everything) == 6
    with pytest.raises(ws.InvalidArgumentError):
        store.weight_list(resource_id=res)


def test_list_shows_imports_only_with_include_importing(store):
    res = unique("importing")
    done = ident(res, revision="done", namespace="listing")
    put_model(store, done, {"w": (np.zeros(4, np.int32), None)})
    w = store.weight_put(ident(res, revision="open", namespace="listing"))
    try:
        shown = {md.identity.revision: md.availability for md in store.weight_list("listing", res).revisions()}
        assert shown == {"done": ws.WeightAvailability.READY}
        page = store.weight_list("listing", res, include_importing=True, limit=1)
        shown = {md.identity.revision: md.availability for md in page.revisions()}
        assert shown == {"done": ws.WeightAvailability.READY, "open": ws.WeightAvailability.IMPORTING}
    finally:
        w.abort()


def test_update_policy_is_fenced(store):
    i = ident(unique("policy"))
    md = put_model(store, i, {"w": (np.arange(8, dtype=np.float32), None)})
    new = ws.WeightStoragePolicy(R.HOT, 0.25, ws.WeightMigrationMode.PINNED)
    up = store.weight_update_policy(i, new, expected_metadata_generation=md.metadata_generation)
    assert up.policy.migration_mode == ws.WeightMigrationMode.PINNED
    assert up.policy.mixed_hot_ratio == pytest.approx(0.25)
    assert up.metadata_generation > md.metadata_generation

    # The old generation is stale: refused, and nothing changes.
    with pytest.raises(ws.StaleGenerationError) as e:
        store.weight_update_policy(i, ws.WeightStoragePolicy(R.HOT, 0.5, ws.WeightMigrationMode.AUTO),
                                   expected_metadata_generation=md.metadata_generation)
    assert e.value.code == -105
    after = store.weight_get_metadata(i).metadata
    assert after.metadata_generation == up.metadata_generation
    assert after.policy == up.policy


@pytest.mark.parametrize("bad", [0, None, -1, True, "3"])
def test_mutations_require_an_explicit_generation(store, bad):
    """0 would make the C library read the current generation itself; the
    Python API refuses it (and anything else not a generation) up front."""
    i = ident(unique("fence"))
    md = put_model(store, i, {"w": (np.arange(4, dtype=np.float32), None)})
    pol = ws.WeightStoragePolicy(R.HOT, 0.5, ws.WeightMigrationMode.MANUAL)
    for call in (lambda: store.weight_update_policy(i, pol, expected_metadata_generation=bad),
                 lambda: store.weight_migrate(i, R.COLD, expected_metadata_generation=bad),
                 lambda: store.weight_remove(i, expected_metadata_generation=bad),
                 lambda: store.weight_upsert(2, replacing=i, expected_metadata_generation=bad)):
        with pytest.raises(ws.InvalidArgumentError):
            call()
    after = store.weight_get_metadata(i).metadata
    assert after.metadata_generation == md.metadata_generation
    assert after.availability == ws.WeightAvailability.READY
    with pytest.raises(TypeError):
        store.weight_remove(i)  # keyword-only and required


def test_migrate_cold_and_back(store):
    i = ident(unique("migrate"))
    src = model(2)
    # MANUAL: reading the COLD revision must not start an automatic promotion.
    md = put_model(store, i, src, policy=ws.WeightStoragePolicy(R.HOT, 0.5, ws.WeightMigrationMode.MANUAL))
    op = store.weight_migrate(i, R.COLD, expected_metadata_generation=md.metadata_generation)
    assert op.operation_id > 0 and op.kind == ws.WeightOperationKind.MIGRATING and op.target == R.COLD
    done = wait_operation(store, op.operation_id)
    assert done.state == ws.WeightOperationState.SUCCEEDED, done.error
    assert done.operation_id == op.operation_id
    cold = store.weight_get_metadata(i).metadata
    assert cold.residency == R.COLD and cold.operation_id is None

    with store.weight_get(i) as load:  # read from the cold tier: copied, not mapped
        assert not load.zero_copy
        for name, (arr, _) in src.items():
            assert np.array_equal(load[name].array, arr), name

    # A stale migration is refused and creates no operation.
    with pytest.raises(ws.StaleGenerationError):
        store.weight_migrate(i, R.HOT, expected_metadata_generation=md.metadata_generation)
    assert store.weight_get_metadata(i).metadata.operation_id is None

    op = store.weight_migrate(i, R.HOT, expected_metadata_generation=cold.metadata_generation)
    assert wait_operation(store, op.operation_id).state == ws.WeightOperationState.SUCCEEDED
    assert store.weight_get_metadata(i).metadata.residency == R.HOT


def test_weight_repair(store):
    """weight_repair starts a REPAIRING operation toward the recorded
    residency under CAS; with every replica in place it succeeds at once and
    the revision stays READY + HOT with its bytes. A stale or missing
    generation is refused and starts nothing; an unknown revision is
    NotFoundError; a deleted one NotReadyError."""
    i = ident(unique("repair"))
    src = {"w": (np.arange(64, dtype=np.float32), None)}
    md = put_model(store, i, src, policy=ws.WeightStoragePolicy(R.HOT, 0.5, ws.WeightMigrationMode.MANUAL))
    for bad in (0, None, True):
        with pytest.raises(ws.InvalidArgumentError):
            store.weight_repair(i, expected_metadata_generation=bad)
    op = store.weight_repair(i, expected_metadata_generation=md.metadata_generation)
    assert op.operation_id > 0
    assert op.kind == ws.WeightOperationKind.REPAIRING and op.target == R.HOT
    done = wait_operation(store, op.operation_id)
    assert done.state == ws.WeightOperationState.SUCCEEDED, done.error
    after = store.weight_get_metadata(i).metadata
    assert after.availability == ws.WeightAvailability.READY and after.residency == R.HOT
    assert after.operation_id is None
    with store.weight_get(i) as load:
        assert np.array_equal(load["w"].array, src["w"][0])

    # The generation read before the repair is stale now: refused, nothing started.
    with pytest.raises(ws.StaleGenerationError):
        store.weight_repair(i, expected_metadata_generation=md.metadata_generation)
    assert store.weight_get_metadata(i).metadata.metadata_generation == after.metadata_generation
    with pytest.raises(ws.NotFoundError):
        store.weight_repair(ident(unique("repair-none")), expected_metadata_generation=1)

    store.weight_remove(i, expected_metadata_generation=after.metadata_generation)
    assert wait_for(lambda: store.weight_get_metadata(i).metadata.availability == ws.WeightAvailability.DELETED)
    tomb = store.weight_get_metadata(i).metadata
    with pytest.raises(ws.NotReadyError):
        store.weight_repair(i, expected_metadata_generation=tomb.metadata_generation)
    assert store.weight_get_metadata(i).metadata.metadata_generation == tomb.metadata_generation


def test_remove_is_busy_while_a_zero_copy_view_lives(store):
    """An array handed out by a zero-copy load holds the revision's lease:
    removal is BUSY (nothing changes) until the last such array is gone."""
    i = ident(unique("busy"))
    md = put_model(store, i, {"w": (np.arange(1000, dtype=np.float32), None)})
    load = store.weight_get(i)
    assert load.zero_copy
    arr = load["w"].array
    load.close()
    del load
    gc.collect()
    assert store.weight_get_metadata(i).metadata.active_leases == 1
    with pytest.raises(ws.BusyError):
        store.weight_remove(i, expected_metadata_generation=md.metadata_generation)
    after = store.weight_get_metadata(i).metadata
    assert after.availability == ws.WeightAvailability.READY
    assert after.metadata_generation == md.metadata_generation
    assert np.array_equal(arr, np.arange(1000, dtype=np.float32))
    del arr
    gc.collect()
    assert store.weight_get_metadata(i).metadata.active_leases == 0
    store.weight_remove(i, expected_metadata_generation=md.metadata_generation)
    assert store.weight_is_exist(i) is False


def test_put_of_an_existing_identity_conflicts(store):
    i = ident(unique("dup"))
    md = put_model(store, i, {"w": (np.arange(4, dtype=np.float32), None)})
    with pytest.raises(ws.ConflictError) as e:
        store.weight_put(i, {"w": np.arange(4, dtype=np.float32)}).commit()
    assert e.value.code == -104
    after = store.weight_get_metadata(i).metadata
    assert after.metadata_generation == md.metadata_generation
    assert after.manifest_sha256 == md.manifest_sha256


def test_upsert_put_first_replaces_the_base(store):
    res = unique("upsert")
    base = ident(res, gen=1)
    md = put_model(store, base, {"w": (np.zeros(16, np.float32), None)})
    with store.weight_upsert(2, replacing=base, expected_metadata_generation=md.metadata_generation,
                             request_id=f"rollout-{res}") as up:
        assert up.identity == base.with_generation(2)
        assert up.needs_write
        up.weight_put_tensor("w", np.ones(16, np.float32))
    assert up.metadata.availability == ws.WeightAvailability.READY
    target = up.identity
    with store.weight_get(target) as load:
        assert np.array_equal(load["w"].array, np.ones(16, np.float32))
    assert wait_for(lambda: up.status().phase == ws.WeightUpsertPhase.COMMITTED)
    assert up.claim.committed_watermark == 2
    assert wait_for(lambda: not store.weight_is_exist(base))

    # The same request again: the existing claim, nothing to write.
    again = store.weight_upsert(2, replacing=base, expected_metadata_generation=md.metadata_generation,
                                request_id=f"rollout-{res}")
    assert not again.needs_write
    assert again.commit().metadata_generation == up.metadata.metadata_generation


def test_upsert_rejects_a_lower_generation_and_a_competitor(store):
    res = unique("upsert")
    base = ident(res, gen=3)
    md = put_model(store, base, {"w": (np.zeros(4, np.float32), None)})
    with pytest.raises(ws.WeightStoreError) as e:
        store.weight_upsert(2, replacing=base, expected_metadata_generation=md.metadata_generation)
    assert isinstance(e.value, (ws.InvalidArgumentError, ws.ConflictError))
    with pytest.raises(ws.StaleGenerationError):
        store.weight_upsert(4, replacing=base, expected_metadata_generation=md.metadata_generation + 100)

    first = store.weight_upsert(4, replacing=base, expected_metadata_generation=md.metadata_generation,
                                request_id=f"a-{res}")
    try:
        with pytest.raises(ws.ConflictError):
            store.weight_upsert(5, replacing=base, expected_metadata_generation=md.metadata_generation,
                                request_id=f"b-{res}")
    finally:
        first.abort()
    assert store.weight_is_exist(base)


def test_writer_aborts_on_exception(store):
    i = ident(unique("abort"))
    with pytest.raises(RuntimeError):
        with store.weight_put(i) as w:
            w.weight_put_tensor("w", np.arange(4, dtype=np.float32))
            raise RuntimeError("caller failure")
    assert store.weight_is_exist(i) is False
    with pytest.raises(ws.InvalidArgumentError):
        w.weight_put_tensor("x", np.arange(4, dtype=np.float32))


def test_bad_placement_and_binding_are_invalid_argument(store):
    i = ident(unique("place"))
    put_model(store, i, {"w": (np.arange(12, dtype=np.float32).reshape(3, 4), None)})
    with pytest.raises(ws.InvalidArgumentError):
        store.weight_get(i, {"w": ws.Split(5, 2, 0)})
    with pytest.raises(ws.InvalidArgumentError):
        store.weight_get(i, {"w": ws.Split(5, 2, 0)}, zero_copy=False)
    with pytest.raises(ws.InvalidArgumentError):
        store.weight_get(i, bindings={"w": np.empty(5, np.float32)})


@pytest.mark.parametrize("zero_copy", [True, False])
def test_a_placement_that_raises_leaves_no_lease(store, zero_copy):
    """A placement callable's exception comes out of weight_get as it was
    raised, and the revision's lease is gone at once -- not only once the
    exception (whose traceback holds weight_get's frame) is freed."""
    i = ident(unique("raises"))
    put_model(store, i, {"w": (np.arange(12, dtype=np.float32).reshape(3, 4), None)})

    def placement(spec):
        raise KeyError(spec.name)

    with pytest.raises(KeyError) as e:
        store.weight_get(i, placement, zero_copy=zero_copy)
    assert store.weight_get_metadata(i).metadata.active_leases == 0
    del e


def test_store_context_closes(master):
    with ws.WeightStore(master.address) as s:
        pass
    with pytest.raises(ws.InvalidArgumentError):
        s.weight_list()


def test_unreachable_master_is_a_transport_error():
    from master import free_port
    with pytest.raises(ws.WeightStoreError) as e:
        with ws.WeightStore(f"127.0.0.1:{free_port()}") as s:
            s.weight_list()
    assert isinstance(e.value, ws.WeightTransportError)


def test_tls_settings_bad_file_is_invalid_argument_before_connecting(tmp_path):
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as ls:
        ls.bind(("127.0.0.1", 0))
        ls.listen(4)
        ls.setblocking(False)
        master = f"127.0.0.1:{ls.getsockname()[1]}"
        garbage = tmp_path / "garbage.pem"
        garbage.write_text("not a certificate\n")
        for kwargs, needle in (({"tls_ca": str(tmp_path / "no-such-ca.pem")}, "no-such-ca.pem"),
                               ({"tls_ca": str(garbage)}, "garbage.pem"),
                               ({"tls_ca": str(garbage), "tls_cert": str(garbage)}, "come together"),
                               ({"tls_cert": "c.pem", "tls_key": "k.pem"}, "need ca")):
            with pytest.raises(ws.InvalidArgumentError) as e:
                ws.WeightStore(master, **kwargs)
            assert needle in str(e.value)
            with pytest.raises(BlockingIOError):
                ls.accept()  # nothing dialled the "master"


def test_tls_ca_makes_the_store_dial_tls(master, tmp_path):
    # the handle's CA asks for TLS: this master's TCP port is plaintext, so
    # the handshake fails as a transport error, where no CA would have served
    import subprocess
    ca = tmp_path / "ca.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-days", "1", "-subj", "/CN=py-test-ca", "-keyout", str(tmp_path / "ca.key"),
                    "-out", str(ca)], check=True, capture_output=True)
    with pytest.raises(ws.WeightTransportError):
        with ws.WeightStore(master.address, tls_ca=str(ca), tls_server_name="localhost") as s:
            s.weight_list(limit=1)
    with ws.WeightStore(master.address) as s:
        s.weight_list(limit=1)


def test_pinned_revision_refuses_migration(store):
    i = ident(unique("pinned"))
    put_model(store, i, {"w": (np.zeros(10, np.float32), None)},
              policy=ws.WeightStoragePolicy(R.HOT, 0.5, ws.WeightMigrationMode.PINNED))
    before = store.weight_get_metadata(i).metadata
    with pytest.raises(ws.PolicyUnsatisfiableError) as e:
        store.weight_migrate(i, R.COLD, expected_metadata_generation=before.metadata_generation)
    assert e.value.code == -109
    with pytest.raises(ws.InvalidArgumentError):
        store.weight_migrate(i, R.MIXED, expected_metadata_generation=before.metadata_generation,
                             mixed_hot_ratio=1.5)
    after = store.weight_get_metadata(i)
    assert after.metadata.metadata_generation == before.metadata_generation
    assert after.metadata.residency == R.HOT and after.operation is None


def test_every_code_has_the_library_name():
    """Each exception class carries the code and the name the C library
    gives that code (weight_error_name)."""
    lib = ws._lib.load()
    classes = {
        -101: ws.InvalidArgumentError, -102: ws.NotFoundError, -103: ws.NotReadyError,
        -104: ws.ConflictError, -105: ws.StaleGenerationError, -106: ws.BusyError,
        -107: ws.LeaseExpiredError, -108: ws.DurabilityFailedError, -109: ws.PolicyUnsatisfiableError,
        -150: ws.DigestMismatchError, -17: ws.CanceledError, -8: ws.WeightTransportError,
    }
    for code, cls in classes.items():
        err = ws.errors.error_for(code, lib.weight_error_name(code).decode(), "cause")
        assert type(err) is cls and err.code == code and err.message == "cause"
        assert isinstance(err, ws.WeightStoreError)
        if code not in (-8, -17):  # the RFC's and the digest's names; the library calls -17 SMP_ECANCELED
            assert err.name == lib.weight_error_name(code).decode()
    io = ws.errors.error_for(-13, "SMP_EPROTO", "x")
    assert type(io) is ws.WeightTransportError and io.code == -13 and io.name == "SMP_EPROTO"


def test_upsert_target_must_share_the_lineage(store):
    base = ident(unique("lineage"), gen=1)
    md = put_model(store, base, {"w": (np.zeros(4, np.float32), None)})
    other = ws.WeightIdentity("llm", base.resource_id, "v2", 2)
    with pytest.raises(ws.InvalidArgumentError):
        store.weight_upsert(other, replacing=base, expected_metadata_generation=md.metadata_generation)
    assert store.weight_get_metadata(base).metadata.metadata_generation == md.metadata_generation


def test_upsert_delete_first(store):
    """DELETE_FIRST: the base is gone before the target may be written;
    the target is published from the tensors given to weight_upsert."""
    res = unique("delfirst")
    base = ident(res, gen=1)
    md = put_model(store, base, {"w": (np.zeros(8, np.float32), None)})
    up = store.weight_upsert(2, replacing=base, expected_metadata_generation=md.metadata_generation,
                             mode=ws.WeightUpsertMode.DELETE_FIRST, tensors={"w": np.full(8, 2, np.float32)})
    assert up.claim.mode == ws.WeightUpsertMode.DELETE_FIRST
    assert not store.weight_is_exist(base)
    target = up.commit()
    assert target.identity.weight_generation == 2 and target.availability == ws.WeightAvailability.READY
    with store.weight_get(up.identity) as load:
        assert np.array_equal(load["w"].array, np.full(8, 2, np.float32))
    assert wait_for(lambda: up.status().phase == ws.WeightUpsertPhase.COMMITTED)


def test_tenants_are_separate(master):
    with ws.WeightStore(master.address, tenant_id="acme") as acme, \
            ws.WeightStore(master.address, tenant_id="globex") as globex:
        i = ws.WeightIdentity("llm", unique("tenant"), "v1", 1)
        md = acme.weight_put(i, {"w": np.arange(3, dtype=np.int32)}).commit()
        assert md.identity.tenant_id == "acme"
        assert acme.weight_is_exist(i) and not globex.weight_is_exist(i)
        assert i.resource_id in [m.identity.resource_id for m in acme.weight_list("llm").revisions()]
        assert i.resource_id not in [m.identity.resource_id for m in globex.weight_list("llm").revisions()]
        # An explicit tenant in the identity names it whatever the store's default.
        assert globex.weight_is_exist(ws.WeightIdentity("llm", i.resource_id, "v1", 1, tenant_id="acme"))


def test_a_retried_request_answers_the_first_result(store):
    """The same request id, arguments and expected generation after the
    first call landed: the first answer, not STALE_GENERATION; the same id
    with other arguments: CONFLICT. Nothing changes twice."""
    i = ident(unique("retry"))
    md = put_model(store, i, {"w": (np.zeros(4, np.float32), None)})
    pol = ws.WeightStoragePolicy(R.HOT, 0.3, ws.WeightMigrationMode.MANUAL)
    first = store.weight_update_policy(i, pol, expected_metadata_generation=md.metadata_generation,
                                       request_id="policy-1")
    again = store.weight_update_policy(i, pol, expected_metadata_generation=md.metadata_generation,
                                       request_id="policy-1")
    assert again.metadata_generation == first.metadata_generation and again.policy == first.policy
    other = ws.WeightStoragePolicy(R.HOT, 0.7, ws.WeightMigrationMode.MANUAL)
    with pytest.raises(ws.ConflictError):
        store.weight_update_policy(i, other, expected_metadata_generation=md.metadata_generation,
                                   request_id="policy-1")
    with pytest.raises(ws.StaleGenerationError):  # no id: the fence as usual
        store.weight_update_policy(i, pol, expected_metadata_generation=md.metadata_generation)
    assert store.weight_get_metadata(i).metadata.metadata_generation == first.metadata_generation

    gone = store.weight_remove(i, expected_metadata_generation=first.metadata_generation, request_id="rm-1")
    again = store.weight_remove(i, expected_metadata_generation=first.metadata_generation, request_id="rm-1")
    assert again.identity == gone.identity
    assert again.availability in (ws.WeightAvailability.DELETING, ws.WeightAvailability.DELETED)
    with pytest.raises(ws.InvalidArgumentError):
        store.weight_remove(i, expected_metadata_generation=first.metadata_generation, request_id="")


def test_a_retried_migration_is_the_same_operation(store):
    i = ident(unique("retrymig"))
    md = put_model(store, i, {"w": (np.zeros(4, np.float32), None)},
                   policy=ws.WeightStoragePolicy(R.HOT, 0.5, ws.WeightMigrationMode.MANUAL))
    op = store.weight_migrate(i, R.COLD, expected_metadata_generation=md.metadata_generation, request_id="m-1")
    again = store.weight_migrate(i, R.COLD, expected_metadata_generation=md.metadata_generation,
                                 request_id="m-1")
    assert again.operation_id == op.operation_id
    assert wait_operation(store, op.operation_id).state == ws.WeightOperationState.SUCCEEDED


def test_upsert_wait_ms_waits_for_the_open_claim(store):
    res = unique("upsertwait")
    base = ident(res, gen=3)
    md = put_model(store, base, {"w": (np.zeros(4, np.float32), None)})
    gen = md.metadata_generation
    first = store.weight_upsert(4, replacing=base, expected_metadata_generation=gen, request_id=f"a-{res}")
    asked = threading.Event()
    real_status = store.weight_upsert_status

    def status(lineage):  # the waiting call reads the claim: it is waiting
        asked.set()
        return real_status(lineage)

    store.weight_upsert_status = status
    try:
        # wait_ms 0: CONFLICT at once, the claim not even read.
        with pytest.raises(ws.ConflictError):
            store.weight_upsert(5, replacing=base, expected_metadata_generation=gen, request_id=f"b-{res}")
        assert not asked.is_set()
        # A claim that stays open: CONFLICT after waiting at least wait_ms.
        t0 = time.monotonic()
        with pytest.raises(ws.ConflictError):
            store.weight_upsert(5, replacing=base, expected_metadata_generation=gen, request_id=f"b-{res}",
                                wait_ms=300)
        assert time.monotonic() - t0 >= 0.3 and asked.is_set()
        # A claim that ends while the call waits: the call then makes its own.
        asked.clear()
        got = {}

        def second():
            try:
                got["up"] = store.weight_upsert(5, replacing=base, expected_metadata_generation=gen,
                                                request_id=f"b-{res}", wait_ms=120000)
            except BaseException as e:  # noqa: BLE001 -- checked below
                got["error"] = e

        t = threading.Thread(target=second)
        t.start()
        assert asked.wait(60), "weight_upsert(wait_ms) did not wait for the open claim"
        first.abort()
        t.join(150)
        assert "error" not in got, got.get("error")
        assert got["up"].claim.request_id == f"b-{res}"
        got["up"].abort()
    finally:
        del store.weight_upsert_status
        first.abort()
    assert store.weight_is_exist(base)


def test_upsert_wait_ms_tries_again_when_the_claim_ends_before_it_is_read(store):
    # The open claim ends between the waiting call's CONFLICT and its read of
    # the claim: the call tries again and makes its own claim.
    res = unique("upsertrace")
    base = ident(res, gen=3)
    md = put_model(store, base, {"w": (np.zeros(4, np.float32), None)})
    gen = md.metadata_generation
    first = store.weight_upsert(4, replacing=base, expected_metadata_generation=gen, request_id=f"a-{res}")
    real_status = store.weight_upsert_status

    def status(lineage):
        first.abort()
        for _ in range(6000):
            claim = real_status(lineage)
            if claim.phase == ws.WeightUpsertPhase.ABORTED:
                return claim
            time.sleep(0.01)
        raise AssertionError(f"claim a-{res} did not end ABORTED")

    store.weight_upsert_status = status
    try:
        up = store.weight_upsert(5, replacing=base, expected_metadata_generation=gen, request_id=f"b-{res}",
                                 wait_ms=60000)
    finally:
        del store.weight_upsert_status
        first.abort()
    assert up.claim.request_id == f"b-{res}"
    up.abort()
    assert store.weight_is_exist(base)


def test_an_identity_without_generation_is_the_newest_live_one(store):
    res = unique("newest")
    put_model(store, ident(res, gen=1), {"w": (np.zeros(4, np.float32), None)})
    put_model(store, ident(res, gen=3), {"w": (np.full(4, 3, np.float32), None)})
    text = f"llm/{res}/v1"
    assert store.weight_get_metadata(text).metadata.identity.weight_generation == 3
    assert store.weight_is_exist(text) is True
    assert store.weight_get_size(text) == 16
    with store.weight_get(text) as load:
        assert np.array_equal(load["w"].array, np.full(4, 3, np.float32))
    with pytest.raises(ws.NotFoundError, match="no live generation"):
        store.weight_get_metadata(f"llm/{res}/nope")
    assert store.weight_is_exist(f"llm/{res}/nope") is False
    with pytest.raises(ws.InvalidArgumentError):
        store.weight_get_metadata(f"llm/{res}")


def test_upsert_status_reads_a_lineages_claim(store):
    res = unique("claimstatus")
    base = ident(res, gen=1)
    md = put_model(store, base, {"w": (np.zeros(4, np.float32), None)})
    with pytest.raises(ws.NotFoundError):
        store.weight_upsert_status(f"llm/{res}/v1")
    up = store.weight_upsert(2, replacing=base, expected_metadata_generation=md.metadata_generation,
                             request_id=f"trainer-{res}")
    try:
        c = store.weight_upsert_status(f"llm/{res}/v1")
        assert c.request_id == f"trainer-{res}"
        assert c.phase in (ws.WeightUpsertPhase.CLAIMED, ws.WeightUpsertPhase.IMPORTING_TARGET)
        assert c.target == base.with_generation(2) or c.target.weight_generation == 2
        assert store.weight_upsert_status(base.with_generation(7)).request_id == c.request_id
    finally:
        up.abort()
    assert wait_for(lambda: store.weight_upsert_status(f"llm/{res}/v1").phase == ws.WeightUpsertPhase.ABORTED)

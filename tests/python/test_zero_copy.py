"""test_zero_copy -- weight_get of a HOT revision on the node's host hands
out numpy views into the node's shared-memory segment (no copy), the same
bytes as the source for every tensor-parallel layout, and keeps the lease
and the mapping alive exactly as long as a view does."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import weightstore as ws
from weightstore import store as store_module
from helpers import inside, mapped_ranges, model, put_model, unique, wait_for


def ident(resource, gen=1):
    return ws.WeightIdentity("zc", resource, "v1", gen)


def split_source(arr, p: ws.TensorPlacement):
    """The box of placement p cut from the source with numpy (array_split
    gives the first S % N parts one more element, the library's rule)."""
    if p.kind != 2:
        return arr
    return np.array_split(arr, p.parts, axis=p.dim)[p.rank]


@pytest.fixture(scope="module")
def revision(master):
    with ws.WeightStore(master.address) as s:
        i = ident(unique("model"))
        src = model(7)
        put_model(s, i, src, aliases={"lm_head.weight": "embed.weight"})
    src["lm_head.weight"] = src["embed.weight"]
    return i, src


def test_hot_load_points_into_the_segment(store, master, revision):
    i, src = revision
    with store.weight_get(i) as load:
        assert load.zero_copy
        load.check_lease()  # held and renewed: no error
        ranges = mapped_ranges(master.segment_path)
        assert ranges, "the segment file is not mapped into this process"
        for name, t in load.items():
            a = t.array
            assert t.zero_copy
            assert inside(ranges, a.ctypes.data, a.nbytes), f"{name} is not inside the segment mapping"
            assert not a.flags.writeable
            assert np.array_equal(a, src[name][0]), name
        # A tied weight is the very same bytes as its target.
        assert load["lm_head.weight"].array.ctypes.data == load["embed.weight"].array.ctypes.data


def test_copy_path_does_not_point_into_the_segment(store, master, revision):
    i, src = revision
    with store.weight_get(i, zero_copy=False) as load:
        ranges = mapped_ranges(master.segment_path)
        for name, t in load.items():
            assert not t.zero_copy
            assert not inside(ranges, t.array.ctypes.data, max(1, t.array.nbytes))
            assert np.array_equal(t.array, src[name][0]), name


@pytest.mark.parametrize("tp", [1, 2, 4])
@pytest.mark.parametrize("zero_copy", [True, False])
def test_tensor_parallel_loads_match_the_source(store, revision, tp, zero_copy):
    i, src = revision
    rules = {"*.o_proj.weight": 1}
    for rank in range(tp):
        # model() has sizes 2 and 4 do not divide: uneven splits, asked for.
        placement = ws.tensor_parallel(tp, rank, split=rules, allow_uneven=True)
        with store.weight_get(i, placement, zero_copy=zero_copy) as load:
            assert set(load) == set(src)
            for name, t in load.items():
                want = split_source(src[name][0], t.placement)
                assert t.array.shape == want.shape, name
                assert t.array.tobytes() == want.tobytes(), f"{name} rank {rank} of {tp}"
                assert t.zero_copy == zero_copy
            if tp > 1:
                assert load["layers.0.o_proj.weight"].placement == ws.Split(1, tp, rank)
                assert load["embed.weight"].placement == ws.Split(0, tp, rank)
                assert load["layers.0.norm.weight"].placement == ws.REPLICATED


def test_tensor_parallel_refuses_an_uneven_split_unless_allowed():
    """tensor_parallel refuses, as `weightctl get --tp` without
    --allow-uneven does, to split a dimension world_size does not divide,
    naming the tensor, the dimension and world_size; allow_uneven=True
    splits it. Tensors it replicates, and dimensions it divides, are never
    refused."""
    embed = ws.TensorSpec("embed.weight", "F32", (64, 32))
    with pytest.raises(ws.InvalidArgumentError) as e:
        ws.tensor_parallel(3, 0)(embed)
    msg = str(e.value)
    assert "embed.weight" in msg and "dimension 0 (64)" in msg and "3 parts" in msg, msg
    assert "allow_uneven=True" in msg, msg
    with pytest.raises(ws.InvalidArgumentError, match=r"o\.weight: dimension 1 \(5\)"):
        ws.tensor_parallel(2, 1, split={"o.*": 1})(ws.TensorSpec("o.weight", "F32", (4, 5)))
    assert ws.tensor_parallel(3, 2, allow_uneven=True)(embed) == ws.Split(0, 3, 2)
    assert ws.tensor_parallel(4, 1)(embed) == ws.Split(0, 4, 1)
    assert ws.tensor_parallel(3, 0, replicate=["embed.*"])(embed) == ws.REPLICATED
    assert ws.tensor_parallel(3, 0)(ws.TensorSpec("norm", "F32", (64,))) == ws.REPLICATED
    assert ws.tensor_parallel(1, 0, split={"*": 1})(ws.TensorSpec("o", "F32", (4, 5))) == ws.Split(1, 1, 0)


@pytest.mark.parametrize("zero_copy", [True, False])
def test_an_uneven_split_is_refused_before_a_load_and_holds_no_lease(store, zero_copy):
    """weight_get with tensor_parallel(3, r) of a 64-row tensor raises
    InvalidArgumentError naming it and hands nothing out; no lease is left
    even while the exception is still referenced. With allow_uneven=True
    the first 64 % 3 ranks get one row more (22, 21, 21), the bytes those of
    the source."""
    i = ident(unique("uneven"))
    src = {"embed.weight": (np.arange(64 * 32, dtype=np.float32).reshape(64, 32), None),
           "layers.0.q_proj.weight": (np.ones((48, 32), dtype=np.float32), None)}
    put_model(store, i, src)
    with pytest.raises(ws.InvalidArgumentError) as e:
        store.weight_get(i, ws.tensor_parallel(3, 0), zero_copy=zero_copy)
    assert "tensor embed.weight: dimension 0 (64) does not split evenly into 3 parts" in str(e.value)
    assert store.weight_get_metadata(i).metadata.active_leases == 0
    del e
    rows = []
    for rank in range(3):
        with store.weight_get(i, ws.tensor_parallel(3, rank, allow_uneven=True), zero_copy=zero_copy) as load:
            a = load["embed.weight"].array
            rows.append(a.shape[0])
            assert a.tobytes() == np.array_split(src["embed.weight"][0], 3)[rank].tobytes()
            assert load["layers.0.q_proj.weight"].shape == (16, 32)
    assert rows == [22, 21, 21]
    del a, load  # a view keeps the lease of its load
    gc.collect()
    assert store.weight_get_metadata(i).metadata.active_leases == 0


def test_views_are_verified_in_one_call_before_they_are_taken(store, revision, monkeypatch):
    """weight_get asks the library once, before taking any view, to verify
    the objects behind exactly the tensors it will view (on the store's
    threads): not the ones it copies into bindings or skips."""
    i, src = revision
    calls = []
    verify = store_module._MappedRevision.verify

    def spy(self, indices):
        calls.append([spec.name for index, spec, _ in self.tensors() if index in indices])
        return verify(self, indices)

    monkeypatch.setattr(store_module._MappedRevision, "verify", spy)
    out = np.empty_like(src["embed.weight"][0])
    skip = {"step"}
    placement = lambda spec: None if spec.name in skip else ws.REPLICATED  # noqa: E731
    with store.weight_get(i, placement, bindings={"embed.weight": out}) as load:
        assert np.array_equal(out, src["embed.weight"][0])
        viewed = sorted(n for n, t in load.items() if t.zero_copy)
        for name in viewed:
            assert np.array_equal(load[name].array, src[name][0]), name
    assert len(calls) == 1
    assert sorted(calls[0]) == viewed
    assert "embed.weight" not in viewed and "step" not in viewed and viewed


def test_an_older_library_verifies_each_view_on_first_use(store, revision, monkeypatch):
    """A libweightclient without weight_mapped_verify (older than this
    package): each object is verified as its tensor is viewed, and the same
    bytes are handed out."""
    i, src = revision
    monkeypatch.setattr(store._lib, "has_mapped_verify", False)
    with store.weight_get(i) as load:
        assert load.zero_copy
        for name, t in load.items():
            assert t.zero_copy and np.array_equal(t.array, src[name][0]), name


def test_presharded_revision_loads_by_copy_and_matches(store, master):
    """A revision put as TP shards (fragments) is not one contiguous block
    per tensor: those tensors are copied, and still byte-identical."""
    i = ident(unique("sharded"))
    full = np.arange(10 * 6, dtype=np.float32).reshape(10, 6)
    with store.weight_put(i) as w:
        for part in range(4):
            rows = np.array_split(np.arange(10), 4)[part]
            w.weight_put_fragment("w", full[rows[0]:rows[-1] + 1], global_shape=(10, 6),
                                  global_offset=(int(rows[0]), 0))
        w.weight_put_tensor("b", np.arange(6, dtype=np.float32))
    with store.weight_get(i) as load:
        assert np.array_equal(load["w"].array, full) and not load["w"].zero_copy
        assert load["b"].zero_copy and np.array_equal(load["b"].array, np.arange(6, dtype=np.float32))
    for tp in (2, 4):
        for rank in range(tp):
            with store.weight_get(i, {"w": ws.Split(1, tp, rank)}) as load:
                assert set(load) == {"w"}
                assert np.array_equal(load["w"].array, np.array_split(full, tp, axis=1)[rank])


def test_raw_dtypes_keep_their_names(store, revision):
    i, src = revision
    with store.weight_get(i) as load:
        bf = load["layers.0.mlp.weight"]
        f8 = load["layers.0.scale"]
        assert bf.dtype == "BF16" and bf.array.dtype == np.uint16
        assert f8.dtype == "F8_E4M3" and f8.array.dtype == np.uint8
        assert bf.array.tobytes() == src["layers.0.mlp.weight"][0].tobytes()


def test_as_torch():
    torch = pytest.importorskip("torch", reason="torch is not installed: as_torch() cannot be exercised")
    t = ws.LoadedTensor("x", "BF16", np.zeros(4, np.uint16), False, ws.REPLICATED, (4,))
    assert t.as_torch().dtype == torch.bfloat16


def test_a_view_keeps_lease_and_mapping_alive(master, revision):
    """Closing the load and even the store leaves a surviving array valid:
    it holds the lease (active_leases stays 1) and points into a live
    mapping; dropping the last array releases the lease. The mapping is the
    library's, shared by later loads rather than made again."""
    i, src = revision
    s = ws.WeightStore(master.address)
    with ws.WeightStore(master.address) as probe:
        load = s.weight_get(i)
        arr = load["layers.0.o_proj.weight"].array[:, 3:7]  # a strided slice keeps it too
        load.close()
        del load
        s.close()
        gc.collect()
        assert probe.weight_get_metadata(i).metadata.active_leases == 1
        ranges = mapped_ranges(master.segment_path)
        assert inside(ranges, arr.ctypes.data, 1)
        assert np.array_equal(arr, src["layers.0.o_proj.weight"][0][:, 3:7])
        del arr
        gc.collect()
        assert probe.weight_get_metadata(i).metadata.active_leases == 0
        with probe.weight_get(i) as again:  # points into the same mapping as before
            assert again.zero_copy
            assert inside(ranges, again["embed.weight"].array.ctypes.data, again["embed.weight"].array.nbytes)


def test_remote_transport_copies(master, revision):
    i, src = revision
    with ws.WeightStore(master.address, transport=ws.TRANSPORT_REMOTE) as s:
        with s.weight_get(i) as load:
            assert not load.zero_copy
            for name, t in load.items():
                assert np.array_equal(t.array, src[name][0]), name


def test_bindings_receive_the_bytes(store, revision):
    i, src = revision
    out = np.empty((24, 15), dtype=np.float32)
    with store.weight_get(i, {"layers.0.o_proj.weight": ws.Split(1, 2, 1), "step": ws.REPLICATED},
                          bindings={"layers.0.o_proj.weight": out}) as load:
        assert load["layers.0.o_proj.weight"].array is out
        assert not load["layers.0.o_proj.weight"].zero_copy
        assert load["step"].zero_copy and int(load["step"].array) == 7
    assert np.array_equal(out, src["layers.0.o_proj.weight"][0][:, 15:])


def test_altered_bytes_are_never_handed_out(store, master):
    """A payload byte changed in the segment behind the store's back: the
    copy path finds no other replica and weight_get raises
    DigestMismatchError; the view refuses the object (its checksum fails)
    and reports it at once, so the copy that follows either meets the same
    bytes (DigestMismatchError) or finds the replica already dropped (the
    master's node hashed it and agreed: "no replica left") -- never the
    altered bytes. A DigestMismatchError says the replica was reported. One
    revision each; each turns DEGRADED (no cold copy)."""
    for zero_copy in (False, True):
        i = ident(unique("tamper"))
        put_model(store, i, {"w": (np.arange(4096, dtype=np.float32), None)})
        with store.weight_get(i) as load:
            a = load["w"].array
            (start, _), = [r for r in mapped_ranges(master.segment_path) if inside([r], a.ctypes.data, a.nbytes)]
            offset = a.ctypes.data - start + 100
            del a
        gc.collect()
        with open(master.segment_path, "r+b") as f:
            f.seek(offset)
            old = f.read(1)
            f.seek(offset)
            f.write(bytes([old[0] ^ 0xFF]))
        with pytest.raises(ws.WeightStoreError) as e:
            store.weight_get(i, zero_copy=zero_copy)
        if not zero_copy or not isinstance(e.value, ws.WeightTransportError):
            assert isinstance(e.value, ws.DigestMismatchError), repr(e.value)
            assert e.value.code == -150
            # the view's report or the copy's own: said either way (the master may
            # have dropped the replica on the view's, refusing the copy's)
            assert "reported to the master" in str(e.value), str(e.value)
        else:
            assert "no replica left" in str(e.value), str(e.value)
        assert wait_for(lambda: store.weight_get_metadata(i).metadata.availability
                        == ws.WeightAvailability.DEGRADED)
        assert store.weight_get_metadata(i).metadata.active_leases == 0


def test_one_store_shared_by_threads(store, revision):
    """Calls from several threads on one WeightStore are serialized by it;
    every load sees the source bytes and every lease is released."""
    import threading
    i, src = revision
    errors = []

    def worker(rank):
        try:
            for _ in range(3):
                with store.weight_get(i, ws.tensor_parallel(4, rank, allow_uneven=True)) as load:
                    for name, t in load.items():
                        if t.array.tobytes() != split_source(src[name][0], t.placement).tobytes():
                            errors.append(f"{name} rank {rank}")
                if not store.weight_is_exist(i):
                    errors.append("not READY")
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(r,)) for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    gc.collect()
    assert store.weight_get_metadata(i).metadata.active_leases == 0


def test_a_view_of_a_replaced_base_reports_its_lost_lease(master):
    """PUT_FIRST retires the base: its lease renewals are refused, the lease
    lapses, the base is deleted. A zero-copy load still alive says so:
    check_lease raises LeaseExpiredError (its bytes must not be trusted)."""
    with ws.WeightStore(master.address, lease_ttl_ms=500) as s, ws.WeightStore(master.address) as other:
        base = ident(unique("retired"))
        md = put_model(s, base, {"w": (np.arange(100, dtype=np.float32), None)})
        load = s.weight_get(base)
        assert load.zero_copy
        load.check_lease()  # held
        with other.weight_upsert(2, replacing=base, expected_metadata_generation=md.metadata_generation) as up:
            up.weight_put_tensor("w", np.ones(100, np.float32))
        assert wait_for(lambda: up.status().phase == ws.WeightUpsertPhase.COMMITTED)
        with pytest.raises(ws.LeaseExpiredError):
            load.check_lease()
        assert other.weight_get_metadata(base).metadata.availability == ws.WeightAvailability.DELETED


def test_a_lost_view_fails_closed(master):
    """Once the lease of a zero-copy load is lost (PUT_FIRST replaced its
    base, later generations were published) the load fails closed: looking
    a tensor up through it raises LeaseExpiredError, and an array kept from
    before is fenced -- a child process that reads it dies of SIGSEGV
    instead of reading a later generation's bytes (the trial's holder read
    markers 3, 5, 7 through it)."""
    import faulthandler
    import os
    import signal

    with ws.WeightStore(master.address, lease_ttl_ms=500) as s, ws.WeightStore(master.address) as other:
        base = ident(unique("fenced"))
        md = put_model(s, base, {"gen_marker": (np.full(64 * 1024, 1, dtype=np.uint8), None)})
        load = s.weight_get(base)
        kept = load["gen_marker"].array
        assert load.zero_copy and int(kept[0]) == 1
        replacing = base
        for gen in (2, 3, 4):
            with other.weight_upsert(gen, replacing=replacing,
                                     expected_metadata_generation=md.metadata_generation) as up:
                up.weight_put_tensor("gen_marker", np.full(64 * 1024, gen, dtype=np.uint8))
            assert wait_for(lambda: up.status().phase == ws.WeightUpsertPhase.COMMITTED)
            replacing = ident(base.resource_id, gen)
            md = other.weight_get_metadata(replacing).metadata
        with pytest.raises(ws.LeaseExpiredError):
            load.check_lease()
        with pytest.raises(ws.LeaseExpiredError):
            load["gen_marker"]
        with pytest.raises(ws.LeaseExpiredError):
            load.arrays()
        pid = os.fork()
        if pid == 0:
            faulthandler.disable()  # the fault is expected: no traceback
            try:
                os._exit(0 if int(kept[kept.size // 2]) >= 0 else 1)
            finally:
                os._exit(2)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGSEGV, status
        assert master.proc.poll() is None  # the master is alive
        assert other.weight_get_metadata(replacing).metadata.availability == ws.WeightAvailability.READY

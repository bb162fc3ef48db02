"""test_newest -- a read of "NAMESPACE/RESOURCE/REVISION" (no "@GENERATION",
the revision's newest live generation) while a trainer upserts the lineage
(PUT_FIRST) follows the replacement: when the generation it resolved was
retired between its listing and its lease (fenced by the replacement, or
already deleted), it resolves the newest one again and reads that, instead
of failing NOT_READY / NOT_FOUND. An explicit "@GENERATION" still fails.

The race is made deterministic: the reader's listing is the one taken
before the upsert (stale_listing), so it resolves the replaced base every
time; the base is held fenced (DRAINING_BASE, a lease on it held by the
test) in half of the generations, and already deleted in the others."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import weightstore as ws
from helpers import put_model, unique, wait_for

P = ws.WeightUpsertPhase
GENERATIONS = 20


def payload(gen: int) -> np.ndarray:
    return np.full(4096, gen, dtype=np.float32)


def stale_listing(store, page):
    """The next listing store makes for a resolution is `page` (taken
    before the upsert); the ones after it are real again."""
    store.__dict__.pop("weight_list", None)
    real = store.weight_list

    def listing(*args, **kwargs):
        store.__dict__.pop("weight_list", None)
        return page
    store.weight_list = listing
    return real


def test_newest_follows_every_replacement(master):
    res = unique("newest")
    text = f"llm/{res}/v1"
    with ws.WeightStore(master.address) as trainer, ws.WeightStore(master.address) as reader:
        base = ws.WeightIdentity("llm", res, "v1", 1)
        put_model(trainer, base, {"w": (payload(1), None)})
        for gen in range(2, GENERATIONS + 2):
            md = trainer.weight_get_metadata(base).metadata
            fenced = gen % 2 == 0  # the base held DRAINING by a lease, or deleted
            stale = reader.weight_list("llm", res)
            assert [m.identity.weight_generation for m in stale] == [gen - 1]
            hold = trainer.weight_get(base) if fenced else None
            with trainer.weight_upsert(gen, replacing=base,
                                       expected_metadata_generation=md.metadata_generation) as up:
                up.weight_put_tensor("w", payload(gen))
            if fenced:
                assert wait_for(lambda: up.status().phase == P.DRAINING_BASE)
                with pytest.raises(ws.NotReadyError):  # the caller named it: no following
                    reader.weight_get(f"{text}@{gen - 1}")
            else:
                assert wait_for(lambda: up.status().phase == P.COMMITTED)

            for zero_copy in (True, False):
                stale_listing(reader, stale)
                with reader.weight_get(text, zero_copy=zero_copy) as load:
                    assert load.identity.weight_generation == gen
                    assert np.array_equal(load["w"].array, payload(gen))
            stale_listing(reader, stale)
            assert reader.weight_is_exist(text) is True
            stale_listing(reader, stale)
            assert reader.weight_get_size(text) == payload(gen).nbytes
            stale_listing(reader, stale)
            assert reader.weight_get_attachments(text) == {}

            if hold is not None:
                hold.close()
                del hold
                gc.collect()
            assert wait_for(lambda: up.status().phase == P.COMMITTED)
            base = up.identity

"""test_put -- weight_put from Python: numpy dicts, safetensors files (one or
several, as weightctl writes them), pre-sharded fragments and tied aliases,
each loaded back byte for byte."""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

import weightstore as ws
from helpers import model, put_model, unique, write_safetensors
from master import build_dir


def ident(resource, gen=1):
    return ws.WeightIdentity("put", resource, "v1", gen)


def test_put_from_safetensors_files(store, tmp_path):
    src = model(3)
    names = list(src)
    a, b = tmp_path / "model-00001.safetensors", tmp_path / "model-00002.safetensors"
    write_safetensors(a, {n: src[n] for n in names[:3]}, metadata={"format": "pt"})
    write_safetensors(b, {n: src[n] for n in names[3:]})
    i = ident(unique("st"))
    md = store.weight_put(i, [str(a), b]).commit()
    assert md.availability == ws.WeightAvailability.READY
    with store.weight_get(i) as load:
        assert set(load) == set(names)
        for n, (arr, dt) in src.items():
            assert load[n].dtype == (dt or ws.tensors.dtype_name(arr))
            assert load[n].array.tobytes() == arr.tobytes(), n
            assert load[n].shape == arr.shape


def test_safetensors_reader_matches_weightctl(store, master, tmp_path):
    """weightctl get writes safetensors the reader maps back to the same bytes."""
    i = ident(unique("ctl"))
    src = model(4)
    put_model(store, i, src)
    out = tmp_path / "out"
    r = subprocess.run([f"{build_dir()}/bin/weightctl", "--master", master.address, "get", str(i),
                        "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    files = list(out.glob("*.safetensors"))
    assert len(files) == 1
    f = ws.read_safetensors(files[0])
    assert set(f) == set(src)
    for n, (arr, dt) in src.items():
        got, got_dt = f[n]
        assert got_dt == (dt or ws.tensors.dtype_name(arr)) and got.tobytes() == arr.tobytes()


def test_malformed_safetensors_is_invalid_argument(store, tmp_path):
    p = tmp_path / "bad.safetensors"
    p.write_bytes(b"\xff" * 8 + b"{}")
    with pytest.raises(ws.InvalidArgumentError):
        ws.read_safetensors(p)
    i = ident(unique("bad"))
    with pytest.raises(ws.InvalidArgumentError):
        store.weight_put(i, str(p))
    assert not store.weight_is_exist(i)


def test_fragments_and_aliases(store):
    i = ident(unique("frag"))
    full = np.arange(7 * 5, dtype=np.int32).reshape(7, 5)
    with store.weight_put(i) as w:
        w.weight_put_fragment("w", full[:, :2], global_shape=(7, 5), global_offset=(0, 0))
        w.weight_put_fragment("w", full[:, 2:], global_shape=(7, 5), global_offset=(0, 2))
        w.weight_put_alias("w_tied", "w")
    assert w.metadata.logical_bytes == full.nbytes  # the alias is stored once
    with store.weight_get(i) as load:
        assert np.array_equal(load["w"].array, full)
        assert np.array_equal(load["w_tied"].array, full)


def test_incomplete_fragments_fail_at_commit_and_publish_nothing(store):
    i = ident(unique("hole"))
    full = np.arange(12, dtype=np.float32).reshape(4, 3)
    w = store.weight_put(i)
    w.weight_put_fragment("w", full[:2], global_shape=(4, 3), global_offset=(0, 0))
    with pytest.raises(ws.InvalidArgumentError):
        w.commit()
    assert not store.weight_is_exist(i)


def test_dtypes_numpy_lacks_need_a_name(store):
    i = ident(unique("dt"))
    with pytest.raises(ws.InvalidArgumentError):
        store.weight_put(i, {"c": np.zeros(3, np.complex64)})
    with pytest.raises(ws.InvalidArgumentError):
        store.weight_put(i, {"x": (np.zeros(3, np.uint8), "BF16")})  # 1-byte items are not BF16
    assert not store.weight_is_exist(i)


def test_generation_zero_is_refused_and_publishes_nothing(store):
    i = ident(unique("g0")).with_generation(0)
    with pytest.raises(ws.InvalidArgumentError, match="generations start at 1"):
        store.weight_put(i, {"w": np.ones(4, np.float32)}).commit()
    assert not [r for r in store.weight_list(i.namespace).revisions() if r.identity.resource_id == i.resource_id]


def test_non_contiguous_input_is_stored_in_logical_order(store):
    i = ident(unique("strided"))
    base = np.arange(6 * 8, dtype=np.float64).reshape(6, 8)
    put_model(store, i, {"t": (base.T, None), "s": (base[::2, 1::3], None)})
    with store.weight_get(i) as load:
        assert np.array_equal(load["t"].array, base.T)
        assert np.array_equal(load["s"].array, base[::2, 1::3])


def hf_checkpoint(directory, src, split_at=3):
    """Write src as a Hugging Face checkpoint: two shards and the index."""
    import json
    names = list(src)
    shards = {"model-00001-of-00002.safetensors": names[:split_at],
              "model-00002-of-00002.safetensors": names[split_at:]}
    for fname, ns in shards.items():
        write_safetensors(directory / fname, {n: src[n] for n in ns})
    weight_map = {n: fname for fname, ns in shards.items() for n in ns}
    (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return weight_map


def test_put_from_a_hugging_face_directory(store, tmp_path):
    src = model(5)
    hf_checkpoint(tmp_path, src)
    i = ident(unique("hf"))
    md = store.weight_put(i, str(tmp_path), aliases={"lm_head.weight": "embed.weight"}).commit()
    assert md.availability == ws.WeightAvailability.READY
    with store.weight_get(i) as load:
        assert set(load) == set(src) | {"lm_head.weight"}
        for n, (arr, _) in src.items():
            assert load[n].array.tobytes() == arr.tobytes() and load[n].shape == arr.shape, n


def test_hugging_face_index_must_match_its_shards(store, tmp_path):
    import json
    src = model(6)
    weight_map = hf_checkpoint(tmp_path, src)
    index = tmp_path / "model.safetensors.index.json"
    moved = dict(weight_map, **{"embed.weight": "model-00002-of-00002.safetensors"})
    index.write_text(json.dumps({"weight_map": moved}))
    with pytest.raises(ws.InvalidArgumentError, match="embed.weight"):
        ws.HuggingFaceCheckpoint(tmp_path)
    missing = {n: f for n, f in weight_map.items() if n != "step"}
    index.write_text(json.dumps({"weight_map": missing}))
    with pytest.raises(ws.InvalidArgumentError, match="step"):
        ws.HuggingFaceCheckpoint(tmp_path)
    i = ident(unique("hfbad"))
    with pytest.raises(ws.InvalidArgumentError):
        store.weight_put(i, str(tmp_path))
    with pytest.raises(ws.InvalidArgumentError, match="neither"):
        ws.HuggingFaceCheckpoint(tmp_path / "nothing-here")


def test_hugging_face_directory_keeps_its_files(store, master, tmp_path):
    """A model directory's other files (config, tokenizer, ...) are stored
    with the revision: Python loads see only the tensors, and weightctl get
    --out writes a loadable directory again, every file byte for byte."""
    src = model(7)
    hf = tmp_path / "hf"
    hf.mkdir()
    hf_checkpoint(hf, src)
    files = {"config.json": b'{"architectures": ["Tiny"]}\n', "tokenizer.json": bytes(range(256)) * 900,
             "generation_config.json": b"{}\n", "special_tokens_map.json": b""}
    for name, data in files.items():
        (hf / name).write_bytes(data)
    (hf / ".gitattributes").write_text("*.safetensors filter=lfs\n")
    ck = ws.HuggingFaceCheckpoint(hf)
    assert ck.attachments == files and ck.skipped == [".gitattributes (hidden)"]
    i = ident(unique("hffiles"))
    store.weight_put(i, str(hf)).commit()
    with store.weight_get(i) as load:
        assert set(load) == set(src)  # attachments are not tensors
    assert store.weight_get_attachments(i) == files
    assert store.weight_get_attachments(i, ["config.json"]) == {"config.json": files["config.json"]}
    with pytest.raises(ws.NotFoundError, match="'model.safetensors'"):
        store.weight_get_attachments(i, ["config.json", "model.safetensors"])
    plain = ident(unique("nofiles"))
    put_model(store, plain, src)
    assert store.weight_get_attachments(plain) == {}
    out = tmp_path / "back"
    r = subprocess.run([f"{build_dir()}/bin/weightctl", "--master", master.address, "get", str(i),
                        "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(list(files) + ["model.safetensors"])
    for name, data in files.items():
        assert (out / name).read_bytes() == data, name
    back = ws.read_safetensors(out / "model.safetensors")
    for n, (arr, _) in src.items():
        assert back[n][0].tobytes() == arr.tobytes(), n


def test_hugging_face_directory_refusals(store, tmp_path):
    """A shard the index names but the directory lacks, and a file over the
    attachment cap, are refused naming the file; nothing is published."""
    src = model(8)
    hf_checkpoint(tmp_path, src)
    (tmp_path / "model-00002-of-00002.safetensors").rename(tmp_path / "aside")
    with pytest.raises(ws.InvalidArgumentError, match="model-00002-of-00002.safetensors, named by "
                                                      "model.safetensors.index.json, is missing"):
        store.weight_put(ident(unique("hfmiss")), str(tmp_path))
    (tmp_path / "aside").rename(tmp_path / "model-00002-of-00002.safetensors")
    with open(tmp_path / "big.bin", "wb") as f:
        f.truncate(ws.ATTACHMENT_MAX_BYTES + 1)
    i = ident(unique("hfbig"))
    with pytest.raises(ws.InvalidArgumentError, match="big.bin is 67108865 bytes, over the 67108864"):
        store.weight_put(i, str(tmp_path))
    assert not store.weight_is_exist(i)
    w = store.weight_put(i)
    with pytest.raises(ws.InvalidArgumentError, match="not a file name"):
        w.weight_put_attachment("sub/config.json", b"{}")
    w.abort()

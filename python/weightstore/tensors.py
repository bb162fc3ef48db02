"""tensors -- dtypes, placements, safetensors files and the loaded tensors
of weightstore.

A revision's tensors carry safetensors dtype names ("F32", "BF16",
"F8_E4M3", ...). numpy has no bfloat16 or float8, so those load as raw views
of the same bytes (uint16 / uint8) and keep the name in LoadedTensor.dtype;
as_torch() reinterprets them when torch is importable.

A placement says, per tensor, what this process loads: the whole tensor
(Replicated), part `rank` of `parts` along `dim` (Split: a dimension of size
S gives part r S // N elements, plus one for the first S % N parts -- the C
library's rule), or nothing (SKIP). tensor_parallel() builds the placement
weightctl's `--tp N --rank R --split PATTERN=DIM` uses, and like `weightctl
get --tp` refuses a split of a dimension N does not divide unless told
(allow_uneven=True, weightctl's --allow-uneven).

read_safetensors() maps a .safetensors file read-only and returns numpy
views of its tensors without reading them, so weight_put of a file copies
its bytes once, into the store; HuggingFaceCheckpoint does the same for a
checkpoint directory (model.safetensors.index.json and its shards).
"""
from __future__ import annotations

import fnmatch
import json
import mmap
import os
import struct
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from .errors import InvalidArgumentError

# safetensors name -> (numpy dtype the bytes are viewed as, raw?)
_DTYPES = {
    "F64": (np.float64, False),
    "F32": (np.float32, False),
    "F16": (np.float16, False),
    "BF16": (np.uint16, True),
    "I64": (np.int64, False),
    "I32": (np.int32, False),
    "I16": (np.int16, False),
    "I8": (np.int8, False),
    "U64": (np.uint64, False),
    "U32": (np.uint32, False),
    "U16": (np.uint16, False),
    "U8": (np.uint8, False),
    "BOOL": (np.bool_, False),
    "F8_E4M3": (np.uint8, True),
    "F8_E5M2": (np.uint8, True),
}
_FROM_NUMPY = {
    np.dtype(np.float64): "F64", np.dtype(np.float32): "F32", np.dtype(np.float16): "F16",
    np.dtype(np.int64): "I64", np.dtype(np.int32): "I32", np.dtype(np.int16): "I16",
    np.dtype(np.int8): "I8", np.dtype(np.uint64): "U64", np.dtype(np.uint32): "U32",
    np.dtype(np.uint16): "U16", np.dtype(np.uint8): "U8", np.dtype(np.bool_): "BOOL",
}
# dtypes of the ml_dtypes package (what jax and others use), by numpy name.
_FROM_NUMPY_NAME = {"bfloat16": "BF16", "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2"}
_TORCH_NAMES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
    "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "U16": "uint16", "U32": "uint32",
    "U64": "uint64",
}


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype tensors of safetensors dtype `name` load as."""
    try:
        return np.dtype(_DTYPES[name][0])
    except KeyError:
        raise InvalidArgumentError(f"unknown dtype {name!r}") from None


def dtype_name(array: np.ndarray, dtype: Optional[str] = None) -> str:
    """The safetensors name for array's elements: `dtype` when given (its
    item size must match, e.g. "BF16" for a uint16 array holding bfloat16
    bits), else derived from the numpy dtype."""
    if dtype is not None:
        if dtype not in _DTYPES:
            raise InvalidArgumentError(f"unknown dtype {dtype!r}")
        if numpy_dtype(dtype).itemsize != array.dtype.itemsize:
            raise InvalidArgumentError(f"dtype {dtype} has {numpy_dtype(dtype).itemsize}-byte items, "
                                       f"the array {array.dtype.itemsize}-byte ones")
        return dtype
    name = _FROM_NUMPY.get(array.dtype) or _FROM_NUMPY_NAME.get(array.dtype.name)
    if name is None:
        raise InvalidArgumentError(f"numpy dtype {array.dtype} has no safetensors name; "
                                   f"pass dtype= explicitly")
    return name


# -- placement -------------------------------------------------------------------

PLACE_SKIP, PLACE_REPLICATED, PLACE_SPLIT = 0, 1, 2


@dataclass(frozen=True)
class TensorPlacement:
    """One tensor's target layout (see the module comment)."""

    kind: int = PLACE_REPLICATED
    dim: int = 0
    parts: int = 1
    rank: int = 0


SKIP = TensorPlacement(PLACE_SKIP)
REPLICATED = TensorPlacement(PLACE_REPLICATED)


def Replicated() -> TensorPlacement:
    return REPLICATED


def Split(dim: int, parts: int, rank: int) -> TensorPlacement:
    return TensorPlacement(PLACE_SPLIT, dim, parts, rank)


@dataclass(frozen=True)
class TensorSpec:
    """A tensor of a revision as a placement sees it: name, safetensors
    dtype, global shape, and the tensor it is tied to (or None)."""

    name: str
    dtype: str
    shape: Tuple[int, ...]
    alias_of: Optional[str] = None


PlacementLike = Union[None, Callable[[TensorSpec], Optional[TensorPlacement]],
                      Mapping[str, TensorPlacement]]


def resolve_placement(placement: PlacementLike, spec: TensorSpec) -> TensorPlacement:
    """The placement of spec under `placement`: None places every tensor
    whole; a mapping places the names it holds (others skipped); a callable
    returns a TensorPlacement, or None to skip."""
    if placement is None:
        return REPLICATED
    if isinstance(placement, Mapping):
        return placement.get(spec.name, SKIP)
    p = placement(spec)
    return SKIP if p is None else p


def tensor_parallel(world_size: int, rank: int, split: Optional[Mapping[str, int]] = None,
                    replicate: Sequence[str] = (), *,
                    allow_uneven: bool = False) -> Callable[[TensorSpec], TensorPlacement]:
    """The placement of TP rank `rank` of `world_size`, by the rules of
    `weightctl get --tp N --rank R`: the first of `split` (glob -> dim, used
    only when the tensor has that dim) or `replicate` (globs) matching the
    name decides, the split rules first; otherwise a tensor of two or more
    dimensions is split along 0 and the rest replicated.

    A split of a dimension world_size does not divide is refused, as
    weightctl refuses it without --allow-uneven: the placement raises
    InvalidArgumentError naming the tensor, the dimension (and its size) and
    world_size -- so weight_get raises it before anything is loaded. With
    allow_uneven=True such a dimension is split anyway, the first
    size % world_size ranks holding one more element (the C library's rule,
    see box())."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise InvalidArgumentError(f"rank {rank} of {world_size}")
    split = dict(split or {})

    def cut(spec: TensorSpec, dim: int) -> TensorPlacement:
        size = spec.shape[dim]
        rem = size % world_size
        if rem and not allow_uneven:
            raise InvalidArgumentError(
                f"tensor {spec.name}: dimension {dim} ({size}) does not split evenly into "
                f"{world_size} parts; allow_uneven=True gives the first {rem} rank(s) one more, "
                f"or replicate it or split it along another dimension")
        return Split(dim, world_size, rank)

    def place(spec: TensorSpec) -> TensorPlacement:
        for pat, dim in split.items():
            if fnmatch.fnmatchcase(spec.name, pat) and dim < len(spec.shape):
                return cut(spec, dim)
        for pat in replicate:
            if fnmatch.fnmatchcase(spec.name, pat):
                return REPLICATED
        if len(spec.shape) >= 2 and world_size > 1:
            return cut(spec, 0)
        return REPLICATED

    return place


def box(shape: Sequence[int], p: TensorPlacement) -> Tuple[slice, ...]:
    """The index box of placement p in a tensor of `shape` (slices per dim)."""
    sl = [slice(None)] * len(shape)
    if p.kind == PLACE_SPLIT:
        if p.dim >= len(shape) or p.parts < 1 or p.rank >= p.parts:
            raise InvalidArgumentError(f"split dim {p.dim} part {p.rank} of {p.parts} "
                                       f"does not fit shape {tuple(shape)}")
        s = shape[p.dim]
        base, rem = divmod(s, p.parts)
        start = p.rank * base + min(p.rank, rem)
        sl[p.dim] = slice(start, start + base + (1 if p.rank < rem else 0))
    return tuple(sl)


# -- loaded tensors --------------------------------------------------------------


class LoadedTensor:
    """One tensor of a weight_get: `array` is a numpy array of this rank's
    box (its dtype the raw view for BF16 and F8), `dtype` the safetensors
    name, `shape` the box's shape, `zero_copy` True when the array points
    into the store's shared memory (read-only; it keeps the revision's
    lease and the mapping alive for as long as it lives)."""

    __slots__ = ("name", "dtype", "array", "zero_copy", "placement", "global_shape")

    def __init__(self, name: str, dtype: str, array: np.ndarray, zero_copy: bool,
                 placement: TensorPlacement, global_shape: Tuple[int, ...]):
        self.name = name
        self.dtype = dtype
        self.array = array
        self.zero_copy = zero_copy
        self.placement = placement
        self.global_shape = global_shape

    @property
    def shape(self) -> Tuple[int, ...]:
        return tuple(self.array.shape)

    def numpy(self) -> np.ndarray:
        return self.array

    def __array__(self, dtype=None):
        return self.array if dtype is None else self.array.astype(dtype)

    def as_torch(self):
        """A torch tensor sharing this array's memory (BF16 and F8 with their
        torch dtype). Raises ImportError when torch is not installed.
        Zero-copy tensors are read-only memory: torch may warn, and writing
        to them faults."""
        import torch  # noqa: F401  (optional dependency)

        t = torch.from_numpy(self.array)
        name = _TORCH_NAMES.get(self.dtype)
        want = getattr(torch, name) if name else None
        if _DTYPES[self.dtype][1] and want is not None:
            t = t.view(want)
        return t

    def __repr__(self) -> str:
        return (f"LoadedTensor({self.name!r}, dtype={self.dtype}, shape={self.shape}, "
                f"zero_copy={self.zero_copy})")


# -- safetensors -----------------------------------------------------------------


class SafetensorsFile(Mapping):
    """A .safetensors file mapped read-only: name -> (array, dtype name),
    arrays are views of the mapping (no read happens until they are used).
    `metadata` is the header's __metadata__ (or {})."""

    def __init__(self, path: Union[str, os.PathLike]):
        self.path = os.fspath(path)
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 8:
                raise InvalidArgumentError(f"{self.path}: not a safetensors file (too short)")
            (n,) = struct.unpack("<Q", f.read(8))
            if n > size - 8 or n > 100 << 20:
                raise InvalidArgumentError(f"{self.path}: header length {n} past the file's end")
            try:
                header = json.loads(f.read(n))
            except ValueError as e:
                raise InvalidArgumentError(f"{self.path}: header is not JSON: {e}") from None
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size > 0 else None
        self.metadata = header.pop("__metadata__", {}) or {}
        data_start = 8 + n
        self._tensors: Dict[str, Tuple[np.ndarray, str]] = {}
        buf = np.frombuffer(self._map, dtype=np.uint8)
        for name, t in header.items():
            try:
                dt, shape, (a, b) = t["dtype"], tuple(int(x) for x in t["shape"]), t["data_offsets"]
            except (KeyError, TypeError, ValueError):
                raise InvalidArgumentError(f"{self.path}: tensor {name!r}: malformed header entry") from None
            npdt = numpy_dtype(dt)
            count = int(np.prod(shape, dtype=np.uint64)) if shape else 1
            if b < a or data_start + b > size or b - a != count * npdt.itemsize:
                raise InvalidArgumentError(f"{self.path}: tensor {name!r}: data_offsets [{a}, {b}) "
                                           f"do not hold {shape} {dt}")
            arr = buf[data_start + a:data_start + b].view(npdt).reshape(shape)
            self._tensors[name] = (arr, dt)

    def __getitem__(self, name):
        return self._tensors[name]

    def __iter__(self):
        return iter(self._tensors)

    def __len__(self):
        return len(self._tensors)


class HuggingFaceCheckpoint(Mapping):
    """A Hugging Face checkpoint directory: model.safetensors.index.json
    (its weight_map names the shard file of every tensor) with its shard
    files, or a single model.safetensors. name -> (array, dtype name), the
    arrays views of the mapped files as in SafetensorsFile. Every tensor of
    the weight_map must be in the shard it names, and no shard may hold a
    tensor the weight_map does not list (InvalidArgumentError naming both).
    Tied weights the checkpoint leaves out (lm_head with
    tie_word_embeddings) are not guessed: pass them as weight_put aliases.

    A shard the weight_map names but the directory lacks is refused naming
    it. The directory's other regular files (config.json, tokenizer files,
    generation_config.json, ...) are read into .attachments (name -> bytes):
    weight_put stores them with the revision, and `weightctl get --out DIR`
    writes them back. A file over ATTACHMENT_MAX_BYTES is refused naming it;
    hidden files, subdirectories and safetensors files the index does not
    name are not stored (listed in .skipped, "name (why)"), nor is the index
    itself (get writes the tensors as one model.safetensors)."""

    INDEX = "model.safetensors.index.json"
    SINGLE = "model.safetensors"

    def __init__(self, path: Union[str, os.PathLike]):
        self.path = os.fspath(path)
        index = os.path.join(self.path, self.INDEX)
        if os.path.exists(index):
            try:
                with open(index) as f:
                    weight_map = json.load(f)["weight_map"]
                if not isinstance(weight_map, dict):
                    raise TypeError
            except (ValueError, KeyError, TypeError):
                raise InvalidArgumentError(f"{index}: no weight_map object") from None
        elif os.path.exists(os.path.join(self.path, self.SINGLE)):
            weight_map = None
        else:
            raise InvalidArgumentError(f"{self.path}: neither {self.INDEX} nor {self.SINGLE}")
        self.files: Dict[str, SafetensorsFile] = {}
        self._tensors: Dict[str, Tuple[np.ndarray, str]] = {}
        shards = [self.SINGLE] if weight_map is None else list(dict.fromkeys(weight_map.values()))
        for shard in shards:
            if not isinstance(shard, str) or os.path.basename(shard) != shard:
                raise InvalidArgumentError(f"{index}: shard {shard!r} is not a file name")
            if not os.path.isfile(os.path.join(self.path, shard)):
                raise InvalidArgumentError(f"{self.path}: {shard}, named by {self.INDEX}, is missing")
        self.attachments, self.skipped = _read_attachments(self.path, set(shards) | {self.INDEX})
        if weight_map is None:
            self.files[self.SINGLE] = SafetensorsFile(os.path.join(self.path, self.SINGLE))
            self._tensors.update(self.files[self.SINGLE])
            return
        for name, shard in weight_map.items():
            if shard not in self.files:
                self.files[shard] = SafetensorsFile(os.path.join(self.path, shard))
            if name not in self.files[shard]:
                raise InvalidArgumentError(f"{index}: tensor {name!r} is not in {shard}")
            self._tensors[name] = self.files[shard][name]
        for shard, f in self.files.items():
            extra = sorted(set(f) - set(n for n, s in weight_map.items() if s == shard))
            if extra:
                raise InvalidArgumentError(f"{shard} holds {extra[0]!r}, which {self.INDEX} does not map to it")

    def __getitem__(self, name):
        return self._tensors[name]

    def __iter__(self):
        return iter(self._tensors)

    def __len__(self):
        return len(self._tensors)


ATTACHMENT_MAX_BYTES = 64 << 20  # libweightclient's WEIGHT_ATTACHMENT_MAX_BYTES


def _read_attachments(path: str, taken) -> Tuple[Dict[str, bytes], List[str]]:
    """The attachments of a model directory (see HuggingFaceCheckpoint):
    its regular files but `taken`, in name order, and what is left out."""
    attachments: Dict[str, bytes] = {}
    skipped: List[str] = []
    for name in sorted(os.listdir(path)):
        if name in taken:
            continue
        full = os.path.join(path, name)
        why = ("hidden" if name.startswith(".") else "a directory" if os.path.isdir(full)
               else "not a regular file" if not os.path.isfile(full)
               else "not in the shard set" if name.endswith(".safetensors") else None)
        if why:
            skipped.append(f"{name} ({why})")
            continue
        size = os.path.getsize(full)
        if size > ATTACHMENT_MAX_BYTES:
            raise InvalidArgumentError(f"{path}: {name} is {size} bytes, over the "
                                       f"{ATTACHMENT_MAX_BYTES} bytes an attachment may hold")
        with open(full, "rb") as f:
            attachments[name] = f.read()
    return attachments, skipped


def iter_attachment_source(source) -> Iterable[Tuple[str, bytes]]:
    """(name, bytes) of the attachments of a put source: those of a Hugging
    Face checkpoint (object or directory path), in a list too; other
    sources have none."""
    if isinstance(source, (str, os.PathLike)) and os.path.isdir(source):
        source = HuggingFaceCheckpoint(source)
    if isinstance(source, HuggingFaceCheckpoint):
        yield from source.attachments.items()
    elif isinstance(source, (list, tuple)):
        for item in source:
            yield from iter_attachment_source(item)


def read_safetensors(path) -> SafetensorsFile:
    """Open a .safetensors file (see SafetensorsFile)."""
    return SafetensorsFile(path)


def iter_tensor_source(source) -> Iterable[Tuple[str, np.ndarray, Optional[str]]]:
    """(name, array, dtype name or None) of a put source: a mapping of name
    -> array or (array, dtype) / (dtype, array), a safetensors file path, a
    Hugging Face checkpoint directory, or a list of those."""
    if isinstance(source, (str, os.PathLike)):
        source = HuggingFaceCheckpoint(source) if os.path.isdir(source) else SafetensorsFile(source)
    if isinstance(source, Mapping):
        for name, v in source.items():
            if isinstance(v, tuple) and len(v) == 2:
                a, b = v
                arr, dt = (b, a) if isinstance(a, str) else (a, b)
                yield name, np.asarray(arr), dt
            else:
                yield name, np.asarray(v), None
        return
    if isinstance(source, (list, tuple)):
        for item in source:
            yield from iter_tensor_source(item)
        return
    raise InvalidArgumentError(f"cannot put tensors from {type(source).__name__}")

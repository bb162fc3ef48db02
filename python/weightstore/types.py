"""types -- the values weightstore passes and returns: identities, states,
policies, metadata, operations and replacement claims.

All are immutable (frozen dataclasses and IntEnums whose values are the C
library's). They hold plain Python values, never pointers into the library,
so they outlive the store they came from. Conversions to and from the ctypes
structs of weightstore._lib live here too (functions prefixed with an
underscore; not public).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional, Union

from . import _lib
from .errors import InvalidArgumentError


class WeightAvailability(enum.IntEnum):
    IMPORTING = 1
    READY = 2
    DEGRADED = 3
    DELETING = 4
    DELETED = 5


class WeightResidencyState(enum.IntEnum):
    UNKNOWN = 0
    HOT = 1
    COLD = 2
    MIXED = 3
    ABSENT = 4


class WeightMigrationMode(enum.IntEnum):
    PINNED = 1
    MANUAL = 2
    AUTO = 3


class WeightUpsertMode(enum.IntEnum):
    PUT_FIRST = 1
    DELETE_FIRST = 2


class WeightOperationKind(enum.IntEnum):
    MIGRATING = 1
    REPAIRING = 2
    DELETING = 3
    IMPORTING = 4


class WeightOperationState(enum.IntEnum):
    RUNNING = 1
    SUCCEEDED = 2
    FAILED = 3


class WeightUpsertPhase(enum.IntEnum):
    CLAIMED = 1
    IMPORTING_TARGET = 2
    BASE_FENCED = 3
    DRAINING_BASE = 4
    DELETING_BASE = 5
    BASE_DELETED = 6
    COMMITTED = 7
    ABORTED = 8


def _enum_or_int(cls, v):
    try:
        return cls(v)
    except ValueError:
        return v


@dataclass(frozen=True)
class WeightIdentity:
    """(tenant_id, namespace, resource_id, revision, weight_generation).
    tenant_id "" means the store's tenant."""

    namespace: str
    resource_id: str
    revision: str
    weight_generation: int
    tenant_id: str = ""

    @property
    def lineage(self):
        """The identity without its generation."""
        return (self.tenant_id, self.namespace, self.resource_id, self.revision)

    def with_generation(self, generation: int) -> "WeightIdentity":
        return WeightIdentity(self.namespace, self.resource_id, self.revision, generation, self.tenant_id)

    @classmethod
    def parse(cls, text: str, tenant_id: str = "") -> "WeightIdentity":
        """NAMESPACE/RESOURCE/REVISION@GENERATION (weightctl's form; '/',
        '@' and '%' inside a component percent-encoded)."""
        lib = _lib.load()
        c = _lib.Identity()
        has = _lib.c_int(0)
        rc = lib.weight_identity_parse(text.encode(), tenant_id.encode() or None, c, has)
        if rc < 0 or not has.value:
            raise InvalidArgumentError(f"{text!r} is not NAMESPACE/RESOURCE/REVISION@GENERATION")
        return _identity_from_c(c)

    def __str__(self) -> str:
        lib = _lib.load()
        buf = _lib.ctypes.create_string_buffer(4 * 3 * 257 + 32)
        c = _identity_to_c(self)
        n = lib.weight_identity_format(c, buf, len(buf))
        return buf.value.decode() if n >= 0 else repr(self)


IdentityLike = Union[WeightIdentity, str]


def _as_identity(v: IdentityLike) -> WeightIdentity:
    if isinstance(v, WeightIdentity):
        return v
    if isinstance(v, str):
        return WeightIdentity.parse(v)
    raise InvalidArgumentError(f"not a WeightIdentity: {v!r}")


def _identity_to_c(ident: IdentityLike) -> "_lib.Identity":
    ident = _as_identity(ident)
    lib = _lib.load()
    c = _lib.Identity()
    if not isinstance(ident.weight_generation, int) or ident.weight_generation < 0:
        raise InvalidArgumentError(f"weight_generation {ident.weight_generation!r} is not an integer >= 0")
    rc = lib.weight_identity_set(c, ident.tenant_id.encode() or None, ident.namespace.encode(),
                                 ident.resource_id.encode(), ident.revision.encode(),
                                 ident.weight_generation)
    if rc < 0:
        raise InvalidArgumentError(f"identity {ident!r}: a component is empty or longer than "
                                   f"{_lib.WEIGHT_ID_MAX} bytes")
    return c


def _identity_from_c(c) -> WeightIdentity:
    return WeightIdentity(c.namespace_id.decode(), c.resource_id.decode(), c.revision.decode(),
                          int(c.generation), c.tenant_id.decode())


@dataclass(frozen=True)
class WeightStoragePolicy:
    """A revision's residency policy. In a request, a field set to None is
    "not given": the next level (store default, then the cluster default)
    decides it. Metadata always carries every field."""

    preferred_residency: Optional[WeightResidencyState] = WeightResidencyState.MIXED
    mixed_hot_ratio: Optional[float] = 0.5
    migration_mode: Optional[WeightMigrationMode] = WeightMigrationMode.AUTO


def _policy_to_c(p: Optional[WeightStoragePolicy]):
    if p is None:
        return None
    if not isinstance(p, WeightStoragePolicy):
        raise InvalidArgumentError(f"not a WeightStoragePolicy: {p!r}")
    c = _lib.Policy()
    c.preferred = int(p.preferred_residency) if p.preferred_residency is not None else 0
    c.mixed_hot_ratio = float(p.mixed_hot_ratio) if p.mixed_hot_ratio is not None else 0.0
    c.mode = int(p.migration_mode) if p.migration_mode is not None else 0
    return c


def _policy_from_c(c) -> WeightStoragePolicy:
    return WeightStoragePolicy(_enum_or_int(WeightResidencyState, c.preferred), c.mixed_hot_ratio,
                               _enum_or_int(WeightMigrationMode, c.mode))


@dataclass(frozen=True)
class WeightMetadata:
    """Lightweight metadata of a revision (never the manifest body)."""

    identity: WeightIdentity
    policy: WeightStoragePolicy
    availability: WeightAvailability
    residency: WeightResidencyState
    observed_hot_ratio: float
    metadata_generation: int
    operation_id: Optional[int]
    manifest_key: str
    manifest_sha256: bytes
    payload_count: int
    logical_bytes: int
    affinity_count: int
    created_ms: int
    updated_ms: int
    last_access_ms: int
    active_leases: int


def _metadata_from_c(c) -> WeightMetadata:
    return WeightMetadata(
        identity=_identity_from_c(c.identity),
        policy=_policy_from_c(c.policy),
        availability=_enum_or_int(WeightAvailability, c.availability),
        residency=_enum_or_int(WeightResidencyState, c.residency),
        observed_hot_ratio=c.observed_hot_ratio,
        metadata_generation=int(c.metadata_generation),
        operation_id=int(c.operation_id) or None,
        manifest_key=c.manifest_key.decode(),
        manifest_sha256=bytes(c.manifest_sha256),
        payload_count=int(c.payload_count),
        logical_bytes=int(c.logical_bytes),
        affinity_count=int(c.affinity_count),
        created_ms=int(c.created_ms),
        updated_ms=int(c.updated_ms),
        last_access_ms=int(c.last_access_ms),
        active_leases=int(c.active_leases),
    )


@dataclass(frozen=True)
class WeightOperation:
    """An asynchronous operation: its target, progress and error."""

    operation_id: int
    identity: WeightIdentity
    kind: WeightOperationKind
    target: WeightResidencyState
    target_hot_ratio: float
    state: WeightOperationState
    members_done: int
    members_total: int
    bytes_done: int
    bytes_total: int
    error: str
    attempts: int
    created_ms: int
    updated_ms: int

    @property
    def done(self) -> bool:
        return self.state != WeightOperationState.RUNNING


def _operation_from_c(c) -> WeightOperation:
    return WeightOperation(
        operation_id=int(c.id),
        identity=_identity_from_c(c.identity),
        kind=_enum_or_int(WeightOperationKind, c.kind),
        target=_enum_or_int(WeightResidencyState, c.target),
        target_hot_ratio=c.target_hot_ratio,
        state=_enum_or_int(WeightOperationState, c.state),
        members_done=int(c.members_done),
        members_total=int(c.members_total),
        bytes_done=int(c.bytes_done),
        bytes_total=int(c.bytes_total),
        error=c.error.decode(errors="replace"),
        attempts=int(c.attempts),
        created_ms=int(c.created_ms),
        updated_ms=int(c.updated_ms),
    )


@dataclass(frozen=True)
class WeightMetadataView:
    """What weight_get_metadata returns: the metadata and, when one is
    active, the revision's operation (else None). A DEGRADED revision also
    says where it goes back once its manifest and members are readable (HOT, COLD or
    MIXED, and MIXED's hot ratio); None for any other availability."""

    metadata: WeightMetadata
    operation: Optional[WeightOperation]
    degraded_from: Optional[WeightResidencyState] = None
    degraded_from_hot_ratio: float = 0.0


def _degraded_from_c(c):
    """(degraded_from, its hot ratio) of a weight_metadata_more."""
    if c.degraded_from == 0:
        return None, 0.0
    return _enum_or_int(WeightResidencyState, c.degraded_from), c.degraded_from_hot_ratio


@dataclass(frozen=True)
class WeightUpsertClaim:
    """A lineage's replacement claim as the master holds it (not the
    serving head)."""

    request_id: str
    base: WeightIdentity
    target: WeightIdentity
    mode: WeightUpsertMode
    phase: WeightUpsertPhase
    expected_metadata_generation: int
    committed_watermark: int
    error: str
    created_ms: int
    updated_ms: int


def _claim_from_c(c) -> WeightUpsertClaim:
    return WeightUpsertClaim(
        request_id=c.request_id.decode(),
        base=_identity_from_c(c.base),
        target=_identity_from_c(c.target),
        mode=_enum_or_int(WeightUpsertMode, c.mode),
        phase=_enum_or_int(WeightUpsertPhase, c.phase),
        expected_metadata_generation=int(c.expected_metadata_generation),
        committed_watermark=int(c.committed_watermark),
        error=c.error.decode(errors="replace"),
        created_ms=int(c.created_ms),
        updated_ms=int(c.updated_ms),
    )

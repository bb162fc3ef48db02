"""weightstore -- model weights in a weight_mgmt Store Master, from Python.

WeightStore (weightstore.store) offers the RFC's eleven weight_* calls over
libweightclient.so, which is loaded through ctypes from $WEIGHTSTORE_LIB (or
a build tree next to this package, or the system loader). Loads hand out
numpy arrays -- zero-copy views of the store's shared memory when the
revision is HOT on this host. Errors are WeightStoreError subclasses, one
per RFC error code (weightstore.errors).
"""
from .errors import (AuthError, BusyError, CanceledError, ForbiddenError, ConflictError, DigestMismatchError, DurabilityFailedError,
                     InvalidArgumentError, LeaseExpiredError, NotFoundError, NotReadyError,
                     PolicyUnsatisfiableError, StaleGenerationError, WeightStoreError, WeightTransportError)
from .store import (TRANSPORT_AUTO, TRANSPORT_LOCAL, TRANSPORT_REMOTE, WeightListPage, WeightLoad,
                    WeightStore, WeightUpsert, WeightWriter)
from .tensors import (ATTACHMENT_MAX_BYTES, REPLICATED, SKIP, HuggingFaceCheckpoint, LoadedTensor, Replicated, SafetensorsFile, Split, TensorPlacement,
                      TensorSpec, read_safetensors, tensor_parallel)
from .types import (WeightAvailability, WeightIdentity, WeightMetadata, WeightMetadataView,
                    WeightMigrationMode, WeightOperation, WeightOperationKind, WeightOperationState,
                    WeightResidencyState, WeightStoragePolicy, WeightUpsertClaim, WeightUpsertMode,
                    WeightUpsertPhase)

__version__ = "0.1.0"

__all__ = [
    "WeightStore", "WeightWriter", "WeightUpsert", "WeightLoad", "WeightListPage",
    "WeightIdentity", "WeightStoragePolicy", "WeightMetadata", "WeightMetadataView", "WeightOperation",
    "WeightUpsertClaim", "WeightAvailability", "WeightResidencyState", "WeightMigrationMode",
    "WeightUpsertMode", "WeightOperationKind", "WeightOperationState", "WeightUpsertPhase",
    "TensorPlacement", "TensorSpec", "LoadedTensor", "Replicated", "Split", "REPLICATED", "SKIP",
    "tensor_parallel", "read_safetensors", "SafetensorsFile", "HuggingFaceCheckpoint", "ATTACHMENT_MAX_BYTES",
    "TRANSPORT_AUTO", "TRANSPORT_LOCAL", "TRANSPORT_REMOTE",
    "WeightStoreError", "InvalidArgumentError", "NotFoundError", "NotReadyError", "ConflictError",
    "StaleGenerationError", "BusyError", "LeaseExpiredError", "DurabilityFailedError",
    "PolicyUnsatisfiableError", "DigestMismatchError", "CanceledError", "AuthError", "ForbiddenError", "WeightTransportError",
]

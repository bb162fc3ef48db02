"""errors -- the exceptions of weightstore, one class per error code.

Every failing call raises a subclass of WeightStoreError carrying the C
library's code (`code`, a negative int), its RFC name (`name`, e.g.
"STALE_GENERATION") and the cause the library reported (`message`). The nine
RFC errors each have their own class; DIGEST_MISMATCH (stored bytes that do
not match their recorded digest) and CANCELED are the client's own; transport
and store failures (IO, AGAIN, PROTO, ...) are WeightTransportError.
"""
from __future__ import annotations


class WeightStoreError(Exception):
    """Base of every weightstore error. code: the C code (negative);
    name: its RFC name; message: the cause."""

    code = 0
    name = "ERROR"

    def __init__(self, message: str = "", code: int | None = None, name: str | None = None):
        if code is not None:
            self.code = code
        if name is not None:
            self.name = name
        self.message = message
        super().__init__(f"{self.name}: {message}" if message else self.name)


class InvalidArgumentError(WeightStoreError):
    code, name = -101, "INVALID_ARGUMENT"


class NotFoundError(WeightStoreError):
    code, name = -102, "NOT_FOUND"


class NotReadyError(WeightStoreError):
    code, name = -103, "NOT_READY"


class ConflictError(WeightStoreError):
    code, name = -104, "CONFLICT"


class StaleGenerationError(WeightStoreError):
    code, name = -105, "STALE_GENERATION"


class BusyError(WeightStoreError):
    code, name = -106, "BUSY"


class LeaseExpiredError(WeightStoreError):
    code, name = -107, "LEASE_EXPIRED"


class DurabilityFailedError(WeightStoreError):
    code, name = -108, "DURABILITY_FAILED"


class PolicyUnsatisfiableError(WeightStoreError):
    code, name = -109, "POLICY_UNSATISFIABLE"


class DigestMismatchError(WeightStoreError):
    code, name = -150, "DIGEST_MISMATCH"


class CanceledError(WeightStoreError):
    code, name = -17, "CANCELED"


class AuthError(WeightStoreError):
    """No token, or a token the master does not know (auth on)."""
    code, name = -18, "AUTH"


class ForbiddenError(WeightStoreError):
    """The token's role does not allow the call."""
    code, name = -19, "FORBIDDEN"


class WeightTransportError(WeightStoreError):
    """IO, AGAIN, PROTO, ENOMEM and the other transport or store codes;
    `code` tells which."""

    code, name = -8, "IO"


_BY_CODE = {
    cls.code: cls
    for cls in (
        InvalidArgumentError, NotFoundError, NotReadyError, ConflictError, StaleGenerationError,
        BusyError, LeaseExpiredError, DurabilityFailedError, PolicyUnsatisfiableError,
        DigestMismatchError, CanceledError, AuthError, ForbiddenError,
    )
}


def error_for(code: int, name: str, message: str) -> WeightStoreError:
    """The exception for a failing C return code. The host's EINVAL (-1)
    is reported as InvalidArgumentError too."""
    if code == -1:
        return InvalidArgumentError(message, code=code, name="INVALID_ARGUMENT")
    cls = _BY_CODE.get(code)
    if cls is not None:
        return cls(message)
    return WeightTransportError(message, code=code, name=name)

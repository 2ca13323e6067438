"""Domain errors raised below the servicers; one server interceptor maps them to gRPC status codes with details."""
from __future__ import annotations

from dataclasses import dataclass


class OmniError(Exception):
    """Base of every error a client should see as a gRPC status rather than INTERNAL."""

    grpc_code_name = "INTERNAL"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


PREVIEW_CHARS = 32


def preview(value: str | bytes, limit: int = PREVIEW_CHARS) -> str:
    """What an error may echo of a client's value: a short prefix, and the full length when cut (a 1 MB value echoed
    whole would overflow the status metadata)."""
    if len(value) <= limit:
        return repr(value)
    unit = "bytes" if isinstance(value, bytes) else "characters"
    return f"{value[:limit]!r}... ({len(value)} {unit})"


@dataclass(frozen=True)
class FieldViolation:
    """One bad field: its path in the request (e.g. `messages[0].content[1].image`) and what is wrong and allowed."""

    field: str
    description: str


class InvalidArgument(OmniError):
    """Bad input. Always names the field, what is wrong and what is allowed."""

    grpc_code_name = "INVALID_ARGUMENT"

    def __init__(self, field: str, description: str, violations: list[FieldViolation] | None = None) -> None:
        super().__init__(f"{field}: {description}")
        self.violations = violations or [FieldViolation(field, description)]


class Unimplemented(OmniError):
    grpc_code_name = "UNIMPLEMENTED"


class Unavailable(OmniError):
    """A stage this request needs is down or unreachable."""

    grpc_code_name = "UNAVAILABLE"

    def __init__(self, message: str, stage: str = "") -> None:
        super().__init__(message)
        self.stage = stage


class StageFault(OmniError):
    """A stage answered with something its caller cannot use (a tensor cut short or missing, a chunk out of order):
    a bug, or caller and stage builds that differ mid-rollout. INTERNAL naming the stage, since the client's request
    is not what is wrong."""

    grpc_code_name = "INTERNAL"

    def __init__(self, message: str, stage: str) -> None:
        super().__init__(message)
        self.stage = stage


class ResourceExhausted(OmniError):
    """A queue or a limit is full; the client may retry after `retry_after_s` (None: a retry cannot help, e.g. a
    request over a size limit, so no RetryInfo is sent)."""

    grpc_code_name = "RESOURCE_EXHAUSTED"

    def __init__(self, message: str, retry_after_s: float | None = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Unauthenticated(OmniError):
    grpc_code_name = "UNAUTHENTICATED"


class DeadlineExceeded(OmniError):
    grpc_code_name = "DEADLINE_EXCEEDED"


class Cancelled(OmniError):
    grpc_code_name = "CANCELLED"

"""Maps a failed stage call to the domain error the gateway's own client should see."""
from __future__ import annotations

import grpc

from runtime.errors import (Cancelled, DeadlineExceeded, InvalidArgument, OmniError, ResourceExhausted, Unavailable,
                            Unimplemented)


def stage_error(stage: str, err: grpc.aio.AioRpcError) -> OmniError:
    code = err.code()
    detail = err.details() or code.name
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidArgument(f"{stage}", detail)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return ResourceExhausted(f"{stage} is at capacity: {detail}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return DeadlineExceeded(f"deadline passed while waiting for {stage}")
    if code == grpc.StatusCode.CANCELLED:
        return Cancelled(f"{stage} call cancelled")
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return Unimplemented(f"{stage}: {detail}")
    return Unavailable(f"{stage} stage failed ({code.name}): {detail}", stage=stage)

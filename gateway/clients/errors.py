"""Maps a failed stage call to the domain error the gateway's own client should see; a stage's Info."""
from __future__ import annotations

from collections.abc import Awaitable, Callable

import grpc
import torch
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from omnimesh.v1 import common_pb2
from runtime.errors import (Cancelled, DeadlineExceeded, InvalidArgument, OmniError, ResourceExhausted, StageFault,
                            Unavailable, Unimplemented)
from runtime.tensor_codec import TensorAssembler


def stage_error(stage: str, err: grpc.aio.AioRpcError) -> OmniError:
    code = err.code()
    detail = err.details() or code.name
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidArgument(f"{stage}", detail)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:  # the stage's RetryInfo passes on; none: a retry cannot help
        return ResourceExhausted(f"{stage} is at capacity: {detail}", retry_after_s=_retry_delay(err))
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return DeadlineExceeded(f"deadline passed while waiting for {stage}")
    if code == grpc.StatusCode.CANCELLED:
        return Cancelled(f"{stage} call cancelled")
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return Unimplemented(f"{stage}: {detail}")
    return Unavailable(f"{stage} stage failed ({code.name}): {detail}", stage=stage)


def _retry_delay(err: grpc.aio.AioRpcError) -> float | None:
    """The delay of the RetryInfo in a stage's status details, if it sent one. A stage's own refusals carry one when
    a retry can succeed (load); grpc's (a message over a size limit) and over-limit requests carry none."""
    try:
        status = rpc_status.from_call(err)
    except ValueError:  # details whose code disagrees with the call's: not a status we can trust
        return None
    for detail in status.details if status is not None else ():
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            return info.retry_delay.ToTimedelta().total_seconds()
    return None


def add_stage_chunk(assembler: TensorAssembler, chunk: common_pb2.Tensor, stage: str
                    ) -> tuple[str, torch.Tensor] | None:  # fmt: skip
    """`assembler.add` on a chunk a stage sent back: a chunk it cannot take is the stage's fault, not the request's."""
    try:
        return assembler.add(chunk)
    except InvalidArgument as err:
        raise StageFault(f"{stage} stage sent a malformed tensor: {err.message}", stage) from None


def check_stage_done(assembler: TensorAssembler, stage: str) -> None:
    """At the end of a stage's answer every tensor it began must be whole."""
    if assembler.pending:
        raise StageFault(f"{stage} stage ended its answer with tensors incomplete: {assembler.pending}", stage)


async def stage_info(info_rpc: Callable[..., Awaitable[common_pb2.StageInfo]], stage: str,
                     timeout: float) -> common_pb2.StageInfo:
    """A stage's Info, waiting up to `timeout` for it to come up; not answering by then means it is down."""
    try:
        return await info_rpc(common_pb2.InfoRequest(), timeout=timeout, wait_for_ready=True)
    except grpc.aio.AioRpcError as err:
        if err.code() == grpc.StatusCode.UNAUTHENTICATED:  # a deployment whose stage token differs: say so
            raise Unavailable(f"{stage} stage refused the gateway (UNAUTHENTICATED): {err.details()}",
                              stage=stage) from None
        raise Unavailable(f"{stage} stage did not answer Info in {timeout:.1f} s ({err.code().name})",
                          stage=stage) from None

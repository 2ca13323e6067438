"""Every malformed Encode stream is INVALID_ARGUMENT naming the field; the request cap names its limit."""
from __future__ import annotations

import asyncio

import grpc
import pytest
import torch
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from omnimesh.v1 import common_pb2, vision_pb2, vision_pb2_grpc
from tests.integration.vision.conftest import MAX_REQUEST_PATCHES
from tests.integration.vision.vision_calls import encode_raw, frame_msgs, frames, raw_frames, start_msg

IMAGE = (False, [1, 2, 2])  # one 32x32 frame
VIDEO = (True, [2, 2, 2])  # three or four 32x32 frames
U8 = common_pb2.DTYPE_UINT8


def image_frames(name: str = "item.0") -> list[vision_pb2.VisionRequest]:
    return frame_msgs(name, frames(1, 32, 32))


# case -> (messages, the field the error must name first, a phrase its description must hold)
CASES: dict[str, tuple[list[vision_pb2.VisionRequest], str, str]] = {
    "empty stream": ([], "start", "first message"),
    "frames before start": (image_frames(), "start", "first message"),
    "second start": ([start_msg(IMAGE), start_msg(IMAGE)], "start", "only one"),
    "no items": ([start_msg()], "start.items", "empty"),
    "grid of two entries": ([start_msg((False, [2, 2]))], "start.items[0].grid_thw", "(t, h, w)"),
    "grid with a zero": ([start_msg(IMAGE, (True, [0, 2, 2]))], "start.items[1].grid_thw", ">= 1"),
    "grid off the merge size": ([start_msg((False, [1, 3, 2]))], "start.items[0].grid_thw", "merge_size=2"),
    "image with t > 1": ([start_msg((False, [2, 2, 2]))], "start.items[0].grid_thw", "t == 1"),
    "over the request cap": ([start_msg(IMAGE, (True, [16, 16, 16]))], "start.items",  # 4 + 4096 patches
                             f"max_request_patches={MAX_REQUEST_PATCHES}"),
    "frames not uint8": ([start_msg(IMAGE), *frame_msgs("item.0", torch.zeros(1, 32, 32, 3))], "frames[item.0]",
                         "uint8"),
    "frames 3-D": ([start_msg(IMAGE), *frame_msgs("item.0", frames(1, 32, 32)[0])], "frames[item.0]", "4-D"),
    "frames not RGB": ([start_msg(IMAGE), *frame_msgs("item.0", torch.zeros(1, 32, 32, 4, dtype=torch.uint8))],
                       "frames[item.0]", "4-D"),
    "frames height off the grid": ([start_msg(IMAGE), *frame_msgs("item.0", frames(1, 64, 32))], "frames[item.0]",
                                   "[1, 32, 32, 3]"),
    "image with two frames": ([start_msg(IMAGE), *frame_msgs("item.0", frames(2, 32, 32))], "frames[item.0]",
                              "[1, 32, 32, 3]"),
    "video frames off t": ([start_msg(VIDEO), *frame_msgs("item.0", frames(5, 32, 32))], "frames[item.0]",
                           "[3..4, 32, 32, 3]"),
    "missing item": ([start_msg(IMAGE, IMAGE), *image_frames()], "frames[item.1]", "missing"),
    "unknown index": ([start_msg(IMAGE), *image_frames("item.1")], "frames[item.1]", "item.0 .. item.0"),
    "unknown name": ([start_msg(IMAGE), *image_frames("pixels")], "frames[pixels]", "not a tensor"),
    "index with a leading zero": ([start_msg(IMAGE), *image_frames("item.00")], "frames[item.00]", "not a tensor"),
    "unknown dtype": ([start_msg(IMAGE), raw_frames(name="item.0", dtype=99, shape=[1, 32, 32, 3])], "frames[item.0]",
                      "uint8"),
    "item sent twice": ([start_msg(IMAGE), *image_frames(), *image_frames()], "frames[item.0]", "twice"),
    "chunks missing at the end": ([start_msg(IMAGE), *frame_msgs("item.0", frames(1, 32, 32), 1000)[:2]], "frames",
                                  "incomplete"),
    "too few bytes": ([start_msg(IMAGE), raw_frames(name="item.0", dtype=U8, shape=[1, 32, 32, 3], data=b"\0" * 10)],
                      "frames[item.0]", "bytes received"),
    "more bytes than the shape": ([start_msg(IMAGE), raw_frames(name="item.0", dtype=U8, shape=[1, 32, 32, 3],
                                                                data=b"\0" * 3072, chunk_count=2),
                                   raw_frames(name="item.0", dtype=U8, shape=[1, 32, 32, 3], data=b"\0",
                                              chunk_index=1, chunk_count=2)], "frames[item.0]", "more than"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_encode_is_invalid_argument(vision_addr: str, case: str) -> None:
    messages, field, phrase = CASES[case]
    with pytest.raises(grpc.aio.AioRpcError) as info:
        asyncio.run(encode_raw(vision_addr, messages))
    err = info.value
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert err.details().startswith(f"{field}: "), err.details()
    assert phrase in err.details(), err.details()


def test_request_cap_carries_a_field_violation(vision_addr: str) -> None:
    async def call() -> grpc.aio.AioRpcError:
        async with grpc.aio.insecure_channel(vision_addr) as channel:
            rpc = vision_pb2_grpc.VisionStub(channel).Encode(iter([start_msg((True, [16, 16, 18]))]))
            try:
                async for _ in rpc:
                    pass
            except grpc.aio.AioRpcError as err:
                return err
        raise AssertionError("the over-cap request succeeded")

    status = rpc_status.from_call(asyncio.run(call()))
    bad = error_details_pb2.BadRequest()
    assert status is not None and status.details[0].Unpack(bad)
    assert bad.field_violations[0].field == "start.items"
    assert f"max_request_patches={MAX_REQUEST_PATCHES}" in bad.field_violations[0].description

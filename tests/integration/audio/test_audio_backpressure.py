"""The audio stage admits a request on its `start` message against the mel frames it already holds: past
`max_pending_size` a new request is RESOURCE_EXHAUSTED before its samples are read (the vision stage's full cases are
in tests/integration/vision/test_vision_backpressure.py; this checks the audio stage's wiring and unit)."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc

from omnimesh.v1 import audio_pb2, audio_pb2_grpc
from tests.integration.audio.audio_calls import clip, request, start
from tests.integration.mesh_process import start_stage


def test_a_request_past_the_pending_limit_is_resource_exhausted(demo_ckpt: Path, tmp_path: Path) -> None:
    # 10 s of audio = 1,000 mel frames: the request limit and the pending limit, so one open request fills the stage
    # no queue (max_waiting 0): a request past the limit is refused at once instead of waiting its turn
    mesh = {"audio": {"encoder": {"max_batch_size": 1000, "max_request_size": 1000, "max_pending_size": 1000,
                                  "max_waiting": 0}}}
    stage = start_stage("audio", demo_ckpt, mesh, tmp_path)
    addr = f"127.0.0.1:{stage.ports['grpc_port']}"

    async def refused_while_open() -> grpc.aio.AioRpcError | None:
        async with grpc.aio.insecure_channel(addr) as channel:
            held = audio_pb2_grpc.AudioStub(channel).Encode()
            await held.write(start(8 * 16000))  # 800 frames held while its samples do not come
            for _ in range(25):
                call = None

                async def paced() -> AsyncIterator[audio_pb2.AudioRequest]:
                    for i, m in enumerate(request([clip(3.0)])):  # 300 more
                        if i:
                            await asyncio.sleep(0.05)
                        if call is not None and call.done():
                            return
                        yield m

                call = audio_pb2_grpc.AudioStub(channel).Encode(paced())
                try:
                    [r async for r in call]
                except grpc.aio.AioRpcError as err:
                    held.cancel()
                    return err
                await asyncio.sleep(0.2)
            held.cancel()
            return None

    try:
        err = asyncio.run(refused_while_open())
        assert err is not None and err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err
        assert "the audio stage holds 800 mel frames" in err.details()
        assert "audio.encoder.max_pending_size=1000" in err.details()
    finally:
        assert stage.stop() == 0

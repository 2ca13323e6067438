"""The gateway's media budget: each item's decoded size estimated from its header, a request admitted against what
the replica already holds, refused RESOURCE_EXHAUSTED with a retry past `gateway.max_media_bytes`, released however
the request ends."""
from __future__ import annotations

import asyncio
import io

import av
import numpy as np
import pytest
import soundfile as sf
from PIL import Image

from omnimesh.v1 import omni_pb2
from runtime.config import SamplingDefaults
from runtime.errors import ResourceExhausted
from runtime.metrics import Metrics
from gateway.chat_input import MediaBytes, chat_input_from_pb
from gateway.media.footprint import COPIES, WORST_CHANNELS, WORST_SOURCE_RATE, audio_bytes, image_bytes, video_bytes
from gateway.media.vision import VisionMediaConfig, target_size
from gateway.media_prep import MediaPipeline
from gateway.service import OmniService

CFG = VisionMediaConfig()


def png(height: int, width: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), (1, 2, 3)).save(buf, format="PNG")
    return buf.getvalue()


def test_an_image_counts_its_canvas_and_its_resized_frame() -> None:
    size = target_size("f", 3000, 4000, CFG, video=False)
    assert image_bytes(png(3000, 4000), "f", CFG) == COPIES * 4000 * 3000 * 4 + size.height * size.width * 3


def test_a_video_counts_the_frames_its_duration_samples() -> None:
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as out:  # 3 s at 10 fps, 64x48
        stream = out.add_stream("mpeg4", rate=10)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        for k in range(30):
            out.mux(stream.encode(av.VideoFrame.from_ndarray(np.full((48, 64, 3), k, np.uint8), format="rgb24")))
        out.mux(stream.encode())
    size = target_size("f", 48, 64, CFG, video=True)
    assert video_bytes(buf.getvalue(), "f", CFG) == 6 * size.height * size.width * 3 * COPIES + 64 * 48 * 4
    worst = CFG.video_max_frames * CFG.video_max_pixels * 3 * COPIES + CFG.max_video_frame_pixels * 4
    assert video_bytes(b"not a video", "f", CFG) == worst
    # Qwen3.5 (qwen3_vl): the clip is sized as a whole (6 frames of 64x48 -> 64x64 within 4096..25165824 pixels)
    # and its pixel maximum is the whole clip's, so the worst case is one budget, not one per frame
    qwen3_vl = VisionMediaConfig(video_sampling="qwen3_vl", video_min_pixels=4096, video_max_pixels=25165824)
    assert video_bytes(buf.getvalue(), "f", qwen3_vl) == 6 * 64 * 64 * 3 * COPIES + 64 * 48 * 4
    assert video_bytes(b"not a video", "f", qwen3_vl) == 25165824 * 3 * COPIES + CFG.max_video_frame_pixels * 4


def test_audio_counts_its_source_samples_and_the_16_khz_ones() -> None:
    buf = io.BytesIO()
    sf.write(buf, np.zeros((44_100 * 2, 2), np.float32), 44_100, format="WAV")  # 2 s stereo
    assert audio_bytes(buf.getvalue(), 600.0) == int(2.0 * (44_100 * 2 + 16_000) * 4 * COPIES)
    assert audio_bytes(buf.getvalue(), 1.0) == int(1.0 * (44_100 * 2 + 16_000) * 4 * COPIES)  # the cap bounds it
    assert audio_bytes(b"noise", 10.0) == int(10.0 * (WORST_SOURCE_RATE * WORST_CHANNELS + 16_000) * 4 * COPIES)


class SlowDecode(MediaPipeline):
    """Decoding waits for `release`, so a request holds its media while the test sends another."""

    def __init__(self, max_media_bytes: int) -> None:
        super().__init__(CFG, object(), 0, None, 600.0, max_media_bytes)  # type: ignore[arg-type]
        self.release = asyncio.Event()
        self.fail = False

    async def decode(self, media: list[MediaBytes], use_audio_in_video: bool = False) -> list:
        await self.release.wait()
        if self.fail:
            raise RuntimeError("decoder crashed")
        return []


class Thinker:
    async def info(self, timeout: float) -> object:
        return type("Info", (), {"limits": {"max_model_len": 1 << 20}})()


def image_chat() -> object:
    part = omni_pb2.ContentPart(image=omni_pb2.Media(data=png(512, 512)))
    req = omni_pb2.ChatRequest(messages=[omni_pb2.Message(role="user", content=[part])])
    return chat_input_from_pb(req, SamplingDefaults())


def test_a_request_past_the_budget_is_resource_exhausted_until_the_first_lets_go() -> None:
    async def scenario() -> None:
        media = SlowDecode(max_media_bytes=1 << 20)
        service = OmniService(None, Thinker(), media, None, Metrics("gateway", "t"), 1.0)  # type: ignore[arg-type]
        one = image_bytes(png(512, 512), "f", CFG)
        assert one > 1 << 20  # over the budget alone: a request alone is still admitted
        first = asyncio.create_task(anext(service.chat(image_chat(), None)))
        while media.budget.held == 0:
            await asyncio.sleep(0.01)
        assert media.budget.held == one
        with pytest.raises(ResourceExhausted, match=rf"holds {one} bytes of media .* this request brings {one}, over "
                                                    r"its limit gateway.max_media_bytes=1048576; retry shortly"):
            await anext(service.chat(image_chat(), None))
        media.fail = True
        media.release.set()
        with pytest.raises(RuntimeError, match="decoder crashed"):
            await first
        assert media.budget.held == 0  # released by a failed request too

    asyncio.run(scenario())


def test_memory_is_returned_once_per_burst_and_never_after_the_executor_stopped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    trims = []
    monkeypatch.setattr("gateway.media_prep.return_freed_heap", lambda: trims.append(1))
    media = MediaPipeline(None, None, 0, None, 30.0)
    errors = []

    async def burst_then_stop() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, context: errors.append(context))
        for _ in range(16):  # sixteen requests ending together
            media.return_memory_when_idle(after_s=0.01)
        await asyncio.sleep(0.2)
        assert trims == [1]
        media.return_memory_when_idle(after_s=0.05)  # pending while the process stops
        await loop.shutdown_default_executor()
        await asyncio.sleep(0.2)

    asyncio.run(burst_then_stop())
    assert trims == [1] and errors == []

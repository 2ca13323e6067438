"""Media limits read from headers before any pixel is decoded: images that cannot fit the context, and a video whose
frames outnumber what its duration allows."""
from __future__ import annotations

import asyncio
import io

import av
import numpy as np
import pytest
from PIL import Image

from omnimesh.v1 import omni_pb2
from runtime.config import SamplingDefaults
from runtime.errors import InvalidArgument
from runtime.metrics import Metrics
from gateway.chat_input import MediaBytes, chat_input_from_pb
from gateway.media.audio import decode_audio
from gateway.media.vision import MAX_SOURCE_FPS, VisionMediaConfig, decode_video, target_size
from gateway.media_prep import MediaPipeline
from gateway.service import OmniService
from tests.integration.media_files import mp4, wav

FIELD = "messages[0].content[0].image"


def png(height: int, width: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), (200, 10, 10)).save(buf, format="PNG")
    return buf.getvalue()


class NeverDecode(MediaPipeline):
    def _decode_one(self, m: MediaBytes, use_audio_in_video: bool):
        raise AssertionError(f"{m.field} was decoded")


class ThinkerInfo:
    async def info(self, timeout: float) -> omni_pb2.OmniInfo:
        return type("Info", (), {"limits": {"max_model_len": 1024}})()


def test_image_tokens_come_from_the_header() -> None:
    cfg = VisionMediaConfig()
    pipeline = MediaPipeline(cfg, object(), 0, None, 600.0)  # type: ignore[arg-type]
    size = target_size(FIELD, 3000, 4000, cfg, video=False)
    image = MediaBytes("image", png(3000, 4000), "", FIELD)
    assert pipeline.header_tokens([image, image]) == 2 * size.height * size.width // cfg.factor**2
    assert MediaPipeline(None, None, 0, None, 600.0).header_tokens([image]) == 0  # no vision: UNIMPLEMENTED later


def test_images_that_cannot_fit_the_context_are_refused_before_decoding() -> None:
    pipeline = NeverDecode(VisionMediaConfig(), object(), 0, None, 600.0)  # type: ignore[arg-type]
    service = OmniService(None, ThinkerInfo(), pipeline, None, Metrics("gateway", "t"), 1.0)  # type: ignore[arg-type]
    part = omni_pb2.ContentPart(image=omni_pb2.Media(data=png(3000, 4000)))
    chat = chat_input_from_pb(omni_pb2.ChatRequest(messages=[omni_pb2.Message(role="user", content=[part, part])]),
                              SamplingDefaults())

    async def first_event() -> object:
        return await anext(service.chat(chat, None))

    with pytest.raises(InvalidArgument, match="the media alone take 1944 tokens by their headers; the "
                                              "model's context is 1024 tokens"):
        asyncio.run(first_event())


def fast_clip(num_frames: int, rate: int) -> bytes:
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as out:
        stream = out.add_stream("mpeg4", rate=rate)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        for k in range(num_frames):
            frame = av.VideoFrame.from_ndarray(np.full((32, 32, 3), k % 256, np.uint8), format="rgb24")
            out.mux(stream.encode(frame))
        out.mux(stream.encode())
    return buf.getvalue()


def test_a_video_with_more_frames_than_its_duration_allows_is_refused() -> None:
    cfg = VisionMediaConfig(video_min_pixels=32 * 32, video_max_pixels=64 * 64)
    with pytest.raises(InvalidArgument, match=rf"holds 1500 frames but its header says 1.5 s \(1000 frames a second\); "
                                              rf"at most {MAX_SOURCE_FPS}"):
        decode_video(fast_clip(1500, 1000), "messages[0].content[0].video", cfg)
    assert decode_video(fast_clip(300, 240), "messages[0].content[0].video", cfg).frames.shape[0] == 4  # slow motion


@pytest.mark.parametrize(("num_frames", "fps", "height", "width"), [(8, 4, 64, 96), (30, 10, 120, 160), (3, 4, 64, 64)])
def test_video_tokens_from_its_header_are_what_decoding_gives(num_frames: int, fps: int, height: int,
                                                               width: int) -> None:
    """The frames the reference samples, counted from header and packets: exactly the decoded video's tokens."""
    cfg = VisionMediaConfig()
    pipeline = MediaPipeline(cfg, object(), 0, None, 600.0)  # type: ignore[arg-type]
    data = mp4(num_frames=num_frames, fps=fps, height=height, width=width)
    field = "messages[0].content[0].video"
    want = decode_video(data, field, cfg).num_tokens
    assert pipeline.header_tokens([MediaBytes("video", data, "", field)]) == want > 0


def test_videos_that_cannot_fit_the_context_are_refused_before_decoding() -> None:
    pipeline = NeverDecode(VisionMediaConfig(), object(), 0, None, 600.0)  # type: ignore[arg-type]
    service = OmniService(None, ThinkerInfo(), pipeline, None, Metrics("gateway", "t"), 1.0)  # type: ignore[arg-type]
    part = omni_pb2.ContentPart(video=omni_pb2.Media(data=mp4(num_frames=40, fps=2, height=448, width=448)))
    chat = chat_input_from_pb(omni_pb2.ChatRequest(messages=[omni_pb2.Message(role="user", content=[part])]),
                              SamplingDefaults())

    async def first_event() -> object:
        return await anext(service.chat(chat, None))

    with pytest.raises(InvalidArgument, match=r"the media alone take \d+ tokens by their headers; the "
                                              "model's context is 1024 tokens; send fewer or smaller images, or "
                                              "shorter videos and clips"):
        asyncio.run(first_event())


@pytest.mark.parametrize("seconds", [0.3, 2.0, 7.5])
def test_audio_tokens_from_its_header_are_at_most_what_decoding_gives(seconds: float) -> None:
    """A lower bound (a header may round a clip up): never more than decoding gives, and within a few tokens."""
    pipeline = MediaPipeline(None, None, 0, object(), 600.0)  # type: ignore[arg-type]
    data = wav(seconds=seconds)
    field = "messages[0].content[0].audio"
    got = pipeline.header_tokens([MediaBytes("audio", data, "", field)])
    want = decode_audio(data, field, 600.0).token_count
    assert want - 3 <= got <= want
    assert pipeline.header_tokens([MediaBytes("audio", b"no header", "", field)]) == 0


def test_clips_that_cannot_fit_the_context_are_refused_before_decoding() -> None:
    pipeline = NeverDecode(None, None, 0, object(), 600.0)  # type: ignore[arg-type]
    service = OmniService(None, ThinkerInfo(), pipeline, None, Metrics("gateway", "t"), 1.0)  # type: ignore[arg-type]
    part = omni_pb2.ContentPart(audio=omni_pb2.Media(data=wav(seconds=90.0)))  # ~1,170 tokens
    chat = chat_input_from_pb(omni_pb2.ChatRequest(messages=[omni_pb2.Message(role="user", content=[part])]),
                              SamplingDefaults())

    async def first_event() -> object:
        return await anext(service.chat(chat, None))

    with pytest.raises(InvalidArgument, match=r"the media alone take \d+ tokens by their headers"):
        asyncio.run(first_event())


@pytest.mark.parametrize(("kind", "data", "on_loop"), [
    ("audio", wav(0.5), True),  # WAV: its header parses in microseconds, less than a thread hop
    ("audio", b"RIFF\x00\x00\x00\x00WAVEjunk", False),  # not a WAV this reads: libsndfile or FFmpeg, which block
    ("image", png(8, 8), False),
])
def test_header_checks_run_on_the_loop_only_for_wav_clips(kind: str, data: bytes, on_loop: bool) -> None:
    import threading

    from gateway.media_prep import by_headers

    media = [MediaBytes(kind, data, "", "messages[0].content[0]")]
    ran_on = asyncio.run(by_headers(media, lambda: threading.current_thread()))
    assert (ran_on is threading.main_thread()) == on_loop

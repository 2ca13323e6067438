"""gateway.media.vision video decoding: containers, fps sampling, grids, and every bad-video error."""
from __future__ import annotations

import io
from types import SimpleNamespace

import av
import numpy as np
import pytest

from gateway.media import vision as media
from gateway.media.vision import VisionMediaConfig, check_video_stream, decode_video
from runtime.errors import InvalidArgument

FIELD = "messages[1].content[0].video"


@pytest.mark.parametrize(
    "fmt,codec", [("mp4", "libx264"), ("mp4", "mpeg4"), ("webm", "libvpx-vp9"), ("matroska", "mpeg4")]
)
def test_containers_sample_at_fps(encode_video, small_media_cfg, fmt, codec) -> None:
    # 30 frames at 10 fps = 3 s; at 2 fps the frames on screen at 0, 0.5, ... 2.5 s are 0, 5, ..., 25.
    out = decode_video(encode_video(fmt, codec, num_frames=30, rate=10), FIELD, small_media_cfg)
    assert out.frames.dtype == np.uint8 and out.frames.shape == (6, 64, 64, 3)
    levels = out.frames.reshape(6, -1).mean(1)
    np.testing.assert_allclose(levels, [8 * k for k in (0, 5, 10, 15, 20, 25)], atol=4)
    assert tuple(out.grid) == (3, 4, 4) and out.num_tokens == 12
    assert out.fps == 2.0 and out.second_per_grid == 1.0


def test_frame_count_is_floored_to_the_temporal_patch_as_the_reference_does(encode_video, small_media_cfg) -> None:
    out = decode_video(encode_video(num_frames=25, rate=10), FIELD, small_media_cfg)  # 2.5 s -> 5 wanted -> 4
    levels = out.frames.reshape(out.frames.shape[0], -1).mean(1)
    np.testing.assert_allclose(levels, [8 * k for k in (0, 6, 12, 18)], atol=4)  # evenly spread, truncated
    assert tuple(out.grid) == (2, 4, 4) and out.num_tokens == 8


def test_a_short_clip_gets_at_least_min_frames(encode_video, small_media_cfg) -> None:
    out = decode_video(encode_video(num_frames=10, rate=10), FIELD, small_media_cfg)  # 1 s: 2 wanted, 4 taken
    levels = out.frames.reshape(out.frames.shape[0], -1).mean(1)
    np.testing.assert_allclose(levels, [8 * k for k in (0, 2, 5, 7)], atol=4)
    assert out.second_per_grid == 1.0  # positions still follow the requested fps, as the reference's do


def test_source_slower_than_fps_is_capped_by_its_frames(encode_video, small_media_cfg) -> None:
    out = decode_video(encode_video(num_frames=3, rate=1), FIELD, small_media_cfg)  # 3 s at 1 fps: 6 wanted
    levels = out.frames.reshape(out.frames.shape[0], -1).mean(1)
    np.testing.assert_allclose(levels, [0, 8], atol=4)  # at most the clip's frames, floored to the patch


def test_custom_fps_and_second_per_grid(encode_video) -> None:
    cfg = VisionMediaConfig(video_min_pixels=32 * 32, video_max_pixels=128 * 128, video_fps=4.0)
    out = decode_video(encode_video(num_frames=20, rate=10), FIELD, cfg)  # 2 s at 4 fps
    assert out.frames.shape[0] == 8 and out.second_per_grid == 0.5


def test_content_hash_changes_with_fps(encode_video, small_media_cfg) -> None:
    data = encode_video()
    faster = VisionMediaConfig(video_min_pixels=32 * 32, video_max_pixels=128 * 128, video_fps=4.0)
    assert decode_video(data, FIELD, small_media_cfg).content_hash != decode_video(data, FIELD, faster).content_hash


def assert_invalid(data: bytes, cfg: VisionMediaConfig, needle: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        decode_video(data, FIELD, cfg)
    assert err.value.violations[0].field == FIELD
    assert needle in err.value.violations[0].description


def test_empty_bytes(small_media_cfg) -> None:
    assert_invalid(b"", small_media_cfg, "empty")


def test_undecodable_bytes(small_media_cfg) -> None:
    assert_invalid(b"\x00\x01garbage" * 50, small_media_cfg, "not a decodable video")


def test_unsupported_container(encode_video, small_media_cfg) -> None:
    assert_invalid(encode_video("avi", "mpeg4"), small_media_cfg, "unsupported container avi")


def test_no_video_stream(small_media_cfg) -> None:
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="matroska") as out:
        audio = out.add_stream("pcm_s16le", rate=16000)
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 1600), np.int16), format="s16", layout="mono")
        frame.sample_rate = 16000
        for packet in [*audio.encode(frame), *audio.encode()]:
            out.mux(packet)
    assert_invalid(buf.getvalue(), small_media_cfg, "no video stream")


def test_video_stream_without_frames(small_media_cfg) -> None:
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="matroska") as out:
        video = out.add_stream("mpeg4", rate=10)
        video.width, video.height, video.pix_fmt = 64, 48, "yuv420p"
        audio = out.add_stream("pcm_s16le", rate=16000)
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 1600), np.int16), format="s16", layout="mono")
        frame.sample_rate = 16000
        for packet in [*audio.encode(frame), *audio.encode()]:
            out.mux(packet)
    assert_invalid(buf.getvalue(), small_media_cfg, "no decodable frames")


def test_zero_sized_frames_in_header(small_media_cfg) -> None:
    stream = SimpleNamespace(codec_context=SimpleNamespace(width=0, height=48))
    with pytest.raises(InvalidArgument, match="zero-size"):
        check_video_stream(stream, FIELD, small_media_cfg)  # type: ignore[arg-type]


def test_frame_pixel_cap_before_decoding(encode_video) -> None:
    cfg = VisionMediaConfig(video_min_pixels=32 * 32, video_max_pixels=128 * 128, max_video_frame_pixels=1000)
    assert_invalid(encode_video(), cfg, "over the cap of 1000 pixels")


def test_frame_cap_from_header(encode_video) -> None:
    cfg = VisionMediaConfig(video_min_pixels=32 * 32, video_max_pixels=128 * 128, video_max_frames=4)
    assert_invalid(encode_video(num_frames=30, rate=10), cfg, "more than 4 frames")


def test_frame_cap_while_decoding(encode_video, monkeypatch) -> None:
    # A container that states no duration is caught while sampling instead.
    monkeypatch.setattr(media, "duration_seconds", lambda stream: None)
    cfg = VisionMediaConfig(video_min_pixels=32 * 32, video_max_pixels=128 * 128, video_max_frames=4)
    assert_invalid(encode_video(num_frames=30, rate=10), cfg, "more than 4 frames")


def test_codec_that_cannot_open(small_media_cfg) -> None:
    stream = SimpleNamespace(codec_context=None)
    with pytest.raises(InvalidArgument, match="codec cannot be opened"):
        check_video_stream(stream, FIELD, small_media_cfg)  # type: ignore[arg-type]


def test_damaged_stream(encode_video, small_media_cfg) -> None:
    data = bytearray(encode_video("matroska", "mpeg4", num_frames=30, noise=True))
    rng = np.random.default_rng(1)
    for i in rng.integers(len(data) * 3 // 10, len(data), 200):  # scribble over the back 70 %
        data[i] = int(rng.integers(0, 256))
    assert_invalid(bytes(data), small_media_cfg, "")

"""Fixtures that make small test media in-test: encoded images (Pillow) and videos (PyAV); the vision benchmark
loaded as a module."""
from __future__ import annotations

import importlib.util
import io
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import av
import numpy as np
import pytest
from PIL import Image

from gateway.media.vision import VisionMediaConfig

EncodeVideo = Callable[..., bytes]
EncodeImage = Callable[..., bytes]


def gray_ramp_frame(k: int, width: int, height: int) -> np.ndarray:
    """Frame k of a test clip: a flat gray level 8·k, easy to recognise after lossy coding."""
    return np.full((height, width, 3), (8 * k) % 256, np.uint8)


@pytest.fixture
def encode_video() -> EncodeVideo:
    def encode(
        fmt: str = "mp4",
        codec: str = "mpeg4",
        num_frames: int = 30,
        rate: int = 10,
        width: int = 64,
        height: int = 48,
        noise: bool = False,
    ) -> bytes:
        rng = np.random.default_rng(0)
        buf = io.BytesIO()
        with av.open(buf, mode="w", format=fmt) as out:
            stream = out.add_stream(codec, rate=rate)
            stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
            for k in range(num_frames):
                noisy = rng.integers(0, 256, (height, width, 3), np.uint8)
                pixels = noisy if noise else gray_ramp_frame(k, width, height)
                frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
                for packet in stream.encode(frame):
                    out.mux(packet)
            for packet in stream.encode():
                out.mux(packet)
        return buf.getvalue()

    return encode


@pytest.fixture
def encode_image() -> EncodeImage:
    def encode(array: np.ndarray, fmt: str = "PNG", **save_kwargs: object) -> bytes:
        buf = io.BytesIO()
        Image.fromarray(array).save(buf, format=fmt, **save_kwargs)
        return buf.getvalue()

    return encode


@pytest.fixture
def small_media_cfg() -> VisionMediaConfig:
    """Bounds that keep test frames tiny: 32..64k pixels for both images and video."""
    return VisionMediaConfig(
        image_min_pixels=32 * 32, image_max_pixels=256 * 256, video_min_pixels=32 * 32, video_max_pixels=128 * 128
    )


BENCH = Path(__file__).resolve().parents[3] / "bench" / "vision" / "bench_vision_tower.py"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """bench/vision/bench_vision_tower.py, imported from its path (bench/ is not a package on the test path)."""
    spec = importlib.util.spec_from_file_location("bench_vision_tower", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module

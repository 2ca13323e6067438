"""gateway.media.vision image decoding: formats, EXIF, transparency, resize, and every bad-image error."""
from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from gateway.media.vision import VisionMediaConfig, decode_image
from runtime.errors import InvalidArgument

FIELD = "messages[0].content[2].image"


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that declares width×height and carries no pixel data at all."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b"")


def two_colour(width: int, height: int) -> np.ndarray:
    """Left half red, right half blue."""
    img = np.zeros((height, width, 3), np.uint8)
    img[:, : width // 2, 0] = 255
    img[:, width // 2 :, 2] = 255
    return img


@pytest.mark.parametrize("fmt,kwargs", [("PNG", {}), ("JPEG", {"quality": 95}), ("WEBP", {"lossless": True})])
def test_formats_decode_resize_and_count(encode_image, small_media_cfg, fmt, kwargs) -> None:
    rng = np.random.default_rng(0)
    arr = rng.integers(0, 256, (70, 100, 3), dtype=np.uint8)
    out = decode_image(encode_image(arr, fmt, **kwargs), FIELD, small_media_cfg)
    assert out.frames.dtype == np.uint8 and out.frames.shape == (1, 64, 96, 3)
    assert tuple(out.grid) == (1, 4, 6) and out.num_tokens == 6
    if fmt != "JPEG":  # lossless: the pixels are exactly Pillow's bicubic resize of the input
        expected = np.asarray(Image.fromarray(arr).resize((96, 64), Image.Resampling.BICUBIC))
        np.testing.assert_array_equal(out.frames[0], expected)


def test_gif_uses_first_frame(small_media_cfg) -> None:
    frames = [Image.new("RGB", (64, 64), colour) for colour in ((255, 0, 0), (0, 0, 255))]
    buf = io.BytesIO()
    frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:], duration=100)
    out = decode_image(buf.getvalue(), FIELD, small_media_cfg)
    assert out.frames.shape == (1, 64, 64, 3)
    assert out.frames[0, ..., 0].min() > 200 and out.frames[0, ..., 2].max() < 50  # red, not blue


def test_exif_orientation_is_applied(small_media_cfg) -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 CW to display"
    buf = io.BytesIO()
    Image.fromarray(two_colour(64, 32)).save(buf, format="JPEG", quality=95, exif=exif)
    out = decode_image(buf.getvalue(), FIELD, small_media_cfg)
    assert out.frames.shape == (1, 64, 32, 3)  # portrait after rotation
    top, bottom = out.frames[0, 8], out.frames[0, -8]
    assert top[:, 0].mean() > 200 and bottom[:, 2].mean() > 200  # the left (red) half is now on top


def test_transparency_composites_onto_white(encode_image, small_media_cfg) -> None:
    rgba = np.zeros((64, 64, 4), np.uint8)  # fully transparent black
    out = decode_image(encode_image(rgba, "PNG"), FIELD, small_media_cfg)
    assert (out.frames == 255).all()


def test_small_image_is_upscaled_to_min_pixels(encode_image) -> None:
    cfg = VisionMediaConfig(image_min_pixels=128 * 128, image_max_pixels=512 * 512)
    out = decode_image(encode_image(np.zeros((10, 10, 3), np.uint8)), FIELD, cfg)
    assert out.frames.shape == (1, 128, 128, 3) and tuple(out.grid) == (1, 8, 8) and out.num_tokens == 16


def test_content_hash_depends_on_bytes_and_target(encode_image, small_media_cfg) -> None:
    a = encode_image(np.zeros((64, 64, 3), np.uint8))
    b = encode_image(np.ones((64, 64, 3), np.uint8))
    ha = decode_image(a, FIELD, small_media_cfg).content_hash
    assert ha == decode_image(a, FIELD, small_media_cfg).content_hash
    assert ha != decode_image(b, FIELD, small_media_cfg).content_hash
    upscaled = VisionMediaConfig(image_min_pixels=128 * 128, image_max_pixels=512 * 512)
    assert ha != decode_image(a, FIELD, upscaled).content_hash


def assert_invalid(data: bytes, cfg: VisionMediaConfig, needle: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        decode_image(data, FIELD, cfg)
    assert err.value.violations[0].field == FIELD
    assert needle in err.value.violations[0].description


def test_empty_bytes(small_media_cfg) -> None:
    assert_invalid(b"", small_media_cfg, "empty")


def test_undecodable_bytes(small_media_cfg) -> None:
    assert_invalid(b"definitely not an image" * 4, small_media_cfg, "not a decodable image")


def test_zero_sized_header_is_refused(small_media_cfg) -> None:
    assert_invalid(png_header_only(0, 10), small_media_cfg, "not a decodable image")


@pytest.mark.parametrize("fmt", ["BMP", "TIFF"])
def test_unsupported_format(encode_image, small_media_cfg, fmt) -> None:
    assert_invalid(encode_image(np.zeros((32, 32, 3), np.uint8), fmt), small_media_cfg, f"unsupported format {fmt}")


def test_truncated_file_is_damaged(encode_image, small_media_cfg) -> None:
    rng = np.random.default_rng(1)
    data = encode_image(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8), "JPEG")
    assert_invalid(data[: len(data) // 2], small_media_cfg, "damaged JPEG")


def test_pixel_cap_is_checked_from_the_header() -> None:
    # 10000×10000 declared, no pixel data: a decode would fail as damaged, so the cap fired first.
    assert_invalid(png_header_only(10000, 10000), VisionMediaConfig(), "over the cap")


def test_pillow_bomb_limit_maps_to_the_pixel_cap() -> None:
    assert_invalid(png_header_only(100000, 100000), VisionMediaConfig(), "more than")


def test_extreme_aspect_ratio(encode_image) -> None:
    cfg = VisionMediaConfig(image_min_pixels=32 * 32, image_max_pixels=8192 * 64)
    assert_invalid(encode_image(np.zeros((2, 500, 3), np.uint8)), cfg, "aspect ratio")

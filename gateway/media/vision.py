"""Decodes client images and videos into resized uint8 RGB frames, grids and token counts for the vision stage.

Bad media raise `InvalidArgument(field, ...)` with the caller's field path (e.g. `messages[0].content[2].image`).
Sizes are checked from the container header before any pixel is decoded, so a small file that claims a huge
canvas (a decompression bomb) costs nothing.
"""
from __future__ import annotations

import hashlib
import io
import math
import warnings
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import av
import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from runtime.errors import InvalidArgument
from gateway.media import qwen3_vl_video
from gateway.media.frame_sampling import count_frames, reference_frame_indices
from gateway.media.sizes import MAX_ASPECT_RATIO, Size

IMAGE_FORMATS = ("JPEG", "PNG", "WEBP", "GIF")
# PyAV names demuxers by comma-joined aliases ("mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm").
VIDEO_FORMATS = ("mp4", "mov", "webm", "matroska")
# More frames a second than this, counted against the header's duration, is a lying header (a 20 s clip holding
# 600,000 frames decoded for 15 s); slow-motion phone video records at 240.
MAX_SOURCE_FPS = 480


class ProcessingSettings(Protocol):
    """What `VisionMediaConfig.from_processing` reads (the vision stage's `VisionProcessingConfig` fits)."""

    patch_size: int
    temporal_patch_size: int
    merge_size: int
    image_min_pixels: int
    image_max_pixels: int
    video_min_pixels: int
    video_max_pixels: int
    video_fps: float
    video_min_frames: int
    video_max_frames: int
    video_sampling: str
    video_cap_pixels_per_frame: bool
    video_max_tokens_per_frame: int


@dataclass(frozen=True)
class VisionMediaConfig:
    """Resize bounds, video sampling and the gateway's input caps."""

    patch_size: int = 16
    temporal_patch_size: int = 2
    merge_size: int = 2
    image_min_pixels: int = 56 * 56
    image_max_pixels: int = 28 * 28 * 1280
    video_min_pixels: int = 128 * 32 * 32
    video_max_pixels: int = 768 * 32 * 32
    video_fps: float = 2.0
    video_min_frames: int = 4  # the reference samples at least this many frames from a short clip
    video_max_frames: int = 768
    # "qwen2_vl" (Qwen3-Omni) or "qwen3_vl" (Qwen3.5: frames spread evenly, one pixel budget for the whole clip in
    # video_min/max_pixels, each temporal patch timestamped); see runtime/vision_processing.py
    video_sampling: str = "qwen2_vl"
    video_cap_pixels_per_frame: bool = False
    video_max_tokens_per_frame: int = 768
    max_image_pixels: int = 64 * 1024 * 1024  # decoded canvas cap, checked from the header
    max_video_frame_pixels: int = 4096 * 4096

    def __post_init__(self) -> None:
        if self.video_fps <= 0:
            raise ValueError(f"video_fps={self.video_fps} must be positive; the default is 2.0")
        for name in ("patch_size", "temporal_patch_size", "merge_size", "video_max_frames", "max_image_pixels",
                     "max_video_frame_pixels"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")

    @property
    def factor(self) -> int:
        return self.patch_size * self.merge_size

    @classmethod
    def from_processing(cls, settings: ProcessingSettings, **caps: int) -> VisionMediaConfig:
        """From the checkpoint's processing settings; `caps` override the gateway-only limits."""
        return cls(
            patch_size=settings.patch_size,
            temporal_patch_size=settings.temporal_patch_size,
            merge_size=settings.merge_size,
            image_min_pixels=settings.image_min_pixels,
            image_max_pixels=settings.image_max_pixels,
            video_min_pixels=settings.video_min_pixels,
            video_max_pixels=settings.video_max_pixels,
            video_fps=settings.video_fps,
            video_min_frames=settings.video_min_frames,
            video_max_frames=settings.video_max_frames,
            video_sampling=settings.video_sampling,
            video_cap_pixels_per_frame=settings.video_cap_pixels_per_frame,
            video_max_tokens_per_frame=settings.video_max_tokens_per_frame,
            **caps,
        )


class MediaGrid(NamedTuple):
    """Temporal patches, patch rows, patch columns (the vision stage's `Grid`)."""

    t: int
    h: int
    w: int


@dataclass(frozen=True)
class DecodedImage:
    frames: np.ndarray  # uint8 [1, H, W, 3], H and W multiples of patch·merge
    grid: MediaGrid
    num_tokens: int
    content_hash: str  # of the encoded bytes and the resize target: equal hashes mean equal embeddings


@dataclass(frozen=True)
class DecodedVideo:
    frames: np.ndarray  # uint8 [F, H, W, 3], sampled at `fps`
    grid: MediaGrid  # t = ceil(F / temporal_patch_size): the vision stage repeats the last frame of an odd count
    num_tokens: int
    fps: float
    second_per_grid: float  # seconds one temporal patch spans: temporal_patch_size / fps
    content_hash: str
    timestamps: tuple[float, ...] = ()  # qwen3_vl sampling: each temporal patch's time in the source, in seconds


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> Size:
    """The model's resize rule: both sides multiples of `factor`, area within the bounds, aspect ratio kept."""
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise ValueError(f"aspect ratio {max(height, width) / min(height, width):.1f} exceeds {MAX_ASPECT_RATIO}")
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return Size(h_bar, w_bar)


def target_size(field: str, height: int, width: int, cfg: VisionMediaConfig, video: bool) -> Size:
    lo, hi = (cfg.video_min_pixels, cfg.video_max_pixels) if video else (cfg.image_min_pixels, cfg.image_max_pixels)
    try:
        return smart_resize(height, width, cfg.factor, lo, hi)
    except ValueError as err:
        raise InvalidArgument(field, f"{width}x{height} cannot be used: {err}; crop it closer to square") from None


def video_size(field: str, height: int, width: int, num_frames: int, cfg: VisionMediaConfig) -> Size:
    """Frames of a clip of `num_frames` sampled frames are resized to this: per frame (qwen2_vl, which does not read
    `num_frames`), or with one budget for the whole clip (qwen3_vl)."""
    if cfg.video_sampling != "qwen3_vl":
        return target_size(field, height, width, cfg, video=True)
    budget = qwen3_vl_video.clip_pixel_budget(num_frames, cfg.factor, cfg.video_min_pixels, cfg.video_max_pixels,
                                              cfg.video_cap_pixels_per_frame, cfg.video_max_tokens_per_frame)
    try:
        return qwen3_vl_video.clip_size(num_frames, height, width, cfg.temporal_patch_size, cfg.factor,
                                        cfg.video_min_pixels, budget)
    except ValueError as err:
        raise InvalidArgument(field, f"{width}x{height} with {num_frames} sampled frames cannot be used: {err}; send "
                              "a longer clip, or crop it closer to square") from None


def content_hash(data: bytes, *params: object) -> str:
    digest = hashlib.blake2b(data, digest_size=16)
    digest.update(repr(params).encode())
    return digest.hexdigest()


def to_rgb(im: Image.Image) -> Image.Image:
    """RGB, with any transparency composited onto white (as the reference processor does)."""
    if "A" in im.getbands() or "transparency" in im.info:
        rgba = im.convert("RGBA")
        return Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba).convert("RGB")
    return im.convert("RGB")


def open_image(data: bytes, field: str, cfg: VisionMediaConfig) -> Image.Image:
    """The opened (header-only) image, after the empty, format and pixel-cap checks."""
    if not data:
        raise InvalidArgument(field, "is empty (0 bytes); send the encoded image (JPEG, PNG, WebP or GIF)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # our own cap below decides
            im = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError:
        raise InvalidArgument(
            field, f"declares more than {cfg.max_image_pixels} pixels; send a smaller image"
        ) from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError):
        raise InvalidArgument(field, "is not a decodable image; send JPEG, PNG, WebP or GIF bytes") from None
    if im.format not in IMAGE_FORMATS:
        raise InvalidArgument(field, f"has unsupported format {im.format}; send JPEG, PNG, WebP or GIF")
    width, height = im.size  # Pillow refuses zero-sized headers as unidentifiable, above
    if width * height > cfg.max_image_pixels:
        raise InvalidArgument(
            field,
            f"is {width}x{height} = {width * height} pixels, over the cap of {cfg.max_image_pixels}; downscale it",
        )
    return im


def image_tokens(data: bytes, field: str, cfg: VisionMediaConfig) -> int:
    """The thinker tokens the image will take, from its header alone (no pixel decoded)."""
    im = open_image(data, field, cfg)
    size = target_size(field, im.height, im.width, cfg, video=False)  # EXIF may swap the sides, not their product
    return size.height * size.width // cfg.factor**2


def decode_image(data: bytes, field: str, cfg: VisionMediaConfig) -> DecodedImage:
    """JPEG / PNG / WebP / GIF (first frame) bytes -> EXIF-upright RGB resized with `smart_resize`."""
    im = open_image(data, field, cfg)
    try:
        im.seek(0)  # an animated GIF stands for its first frame
        im.load()
        im = to_rgb(ImageOps.exif_transpose(im))
    except (OSError, ValueError, SyntaxError, EOFError):
        raise InvalidArgument(field, f"is a damaged {im.format} file that cannot be decoded") from None
    size = target_size(field, im.height, im.width, cfg, video=False)
    im = im.resize((size.width, size.height), Image.Resampling.BICUBIC)
    frames = np.array(im, dtype=np.uint8)[None]  # [1, H, W, 3], writable so torch.from_numpy takes it as is
    grid = MediaGrid(1, size.height // cfg.patch_size, size.width // cfg.patch_size)
    return DecodedImage(frames, grid, size.height * size.width // cfg.factor**2, content_hash(data, "image", size))


def open_video(data: bytes, field: str) -> av.container.InputContainer:
    if not data:
        raise InvalidArgument(field, "is empty (0 bytes); send the encoded video (MP4, WebM or MKV)")
    try:
        container = av.open(io.BytesIO(data), mode="r")
    except (av.FFmpegError, ValueError):
        raise InvalidArgument(field, "is not a decodable video; send MP4, WebM or MKV bytes") from None
    if not set(container.format.name.split(",")) & set(VIDEO_FORMATS):
        container.close()
        raise InvalidArgument(field, f"has unsupported container {container.format.name}; send MP4, WebM or MKV")
    return container


def check_video_stream(stream: av.VideoStream, field: str, cfg: VisionMediaConfig) -> None:
    """Header checks before decoding: frame size, pixel cap and (when the container says) the frame cap."""
    if stream.codec_context is None:
        raise InvalidArgument(field, "has a video stream whose codec cannot be opened; send H.264, VP9 or similar")
    width, height = stream.codec_context.width, stream.codec_context.height
    if width == 0 or height == 0:
        raise InvalidArgument(field, f"has zero-size frames ({width}x{height})")
    if width * height > cfg.max_video_frame_pixels:
        raise InvalidArgument(
            field, f"frames are {width}x{height}, over the cap of {cfg.max_video_frame_pixels} pixels; downscale it"
        )
    seconds = duration_seconds(stream)
    if seconds is not None and math.ceil(seconds * cfg.video_fps - 1e-6) > cfg.video_max_frames:
        raise InvalidArgument(field, frame_cap_message(cfg))


def duration_seconds(stream: av.VideoStream) -> float | None:
    """The stream's duration from its header (else the container's), None when neither says."""
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if stream.container.duration is not None:
        return stream.container.duration / av.time_base
    return None


def check_frame_rate(total: int, seconds: float | None, field: str) -> None:
    if seconds is not None and total > max(seconds, 1.0) * MAX_SOURCE_FPS:
        raise InvalidArgument(field, f"holds {total} frames but its header says {seconds:.3g} s "
                              f"({total / max(seconds, 1e-9):.0f} frames a second); at most {MAX_SOURCE_FPS}")


def frame_cap_message(cfg: VisionMediaConfig) -> str:
    seconds = cfg.video_max_frames / cfg.video_fps
    return f"needs more than {cfg.video_max_frames} frames at {cfg.video_fps} fps; send at most {seconds:g} s"


class VideoPlan(NamedTuple):
    """What a video's header and packets say before any frame is decoded."""

    size: Size  # frames resized to this (`video_size`)
    total: int  # frames counted in the first video stream
    keep: list[int]  # the frame indices the reference processor samples
    source_fps: float  # the stream's frame rate (what timestamps are computed from)


def plan_video(container: av.container.InputContainer, data: bytes, field: str, cfg: VisionMediaConfig) -> VideoPlan:
    """Header checks, then the frames the reference processor samples at `cfg.video_fps` (no frame decoded)."""
    if not container.streams.video:
        raise InvalidArgument(field, "has no video stream; send a video with frames")
    stream = container.streams.video[0]
    check_video_stream(stream, field, cfg)
    height, width = stream.codec_context.height, stream.codec_context.width
    qwen3_vl = cfg.video_sampling == "qwen3_vl"
    size = None if qwen3_vl else video_size(field, height, width, 0, cfg)  # qwen3_vl: sized once sampled, below
    total = count_frames(data)
    check_frame_rate(total, duration_seconds(stream), field)
    rate = stream.average_rate or stream.guessed_rate
    source_fps = float(rate) if rate else total / max(duration_seconds(stream) or 1.0, 1e-6)
    if math.ceil(total / source_fps * cfg.video_fps - 1e-6) > cfg.video_max_frames:
        raise InvalidArgument(field, frame_cap_message(cfg))
    if size is None:
        keep = qwen3_vl_video.frame_indices(total, source_fps, cfg.video_fps, cfg.video_min_frames,
                                            cfg.video_max_frames)
        return VideoPlan(video_size(field, height, width, len(keep), cfg), total, keep, source_fps)
    wanted = reference_frame_indices(total, source_fps, cfg.video_fps, cfg.video_min_frames,
                                     cfg.video_max_frames, cfg.temporal_patch_size)
    # under one patch: every frame
    return VideoPlan(size, total, list(range(total)) if wanted is None else wanted, source_fps)


def video_tokens(data: bytes, field: str, cfg: VisionMediaConfig) -> int:
    """The thinker tokens the video will take, from its header and packets alone (no frame decoded); a damaged
    stream can decode fewer frames than planned, never more."""
    with open_video(data, field) as container:
        plan = plan_video(container, data, field, cfg)
    return _video_token_count(len(plan.keep), plan.size, cfg)


def _video_token_count(frames: int, size: Size, cfg: VisionMediaConfig) -> int:
    t = -(-frames // cfg.temporal_patch_size)
    return t * (size.height // cfg.patch_size) * (size.width // cfg.patch_size) // cfg.merge_size**2


def decode_video(data: bytes, field: str, cfg: VisionMediaConfig) -> DecodedVideo:
    """MP4 / WebM / MKV bytes -> the frames the reference processor samples at `cfg.video_fps`, resized with
    `smart_resize` (video bounds)."""
    with open_video(data, field) as container:
        size, total, keep_list, source_fps = plan_video(container, data, field, cfg)
        keep = set(keep_list)
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"  # frame- and slice-threaded decoding where the codec allows it
        selected: list[np.ndarray] = []
        decoded: list[int] = []  # the source index of each selected frame (a damaged stream may lose some)
        try:
            for index, frame in enumerate(container.decode(stream)):
                if index >= total:  # frames past those counted (a header that undercounts them) are never decoded
                    break
                if index in keep:
                    im = frame.to_image().resize((size.width, size.height), Image.Resampling.BICUBIC)
                    selected.append(np.asarray(im, dtype=np.uint8))
                    decoded.append(index)
        except av.FFmpegError:
            raise InvalidArgument(field, "is a damaged video that cannot be decoded") from None
    if not selected:
        raise InvalidArgument(field, "has no decodable frames; send a video with at least one frame")
    frames = np.stack(selected)  # [F, H, W, 3]
    t = -(-len(selected) // cfg.temporal_patch_size)
    grid = MediaGrid(t, size.height // cfg.patch_size, size.width // cfg.patch_size)
    return DecodedVideo(
        frames=frames,
        grid=grid,
        num_tokens=_video_token_count(len(selected), size, cfg),
        fps=cfg.video_fps,
        second_per_grid=cfg.temporal_patch_size / cfg.video_fps,
        content_hash=content_hash(data, "video", size, cfg.video_fps),
        timestamps=(qwen3_vl_video.patch_timestamps(decoded, source_fps, cfg.temporal_patch_size)
                    if cfg.video_sampling == "qwen3_vl" else ()),
    )

"""Qwen3.5's prompt through the gateway: frames sampled, clips sized and patches timestamped by transformers'
Qwen3-VL rules; the prompt ids equal Qwen3VLProcessor's (image, and a video laid out one timestamped block per frame)
and the thinker's M-RoPE positions equal transformers' `get_rope_index` on them."""
from __future__ import annotations

import asyncio
import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import av
import numpy as np
import pytest
import torch

from runtime.vision_processing import VisionProcessingConfig
from gateway.chat_input import ChatInput, MediaBytes, Turn
from gateway.media import qwen3_vl_video
from gateway.media.vision import VisionMediaConfig
from gateway.media_prep import EncodedMedia, MediaPipeline, thinker_media
from gateway.prompt import PromptBuilder
from services.thinker.model import MediaKind, MediaSpanGrid, ThinkerConfig, prompt_positions
from tests.integration.media_files import mp4, png
from tests.parity.test_qwen3_5_demo_checkpoint import hf_processor

VIDEO_FPS = 10  # source frame rate of the test clips


def qwen3_vl_video_processor() -> Any:
    """transformers' Qwen3VLVideoProcessor methods on an object with its class defaults (the class itself cannot be
    built here: it needs torchvision)."""
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    return SimpleNamespace(fps=2, min_frames=4, max_frames=768,
                           sample_frames=lambda *a, **k: Qwen3VLVideoProcessor.sample_frames(
                               SimpleNamespace(fps=2, min_frames=4, max_frames=768), *a, **k))


@pytest.mark.parametrize("total", [1, 4, 9, 30, 61, 250, 1999])
@pytest.mark.parametrize("source_fps", [1.0, 10.0, 29.97, 60.0])
def test_frame_indices_are_the_reference_sampler(total: int, source_fps: float) -> None:
    from transformers.video_utils import VideoMetadata

    ref = qwen3_vl_video_processor().sample_frames(VideoMetadata(total_num_frames=total, fps=source_fps))
    assert qwen3_vl_video.frame_indices(total, source_fps, 2.0, 4, 768) == ref.tolist()


@pytest.mark.parametrize("frames,height,width", [(2, 64, 96), (4, 20, 300), (6, 480, 640), (61, 1080, 1920),
                                                 (768, 720, 1280), (9, 31, 33), (4, 4000, 30)])
def test_clip_size_is_the_reference_resize(frames: int, height: int, width: int) -> None:
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import smart_resize

    # the demo's bounds: 4096 .. 25165824 pixels per clip
    ref = smart_resize(frames, height, width, temporal_factor=2, factor=32, min_pixels=4096, max_pixels=25165824)
    assert tuple(qwen3_vl_video.clip_size(frames, height, width, 2, 32, 4096, 25165824)) == ref


@pytest.mark.parametrize("indices", [[0, 6, 12, 17, 23, 29], [0, 3, 5], [4]])
def test_patch_timestamps_are_the_processors(indices: list[int]) -> None:
    from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor

    ref = Qwen3VLProcessor._calculate_timestamps(None, list(indices), VIDEO_FPS, 2)
    assert list(qwen3_vl_video.patch_timestamps(indices, VIDEO_FPS, 2)) == ref


def test_processing_config_reads_the_qwen3_vl_video_file(qwen3_5_ckpt: Path, demo_ckpt: Path) -> None:
    ours = VisionProcessingConfig.from_checkpoint(qwen3_5_ckpt)
    assert (ours.video_sampling, ours.video_min_pixels, ours.video_max_pixels) == ("qwen3_vl", 4096, 25165824)
    assert (ours.image_min_pixels, ours.image_max_pixels) == (65536, 16777216)
    assert VisionProcessingConfig.from_checkpoint(demo_ckpt).video_sampling == "qwen2_vl"


def reference_video_inputs(data: bytes) -> dict[str, Any]:
    """What Qwen3VLVideoProcessor returns for the clip, from transformers' own sampler and resize."""
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import smart_resize
    from transformers.video_utils import VideoMetadata

    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        total, fps = stream.frames, float(stream.average_rate)
        height, width = stream.codec_context.height, stream.codec_context.width
    metadata = VideoMetadata(total_num_frames=total, fps=fps)
    indices = qwen3_vl_video_processor().sample_frames(metadata)
    metadata.frames_indices = indices
    h, w = smart_resize(len(indices), height, width, temporal_factor=2, factor=32, min_pixels=4096,
                        max_pixels=25165824)
    grid = [-(-len(indices) // 2), h // 16, w // 16]
    return {"video_grid_thw": torch.tensor([grid]), "video_metadata": [metadata],
            "pixel_values_videos": torch.zeros(int(np.prod(grid)), 1536)}


def processor_with_video(ckpt: Path, video: bytes | None) -> Any:
    proc = hf_processor(ckpt)
    outputs = reference_video_inputs(video) if video is not None else None

    class VideoProcessor:
        merge_size = 2
        temporal_patch_size = 2

        def __call__(self, videos: Any, **kwargs: Any) -> Any:
            from transformers.feature_extraction_utils import BatchFeature

            return BatchFeature(outputs)

    proc.video_processor = VideoProcessor()
    return proc


async def gateway_prompt(ckpt: Path, parts: tuple[str | MediaBytes, ...]) -> tuple[Any, list[Any]]:
    vision_cfg = VisionMediaConfig.from_processing(VisionProcessingConfig.from_checkpoint(ckpt))
    pipeline = MediaPipeline(vision_cfg, object(), 0, None, 30.0)  # a vision client is only needed to encode
    chat = ChatInput("r", (Turn("system", ("Be brief.",)), Turn("user", parts)), None, False, "", False, False)
    decoded = await pipeline.decode(chat.media)
    return PromptBuilder.from_dir(ckpt).build(chat, decoded), decoded


CASES = {
    "image": ("image",),
    "video": ("video",),
    "image_and_video": ("image", "video"),
}


@pytest.mark.parametrize("case", CASES)
def test_prompt_ids_and_positions_equal_transformers(qwen3_5_ckpt: Path, case: str) -> None:
    from PIL import Image
    from transformers import Qwen3_5Config, Qwen3_5Model

    image, video = png(72, 100, seed=1), mp4(num_frames=30, fps=VIDEO_FPS, height=64, width=96, seed=2)
    media = {"image": MediaBytes("image", image, "", "image"), "video": MediaBytes("video", video, "", "video")}
    parts = tuple(p for kind in CASES[case] for p in (media[kind], f"What is in the {kind}?"))
    prompt, decoded = asyncio.run(gateway_prompt(qwen3_5_ckpt, parts))

    proc = processor_with_video(qwen3_5_ckpt, video if "video" in CASES[case] else None)
    hf_parts = [p for kind in CASES[case]
                for p in ({"type": kind}, {"type": "text", "text": f"What is in the {kind}?"})]
    text = proc.apply_chat_template([{"role": "system", "content": "Be brief."}, {"role": "user", "content": hf_parts}],
                                    add_generation_prompt=True, tokenize=False)
    kwargs = {"images": [Image.open(io.BytesIO(image))]} if "image" in CASES[case] else {}
    if "video" in CASES[case]:
        kwargs["videos"] = [np.zeros((1, 2, 2, 3), dtype=np.uint8)]  # the stub answers for the clip
    ref = proc(text=[text], return_tensors="pt", **kwargs)
    assert prompt.ids == ref["input_ids"][0].tolist()
    if "video" in CASES[case]:
        assert len([s for s in prompt.spans if s.kind == "video"]) == 3  # six frames: three timestamped blocks
        laid_out = proc.tokenizer.decode(ref["input_ids"][0])  # frames 0 and 6 of a 10 fps clip open the first patch
        assert "<|vision_start|><0.3 seconds><|vision_start|><|video_pad|>" in laid_out

    encoded = [EncodedMedia(torch.zeros(d.num_tokens, 64)) for d in decoded]
    pbs, tensors = thinker_media(prompt.spans, decoded, encoded)
    assert [tensors[f"media.{i}.embeddings"].shape[0] for i in range(len(pbs))] == [s.length for s in pbs]
    kinds = {1: MediaKind.IMAGE, 2: MediaKind.VIDEO}
    grids = [MediaSpanGrid(kinds[s.kind], tuple(s.grid_thw), s.second_per_grid) for s in pbs]
    ours = prompt_positions(prompt.ids, grids, ThinkerConfig.from_checkpoint(qwen3_5_ckpt))

    with torch.device("meta"):
        model = Qwen3_5Model(Qwen3_5Config.from_pretrained(qwen3_5_ckpt))
    want, delta = model.get_rope_index(ref["input_ids"], ref["mm_token_type_ids"],
                                       image_grid_thw=ref.get("image_grid_thw"),
                                       video_grid_thw=ref.get("video_grid_thw"))
    assert ours.positions.tolist() == want[:, 0].tolist()
    assert ours.rope_delta == int(delta)


def test_clips_the_reference_cannot_size_are_refused(qwen3_5_ckpt: Path) -> None:
    from runtime.errors import InvalidArgument
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import smart_resize

    from gateway.media.vision import decode_video

    for frames, height, width in ((1, 64, 96), (4, 32, 32 * 201)):
        with pytest.raises(ValueError):
            smart_resize(frames, height, width, temporal_factor=2, factor=32, min_pixels=4096, max_pixels=25165824)
        with pytest.raises(ValueError, match="fewer than one temporal patch|aspect ratio"):
            qwen3_vl_video.clip_size(frames, height, width, 2, 32, 4096, 25165824)
    cfg = VisionMediaConfig.from_processing(VisionProcessingConfig.from_checkpoint(qwen3_5_ckpt))
    with pytest.raises(InvalidArgument, match="with 1 sampled frames cannot be used: 1 sampled frames are fewer"):
        decode_video(mp4(num_frames=1, fps=VIDEO_FPS), "messages[0].content[0].video", cfg)


def test_per_frame_cap_shares_the_clip_budget() -> None:
    """With the cap, each of 100 frames gets 25165824 // 100 pixels at most, never more than 768 merged tokens' worth
    (786,432 px at factor 32) nor under 1.05x the minimum."""
    assert qwen3_vl_video.clip_pixel_budget(100, 32, 4096, 25165824, False, 768) == 25165824
    assert qwen3_vl_video.clip_pixel_budget(100, 32, 4096, 25165824, True, 768) == 251658 * 100
    assert qwen3_vl_video.clip_pixel_budget(4, 32, 4096, 25165824, True, 768) == 786432 * 4
    assert qwen3_vl_video.clip_pixel_budget(100000, 32, 4096, 25165824, True, 768) == 4300 * 100000

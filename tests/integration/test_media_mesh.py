"""Images, video and audio through the whole mesh (CLI -> gateway -> vision/audio -> thinker) equal transformers."""
from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from omnimesh.v1 import common_pb2, omni_pb2
from runtime.vision_processing import VisionProcessingConfig
from tests.integration.client import run_concurrent
from tests.integration.media_files import mp4, png, wav
from tests.integration.mesh_process import OMNIMESH, Proc, metric_value, scrape, start
from tests.integration.test_mesh_parity import MAX_NEW, NEAR_TIE
from tests.parity.vision.test_vision_preprocess_parity import reference_video_pixel_values


@pytest.fixture(scope="module")
def media_mesh(demo_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Proc:
    from gateway.cli.up import MESH_PREFIX

    cfg = tmp_path_factory.mktemp("media_mesh") / "mesh.yaml"
    cfg.write_text(yaml.safe_dump({
        "vision": {"enabled": True, "encoder": {"batch_wait_ms": 100.0}},
        "audio": {"enabled": True},
        "talker": {"enabled": False},
        "thinker": {"engine": {"kv_cache_bytes": 16 << 20, "token_flush_ms": 5.0}}}))
    proc = start([OMNIMESH, "up", "--model", str(demo_ckpt), "--port", "0", "--config", str(cfg)], MESH_PREFIX,
                 timeout=240)
    yield proc
    assert proc.stop() == 0


def run_chat(mesh: Proc, text: str, files: dict[str, Path]) -> list[int]:
    flags = [x for kind, path in files.items() for x in (f"--{kind}", str(path))]
    out = subprocess.run([OMNIMESH, "chat", "--addr", f"127.0.0.1:{mesh.ports['gateway']['grpc_port']}", "--json",
                          "--greedy", "--max-tokens", str(MAX_NEW), *flags, text],
                         capture_output=True, text=True, timeout=120)
    events = [json.loads(line) for line in out.stdout.splitlines()]
    assert out.returncode == 0, events
    return [t for e in events if e["type"] == "text" for t in e["token_ids"]]


def expanded_ids(tokenizer, text: str, kinds: list[str], counts: list[int]) -> torch.Tensor:
    """The processor's prompt: the template with each media pad expanded to its token count."""
    content = [{"type": k} for k in kinds] + [{"type": "text", "text": text}]
    ids = tokenizer.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True,
                                       tokenize=True, return_dict=True)["input_ids"]
    pads = {tokenizer.convert_tokens_to_ids(t): t for t in ("<|image_pad|>", "<|video_pad|>", "<|audio_pad|>")}
    out, counts = [], list(counts)
    for t in ids:
        out.extend([t] * counts.pop(0) if t in pads else [t])
    return torch.tensor([out])


def reference(hf_omni, input_ids: torch.Tensor, **media) -> tuple[list[int], list[float]]:
    out = hf_omni.thinker.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                                   max_new_tokens=MAX_NEW, do_sample=False, eos_token_id=151645,
                                   output_scores=True, return_dict_in_generate=True, **media)
    gaps = [float(torch.topk(s[0].float(), 2).values.diff().abs()) for s in out.scores]
    return out.sequences[0, input_ids.shape[1]:].tolist(), gaps


def assert_equal_but_near_ties(ours: list[int], ref: list[int], gaps: list[float]) -> None:
    for step, (a, b) in enumerate(zip(ours, ref)):
        if a != b:
            assert gaps[step] < NEAR_TIE, f"step {step}: ours {a}, reference {b}, top-2 gap {gaps[step]}"
            return
    assert len(ours) == len(ref)


def test_image_answer_equals_transformers(media_mesh: Proc, hf_omni, demo_ckpt: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer, Qwen2VLImageProcessorPil

    data = png(96, 128)
    (tmp_path / "a.png").write_bytes(data)
    ours = run_chat(media_mesh, "What is in this picture?", {"image": tmp_path / "a.png"})
    processor = Qwen2VLImageProcessorPil.from_pretrained(demo_ckpt)
    from PIL import Image
    import io

    pix = processor(images=[Image.open(io.BytesIO(data)).convert("RGB")], return_tensors="pt")
    count = int(pix["image_grid_thw"][0].prod()) // 4
    ids = expanded_ids(AutoTokenizer.from_pretrained(demo_ckpt), "What is in this picture?", ["image"], [count])
    ref, gaps = reference(hf_omni, ids, pixel_values=pix["pixel_values"], image_grid_thw=pix["image_grid_thw"])
    assert_equal_but_near_ties(ours, ref, gaps)


def test_audio_answer_equals_transformers(media_mesh: Proc, hf_omni, demo_ckpt: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer, WhisperFeatureExtractor

    from runtime.audio_lengths import audio_token_count

    (tmp_path / "a.wav").write_bytes(wav(1.5))
    ours = run_chat(media_mesh, "Transcribe the speech.", {"audio": tmp_path / "a.wav"})
    import soundfile as sf

    samples, _ = sf.read(tmp_path / "a.wav", dtype="float32")
    fe = WhisperFeatureExtractor.from_pretrained(demo_ckpt)
    feats = fe([samples], sampling_rate=16_000, padding=True, truncation=False, return_attention_mask=True,
               return_tensors="pt")
    count = audio_token_count(int(feats["attention_mask"].sum()))
    ids = expanded_ids(AutoTokenizer.from_pretrained(demo_ckpt), "Transcribe the speech.", ["audio"], [count])
    ref, gaps = reference(hf_omni, ids, input_features=feats["input_features"],
                          feature_attention_mask=feats["attention_mask"])
    assert_equal_but_near_ties(ours, ref, gaps)


def test_video_answer_equals_transformers(media_mesh: Proc, hf_omni, demo_ckpt: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from gateway.media.vision import VisionMediaConfig, decode_video

    data = mp4(num_frames=8, fps=4)
    (tmp_path / "v.mp4").write_bytes(data)
    ours = run_chat(media_mesh, "What happens?", {"video": tmp_path / "v.mp4"})
    processing = VisionProcessingConfig.from_checkpoint(demo_ckpt)
    video = decode_video(data, "video", VisionMediaConfig.from_processing(processing))  # the frames the mesh saw
    pixels = reference_video_pixel_values(torch.from_numpy(np.ascontiguousarray(video.frames)), processing)
    grid = torch.tensor([[video.grid.t, video.grid.h, video.grid.w]])
    ids = expanded_ids(AutoTokenizer.from_pretrained(demo_ckpt), "What happens?", ["video"], [video.num_tokens])
    ref, gaps = reference(hf_omni, ids, pixel_values_videos=pixels, video_grid_thw=grid,
                          video_second_per_grid=torch.tensor([video.second_per_grid]))
    assert_equal_but_near_ties(ours, ref, gaps)


def test_concurrent_images_of_different_sizes_batch_in_the_vision_stage(media_mesh: Proc) -> None:
    """Four images of different sizes sent at once over one channel (not four CLI processes, whose start-ups on a
    busy 2-core machine can spread past the stage's 100 ms batching window) share at least one encoder forward."""
    vision_metrics = media_mesh.ports["vision"]["metrics_port"]
    before = scrape(vision_metrics)
    sizes = [(64, 64), (96, 128), (128, 96), (160, 64)]
    sampling = common_pb2.SamplingParams(temperature=0.0, max_tokens=2)
    requests = [omni_pb2.ChatRequest(sampling=sampling, messages=[omni_pb2.Message(role="user", content=[
        omni_pb2.ContentPart(image=omni_pb2.Media(data=png(h, w, seed=i))), omni_pb2.ContentPart(text="Describe.")])])
        for i, (h, w) in enumerate(sizes)]  # fmt: skip
    answers = asyncio.run(run_concurrent(gateway_addr_of(media_mesh), requests))
    assert all(tokens for tokens, _ in answers)
    after = scrape(vision_metrics)
    items = (metric_value(after, "omnimesh_encoder_items_per_batch_sum")
             - metric_value(before, "omnimesh_encoder_items_per_batch_sum"))
    batches = (metric_value(after, "omnimesh_encoder_items_per_batch_count")
               - metric_value(before, "omnimesh_encoder_items_per_batch_count"))
    assert items == len(sizes)
    assert batches < items  # at least two requests shared one forward


def gateway_addr_of(mesh: Proc) -> str:
    return f"127.0.0.1:{mesh.ports['gateway']['grpc_port']}"


BAD_MEDIA = {
    "undecodable image": ("image", b"definitely not a picture", "messages[0].content[0].image"),
    "truncated png": ("image", png()[:60], "messages[0].content[0].image"),
    "undecodable audio": ("audio", b"RIFF....WAVEfmt nonsense", "messages[0].content[0].audio"),
    "undecodable video": ("video", b"\x00\x00\x00\x18ftypmp42 garbage", "messages[0].content[0].video"),
}


@pytest.mark.parametrize("case", sorted(BAD_MEDIA))
def test_bad_media_is_invalid_argument_naming_the_part(media_mesh: Proc, case: str) -> None:
    import asyncio

    import grpc

    from omnimesh.v1 import omni_pb2
    from tests.integration.client import chat_error
    from tests.integration.status_checks import violated_fields

    kind, data, field = BAD_MEDIA[case]
    part = omni_pb2.ContentPart(**{kind: omni_pb2.Media(data=data)})
    req = omni_pb2.ChatRequest(messages=[omni_pb2.Message(role="user", content=[part, omni_pb2.ContentPart(text="?")])])
    err = asyncio.run(chat_error(gateway_addr_of(media_mesh), req))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert violated_fields(err) == [field]


@pytest.mark.parametrize("stage,kind,data", [("vision", "image", png()), ("audio", "audio", wav(0.5))])
def test_encoder_stage_down_is_unavailable(media_mesh: Proc, demo_ckpt: Path, stage: str, kind: str,
                                           data: bytes) -> None:
    import asyncio

    import grpc

    from omnimesh.v1 import omni_pb2
    from runtime.server import READY_PREFIX
    from tests.integration.client import chat_error
    from tests.integration.conftest import python_module
    from tests.integration.test_gateway_errors import free_port

    thinker = f"127.0.0.1:{media_mesh.ports['thinker']['grpc_port']}"
    gw = start(python_module("gateway", "--model", str(demo_ckpt), "--port", "0", "--metrics-port", "-1",
                             "--thinker-addr", thinker, f"--{stage}-addr", f"127.0.0.1:{free_port()}"),
               READY_PREFIX, timeout=60)
    try:
        part = omni_pb2.ContentPart(**{kind: omni_pb2.Media(data=data)})
        req = omni_pb2.ChatRequest(messages=[omni_pb2.Message(role="user", content=[part])])
        err = asyncio.run(chat_error(f"127.0.0.1:{gw.ports['grpc_port']}", req))
        assert err.code() == grpc.StatusCode.UNAVAILABLE
        assert stage in err.details()
    finally:
        assert gw.stop() == 0
    assert metric_value(scrape(media_mesh.ports["thinker"]["metrics_port"]), "omnimesh_requests_running") == 0


def reference_interleaved_ids(tokenizer, text: str, grid: torch.Tensor, second_per_grid: float,
                              num_audio: int) -> torch.Tensor:
    """The prompt as transformers' own processor lays out a video heard with its sound track."""
    from types import SimpleNamespace

    from transformers.models.qwen3_omni_moe.processing_qwen3_omni_moe import Qwen3OmniMoeProcessor

    fake = SimpleNamespace(audio_bos_token="<|audio_start|>", audio_eos_token="<|audio_end|>",
                           video_token="<|video_pad|>", audio_token="<|audio_pad|>",
                           video_processor=SimpleNamespace(merge_size=2))
    body = Qwen3OmniMoeProcessor.replace_video_with_audio_token(
        fake, {"video_grid_thw": grid, "video_second_per_grid": [second_per_grid]}, 0,
        {"num_audio_tokens": [num_audio]}, 0, position_id_per_seconds=13)
    content = [{"type": "video"}, {"type": "text", "text": text}]
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True,
                                             tokenize=False)
    rendered = rendered.replace("<|video_pad|>", body, 1)
    return torch.tensor([tokenizer(rendered, add_special_tokens=False)["input_ids"]])


def test_video_heard_with_its_sound_track_equals_transformers(media_mesh: Proc, hf_omni, demo_ckpt: Path,
                                                               tmp_path: Path) -> None:
    from transformers import AutoTokenizer, WhisperFeatureExtractor

    from gateway.media.audio import extract_video_audio
    from gateway.media.vision import VisionMediaConfig, decode_video
    from tests.integration.media_files import mp4_with_sound

    data = mp4_with_sound()
    (tmp_path / "v.mp4").write_bytes(data)
    flags = ["--use-audio-in-video"]
    out = subprocess.run([OMNIMESH, "chat", "--addr", gateway_addr_of(media_mesh), "--json", "--greedy",
                          "--max-tokens", str(MAX_NEW), "--video", str(tmp_path / "v.mp4"), *flags, "What happens?"],
                         capture_output=True, text=True, timeout=120)
    events = [json.loads(line) for line in out.stdout.splitlines()]
    assert out.returncode == 0, events
    ours = [t for e in events if e["type"] == "text" for t in e["token_ids"]]

    processing = VisionProcessingConfig.from_checkpoint(demo_ckpt)
    video = decode_video(data, "video", VisionMediaConfig.from_processing(processing))
    track = extract_video_audio(data, "video")
    pixels = reference_video_pixel_values(torch.from_numpy(np.ascontiguousarray(video.frames)), processing)
    grid = torch.tensor([[video.grid.t, video.grid.h, video.grid.w]])
    feats = WhisperFeatureExtractor.from_pretrained(demo_ckpt)(
        [track.samples], sampling_rate=16_000, padding=True, truncation=False, return_attention_mask=True,
        return_tensors="pt")
    tok = AutoTokenizer.from_pretrained(demo_ckpt)
    ids = reference_interleaved_ids(tok, "What happens?", grid, video.second_per_grid, track.token_count)
    assert events[-2]["prompt_tokens"] == ids.shape[1]
    ref, gaps = reference(hf_omni, ids, pixel_values_videos=pixels, video_grid_thw=grid,
                          video_second_per_grid=torch.tensor([video.second_per_grid]),
                          input_features=feats["input_features"], feature_attention_mask=feats["attention_mask"],
                          use_audio_in_video=True)
    assert_equal_but_near_ties(ours, ref, gaps)

"""Qwen3.5 (dense and MoE) through the whole mesh on loopback: `omnimesh up` starts only the vision and thinker
stages, and greedy tokens for text, an image and a video (laid out one timestamped block per frame) equal
transformers' `generate` on the demo checkpoints, except at near-ties."""
from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from runtime.vision_processing import VisionProcessingConfig
from tests.integration.media_files import mp4, png
from tests.integration.mesh_process import OMNIMESH, Proc, start
from tests.integration.test_media_mesh import assert_equal_but_near_ties
from tests.parity.test_qwen3_5_prompt import VIDEO_FPS, processor_with_video
from tests.parity.vision.test_vision_preprocess_parity import reference_video_pixel_values

MAX_NEW = 16
QWEN3_5_MESH = {"gateway": {"stage_timeout_s": 10.0},
                "thinker": {"engine": {"kv_cache_bytes": 16 << 20, "max_model_len": 1024, "max_num_seqs": 8,
                                       "max_batch_tokens": 512, "token_flush_ms": 5.0}}}
PROMPT = "What is in it?"


@pytest.fixture(scope="module", params=[False, True], ids=["dense", "moe"])
def ckpt(request: pytest.FixtureRequest) -> Path:
    return request.getfixturevalue("qwen3_5_moe_ckpt" if request.param else "qwen3_5_ckpt")


@pytest.fixture(scope="module")
def mesh(ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Proc:
    from gateway.cli.up import MESH_PREFIX

    config = tmp_path_factory.mktemp("qwen3_5_mesh") / "mesh.yaml"
    config.write_text(yaml.safe_dump(QWEN3_5_MESH))  # every stage enabled: `up` leaves out audio and talker itself
    proc = start([OMNIMESH, "up", "--model", str(ckpt), "--port", "0", "--config", str(config)], MESH_PREFIX,
                 timeout=180)
    yield proc
    assert proc.stop() == 0


@pytest.fixture(scope="module")
def hf_model(ckpt: Path) -> Any:
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(ckpt, dtype=torch.float32, attn_implementation="sdpa").eval()


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("qwen3_5_media")
    files = {"image": (folder / "a.png", png(72, 100, seed=1)),
             "video": (folder / "v.mp4", mp4(num_frames=30, fps=VIDEO_FPS, height=64, width=96, seed=2))}
    for path, data in files.values():
        path.write_bytes(data)
    return {kind: path for kind, (path, _) in files.items()}


def run_chat(mesh: Proc, files: dict[str, Path]) -> list[int]:
    flags = [x for kind, path in files.items() for x in (f"--{kind}", str(path))]
    out = subprocess.run([OMNIMESH, "chat", "--addr", f"127.0.0.1:{mesh.ports['gateway']['grpc_port']}", "--json",
                          "--greedy", "--max-tokens", str(MAX_NEW), *flags, PROMPT],
                         capture_output=True, text=True, timeout=120)
    events = [json.loads(line) for line in out.stdout.splitlines()]
    assert out.returncode == 0, events
    return [t for e in events if e["type"] == "text" for t in e["token_ids"]]


def reference_inputs(ckpt: Path, files: dict[str, Path]) -> dict[str, torch.Tensor]:
    """Qwen3VLProcessor's inputs: its image processor's pixels; for the video, its sampler's and resize's grid and
    timestamps (tests/parity/test_qwen3_5_prompt.py) over the frames the mesh decoded, normalised by its math."""
    from PIL import Image

    from gateway.media.vision import VisionMediaConfig, decode_video

    video = files["video"].read_bytes() if "video" in files else None
    proc = processor_with_video(ckpt, video)
    content = [{"type": kind} for kind in files] + [{"type": "text", "text": PROMPT}]
    text = proc.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True,
                                    tokenize=False)
    kwargs: dict[str, Any] = {}
    if "image" in files:
        kwargs["images"] = [Image.open(io.BytesIO(files["image"].read_bytes())).convert("RGB")]
    if video is not None:
        kwargs["videos"] = [np.zeros((1, 2, 2, 3), dtype=np.uint8)]  # the stub answers for the clip
    inputs = dict(proc(text=[text], return_tensors="pt", **kwargs))
    if video is not None:
        processing = VisionProcessingConfig.from_checkpoint(ckpt)
        decoded = decode_video(video, "video", VisionMediaConfig.from_processing(processing))
        assert [decoded.grid.t, decoded.grid.h, decoded.grid.w] == inputs["video_grid_thw"][0].tolist()
        inputs["pixel_values_videos"] = reference_video_pixel_values(
            torch.from_numpy(np.ascontiguousarray(decoded.frames)), processing)
    return inputs


def reference(hf_model: Any, inputs: dict[str, torch.Tensor]) -> tuple[list[int], list[float]]:
    with torch.inference_mode():
        out = hf_model.generate(**inputs, max_new_tokens=MAX_NEW, do_sample=False, output_scores=True,
                                return_dict_in_generate=True)
    gaps = [float(torch.topk(s[0].float(), 2).values.diff().abs()) for s in out.scores]
    return out.sequences[0, inputs["input_ids"].shape[1]:].tolist(), gaps


def test_only_vision_and_thinker_run(mesh: Proc) -> None:
    import grpc

    from omnimesh.v1 import common_pb2, vision_pb2_grpc

    assert set(mesh.ports) == {"vision", "thinker", "gateway"}
    with grpc.insecure_channel(f"127.0.0.1:{mesh.ports['vision']['grpc_port']}") as channel:
        info = vision_pb2_grpc.VisionStub(channel).Info(common_pb2.InfoRequest(), timeout=10)
    assert (info.dims["num_deepstack"], info.dims["out_hidden_size"]) == (0, 64)  # merged embeddings only


@pytest.mark.parametrize("kinds", [(), ("image",), ("video",)], ids=["text", "image", "video"])
def test_greedy_equals_transformers(mesh: Proc, hf_model: Any, ckpt: Path, media: dict[str, Path],
                                    kinds: tuple[str, ...]) -> None:
    files = {kind: media[kind] for kind in kinds}
    ref, gaps = reference(hf_model, reference_inputs(ckpt, files))
    assert_equal_but_near_ties(run_chat(mesh, files), ref, gaps)

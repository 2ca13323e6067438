"""The Qwen3.5 demo checkpoints (dense and MoE): transformers' layout, loads and generates in transformers with its
processor, no deepstack anywhere, the CLI writes the same bytes for the same seed."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors import safe_open

from gateway.cli.main import main
from runtime.checkpoint import token_ids as ids

EXPECTED_FILES = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                  "tokenizer_config.json", "chat_template.json", "preprocessor_config.json",
                  "video_preprocessor_config.json"}


@pytest.fixture(params=[False, True], ids=["dense", "moe"])
def ckpt(request: pytest.FixtureRequest) -> Path:
    return request.getfixturevalue("qwen3_5_moe_ckpt" if request.param else "qwen3_5_ckpt")


def names(ckpt_dir: Path) -> set[str]:
    with safe_open(str(ckpt_dir / "model.safetensors"), "pt") as f:
        return set(f.keys())


def hf_processor(ckpt_dir: Path) -> Any:
    """Qwen3VLProcessor (what AutoProcessor builds for qwen3_5) from the checkpoint's tokenizer and image processor;
    its Qwen3-VL video processor needs torchvision, absent here, so a stub with the fields it reads stands in."""
    import transformers
    from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor

    class VideoProcessorStub:
        merge_size = 2
        temporal_patch_size = 2

    class ProcessorWithoutTorchvision(Qwen3VLProcessor):
        def check_argument_for_proper_class(self, argument_name: str, argument: Any) -> Any:
            return None if argument_name == "video_processor" else super().check_argument_for_proper_class(
                argument_name, argument)

    return ProcessorWithoutTorchvision(
        image_processor=transformers.AutoImageProcessor.from_pretrained(ckpt_dir),
        tokenizer=transformers.AutoTokenizer.from_pretrained(ckpt_dir),
        video_processor=VideoProcessorStub(),
        chat_template=json.loads((ckpt_dir / "chat_template.json").read_text())["chat_template"])


def test_files_and_config(ckpt: Path) -> None:
    assert EXPECTED_FILES <= {p.name for p in ckpt.iterdir()}
    cfg = json.loads((ckpt / "config.json").read_text())
    moe = cfg["model_type"] == "qwen3_5_moe"
    assert cfg["architectures"] == ["Qwen3_5MoeForConditionalGeneration" if moe else "Qwen3_5ForConditionalGeneration"]
    assert (cfg["image_token_id"], cfg["video_token_id"]) == (ids.IMAGE_PAD, ids.VIDEO_PAD)
    assert (cfg["vision_start_token_id"], cfg["vision_end_token_id"]) == (ids.VISION_START, ids.VISION_END)
    text = cfg["text_config"]
    assert text["layer_types"] == ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3 + [
        "full_attention"]
    rope = text["rope_parameters"]
    assert rope["mrope_interleaved"] and sum(rope["mrope_section"]) * 2 == text["head_dim"] * rope[
        "partial_rotary_factor"]
    assert "deepstack_visual_indexes" not in cfg["vision_config"]
    assert ("num_experts" in text) == moe


def test_weights_in_transformers_layout(ckpt: Path) -> None:
    keys = names(ckpt)
    assert {"lm_head.weight", "model.language_model.embed_tokens.weight", "model.visual.merger.norm.weight",
            "model.visual.merger.linear_fc2.weight", "model.language_model.layers.0.linear_attn.A_log",
            "model.language_model.layers.0.linear_attn.in_proj_qkv.weight",
            "model.language_model.layers.3.self_attn.q_norm.weight"} <= keys
    assert not any("deepstack" in k for k in keys)
    assert {"mtp.fc.weight", "mtp.norm.weight"} <= keys  # as released checkpoints carry; transformers skips them
    assert not any(k.startswith("model.language_model.layers.3.linear_attn") for k in keys)  # a full layer
    if json.loads((ckpt / "config.json").read_text())["model_type"] == "qwen3_5_moe":
        assert {"model.language_model.layers.0.mlp.shared_expert_gate.weight",
                "model.language_model.layers.0.mlp.gate.weight"} <= keys


def test_zero_centred_norms_and_gates_drawn(ckpt: Path) -> None:
    """Zero-centred RMSNorm gains sit near 0 (a gain near 1 would double the scale); A_log is random, not constant."""
    with safe_open(str(ckpt / "model.safetensors"), "pt") as f:
        norm = f.get_tensor("model.language_model.layers.0.input_layernorm.weight")
        a_log = f.get_tensor("model.language_model.layers.0.linear_attn.A_log")
    assert norm.abs().mean() < 0.3 and norm.std() > 0.01
    assert a_log.std() > 0.05 and -2.5 < float(a_log.mean()) < 0.5


def test_loads_and_generates_in_transformers(ckpt: Path) -> None:
    from PIL import Image
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(ckpt, dtype=torch.float32).eval()
    cfg = json.loads((ckpt / "config.json").read_text())
    assert type(model).__name__ == cfg["architectures"][0]
    proc = hf_processor(ckpt)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is this?"}]}]
    text = proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    image = Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 96, 3), dtype=np.uint8))
    inputs = proc(text=[text], images=[image], return_tensors="pt")
    assert inputs["image_grid_thw"].tolist() == [[1, 14, 20]]  # upscaled to the 65,536-pixel minimum
    assert int((inputs["input_ids"] == ids.IMAGE_PAD).sum()) == 70
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=4, do_sample=False)
    assert out.shape[1] == inputs["input_ids"].shape[1] + 4


def test_auto_processor_loads(ckpt: Path) -> None:
    pytest.importorskip("torchvision")  # the Qwen3-VL video processor needs it
    from transformers import AutoProcessor

    assert type(AutoProcessor.from_pretrained(ckpt)).__name__ == "Qwen3VLProcessor"


def test_same_seed_same_bytes_and_moe_flag(tmp_path: Path, qwen3_5_moe_ckpt: Path) -> None:
    out = tmp_path / "moe"
    assert main(["demo-checkpoint", "--model", "qwen3.5", "--moe", "--out", str(out)]) == 0
    assert (out / "model.safetensors").read_bytes() == (qwen3_5_moe_ckpt / "model.safetensors").read_bytes()
    assert main(["demo-checkpoint", "--model", "qwen3-asr", "--moe", "--out", str(tmp_path / "asr")]) == 2

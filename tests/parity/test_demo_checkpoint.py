"""The demo checkpoint: real layout and ids, deterministic per seed, loads and generates in transformers."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open

from runtime.checkpoint import token_ids as ids
from runtime.checkpoint.demo import build_demo_checkpoint, write_weights
from runtime.checkpoint.demo_config import demo_config
from runtime.checkpoint.tokenizer_files import write_json

EXPECTED_FILES = {
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.json",
    "preprocessor_config.json",
    "video_preprocessor_config.json",
}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def chat_ids(user_ids: list[int]) -> torch.Tensor:
    """`<|im_start|>user\\n ... <|im_end|>\\n<|im_start|>assistant\\n` around `user_ids`, batch of one."""
    layout = [ids.IM_START, ids.USER, ids.NEWLINE, *user_ids, ids.IM_END, ids.NEWLINE,
              ids.IM_START, ids.ASSISTANT, ids.NEWLINE]
    return torch.tensor([layout])


def test_writes_every_file(demo_ckpt: Path) -> None:
    assert EXPECTED_FILES <= {p.name for p in demo_ckpt.iterdir()}


def test_config_has_real_ids_and_contract_dims(demo_ckpt: Path) -> None:
    cfg: dict[str, Any] = json.loads((demo_ckpt / "config.json").read_text())
    assert cfg["model_type"] == "qwen3_omni_moe" and cfg["enable_audio_output"] is True
    text = cfg["thinker_config"]["text_config"]
    assert (text["vocab_size"], text["hidden_size"], text["num_hidden_layers"]) == (152064, 64, 4)
    assert (text["num_attention_heads"], text["num_key_value_heads"], text["head_dim"]) == (4, 2, 16)
    assert (text["num_experts"], text["num_experts_per_tok"], text["moe_intermediate_size"]) == (8, 2, 32)
    assert text["rope_scaling"]["mrope_section"] == [4, 2, 2] and text["rope_theta"] == 1e6
    audio = cfg["thinker_config"]["audio_config"]
    assert audio["n_window"] * 2 * 13 // 100 * (audio["n_window_infer"] // (2 * audio["n_window"])) == 104
    talker = cfg["talker_config"]
    assert talker["text_config"]["vocab_size"] == 3072 and talker["num_code_groups"] == 16
    assert talker["speaker_id"] == {"chelsie": 2301, "ethan": 2302, "aiden": 2303}
    assert (talker["codec_pad_id"], talker["codec_bos_id"], talker["codec_eos_token_id"]) == (2148, 2149, 2150)
    assert cfg["tts_pad_token_id"] == 151671 and cfg["thinker_config"]["audio_token_id"] == 151675
    assert cfg["code2wav_config"]["sliding_window"] == 72


def test_preprocessor_config_matches_release(demo_ckpt: Path) -> None:
    pre = json.loads((demo_ckpt / "preprocessor_config.json").read_text())
    assert pre["image_mean"] == pre["image_std"] == [0.5, 0.5, 0.5]
    assert (pre["min_pixels"], pre["max_pixels"], pre["patch_size"]) == (3136, 12845056, 16)
    assert (pre["temporal_patch_size"], pre["merge_size"]) == (2, 2)
    assert (pre["feature_size"], pre["sampling_rate"], pre["hop_length"], pre["n_fft"]) == (128, 16000, 160, 400)


def test_experts_stored_one_tensor_per_expert(demo_ckpt: Path) -> None:
    with safe_open(str(demo_ckpt / "model.safetensors"), framework="pt") as f:
        names = set(f.keys())
        gate = f.get_tensor("thinker.model.layers.0.mlp.experts.7.gate_proj.weight")
    for proj in ("gate_proj", "up_proj", "down_proj"):
        assert f"thinker.model.layers.3.mlp.experts.7.{proj}.weight" in names
        assert f"talker.model.layers.1.mlp.experts.3.{proj}.weight" in names
    assert tuple(gate.shape) == (32, 64) and gate.dtype == torch.float32
    assert not any("gate_up_proj" in n for n in names)
    assert "thinker.lm_head.weight" in names and "code2wav.code_embedding.weight" in names


def test_same_seed_same_bytes(demo_ckpt: Path, tmp_path: Path) -> None:
    fresh = build_demo_checkpoint(tmp_path / "again", seed=0)
    for name in EXPECTED_FILES:
        assert sha256(fresh / name) == sha256(demo_ckpt / name), name


def test_other_seed_other_weights(demo_ckpt: Path, tmp_path: Path) -> None:
    write_json(tmp_path / "config.json", demo_config())
    write_weights(tmp_path, seed=1)
    assert sha256(tmp_path / "model.safetensors") != sha256(demo_ckpt / "model.safetensors")


def test_thinker_logits_are_not_degenerate(hf_omni: Any) -> None:
    """Greedy parity needs clear winners: top-2 gaps far above fp32 noise (~1e-6) at almost every position."""
    input_ids = torch.randint(0, 151643, (1, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = hf_omni.thinker(input_ids=input_ids).logits[0]
    top2 = logits.topk(2, dim=-1).values
    gaps = top2[:, 0] - top2[:, 1]
    assert logits.std(dim=-1).mean() > 0.5
    assert (gaps > 1e-4).float().mean() > 0.95


def test_text_generate(hf_omni: Any) -> None:
    input_ids = chat_ids([9707, 11, 1879, 0])
    out = hf_omni.generate(input_ids=input_ids, return_audio=False, thinker_max_new_tokens=4,
                           thinker_do_sample=False)
    assert out.shape == (1, input_ids.shape[1] + 4)
    assert torch.equal(out[:, : input_ids.shape[1]], input_ids)


def test_text_and_audio_generate(hf_omni: Any) -> None:
    input_ids = chat_ids([9707, 11, 1879, 0])
    text_ids, wav = hf_omni.generate(
        input_ids=input_ids, attention_mask=torch.ones_like(input_ids), speaker="Chelsie",
        thinker_max_new_tokens=4, thinker_do_sample=False, talker_max_new_tokens=6, talker_do_sample=False,
    )
    assert text_ids.shape[1] > input_ids.shape[1]
    frames = 5  # max_new_tokens - 1: the last talker token gets no residual codes
    assert wav.shape == (1, 1, 1920 * frames - 555)
    # Non-degenerate audio: neither silent nor clamped at +-1.
    assert 0.01 < wav.std() < 0.5 and (wav.abs() >= 0.999).float().mean() < 0.01


def test_audio_in_audio_out_generate(hf_omni: Any) -> None:
    """Audio input + speech output: needs the talker audio_config fix the fixture applies."""
    n_audio = 13  # AuT tokens of 100 mel frames (1 s)
    input_ids = chat_ids([ids.AUDIO_START, *[ids.AUDIO_PAD] * n_audio, ids.AUDIO_END, 9707])
    features = torch.randn(1, 128, 100, generator=torch.Generator().manual_seed(0))
    _, wav = hf_omni.generate(
        input_ids=input_ids, attention_mask=torch.ones_like(input_ids), input_features=features,
        feature_attention_mask=torch.ones(1, 100, dtype=torch.long), thinker_max_new_tokens=3,
        thinker_do_sample=False, talker_max_new_tokens=3, talker_do_sample=False,
    )
    assert wav.shape == (1, 1, 1920 * 2 - 555)


@pytest.mark.parametrize("prefix", ["thinker.", "talker.", "code2wav."])
def test_every_component_present(demo_ckpt: Path, prefix: str) -> None:
    with safe_open(str(demo_ckpt / "model.safetensors"), framework="pt") as f:
        assert any(name.startswith(prefix) for name in f.keys())

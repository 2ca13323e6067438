"""The Qwen3-ASR demo checkpoint: real ids and layout, loads and transcribes in transformers, CLI writes it."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

from gateway.cli.main import main
from runtime.checkpoint.asr import token_ids as ids
from runtime.checkpoint.asr.demo import original_name, write_original_layout

EXPECTED_FILES = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                  "tokenizer_config.json", "chat_template.json", "preprocessor_config.json"}


def clip(seconds: float, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(int(16000 * seconds)) * 0.1).astype(np.float32)


def test_files_and_config(asr_ckpt: Path) -> None:
    assert EXPECTED_FILES <= {p.name for p in asr_ckpt.iterdir()}
    cfg = json.loads((asr_ckpt / "config.json").read_text())
    assert cfg["model_type"] == "qwen3_asr" and cfg["architectures"] == ["Qwen3ASRForConditionalGeneration"]
    assert (cfg["audio_token_id"], cfg["timestamp_token_id"]) == (151676, 151705)
    assert cfg["text_config"]["tie_word_embeddings"] and cfg["text_config"]["vocab_size"] == 151936


def test_tokenizer_ids(asr_ckpt: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(asr_ckpt)
    for text, token_id in (("<|audio_pad|>", ids.AUDIO_PAD), ("<asr_text>", ids.ASR_TEXT),
                           ("<|audio_start|>", 151669), ("<|im_end|>", 151645)):
        assert tok.convert_tokens_to_ids(text) == token_id
    encoded = tok.encode("language English<asr_text>hello")
    assert ids.ASR_TEXT in encoded
    assert "<asr_text>" in tok.decode(encoded, skip_special_tokens=True)


def test_weights_have_hf_layout_and_no_head(asr_ckpt: Path) -> None:
    with safe_open(str(asr_ckpt / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    assert "model.multi_modal_projector.linear_1.weight" in names
    assert "model.language_model.layers.0.self_attn.q_norm.weight" in names
    assert not any(n.startswith("lm_head") for n in names)  # tied to embed_tokens


def test_transcribes_in_transformers(asr_ckpt: Path, hf_asr) -> None:
    from transformers import AutoProcessor

    proc = AutoProcessor.from_pretrained(asr_ckpt)
    inputs = proc.apply_transcription_request(clip(2.0), language="en")
    assert int((inputs["input_ids"] == ids.AUDIO_PAD).sum()) == 26  # 13 tokens a second
    out = hf_asr.generate(**inputs, max_new_tokens=4, do_sample=False)
    assert out.shape[1] == inputs["input_ids"].shape[1] + 4


def test_same_seed_same_weights(tmp_path: Path, asr_ckpt: Path) -> None:
    assert main(["demo-checkpoint", "--model", "qwen3-asr", "--out", str(tmp_path / "a")]) == 0
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (asr_ckpt / "model.safetensors").read_bytes()


def test_original_layout_names(tmp_path: Path, asr_ckpt: Path) -> None:
    out = write_original_layout(asr_ckpt, tmp_path / "orig")
    cfg = json.loads((out / "config.json").read_text())
    assert set(cfg["thinker_config"]) >= {"audio_config", "text_config", "audio_token_id"}
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        names = set(f.keys())
        assert torch.equal(f.get_tensor("thinker.lm_head.weight"), f.get_tensor("thinker.model.embed_tokens.weight"))
    assert {"thinker.audio_tower.proj1.weight", "thinker.audio_tower.proj2.bias"} <= names
    assert original_name("model.language_model.norm.weight") == "thinker.model.norm.weight"
    with pytest.raises(KeyError, match="not a Qwen3-ASR"):
        original_name("talker.model.x")

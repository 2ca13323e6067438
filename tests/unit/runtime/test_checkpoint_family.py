"""Model recognition from config.json: Qwen3-Omni (with or without a talker), Qwen3-ASR in both layouts, Qwen3.5
dense and MoE."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.cli.up import only_stages_of
from runtime.checkpoint.asr.demo import original_config
from runtime.checkpoint.asr.demo_config import demo_config as asr_config
from runtime.checkpoint.demo_config import demo_config as omni_config
from runtime.checkpoint.family import family_of, read_family
from runtime.checkpoint.qwen3_5.demo_config import demo_config as qwen3_5_config
from runtime.config import MeshConfig


def test_omni_with_talker() -> None:
    family = family_of(omni_config())
    assert (family.family, family.stages, family.serves_speech) == ("qwen3-omni", ("vision", "audio", "talker",
                                                                                  "thinker"), True)
    assert (family.lm_prefix, family.head_prefix) == ("thinker.model.", "thinker.lm_head.")


def test_omni_without_audio_output_has_no_talker() -> None:
    cfg = omni_config() | {"enable_audio_output": False}
    assert family_of(cfg).stages == ("vision", "audio", "thinker")
    del cfg["talker_config"]
    assert not family_of(cfg | {"enable_audio_output": True}).serves_speech


def test_asr_hf_layout() -> None:
    family = family_of(asr_config())
    assert (family.family, family.layout, family.stages) == ("qwen3-asr", "hf", ("audio", "thinker"))
    assert (family.lm_prefix, family.head_prefix) == ("model.language_model.", None)
    assert (family.audio_prefix, family.projector_prefix) == ("model.audio_tower.", "model.multi_modal_projector.")
    assert family.thinker["audio_token_id"] == 151676 and not family.serves_vision


def test_asr_original_layout() -> None:
    family = family_of(original_config(asr_config()))
    assert (family.family, family.layout, family.stages) == ("qwen3-asr", "original", ("audio", "thinker"))
    assert (family.lm_prefix, family.audio_prefix, family.projector_prefix) == ("thinker.model.",
                                                                               "thinker.audio_tower.", None)
    assert family.thinker["text_config"]["hidden_size"] == 64


def test_asr_untied_original_reads_its_head() -> None:
    cfg = original_config(asr_config())
    cfg["thinker_config"]["text_config"]["tie_word_embeddings"] = False
    assert family_of(cfg).head_prefix == "thinker.lm_head."


def test_unknown_and_incomplete_configs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="model_type 'llama'.*Qwen3-ASR.*Qwen3.5"):
        family_of({"model_type": "llama", "architectures": ["LlamaForCausalLM"]})
    with pytest.raises(ValueError, match="without text_config"):
        family_of({"model_type": "qwen3_asr"})
    with pytest.raises(FileNotFoundError, match="config.json not found"):
        read_family(tmp_path)


def test_up_starts_only_the_stages_of_the_model(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(asr_config()))
    mesh = only_stages_of(MeshConfig(), tmp_path)
    assert [s for s in ("vision", "audio", "talker", "thinker") if mesh.stage(s).enabled] == ["audio", "thinker"]
    (tmp_path / "config.json").write_text(json.dumps(omni_config()))
    mesh = only_stages_of(MeshConfig(), tmp_path)
    assert all(mesh.stage(s).enabled for s in ("vision", "audio", "talker", "thinker"))


def test_demo_asr_resolves_to_the_cached_asr_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from runtime import model_path

    built: list[Path] = []
    monkeypatch.setenv("OMNIMESH_CACHE", str(tmp_path))
    monkeypatch.setattr("runtime.checkpoint.asr.demo_cache.cached_asr_demo_checkpoint",
                        lambda seed, root: built.append(root) or root / "asr")
    assert model_path.resolve_model("demo-asr") == tmp_path / "demo_ckpt" / "asr"
    with pytest.raises(FileNotFoundError, match="Qwen3.5 checkpoint directory, 'demo', 'demo-asr', 'demo-qwen3.5' "
                                                "or 'demo-qwen3.5-moe'"):
        model_path.resolve_model(str(tmp_path / "nowhere"))


@pytest.mark.parametrize("moe", [False, True])
def test_qwen3_5_serves_vision_and_text(moe: bool) -> None:
    family = family_of(qwen3_5_config(moe))
    assert (family.family, family.layout, family.stages) == ("qwen3.5", "hf", ("vision", "thinker"))
    assert (family.lm_prefix, family.head_prefix, family.vision_prefix) == ("model.language_model.", "lm_head.",
                                                                            "model.visual.")
    assert (family.audio_prefix, family.serves_vision, family.serves_speech) == (None, True, False)
    assert family.thinker["text_config"]["model_type"] == ("qwen3_5_moe_text" if moe else "qwen3_5_text")
    tied = qwen3_5_config(moe) | {"tie_word_embeddings": True}
    assert family_of(tied).head_prefix is None
    by_architecture = {k: v for k, v in qwen3_5_config(moe).items() if k != "model_type"}
    assert family_of(by_architecture).family == "qwen3.5"


def test_qwen3_5_without_its_sub_configs_is_refused() -> None:
    cfg = qwen3_5_config()
    del cfg["vision_config"]
    with pytest.raises(ValueError, match="qwen3_5 config without vision_config"):
        family_of(cfg)
    with pytest.raises(ValueError, match="without text_config / vision_config"):
        family_of({"model_type": "qwen3_5_moe"})


def test_up_starts_only_vision_and_thinker_for_qwen3_5(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(qwen3_5_config(moe=True)))
    mesh = only_stages_of(MeshConfig(), tmp_path)
    assert [s for s in ("vision", "audio", "talker", "thinker") if mesh.stage(s).enabled] == ["vision", "thinker"]


def test_audio_stage_refuses_a_qwen3_5_checkpoint(tmp_path: Path) -> None:
    from services.audio.model.encoder import load_audio_tensors

    (tmp_path / "config.json").write_text(json.dumps(qwen3_5_config()))
    with pytest.raises(ValueError, match="holds qwen3.5, which has no audio encoder.*needs vision, thinker"):
        load_audio_tensors(tmp_path, "cpu", None)


@pytest.mark.parametrize("name,moe", [("demo-qwen3.5", False), ("demo-qwen3.5-moe", True)])
def test_demo_qwen3_5_resolves_to_its_cached_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str,
                                                        moe: bool) -> None:
    from runtime import model_path

    monkeypatch.setenv("OMNIMESH_CACHE", str(tmp_path))
    monkeypatch.setattr("runtime.checkpoint.qwen3_5.demo_cache.cached_qwen3_5_demo_checkpoint",
                        lambda seed, moe, root: root / f"seed{seed}-moe{moe}")
    assert model_path.resolve_model(name) == tmp_path / "demo_ckpt" / f"seed0-moe{moe}"

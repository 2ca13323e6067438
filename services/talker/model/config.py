"""The talker stage's model dimensions and token ids, read from an HF-format checkpoint's `config.json`."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.errors import InvalidArgument

# transformers' class default when a config names no rope theta (the released checkpoint always names one).
DEFAULT_ROPE_THETA = 10_000.0


@dataclass(frozen=True)
class TalkerLMConfig:
    """The Talker MoE decoder (`talker.model`, `talker.codec_head`, the two projections)."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    mrope_section: tuple[int, int, int]
    num_experts: int
    num_experts_per_tok: int
    moe_intermediate_size: int
    shared_expert_intermediate_size: int
    norm_topk_prob: bool
    projection_size: int  # width of text_projection / hidden_projection (`text_config.intermediate_size`)
    thinker_hidden_size: int

    def __post_init__(self) -> None:
        if sum(self.mrope_section) * 2 != self.head_dim:
            raise ValueError(
                f"talker mrope_section={self.mrope_section} sums to {sum(self.mrope_section)}; it must be "
                f"head_dim/2 = {self.head_dim // 2}: fix the checkpoint's rope_parameters"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"talker num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}")


@dataclass(frozen=True)
class CodePredictorConfig:
    """The dense decoder that predicts the residual codebooks 1..G-1 of a frame (`talker.code_predictor`)."""

    vocab_size: int  # codebook size
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_theta: float
    num_code_groups: int


@dataclass(frozen=True)
class Code2WavConfig:
    """The causal codec decoder (`code2wav`): codes (G, T) to 24 kHz samples."""

    codebook_size: int
    num_quantizers: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_theta: float
    sliding_window: int
    attention_bias: bool
    upsampling_ratios: tuple[int, ...]
    upsample_rates: tuple[int, ...]
    decoder_dim: int

    @property
    def samples_per_frame(self) -> int:
        total = 1
        for factor in self.upsampling_ratios + self.upsample_rates:
            total *= factor
        return total


@dataclass(frozen=True)
class TalkerTokens:
    """Thinker-vocabulary and codec-vocabulary ids the talker's prompt and loop use."""

    im_start: int
    user: int
    assistant: int
    tts_pad: int
    tts_bos: int
    tts_eos: int
    audio_pad: int
    image_pad: int
    video_pad: int
    vision_start: int
    audio_start: int
    codec_pad: int
    codec_bos: int
    codec_eos: int
    codec_nothink: int
    codec_think_bos: int
    codec_think_eos: int


@dataclass(frozen=True)
class TalkerConfig:
    """Everything the talker stage needs from `config.json`."""

    lm: TalkerLMConfig
    code_predictor: CodePredictorConfig
    code2wav: Code2WavConfig
    tokens: TalkerTokens
    speakers: dict[str, int]  # lower-case voice name -> codec id
    accept_hidden_layer: int
    spatial_merge_size: int
    position_id_per_seconds: float
    thinker_eos: int  # `<|im_end|>`: the thinker's default end of turn

    def __post_init__(self) -> None:
        if self.code_predictor.num_code_groups != self.code2wav.num_quantizers:
            raise ValueError(
                f"code_predictor num_code_groups={self.code_predictor.num_code_groups} differs from code2wav "
                f"num_quantizers={self.code2wav.num_quantizers}; the checkpoint's two configs must agree"
            )
        if not self.speakers:
            raise ValueError("talker_config.speaker_id is empty; the checkpoint must name at least one voice")

    @property
    def num_code_groups(self) -> int:
        return self.code_predictor.num_code_groups

    def speaker_codec_id(self, voice: str) -> int:
        """The codec id of a voice (case-insensitive); unknown voices are INVALID_ARGUMENT naming the known ones."""
        codec_id = self.speakers.get(voice.lower())
        if codec_id is None:
            known = ", ".join(sorted(self.speakers))
            raise InvalidArgument("voice", f"unknown voice {voice!r}; this model has: {known}")
        return codec_id


def _rope(section: dict[str, Any]) -> tuple[float, tuple[int, ...] | None]:
    """(theta, mrope_section) from transformers-5 `rope_parameters` or the older `rope_theta` + `rope_scaling`."""
    params = section.get("rope_parameters") or {}
    scaling = section.get("rope_scaling") or {}
    theta = params.get("rope_theta", section.get("rope_theta", DEFAULT_ROPE_THETA))
    mrope = params.get("mrope_section", scaling.get("mrope_section"))
    return float(theta), (tuple(int(x) for x in mrope) if mrope is not None else None)


def _head_dim(section: dict[str, Any]) -> int:
    return int(section.get("head_dim") or section["hidden_size"] // section["num_attention_heads"])


def parse_talker_lm(talker: dict[str, Any]) -> TalkerLMConfig:
    text = talker["text_config"]
    theta, mrope = _rope(text)
    return TalkerLMConfig(
        vocab_size=int(text["vocab_size"]),
        hidden_size=int(text["hidden_size"]),
        num_layers=int(text["num_hidden_layers"]),
        num_heads=int(text["num_attention_heads"]),
        num_kv_heads=int(text.get("num_key_value_heads") or text["num_attention_heads"]),
        head_dim=_head_dim(text),
        rms_norm_eps=float(text.get("rms_norm_eps", 1e-6)),
        rope_theta=theta,
        mrope_section=tuple(mrope or (24, 20, 20)),  # type: ignore[arg-type]
        num_experts=int(text.get("num_experts", text.get("num_local_experts", 0))),
        num_experts_per_tok=int(text["num_experts_per_tok"]),
        moe_intermediate_size=int(text["moe_intermediate_size"]),
        shared_expert_intermediate_size=int(text["shared_expert_intermediate_size"]),
        norm_topk_prob=bool(text.get("norm_topk_prob", False)),
        projection_size=int(text["intermediate_size"]),
        thinker_hidden_size=int(talker["thinker_hidden_size"]),
    )


def parse_code_predictor(talker: dict[str, Any]) -> CodePredictorConfig:
    cp = talker["code_predictor_config"]
    theta, _ = _rope(cp)
    return CodePredictorConfig(
        vocab_size=int(cp["vocab_size"]),
        hidden_size=int(cp["hidden_size"]),
        num_layers=int(cp["num_hidden_layers"]),
        num_heads=int(cp["num_attention_heads"]),
        num_kv_heads=int(cp.get("num_key_value_heads") or cp["num_attention_heads"]),
        head_dim=_head_dim(cp),
        intermediate_size=int(cp["intermediate_size"]),
        rms_norm_eps=float(cp.get("rms_norm_eps", 1e-6)),
        rope_theta=theta,
        num_code_groups=int(cp.get("num_code_groups", talker.get("num_code_groups"))),
    )


def parse_code2wav(c2w: dict[str, Any]) -> Code2WavConfig:
    theta, _ = _rope(c2w)
    return Code2WavConfig(
        codebook_size=int(c2w["codebook_size"]),
        num_quantizers=int(c2w["num_quantizers"]),
        hidden_size=int(c2w["hidden_size"]),
        num_layers=int(c2w["num_hidden_layers"]),
        num_heads=int(c2w["num_attention_heads"]),
        num_kv_heads=int(c2w.get("num_key_value_heads") or c2w["num_attention_heads"]),
        head_dim=_head_dim(c2w),
        intermediate_size=int(c2w["intermediate_size"]),
        rms_norm_eps=float(c2w.get("rms_norm_eps", 1e-5)),
        rope_theta=theta,
        sliding_window=int(c2w.get("sliding_window", 72)),
        attention_bias=bool(c2w.get("attention_bias", False)),
        upsampling_ratios=tuple(int(x) for x in c2w.get("upsampling_ratios", (2, 2))),
        upsample_rates=tuple(int(x) for x in c2w.get("upsample_rates", (8, 5, 4, 3))),
        decoder_dim=int(c2w.get("decoder_dim", 1536)),
    )


def parse_talker_config(cfg: dict[str, Any]) -> TalkerConfig:
    """The talker stage's view of a whole Qwen3-Omni `config.json` dict."""
    if "talker_config" not in cfg or "code2wav_config" not in cfg:
        raise ValueError("config.json has no talker_config/code2wav_config: this checkpoint cannot speak")
    talker = cfg["talker_config"]
    thinker = cfg.get("thinker_config", {})
    tokens = TalkerTokens(
        im_start=int(cfg.get("im_start_token_id", 151644)),
        user=int(cfg.get("user_token_id", 872)),
        assistant=int(cfg.get("assistant_token_id", 77091)),
        tts_pad=int(cfg.get("tts_pad_token_id", 151671)),
        tts_bos=int(cfg.get("tts_bos_token_id", 151672)),
        tts_eos=int(cfg.get("tts_eos_token_id", 151673)),
        audio_pad=int(talker.get("audio_token_id", thinker.get("audio_token_id", 151675))),
        image_pad=int(talker.get("image_token_id", thinker.get("image_token_id", 151655))),
        video_pad=int(talker.get("video_token_id", thinker.get("video_token_id", 151656))),
        vision_start=int(talker.get("vision_start_token_id", thinker.get("vision_start_token_id", 151652))),
        audio_start=int(talker.get("audio_start_token_id", thinker.get("audio_start_token_id", 151669))),
        codec_pad=int(talker["codec_pad_id"]),
        codec_bos=int(talker["codec_bos_id"]),
        codec_eos=int(talker["codec_eos_token_id"]),
        codec_nothink=int(talker["codec_nothink_id"]),
        codec_think_bos=int(talker["codec_think_bos_id"]),
        codec_think_eos=int(talker["codec_think_eos_id"]),
    )
    return TalkerConfig(
        lm=parse_talker_lm(talker),
        code_predictor=parse_code_predictor(talker),
        code2wav=parse_code2wav(cfg["code2wav_config"]),
        tokens=tokens,
        speakers={str(k).lower(): int(v) for k, v in (talker.get("speaker_id") or {}).items()},
        accept_hidden_layer=int(talker["accept_hidden_layer"]),
        spatial_merge_size=int(talker.get("spatial_merge_size", 2)),
        position_id_per_seconds=float(talker.get("position_id_per_seconds", 13)),
        thinker_eos=int(cfg.get("im_end_token_id", 151645)),
    )


def load_talker_config(ckpt_dir: Path) -> TalkerConfig:
    return parse_talker_config(json.loads((Path(ckpt_dir) / "config.json").read_text()))

"""The Thinker LM's dimensions and special token ids, read from an HF Qwen3-Omni or Qwen3-ASR `config.json`."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.checkpoint.family import family_of
from services.thinker.model.hybrid_config import HybridConfig, is_hybrid_text_config, parse_hybrid

# Real Qwen3-Omni ids, used only when a config.json leaves an id out (the released configs name every one).
_DEFAULT_IDS = {
    "im_start_token_id": 151644, "im_end_token_id": 151645, "system_token_id": 8948, "user_token_id": 872,
    "assistant_token_id": 77091, "tts_pad_token_id": 151671, "tts_bos_token_id": 151672, "tts_eos_token_id": 151673,
    "vision_start_token_id": 151652, "vision_end_token_id": 151653, "image_token_id": 151655,
    "video_token_id": 151656, "audio_start_token_id": 151669, "audio_end_token_id": 151670,
    "audio_token_id": 151675,
}
_TOP_LEVEL_IDS = ("im_start_token_id", "im_end_token_id", "system_token_id", "assistant_token_id",
                  "tts_pad_token_id", "tts_bos_token_id", "tts_eos_token_id")


@dataclass(frozen=True)
class ThinkerConfig:
    """Everything the Thinker LM, its M-RoPE layout and its engine need; nothing of the encoders but their outputs."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int  # dense MLP width, used only by layers that are not MoE
    moe_intermediate_size: int
    num_experts: int
    num_experts_per_tok: int
    norm_topk_prob: bool
    rms_norm_eps: float
    rope_theta: float
    mrope_section: tuple[int, int, int]  # frequencies per (t, h, w) axis; sums to head_dim // 2
    max_position_embeddings: int
    decoder_sparse_step: int
    mlp_only_layers: tuple[int, ...]
    attention_bias: bool
    # special token ids
    im_start_token_id: int
    im_end_token_id: int
    system_token_id: int
    user_token_id: int
    assistant_token_id: int
    tts_pad_token_id: int
    tts_bos_token_id: int
    tts_eos_token_id: int
    vision_start_token_id: int
    vision_end_token_id: int
    image_token_id: int
    video_token_id: int
    audio_start_token_id: int
    audio_end_token_id: int
    audio_token_id: int
    # multimodal layout
    position_id_per_seconds: int  # M-RoPE temporal positions per second of video
    spatial_merge_size: int  # vision patches merged per LLM token along h and w
    audio_n_window: int  # AuT chunk is 2 * n_window mel frames; fixes audio tokens per clip
    num_deepstack: int  # vision deepstack features, added after decoder layers 0 .. num_deepstack-1
    accept_hidden_layer: int | None  # decoder layer (1-based) whose output the talker consumes; None without a talker
    tie_word_embeddings: bool = False  # Qwen3-ASR: the LM head is embed_tokens
    # Qwen3.5: Gated-DeltaNet layers beside gated attention (None: every layer is attention)
    hybrid: HybridConfig | None = None
    rotary_dim: int = 0  # leading dims of each head that RoPE rotates (partial rotary); 0: all of head_dim
    shared_expert_intermediate_size: int = 0  # Qwen3.5 MoE: a sigmoid-gated shared expert beside the routed ones

    def __post_init__(self) -> None:
        if not 0 <= self.rotary_dim <= self.head_dim or self.rotary_dim % 2:
            raise ValueError(f"rotary_dim {self.rotary_dim} must be even and in 0..head_dim ({self.head_dim}); "
                             "check partial_rotary_factor")
        # Qwen3.5 (like transformers) lets mrope_section overrun the rotary frequencies: the extra entries go unused
        if self.hybrid is None and sum(self.mrope_section) != self.rope_dim // 2:
            raise ValueError(
                f"mrope_section {self.mrope_section} sums to {sum(self.mrope_section)}; "
                f"it must sum to head_dim // 2 = {self.head_dim // 2}"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}; "
                "grouped-query attention needs whole groups"
            )
        if self.num_experts and not 0 < self.num_experts_per_tok <= self.num_experts:
            raise ValueError(
                f"num_experts_per_tok {self.num_experts_per_tok} must be in 1..num_experts ({self.num_experts})"
            )
        if self.accept_hidden_layer is not None and not 1 <= self.accept_hidden_layer <= self.num_layers:
            raise ValueError(
                f"accept_hidden_layer {self.accept_hidden_layer} must be in 1..num_layers ({self.num_layers})"
            )
        if self.num_deepstack > self.num_layers:
            raise ValueError(f"num_deepstack {self.num_deepstack} exceeds num_layers {self.num_layers}")

    @property
    def rope_dim(self) -> int:
        """Dims of each head that RoPE rotates."""
        return self.rotary_dim or self.head_dim

    @property
    def kv_layers(self) -> tuple[int, ...]:
        """Decoder layers that keep paged KV: all of them, or a hybrid model's full-attention layers."""
        return self.hybrid.full_layers if self.hybrid is not None else tuple(range(self.num_layers))

    @property
    def num_query_groups(self) -> int:
        return self.num_heads // self.num_kv_heads

    def is_moe_layer(self, layer: int) -> bool:
        """Whether decoder layer `layer` (0-based) routes through experts rather than a dense MLP."""
        return (
            layer not in self.mlp_only_layers
            and self.num_experts > 0
            and (layer + 1) % self.decoder_sparse_step == 0
        )

    @classmethod
    def from_checkpoint(cls, ckpt_dir: Path | str) -> ThinkerConfig:
        """Read `ckpt_dir/config.json` (Qwen3-Omni, Qwen3-ASR in either layout, or a bare thinker config)."""
        path = Path(ckpt_dir) / "config.json"
        if not path.exists():
            raise FileNotFoundError(f"{path} not found; ckpt_dir must be an HF Qwen3-Omni checkpoint directory")
        return cls.from_dict(json.loads(path.read_text()))

    @classmethod
    def from_dict(cls, root: dict[str, Any]) -> ThinkerConfig:
        """A dense decoder (Qwen3-ASR's Qwen3) has no experts: every layer takes the dense MLP."""
        asr = root.get("model_type") == "qwen3_asr"
        thinker = family_of(root).thinker if asr else root.get("thinker_config", root)
        text = thinker.get("text_config")
        if text is None:
            raise ValueError("config.json has no thinker_config.text_config; is it a Qwen3-Omni checkpoint?")
        vision = thinker.get("vision_config") or {}
        audio = thinker.get("audio_config") or {}
        talker = root.get("talker_config")
        ids = {name: _token_id(name, root, thinker) for name in _DEFAULT_IDS}
        num_layers = text["num_hidden_layers"]
        hybrid = parse_hybrid(text) if is_hybrid_text_config(text) else None
        head_dim = text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]
        return cls(
            vocab_size=text["vocab_size"],
            hidden_size=text["hidden_size"],
            num_layers=num_layers,
            num_heads=text["num_attention_heads"],
            num_kv_heads=text["num_key_value_heads"],
            head_dim=head_dim,
            intermediate_size=text.get("intermediate_size", 0),
            moe_intermediate_size=text.get("moe_intermediate_size", 0),
            num_experts=text.get("num_experts", 0),
            num_experts_per_tok=text.get("num_experts_per_tok", 0),
            norm_topk_prob=bool(text.get("norm_topk_prob", True)),
            rms_norm_eps=float(text.get("rms_norm_eps", 1e-6)),
            rope_theta=_rope_theta(text),
            mrope_section=_mrope_section(text, asr, hybrid is not None),
            max_position_embeddings=text.get("max_position_embeddings", 32768),
            decoder_sparse_step=text.get("decoder_sparse_step", 1),
            mlp_only_layers=tuple(text.get("mlp_only_layers") or ()),
            attention_bias=bool(text.get("attention_bias", False)),
            **ids,
            position_id_per_seconds=thinker.get("position_id_per_seconds", 13),
            spatial_merge_size=vision.get("spatial_merge_size", 2),
            audio_n_window=audio.get("n_window", 50),
            # Qwen3.5's tower has no deepstack; an Omni config that omits the field means the released three
            num_deepstack=0 if asr or hybrid else len(vision.get("deepstack_visual_indexes", (8, 16, 24))),
            accept_hidden_layer=talker.get("accept_hidden_layer") if talker else None,
            tie_word_embeddings=bool(text.get("tie_word_embeddings", thinker.get("tie_word_embeddings", False))),
            hybrid=hybrid,
            rotary_dim=_rotary_dim(text, head_dim) if hybrid else 0,
            shared_expert_intermediate_size=text.get("shared_expert_intermediate_size", 0) if hybrid else 0,
        )


def _token_id(name: str, root: dict[str, Any], thinker: dict[str, Any]) -> int:
    """Thinker ids live in thinker_config, chat-role and TTS ids at the top level; either may carry either."""
    first, second = (root, thinker) if name in _TOP_LEVEL_IDS else (thinker, root)
    for source in (first, second):
        if source.get(name) is not None:
            return int(source[name])
    return _DEFAULT_IDS[name]


def _rope_params(text: dict[str, Any]) -> dict[str, Any]:
    """transformers 5 writes `rope_parameters`; the released checkpoints carry 4.x `rope_scaling` + `rope_theta`."""
    return text.get("rope_parameters") or text.get("rope_scaling") or {}


def _rope_theta(text: dict[str, Any]) -> float:
    params = _rope_params(text)
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type != "default":
        raise ValueError(f"rope_type {rope_type!r} is not supported; the Thinker uses 'default' M-RoPE")
    return float(params.get("rope_theta", text.get("rope_theta", 1e6)))


def _rotary_dim(text: dict[str, Any], head_dim: int) -> int:
    """Qwen3.5 rotates a quarter of each head unless `partial_rotary_factor` says otherwise."""
    factor = float(_rope_params(text).get("partial_rotary_factor", text.get("partial_rotary_factor", 0.25)))
    if not 0 < factor <= 1:
        raise ValueError(f"text_config.rope_parameters.partial_rotary_factor {factor} must be in (0, 1]")
    return int(head_dim * factor)


def _mrope_section(text: dict[str, Any], one_axis: bool, hybrid: bool = False) -> tuple[int, int, int]:
    """`one_axis` (1-D RoPE): every frequency reads the t row; the rows are equal for text and audio, so this is
    plain RoPE. Qwen3.5 (`hybrid`) defaults to its released [11, 11, 10]."""
    if one_axis and "mrope_section" not in _rope_params(text):
        head_dim = text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]
        return (head_dim // 2, 0, 0)
    section = _rope_params(text).get("mrope_section", [11, 11, 10] if hybrid else [24, 20, 20])
    if len(section) != 3:
        raise ValueError(f"mrope_section {section} must have 3 entries (t, h, w)")
    return (int(section[0]), int(section[1]), int(section[2]))

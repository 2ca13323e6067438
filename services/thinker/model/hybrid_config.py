"""Qwen3.5's hybrid decoder settings (Gated-DeltaNet layers beside gated full attention), read from its
`text_config`, with everything this engine cannot serve refused at load, naming the field."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

LINEAR, FULL = "linear_attention", "full_attention"
HYBRID_MODEL_TYPES = ("qwen3_5_text", "qwen3_5_moe_text")
# fla's gated-delta kernels keep one head's [Dk, Dv] state in a tile of at most 256 along each side
MAX_LINEAR_HEAD_DIM = 256


@dataclass(frozen=True)
class HybridConfig:
    """What the Gated-DeltaNet layers and their per-sequence state need; attention layers use ThinkerConfig's heads."""

    layer_types: tuple[str, ...]  # LINEAR or FULL per decoder layer
    conv_kernel: int  # depthwise causal conv width over the q/k/v channels
    num_key_heads: int
    num_value_heads: int  # a multiple of num_key_heads: each key head serves that many value heads
    key_head_dim: int
    value_head_dim: int

    @property
    def key_dim(self) -> int:
        return self.num_key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.num_value_heads * self.value_head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the short conv: q, k and v side by side."""
        return 2 * self.key_dim + self.value_dim

    @property
    def linear_layers(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.layer_types) if t == LINEAR)

    @property
    def full_layers(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.layer_types) if t == FULL)


def is_hybrid_text_config(text: dict[str, Any]) -> bool:
    return text.get("model_type") in HYBRID_MODEL_TYPES or "linear_num_value_heads" in text


def parse_hybrid(text: dict[str, Any]) -> HybridConfig:
    """`layer_types` as written, else derived from `full_attention_interval` (every n-th layer full) as transformers
    does. Raises ValueError naming the first field the engine cannot serve."""
    num_layers = int(text["num_hidden_layers"])
    layer_types = text.get("layer_types")
    if layer_types is None:
        interval = int(text.get("full_attention_interval", 4))
        if interval < 1:
            raise ValueError(f"text_config.full_attention_interval {interval} must be >= 1")
        layer_types = [FULL if (i + 1) % interval == 0 else LINEAR for i in range(num_layers)]
    cfg = HybridConfig(
        layer_types=tuple(layer_types),
        conv_kernel=int(text.get("linear_conv_kernel_dim", 4)),
        num_key_heads=int(text.get("linear_num_key_heads", 16)),
        num_value_heads=int(text.get("linear_num_value_heads", 32)),
        key_head_dim=int(text.get("linear_key_head_dim", 128)),
        value_head_dim=int(text.get("linear_value_head_dim", 128)),
    )
    _check(cfg, num_layers, text)
    return cfg


def _check(cfg: HybridConfig, num_layers: int, text: dict[str, Any]) -> None:
    unknown = sorted(set(cfg.layer_types) - {LINEAR, FULL})
    if unknown:
        raise ValueError(f"text_config.layer_types has {unknown}; this engine serves only {LINEAR!r} and {FULL!r}")
    if len(cfg.layer_types) != num_layers:
        raise ValueError(f"text_config.layer_types has {len(cfg.layer_types)} entries; num_hidden_layers is "
                         f"{num_layers}")
    if not cfg.full_layers:
        raise ValueError("text_config.layer_types has no 'full_attention' layer; the engine pages KV for attention "
                         "layers and needs at least one")
    if cfg.conv_kernel < 2:
        raise ValueError(f"text_config.linear_conv_kernel_dim {cfg.conv_kernel} must be >= 2 (the state keeps "
                         "kernel - 1 columns)")
    for name in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim"):
        if int(text.get(name, 1)) < 1:
            raise ValueError(f"text_config.{name} {text[name]} must be >= 1")
    if cfg.num_value_heads % cfg.num_key_heads:
        raise ValueError(f"text_config.linear_num_value_heads {cfg.num_value_heads} is not a multiple of "
                         f"linear_num_key_heads {cfg.num_key_heads}; each key head must serve whole value heads")
    for name, dim in (("linear_key_head_dim", cfg.key_head_dim), ("linear_value_head_dim", cfg.value_head_dim)):
        if dim > MAX_LINEAR_HEAD_DIM:
            raise ValueError(f"text_config.{name} {dim} exceeds {MAX_LINEAR_HEAD_DIM}, the largest head the "
                             "gated-delta kernels hold")
    act = text.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"text_config.hidden_act {act!r} is not served; Qwen3.5's MLP, conv and gate use 'silu'")

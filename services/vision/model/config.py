"""`VisionTowerConfig`: the vision tower's dimensions, read from the checkpoint's `config.json`."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.checkpoint.family import read_family

# Activations the block MLP may name in `hidden_act`.
SUPPORTED_ACTIVATIONS = ("gelu_pytorch_tanh", "gelu")


@dataclass(frozen=True)
class VisionTowerConfig:
    """Dimensions of `thinker.visual`.

    Defaults are the reference config class's defaults, not the released checkpoint's values, because a
    `config.json` written with only the non-default fields must be read the same way the reference reads it
    (the released checkpoint sets `out_hidden_size` to 2048, for example).
    """

    depth: int = 27
    hidden_size: int = 1152
    intermediate_size: int = 4304
    num_heads: int = 16
    in_channels: int = 3
    patch_size: int = 16
    temporal_patch_size: int = 2
    spatial_merge_size: int = 2
    out_hidden_size: int = 3584
    num_position_embeddings: int = 2304
    deepstack_visual_indexes: tuple[int, ...] = (8, 16, 24)
    hidden_act: str = "gelu_pytorch_tanh"
    rope_theta: float = 10000.0
    layer_norm_eps: float = 1e-6

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size={self.hidden_size} is not divisible by num_heads={self.num_heads}; "
                "pick a head count that divides the width"
            )
        if self.head_dim % 4:
            raise ValueError(f"head_dim={self.head_dim} must be a multiple of 4 for the 2-D rotary; change num_heads")
        side = round(self.num_position_embeddings**0.5)
        if side * side != self.num_position_embeddings:
            raise ValueError(
                f"num_position_embeddings={self.num_position_embeddings} is not a perfect square; "
                "the learned position table is a square grid"
            )
        bad = [i for i in self.deepstack_visual_indexes if not 0 <= i < self.depth]
        if bad:
            raise ValueError(
                f"deepstack_visual_indexes={list(self.deepstack_visual_indexes)} has {bad} outside [0, {self.depth})"
            )
        if self.hidden_act not in SUPPORTED_ACTIVATIONS:
            raise ValueError(f"hidden_act={self.hidden_act!r} is not supported; use one of {SUPPORTED_ACTIVATIONS}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def position_grid_side(self) -> int:
        """Side of the square learned position table (48 for the released model)."""
        return round(self.num_position_embeddings**0.5)

    @property
    def patch_dim(self) -> int:
        """Length of one flattened patch row: C·T·P·P (1536 for the released model)."""
        return self.in_channels * self.temporal_patch_size * self.patch_size * self.patch_size

    @property
    def merged_dim(self) -> int:
        """Width a merger sees after folding a merge block into one row (4608 for the released model)."""
        return self.hidden_size * self.spatial_merge_size**2

    @classmethod
    def from_dict(cls, raw: dict[str, Any], deepstack: tuple[int, ...] | None = None) -> VisionTowerConfig:
        """From the `vision_config` section of `config.json`; absent keys take the reference defaults.

        `deepstack`: the layers the model's config class fixes, whatever the section says (Qwen3.5's has none).
        """
        defaults = cls()
        rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
        if deepstack is None:
            deepstack = raw.get("deepstack_visual_indexes", defaults.deepstack_visual_indexes)
        theta = rope.get("rope_theta", raw.get("rope_theta", defaults.rope_theta))
        return cls(
            depth=int(raw.get("depth", defaults.depth)),
            hidden_size=int(raw.get("hidden_size", defaults.hidden_size)),
            intermediate_size=int(raw.get("intermediate_size", defaults.intermediate_size)),
            num_heads=int(raw.get("num_heads", defaults.num_heads)),
            in_channels=int(raw.get("in_channels", defaults.in_channels)),
            patch_size=int(raw.get("patch_size", defaults.patch_size)),
            temporal_patch_size=int(raw.get("temporal_patch_size", defaults.temporal_patch_size)),
            spatial_merge_size=int(raw.get("spatial_merge_size", defaults.spatial_merge_size)),
            out_hidden_size=int(raw.get("out_hidden_size", defaults.out_hidden_size)),
            num_position_embeddings=int(raw.get("num_position_embeddings", defaults.num_position_embeddings)),
            deepstack_visual_indexes=tuple(int(i) for i in deepstack),
            hidden_act=str(raw.get("hidden_act", defaults.hidden_act)),
            rope_theta=float(theta),
        )

    @classmethod
    def from_checkpoint(cls, ckpt_dir: Path) -> VisionTowerConfig:
        """From `<ckpt_dir>/config.json`: `thinker_config.vision_config` (Qwen3-Omni) or `vision_config` (Qwen3.5)."""
        family = read_family(ckpt_dir)
        vision = family.thinker.get("vision_config")
        if vision is None or family.vision_prefix is None:
            raise ValueError(f"{Path(ckpt_dir) / 'config.json'} has no vision_config: a {family.family} checkpoint "
                             f"without a vision tower; serve it without the vision stage (it needs "
                             f"{', '.join(family.stages)})")
        # Qwen3.5's vision config class deletes deepstack_visual_indexes: its tower has no deepstack mergers
        return cls.from_dict(vision, deepstack=() if family.family == "qwen3.5" else None)

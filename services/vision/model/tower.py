"""`VisionTower`: Qwen3-Omni's `thinker.visual` or Qwen3.5's `model.visual` (the same ViT without deepstack),
batching many images and videos into one forward."""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from runtime.checkpoint.family import read_family
from runtime.weights import load_component
from services.vision.model.attention import select_attention, segment_sdpa
from services.vision.model.config import VisionTowerConfig
from services.vision.model.fp8_linear import Fp8Linear, check_linear_dtype
from services.vision.model.grid import Grid
from services.vision.model.layers import PatchEmbed, PatchMerger, VisionBlock, add_norm, reads_fp8_rows
from services.vision.model.plan import VisionPlan, build_plan
from services.vision.model.rotary import inv_frequencies, rotary_cos_sin

# Qwen3-VL-style checkpoints (Qwen3.5) name the final merger's layers as their own classes do; ours keep Omni's.
MERGER_NAMES = {"merger.norm.": "merger.ln_q.", "merger.linear_fc1.": "merger.mlp.0.",
                "merger.linear_fc2.": "merger.mlp.2."}
PLAN_CACHE_SIZE = 64


class VisionOutput(NamedTuple):
    """Merged embeddings and one tensor per deepstack merger, all [N/4, out] rows in item order."""

    merged: torch.Tensor
    deepstack: list[torch.Tensor]

    def split(self, grids: Sequence[Grid], merge_size: int) -> list[VisionOutput]:
        """One `VisionOutput` per item; sizes come from the grids, so nothing is read back from the device."""
        sizes = [g.num_tokens(merge_size) for g in grids]
        merged = torch.split(self.merged, sizes)
        deepstack = [torch.split(d, sizes) for d in self.deepstack]
        return [VisionOutput(merged[i], [d[i] for d in deepstack]) for i in range(len(grids))]


def _our_name(name: str) -> str:
    for theirs, ours in MERGER_NAMES.items():
        if name.startswith(theirs):
            return ours + name[len(theirs):]
    return name


class VisionTower(nn.Module):
    """Patch embed (one GEMM) + interpolated learned positions + 2-D rotary + blocks + deepstack and final mergers."""

    def __init__(self, cfg: VisionTowerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.patch_embed = PatchEmbed(cfg)
        self.pos_embed = nn.Embedding(cfg.num_position_embeddings, cfg.hidden_size)
        self.blocks = nn.ModuleList([VisionBlock(cfg) for _ in range(cfg.depth)])
        self.merger_list = nn.ModuleList([PatchMerger(cfg, norm_after_fold=True) for _ in cfg.deepstack_visual_indexes])
        self.merger = PatchMerger(cfg, norm_after_fold=False)
        self.attention_backend = "segments"
        self.linear_dtype = "native"
        self._attend = segment_sdpa
        self._inv_freq = inv_frequencies(cfg.head_dim, cfg.rope_theta, torch.device("cpu"))
        self._plans: OrderedDict[tuple[Grid, ...], VisionPlan] = OrderedDict()

    @classmethod
    def load(
        cls, ckpt_dir: Path, device: torch.device | str, dtype: torch.dtype, attention: str = "auto",
        linear_dtype: str = "native",
    ) -> VisionTower:
        """Reads only the vision tower's tensors (`thinker.visual.*` or `model.visual.*`) and its config."""
        check_linear_dtype(linear_dtype, torch.device(device), dtype)  # before reading any weights
        cfg = VisionTowerConfig.from_checkpoint(Path(ckpt_dir))
        prefix = read_family(ckpt_dir).vision_prefix
        assert prefix is not None  # from_checkpoint refused a model without a tower
        state = load_component(Path(ckpt_dir), prefix, device=device, dtype=dtype)
        return cls.from_state_dict(cfg, {_our_name(name): t for name, t in state.items()}, device, dtype, attention,
                                   linear_dtype)

    @classmethod
    def from_state_dict(
        cls,
        cfg: VisionTowerConfig,
        state: Mapping[str, torch.Tensor],
        device: torch.device | str,
        dtype: torch.dtype,
        attention: str = "auto",
        linear_dtype: str = "native",
    ) -> VisionTower:
        """From tensors named as in the checkpoint without the `thinker.visual.` prefix (Conv3d kernel included).

        linear_dtype: "native" runs every linear in `dtype`; "fp8" quantizes the blocks' qkv, proj, fc1 and fc2 to
        float8_e4m3fn once here (CUDA with compute capability >= 8.9, bfloat16 only; anything else raises).
        """
        device = torch.device(device)
        check_linear_dtype(linear_dtype, device, dtype)  # before moving any tensor
        tensors = {name: t.to(device=device, dtype=dtype) for name, t in state.items()}
        kernel = tensors["patch_embed.proj.weight"]
        tensors["patch_embed.proj.weight"] = kernel.reshape(kernel.shape[0], -1)  # [hidden, C·T·P·P]
        with torch.device("meta"):
            tower = cls(cfg)
        tower.load_state_dict(tensors, strict=True, assign=True)
        tower.requires_grad_(False).eval()
        tower._inv_freq = inv_frequencies(cfg.head_dim, cfg.rope_theta, device)
        tower.use_attention(attention)
        if linear_dtype == "fp8":
            tower.quantize_block_linears()
        return tower

    def quantize_block_linears(self) -> None:
        """Swaps every block's qkv, proj, fc1 and fc2 for an `Fp8Linear` quantized from its weights. The patch embed
        and the mergers keep the tower's dtype: the embed's GEMM is small, and the mergers' outputs reach the
        thinker with no residual stream to dilute e4m3's error. `from_state_dict` checks the device first; this
        swap itself runs wherever `torch._scaled_mm` does (PyTorch's CPU build included)."""
        for block in self.blocks:
            attn, mlp = block.attn, block.mlp
            attn.qkv, attn.proj = Fp8Linear.from_linear(attn.qkv), Fp8Linear.from_linear(attn.proj)
            mlp.linear_fc1 = Fp8Linear.from_linear(mlp.linear_fc1)
            mlp.linear_fc2 = Fp8Linear.from_linear(mlp.linear_fc2)
        self.linear_dtype = "fp8"

    def use_attention(self, name: str) -> None:
        """Switches the attention backend (one of `ATTENTION_BACKENDS`) for later forwards."""
        self.attention_backend, self._attend = select_attention(name, self.device, self.dtype)

    @property
    def device(self) -> torch.device:
        return self.pos_embed.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.pos_embed.weight.dtype

    def plan(self, grids: Sequence[Grid]) -> VisionPlan:
        """The device-resident plan for these grids, cached because request shapes repeat."""
        key = tuple(Grid(*g) for g in grids)
        plan = self._plans.get(key)
        if plan is None:
            plan = build_plan(key, self.cfg.spatial_merge_size, self.cfg.position_grid_side).to(self.device)
            self._plans[key] = plan
            if len(self._plans) > PLAN_CACHE_SIZE:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
        return plan

    @torch.inference_mode()
    def forward(self, patches: torch.Tensor, grids: Sequence[Grid]) -> VisionOutput:
        """patches [N, C·T·P·P] in the reference `pixel_values` row order, N = Σ t·h·w over `grids`."""
        plan = self.plan(grids)
        if tuple(patches.shape) != (plan.num_patches, self.cfg.patch_dim):
            raise ValueError(
                f"patches has shape {tuple(patches.shape)} but the grids need "
                f"({plan.num_patches}, {self.cfg.patch_dim})"
            )
        # every norm that reads a residual sum, in order: the sum is fused with it (embeddings + positions included),
        # and so is the quantization of the normalised rows where an FP8 qkv reads them (never the merger's ln_q)
        norms = [*(block.norm1 for block in self.blocks), self.merger.ln_q]
        fp8 = [*(reads_fp8_rows(block.attn.qkv) for block in self.blocks), False]
        h, normed = add_norm(self.patch_embed(patches), self.positions(plan), norms[0], fp8[0])  # [N, hidden] each
        cos, sin = self.rotary(plan)  # once per forward, shared by every block
        deepstack: list[torch.Tensor] = []
        slots = {layer: slot for slot, layer in enumerate(self.cfg.deepstack_visual_indexes)}
        for layer, block in enumerate(self.blocks):
            h, normed = block(h, normed, cos, sin, plan, self._attend, norms[layer + 1], fp8[layer + 1])
            if layer in slots:
                deepstack.append(self.merger_list[slots[layer]](h))
        return VisionOutput(self.merger.project(normed.view(-1, self.cfg.merged_dim)), deepstack)  # ln_q(h) folded

    def rotary(self, plan: VisionPlan) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [N, head_dim] float32 (the reference applies the rotary in float32) for every patch."""
        cos, sin = rotary_cos_sin(plan.frame_coords, self._inv_freq)  # [M, head_dim] per distinct-frame patch
        return cos.index_select(0, plan.frame_row), sin.index_select(0, plan.frame_row)  # [N, head_dim]

    def positions(self, plan: VisionPlan) -> torch.Tensor:
        """Learned positions bilinearly resampled to each grid, [N, hidden] in the tower's dtype."""
        taps = F.embedding(plan.interp_index, self.pos_embed.weight)  # [M, 4, hidden]: a plain gather, no sync
        per_frame = (taps * plan.interp_weight[:, :, None]).sum(1).to(self.dtype)  # [M, hidden], summed in fp32
        return per_frame.index_select(0, plan.frame_row)  # [N, hidden]

"""The tower's layers; attribute names mirror the checkpoint's `thinker.visual.*` keys so weights load by name.

Each residual add is fused with the LayerNorm that reads the sum (one Triton pass on CUDA in bf16/fp16). Where an
FP8 linear reads the norm (qkv, fc1 with linear_dtype "fp8"), that pass also quantizes the normalised rows.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from runtime.kernels.fp8_quant import QuantizedRows
from runtime.kernels.layernorm import NormedResidual, QuantizedNormedResidual, add_layernorm, add_layernorm_fp8
from runtime.kernels.vision_rotary import vision_rotary
from services.vision.model.attention import AttentionFn
from services.vision.model.config import VisionTowerConfig
from services.vision.model.fp8_linear import Fp8Linear
from services.vision.model.plan import VisionPlan

HALF_DTYPES = (torch.bfloat16, torch.float16)


class PatchEmbed(nn.Module):
    """The checkpoint's Conv3d has kernel == stride, so it is exactly one GEMM over flattened patch rows."""

    def __init__(self, cfg: VisionTowerConfig) -> None:
        super().__init__()
        self.proj = nn.Linear(cfg.patch_dim, cfg.hidden_size)  # weight: the Conv3d kernel flattened (C, T, P, P)

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        return self.proj(patches.to(self.proj.weight.dtype))  # [N, hidden]


class VisionAttention(nn.Module):
    def __init__(self, cfg: VisionTowerConfig) -> None:
        super().__init__()
        self.num_heads = cfg.num_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.proj = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(
        self, x: torch.Tensor | QuantizedRows, cos: torch.Tensor, sin: torch.Tensor, plan: VisionPlan,
        attend: AttentionFn,
    ) -> torch.Tensor:
        """x [N, hidden], quantized when qkv is an `Fp8Linear`."""
        qkv = self.qkv(x).unflatten(-1, (3, self.num_heads, -1))  # [N, 3, H, D]
        q, k = vision_rotary(qkv[:, 0], qkv[:, 1], cos, sin)  # contiguous [N, H, D] each; one kernel on CUDA
        # v stays a strided view of qkv: every backend reads rows by stride, so a copy would only add traffic
        out = attend(q, k, qkv[:, 2], plan)  # [N, H, D]
        return self.proj(out.flatten(1))  # [N, hidden]


class VisionMLP(nn.Module):
    def __init__(self, cfg: VisionTowerConfig) -> None:
        super().__init__()
        self.linear_fc1 = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.linear_fc2 = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.approximate = "tanh" if cfg.hidden_act == "gelu_pytorch_tanh" else "none"

    def forward(self, x: torch.Tensor | QuantizedRows) -> torch.Tensor:
        """x [N, hidden], quantized when fc1 is an `Fp8Linear`."""
        fc1, fc2 = self.linear_fc1, self.linear_fc2
        if isinstance(fc2, Fp8Linear):
            # fc2 quantizes its input in one pass anyway: the tanh GELU runs inside that pass, so fc1's output is read
            # once and no GELU output is written (the FP8 GEMM has no GELU epilogue); the exact form runs before it
            if self.approximate == "tanh":
                return fc2(fc1(x), gelu_tanh=True)
            return fc2(F.gelu(fc1(x)))
        if self.approximate == "tanh" and x.is_cuda and x.dtype in HALF_DTYPES and x.dim() == 2:
            # GELU in the GEMM's epilogue (cuBLASLt GELU_BIAS) saves a pass over the [N, 4304] activations. On CUDA
            # `use_gelu` is the tanh form (on CPU it is the exact form, hence CUDA only); it rounds once, after the
            # GELU, where the unfused path also rounds the GEMM output before it.
            hidden = torch._addmm_activation(fc1.bias, x, fc1.weight.t(), use_gelu=True)
        else:
            hidden = F.gelu(fc1(x), approximate=self.approximate)
        return fc2(hidden)


def reads_fp8_rows(layer: nn.Module) -> bool:
    """Whether `layer` takes its input rows quantized to e4m3, so the norm before it should write them that way."""
    return isinstance(layer, Fp8Linear)


def add_norm(
    y: torch.Tensor, residual: torch.Tensor, norm: nn.LayerNorm, fp8: bool = False
) -> NormedResidual | QuantizedNormedResidual:
    """h = residual + y, and norm(h): in h's dtype, or with `fp8` as per-row e4m3 for an FP8 linear (h stays as is)."""
    if fp8:
        return add_layernorm_fp8(y, residual, norm.weight, norm.bias, norm.eps)
    return add_layernorm(y, residual, norm.weight, norm.bias, norm.eps)


class VisionBlock(nn.Module):
    """Pre-LN transformer block: h = h + attn(norm1(h)); h = h + mlp(norm2(h))."""

    def __init__(self, cfg: VisionTowerConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.norm2 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.attn = VisionAttention(cfg)
        self.mlp = VisionMLP(cfg)

    def forward(
        self, h: torch.Tensor, normed: torch.Tensor | QuantizedRows, cos: torch.Tensor, sin: torch.Tensor,
        plan: VisionPlan, attend: AttentionFn, next_norm: nn.LayerNorm, next_fp8: bool = False,
    ) -> NormedResidual | QuantizedNormedResidual:
        """h [N, hidden]: the residual stream, normed: norm1(h) (quantized when qkv is FP8). Returns the block's
        output and `next_norm` of it (the next block's norm1, or the final merger's ln_q), quantized with
        `next_fp8` (the next block's qkv is FP8): each residual add is fused with the norm that reads it, so the norm
        never re-reads the sum from memory, nor an FP8 linear the norm's output in the activation dtype."""
        h, x = add_norm(self.attn(normed, cos, sin, plan, attend), h, self.norm2, reads_fp8_rows(self.mlp.linear_fc1))
        return add_norm(self.mlp(x), h, next_norm, next_fp8)


class PatchMerger(nn.Module):
    """Folds each merge block (4 consecutive patch rows) into one row and projects it to the LLM width.

    The final merger normalises each patch before folding; the deepstack mergers normalise after.
    """

    def __init__(self, cfg: VisionTowerConfig, norm_after_fold: bool) -> None:
        super().__init__()
        self.merged_dim = cfg.merged_dim
        self.norm_after_fold = norm_after_fold
        self.ln_q = nn.LayerNorm(cfg.merged_dim if norm_after_fold else cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.mlp = nn.ModuleList(
            [nn.Linear(cfg.merged_dim, cfg.merged_dim), nn.GELU(), nn.Linear(cfg.merged_dim, cfg.out_hidden_size)]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [N, hidden] patch rows -> [N/4, out]."""
        if self.norm_after_fold:
            return self.project(self.ln_q(x.view(-1, self.merged_dim)))  # [N/4, 4·hidden]
        return self.project(self.ln_q(x).view(-1, self.merged_dim))  # [N/4, 4·hidden]

    def project(self, folded: torch.Tensor) -> torch.Tensor:
        """The MLP on folded, normalised rows [N/4, 4·hidden] -> [N/4, out]; the tower calls it directly for the
        final merger, whose ln_q it has fused with the last residual add."""
        for layer in self.mlp:
            folded = layer(folded)
        return folded

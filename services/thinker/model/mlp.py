"""Dense SwiGLU MLP: every layer of a dense decoder (Qwen3-ASR's, Qwen3.5's), the shared expert of Qwen3.5-MoE, and
any layer an Omni config keeps out of the MoE."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from runtime.kernels.activation import silu_mul
from runtime.kernels.skinny_gemm import SKINNY_MAX_ROWS, Epilogue, skinny_linear


class DenseMLP(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.gate_up_weight: torch.Tensor | None = None  # set by fuse_gate_up for the GPU path

    def fuse_gate_up(self) -> None:
        """One [2I, H] weight, gate rows then up rows, for a single GEMM; gate/up_proj become views of it, so
        nothing doubles. At decode sizes a GEMM costs its launch and ramp as much as its bytes: one instead of two,
        and one activation kernel instead of silu and mul, took 7% off Qwen3-ASR's 1-row decode step on an H100
        (bench/asr/NOTES.md)."""
        fused = torch.cat((self.gate_proj.weight, self.up_proj.weight))
        rows = self.gate_proj.weight.shape[0]
        self.gate_proj.weight = nn.Parameter(fused[:rows], requires_grad=False)
        self.up_proj.weight = nn.Parameter(fused[rows:], requires_grad=False)
        self.gate_up_weight = fused

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, H] -> [T, H], the exact reference."""
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    def forward_fused(self, x: torch.Tensor) -> torch.Tensor:
        """`forward` on the GPU path: one gate/up GEMM, silu * up in one launch (their references off CUDA).

        Decode-sized batches on CUDA take the skinny GEMM, silu * up in its epilogue: two launches a layer fewer
        (the activation's, cuBLAS's split-K reduce). On one H100 at Qwen3-ASR's dims, 1-8 rows: gate/up+silu
        20.4 us against cuBLAS's 20.8 plus the activation, down 13.3 against 13.2 (bench/kernels/NOTES.md)."""
        if self.gate_up_weight is None:
            self.fuse_gate_up()
        if x.is_cuda and x.shape[0] <= SKINNY_MAX_ROWS:
            return skinny_linear(skinny_linear(x, self.gate_up_weight, Epilogue.SILU_MUL), self.down_proj.weight)
        return self.down_proj(silu_mul(F.linear(x, self.gate_up_weight)))

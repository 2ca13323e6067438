"""FP8 block linears for the vision tower: e4m3 weights with one scale per output channel, activations quantized per
row on the fly, one row-wise scaled FP8 GEMM (`torch._scaled_mm`) with the bias in its epilogue.

Hopper's FP8 tensor cores run about twice the bf16 rate. The price is e4m3's 3-bit mantissa: each GEMM's output moves
by ~3-4% (relative RMS) against bf16's ~0.3%; through the residual stream the tower's outputs move by less (the
benchmark and the GPU tests measure it).
"""
from __future__ import annotations

import torch
from torch import nn

from runtime.config import VISION_LINEAR_DTYPES
from runtime.kernels.fp8_quant import QuantizedRows, quantize_rows, quantize_rows_reference

FP8_MIN_CAPABILITY = (8, 9)  # Ada (sm_89) and Hopper (sm_90) are the first with FP8 tensor cores
GEMM_ALIGNMENT = 16  # the FP8 GEMM needs in_features and out_features divisible by 16
# Accumulate in the tensor cores' own precision (no periodic promotion to float32 in registers): the FP8 inference
# default and the faster kernel. Its added error is far below e4m3's rounding of the inputs.
FAST_ACCUM = True


def check_linear_dtype(name: str, device: torch.device, dtype: torch.dtype) -> None:
    """Raises ValueError, saying why and what is allowed, unless the block linears can run as `name` here."""
    if name not in VISION_LINEAR_DTYPES:  # "native": the block linears in the tower's dtype
        raise ValueError(f"linear_dtype={name!r} is not supported; use one of {VISION_LINEAR_DTYPES}")
    if name == "native":
        return
    if device.type != "cuda":
        raise ValueError(
            f"linear_dtype='fp8' needs a CUDA GPU with FP8 tensor cores (compute capability >= 8.9: Ada, Hopper or "
            f"newer), but the tower loads on {device}; use linear_dtype='native'"
        )
    capability = torch.cuda.get_device_capability(device)
    if capability < FP8_MIN_CAPABILITY:
        raise ValueError(
            f"linear_dtype='fp8' needs FP8 tensor cores (compute capability >= 8.9: Ada, Hopper or newer), but "
            f"{device} has compute capability {capability[0]}.{capability[1]}; use linear_dtype='native'"
        )
    if dtype != torch.bfloat16:
        raise ValueError(
            f"linear_dtype='fp8' needs dtype bfloat16 (the row-wise scaled FP8 GEMM writes bf16), got {dtype}; "
            "load the tower in bfloat16 or use linear_dtype='native'"
        )


class Fp8Linear(nn.Module):
    """y = x·Wᵀ + b computed as (q(x)·sx)(q(W)·sw)ᵀ + b, with q() rounding to e4m3, sx one scale per row of x and
    sw one per output channel; y comes back in the dtype of the bias (the layer's own)."""

    def __init__(self, weight: QuantizedRows, bias: torch.Tensor) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.values.shape
        # [out, in] row-major, so weight.t() is the column-major [in, out] operand the FP8 GEMM takes
        self.register_buffer("weight", weight.values)
        self.register_buffer("weight_scale", weight.scale.reshape(1, -1))  # [1, out] float32, contiguous
        self.register_buffer("bias", bias)
        self.fast_accum = FAST_ACCUM  # the benchmark times both settings

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Fp8Linear:
        """Quantizes `linear`'s weight once, each output channel (row) to its own scale; the bias stays as it is."""
        if linear.in_features % GEMM_ALIGNMENT or linear.out_features % GEMM_ALIGNMENT:
            raise ValueError(
                f"an FP8 linear needs in_features and out_features divisible by {GEMM_ALIGNMENT}, got "
                f"{linear.in_features} -> {linear.out_features}; use linear_dtype='native' for this model"
            )
        return cls(quantize_rows_reference(linear.weight), linear.bias)

    def forward(self, x: torch.Tensor | QuantizedRows, gelu_tanh: bool = False) -> torch.Tensor:
        """x [M, in] -> [M, out] in the bias's dtype (the layer's). With `gelu_tanh` the layer reads GELU(x) (tanh
        form), applied while x is quantized: the vision MLP's fc2 takes fc1's output this way, in one pass over it.

        x may come already quantized (`QuantizedRows`, e4m3 values and a float32 scale per row): the add +
        LayerNorm before qkv and fc1 writes its rows that way, so the GEMM reads them with no pass of its own."""
        if isinstance(x, QuantizedRows):
            if gelu_tanh:
                raise ValueError("gelu_tanh applies while rows are quantized; these rows came already quantized")
            rows = x
        else:
            rows = quantize_rows(x, gelu_tanh)
        return torch._scaled_mm(
            rows.values, self.weight.t(), scale_a=rows.scale, scale_b=self.weight_scale, bias=self.bias,
            out_dtype=self.bias.dtype, use_fast_accum=self.fast_accum,
        )

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, fast_accum={self.fast_accum}"

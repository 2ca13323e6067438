"""Gated DeltaNet's per-head gates from its projections: the log decay g = -exp(A_log) * softplus(a + dt_bias) in
fp32 (in half precision the product can overflow to -inf) and the write strength beta = sigmoid(b) in b's dtype.
One Triton launch on CUDA in half precision (nine small kernels in plain torch), the reference elsewhere."""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from runtime.kernels._backend import use_triton


class Gates(NamedTuple):
    g: torch.Tensor  # [T, Hv] fp32
    beta: torch.Tensor  # [T, Hv] in b's dtype


def deltanet_gates_reference(a: torch.Tensor, b: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor) -> Gates:
    """a, b: [T, Hv] (any row stride); a_log, dt_bias: [Hv]."""
    return Gates(-a_log.float().exp() * F.softplus(a.float() + dt_bias), b.sigmoid())


def deltanet_gates(a: torch.Tensor, b: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor) -> Gates:
    if use_triton(a, b, a_log, dt_bias) and a.stride(1) == 1 and b.stride(1) == 1:
        from runtime.kernels.deltanet_gates_triton import deltanet_gates_triton  # imports triton

        return deltanet_gates_triton(a, b, a_log, dt_bias)
    return deltanet_gates_reference(a, b, a_log, dt_bias)

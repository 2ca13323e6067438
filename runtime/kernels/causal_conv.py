"""Gated DeltaNet's short depthwise causal conv (then SiLU) over packed rows, each row's last kernel-1 inputs kept in
its state slot. Plain torch (the conv is a few multiply-adds per channel); the decode step of the released kernel
width takes one Triton launch on CUDA in half precision (runtime/kernels/causal_conv_triton.py).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from runtime.kernels._backend import use_triton


def causal_conv_prefill(
    x: torch.Tensor, weight: torch.Tensor, conv_states: torch.Tensor, slot: int
) -> torch.Tensor:
    """One row's tokens x [n, C] after the inputs its slot holds; weight [C, K]; conv_states [S, C, K-1] is
    updated in place at `slot` with the row's last K-1 inputs. -> SiLU(conv) [n, C]."""
    window = torch.cat((conv_states[slot], x.transpose(0, 1).to(conv_states.dtype)), dim=1)  # [C, K-1+n]
    conv_states[slot] = window[:, window.shape[1] - conv_states.shape[2]:]
    out = F.conv1d(window[None].to(weight.dtype), weight[:, None, :], groups=weight.shape[0])[0]  # [C, n]
    return F.silu(out).transpose(0, 1).to(x.dtype)


def causal_conv_decode(
    x: torch.Tensor, weight: torch.Tensor, conv_states: torch.Tensor, slots: torch.Tensor
) -> torch.Tensor:
    """One token of each of B rows, x [B, C]; slots: int64 [B] on x's device. -> SiLU(conv) [B, C]."""
    if (use_triton(x, weight, conv_states) and weight.shape[1] == 4 and weight.is_contiguous()
            and conv_states.stride(2) == 1 and conv_states.stride(1) == 3 and x.stride(1) == 1):
        from runtime.kernels.causal_conv_triton import causal_conv_decode_triton  # imports triton

        return causal_conv_decode_triton(x, weight, conv_states, slots)
    return causal_conv_decode_reference(x, weight, conv_states, slots)


def causal_conv_decode_reference(
    x: torch.Tensor, weight: torch.Tensor, conv_states: torch.Tensor, slots: torch.Tensor
) -> torch.Tensor:
    """`causal_conv_decode` in plain torch."""
    window = torch.cat((conv_states[slots], x[:, :, None].to(conv_states.dtype)), dim=2)  # [B, C, K]
    conv_states[slots] = window[:, :, 1:]
    out = (window.to(weight.dtype) * weight).sum(-1)  # [B, C]
    return F.silu(out).to(x.dtype)

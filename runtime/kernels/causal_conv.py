"""Gated DeltaNet's short depthwise causal conv (then SiLU) over packed rows, each row's last kernel-1 inputs kept in
its state slot. Plain torch (the conv is a few multiply-adds per channel); the decode step of the released kernel
width takes one Triton launch on CUDA in half precision (runtime/kernels/causal_conv_triton.py). Prefill rows go
through together (`causal_conv_prefill_rows`: a fixed handful of launches per layer, however many rows the step
holds), along index maps built once per step (`conv_prefill_plan`).
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from runtime.kernels._backend import use_triton
from runtime.transfer import to_device


class ConvPlan(NamedTuple):
    """Where each prefill token's conv inputs sit in a step's source rows: first every row's K-1 held inputs (row r's
    at r*(K-1) ...), then the rows' tokens in packed order."""

    window: torch.Tensor  # int64 [Tp, K]: the source rows of each token's K inputs, oldest first
    last: torch.Tensor  # int64 [R, K-1]: the source rows of each row's last K-1 inputs (its new held inputs)
    slots: torch.Tensor  # int64 [R]


def conv_prefill_plan(counts: list[int], slots: list[int], kernel: int, device: torch.device) -> ConvPlan:
    """The plan of prefill rows of `counts` tokens in `slots` (one H2D copy each; shared by every layer)."""
    held_rows, first = len(counts) * (kernel - 1), 0
    windows, lasts = [], []
    for r, n in enumerate(counts):
        inputs = torch.cat((torch.arange(r * (kernel - 1), (r + 1) * (kernel - 1)),
                            torch.arange(held_rows + first, held_rows + first + n)))  # [K-1 + n]
        windows.append(inputs.unfold(0, kernel, 1))  # [n, K]
        lasts.append(inputs[n:])
        first += n
    return ConvPlan(*(to_device(t, device) for t in (torch.cat(windows), torch.stack(lasts),
                                                      torch.tensor(slots, dtype=torch.long))))


def causal_conv_prefill_rows(x: torch.Tensor, weight: torch.Tensor, conv_states: torch.Tensor,
                             plan: ConvPlan) -> torch.Tensor:
    """Every prefill row at once: x [Tp, C] their tokens in packed order; weight [C, K]; conv_states [S, C, K-1]
    updated in place at the plan's slots. -> SiLU(conv) [Tp, C], as `causal_conv_prefill` row by row gives."""
    held = conv_states[plan.slots].transpose(1, 2).reshape(-1, x.shape[1])  # [R * (K-1), C]
    source = torch.cat((held, x.to(conv_states.dtype)))
    conv_states[plan.slots] = source[plan.last].transpose(1, 2)  # [R, C, K-1]
    acc = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for tap in range(weight.shape[1]):  # fp32 sums of exact products, rounded once, as conv1d does
        acc += source[plan.window[:, tap]].float() * weight[:, tap].float()
    return F.silu(acc.to(weight.dtype)).to(x.dtype)


def causal_conv_prefill(
    x: torch.Tensor, weight: torch.Tensor, conv_states: torch.Tensor, slot: int
) -> torch.Tensor:
    """One row's tokens x [n, C] after the inputs its slot holds; weight [C, K]; conv_states [S, C, K-1] is
    updated in place at `slot` with the row's last K-1 inputs. -> SiLU(conv) [n, C]. The definition
    `causal_conv_prefill_rows` is tested against."""
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

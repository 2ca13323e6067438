"""Gated DeltaNet's short depthwise causal conv (then SiLU) over packed rows, each row's last kernel-1 inputs kept in
its state slot. On CUDA in half precision each form is one Triton launch (runtime/kernels/causal_conv_triton.py): the
decode step of the released kernel width, and every prefill row of a step together (`causal_conv_prefill_rows`,
along index maps built once per step by `conv_prefill_plan`); plain torch, the reference, elsewhere.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from runtime.kernels._backend import use_triton
from runtime.transfer import to_device


class ConvPlan(NamedTuple):
    """Where each prefill token's conv inputs sit, for the plain-torch form's gathers and the Triton kernel, and where
    each row's new held inputs come from. "Source rows": first every row's K-1 held inputs (row r's at r*(K-1) ...),
    then the rows' tokens in packed order. All int64 on the device, views of one copy."""

    window: torch.Tensor  # [Tp, K]: the source rows of each token's K inputs, oldest first
    token_pos: torch.Tensor  # [Tp]: each token's index within its row
    token_slot: torch.Tensor  # [Tp]: its row's slot
    tail: torch.Tensor  # [N]: the tokens among the rows' last K-1 inputs
    last: torch.Tensor  # [R, K-1]: each row's last K-1 inputs (its new held inputs) in the held rows, then `tail`
    slots: torch.Tensor  # [R]


def conv_prefill_plan(counts: list[int], slots: list[int], kernel: int, device: torch.device) -> ConvPlan:
    """The plan of prefill rows of `counts` tokens in `slots` (one host-to-device copy; shared by every layer)."""
    held_rows, first = len(counts) * (kernel - 1), 0
    windows, positions, token_slots, lasts, tail = [], [], [], [], []
    for r, (n, slot) in enumerate(zip(counts, slots)):
        inputs = torch.cat((torch.arange(r * (kernel - 1), (r + 1) * (kernel - 1)),
                            torch.arange(held_rows + first, held_rows + first + n)))  # [K-1 + n]
        windows.append(inputs.unfold(0, kernel, 1))  # [n, K]
        positions.append(torch.arange(n))
        token_slots.append(torch.full((n,), slot))
        last = inputs[n:].clone()
        from_tokens = last >= held_rows
        last[from_tokens] = held_rows + len(tail) + torch.arange(int(from_tokens.sum()))
        tail.extend((inputs[n:][from_tokens] - held_rows).tolist())
        lasts.append(last)
        first += n
    parts = (torch.cat(windows), torch.cat(positions), torch.cat(token_slots), torch.tensor(tail, dtype=torch.long),
             torch.stack(lasts), torch.tensor(slots, dtype=torch.long))
    flat = to_device(torch.cat([t.reshape(-1) for t in parts]), device)
    views, at = [], 0
    for t in parts:
        views.append(flat[at:at + t.numel()].view(t.shape))
        at += t.numel()
    return ConvPlan(*views)


def causal_conv_prefill_rows(x: torch.Tensor, weight: torch.Tensor, conv_states: torch.Tensor,
                             plan: ConvPlan) -> torch.Tensor:
    """Every prefill row at once: x [Tp, C] their tokens in packed order; weight [C, K]; conv_states [S, C, K-1]
    updated in place at the plan's slots. -> SiLU(conv) [Tp, C], as `causal_conv_prefill` row by row gives."""
    held = conv_states[plan.slots].transpose(1, 2).reshape(-1, x.shape[1])  # [R * (K-1), C], read before the update
    if (use_triton(x, weight, conv_states) and weight.is_contiguous() and x.stride(1) == 1
            and conv_states.stride(2) == 1 and conv_states.stride(1) == conv_states.shape[2]):
        from runtime.kernels.causal_conv_triton import causal_conv_prefill_triton  # imports triton

        out = causal_conv_prefill_triton(x, weight, conv_states, plan.token_pos, plan.token_slot)
    else:
        source = torch.cat((held, x.to(conv_states.dtype)))
        acc = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        for tap in range(weight.shape[1]):  # fp32 sums of exact products, rounded once, as conv1d does
            acc += source[plan.window[:, tap]].float() * weight[:, tap].float()
        out = F.silu(acc.to(weight.dtype)).to(x.dtype)
    inputs = torch.cat((held, x[plan.tail].to(conv_states.dtype)))  # the few rows the new held inputs come from
    conv_states[plan.slots] = inputs[plan.last].transpose(1, 2)  # [R, C, K-1]
    return out


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

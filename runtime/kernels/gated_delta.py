"""The gated delta rule over state slots: fla-core's Triton kernels on CUDA (chunked for prefill rows, fused recurrent
for decode rows), the plain-PyTorch reference elsewhere. Each layer's recurrent states live in one fp32 tensor
[S, Hv, Dk, Dv]; every call reads its rows' slots and writes them back in place.

Decode rows take fla's continuous-batching recurrent kernel of KDA (the delta rule with a decay per key channel),
given the gated delta rule's one decay per head on every channel: it reads and writes each row's state at its slot
in place, where the GDN kernel needs the states gathered first and scattered after (three times the state traffic,
2.4 ms of a 32-row 35B-A3B step on the H200).

fla is imported only on the CUDA path (`pip install -r bench/gpu-wheels.txt`), never by the CPU install.
"""
from __future__ import annotations

import functools
import importlib.util
from types import ModuleType

import torch

from runtime.kernels.gated_delta_reference import chunk_gated_delta_rule, recurrent_gated_delta_step
from runtime.transfer import to_device


@functools.cache
def _fla() -> ModuleType | None:
    """fla.ops.gated_delta_rule when installed, else None (the reference serves)."""
    if importlib.util.find_spec("fla") is None:
        return None
    import fla.ops.gated_delta_rule as ops  # noqa: PLC0415 - GPU-only dependency, imported on first CUDA call
    return ops


@functools.cache
def _fla_recurrent_in_place() -> ModuleType:
    import fla.ops.kda.fused_recurrent as kda  # noqa: PLC0415 - as _fla
    return kda


def fla_decode_in_place(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, states: torch.Tensor,
    slots: torch.Tensor,
) -> torch.Tensor:
    """`gated_delta_decode` through fla's KDA recurrent kernel, states advanced in place at `slots` (rows that share
    a slot, as graph padding rows share the scratch slot, race on it: only padding may)."""
    rows, heads = g.shape
    decay = g[:, None, :, None].expand(rows, 1, heads, q.shape[-1]).contiguous()  # one decay on every key channel
    out, _ = _fla_recurrent_in_place().fused_recurrent_kda_fwd(
        q=q[:, None].contiguous(), k=k[:, None].contiguous(), v=v[:, None].contiguous(), g=decay,
        beta=beta[:, None].contiguous(), initial_state=states, inplace_final_state=True, ssm_state_indices=slots,
        use_qk_l2norm_in_kernel=True)
    return out[:, 0]


def use_fla(x: torch.Tensor) -> bool:
    return x.is_cuda and _fla() is not None


def gated_delta_decode(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, states: torch.Tensor,
    slots: torch.Tensor,
) -> torch.Tensor:
    """One token per row. q, k: [B, Hk, Dk]; v: [B, Hv, Dv]; g (log decay, fp32), beta: [B, Hv]; slots: int64 [B]
    on the device. -> [B, Hv, Dv] in v's dtype; states[slots] advance by one token."""
    if use_fla(q) and states.is_contiguous():
        return fla_decode_in_place(q, k, v, g, beta, states, slots)
    step = recurrent_gated_delta_step(q, k, v, g, beta, states.index_select(0, slots))
    states.index_copy_(0, slots, step.state)
    return step.out


class PrefillRows:
    """A step's rows of several tokens, packed back to back: (first token, token count, slot) covering 0..T in order.
    Their varlen layout for fla (cu_seqlens on host and device, the slots, fla's chunk plan) is built once, on first
    use, and shared by every linear layer of the step: built per layer it cost two host-to-device copies and fla's
    planning 24 times a step at 9B."""

    def __init__(self, rows: list[tuple[int, int, int]]) -> None:
        self.rows = rows
        self._varlen: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def varlen(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(cu_seqlens on the host, the same on `device`, int64 slots on `device`)."""
        if self._varlen is None:
            bounds = [0]
            for _, count, _ in self.rows:
                bounds.append(bounds[-1] + count)
            cu_host = torch.tensor(bounds, dtype=torch.long)
            slots = torch.tensor([slot for _, _, slot in self.rows], dtype=torch.long)
            self._varlen = (cu_host, to_device(cu_host, device), to_device(slots, device))
        return self._varlen


def gated_delta_prefill(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, states: torch.Tensor,
    rows: PrefillRows,
) -> torch.Tensor:
    """q, k: [T, Hk, Dk]; v: [T, Hv, Dv]; g, beta: [T, Hv] over `rows`. -> [T, Hv, Dv]; each row's slot holds its
    state after its last token."""
    if use_fla(q):
        return _prefill_fla(q, k, v, g, beta, states, rows)
    out = torch.empty_like(v)
    for start, count, slot in rows.rows:
        part = slice(start, start + count)
        res = chunk_gated_delta_rule(q[part], k[part], v[part], g[part], beta[part], states[slot])
        out[part] = res.out
        states[slot] = res.state
    return out


def _prefill_fla(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, states: torch.Tensor,
    rows: PrefillRows,
) -> torch.Tensor:
    """One varlen launch for every row: fla takes [1, T, ...] with cu_seqlens and one initial state per row."""
    cu_host, cu_seqlens, slots = rows.varlen(q.device)
    # the host copy of cu_seqlens lets fla plan its chunks without reading the device one back (a sync); the same
    # cu_seqlens tensor in every layer lets fla's plan cache (keyed on the tensor) answer after the first
    out, final = _fla().chunk_gated_delta_rule(
        q=q[None], k=k[None], v=v[None], g=g[None], beta=beta[None], initial_state=states.index_select(0, slots),
        output_final_state=True, use_qk_l2norm_in_kernel=True, cu_seqlens=cu_seqlens, cu_seqlens_cpu=cu_host)
    states.index_copy_(0, slots, final.to(states.dtype))
    return out[0]

"""Attention over packed patches, full inside each segment (one temporal patch of one item), never across.

Backends, picked once when the tower loads:
- `segments`: dense SDPA per run of equal-length consecutive segments, batched as [count, H, length, D], with
  torch choosing the SDPA kernel. Exact on CPU in fp32. Shapes come from the host plan.
- `segments-cudnn`, `segments-flash`, `segments-efficient`: the same calls restricted to that one SDPA kernel
  (CUDA, fp16/bf16); a shape the kernel cannot take raises instead of silently running another one.
- `varlen`: one variable-length flash kernel over all segments via `cu_seqlens` (the `flash_attn` package
  when importable, else `torch.nn.attention.varlen.varlen_attn`); CUDA with fp16/bf16 only.
- `auto`: on CUDA fp16/bf16, per batch: a plan of one run (video frames, same-size images) is a single dense
  SDPA call with cuDNN first (Hopper's fused kernel), other plans go to varlen; elsewhere `segments`.
"""
from __future__ import annotations

from collections.abc import Callable
from importlib.util import find_spec

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from services.vision.model.plan import VisionPlan

# q, k, v [N, H, D] and the plan -> attention output [N, H, D]
AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, VisionPlan], torch.Tensor]


def segment_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: VisionPlan) -> torch.Tensor:
    """Dense SDPA per run of equal-length segments; each segment is one batch row, so none sees another."""
    outputs = []
    for run in plan.runs:
        end = run.start + run.count * run.length
        qs, ks, vs = (
            t[run.start:end].unflatten(0, (run.count, run.length)).transpose(1, 2)  # [count, H, length, D]
            for t in (q, k, v)
        )
        out = F.scaled_dot_product_attention(qs, ks, vs)  # [count, H, length, D]
        outputs.append(out.transpose(1, 2).flatten(0, 1))  # [count·length, H, D]
    return outputs[0] if len(outputs) == 1 else torch.cat(outputs)


def _flash_attn_varlen() -> Callable[..., torch.Tensor] | None:
    if find_spec("flash_attn") is None:
        return None
    from flash_attn import flash_attn_varlen_func

    return flash_attn_varlen_func


def _torch_varlen() -> Callable[..., torch.Tensor] | None:
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


def varlen_available() -> bool:
    return torch.cuda.is_available() and (_flash_attn_varlen() is not None or _torch_varlen() is not None)


def make_varlen() -> AttentionFn:
    """A varlen-flash attention function; raises when neither kernel is importable."""
    flash = _flash_attn_varlen()
    if flash is not None:

        def flash_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: VisionPlan) -> torch.Tensor:
            cu = plan.cu_seqlens
            return flash(q, k, v, cu, cu, plan.max_seqlen, plan.max_seqlen, causal=False)

        return flash_varlen
    torch_varlen = _torch_varlen()
    if torch_varlen is None:
        raise RuntimeError("no varlen attention kernel: install flash-attn or use torch >= 2.9, else use 'segments'")

    def torch_flash_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: VisionPlan) -> torch.Tensor:
        cu = plan.cu_seqlens
        return torch_varlen(q, k, v, cu, cu, plan.max_seqlen, plan.max_seqlen)

    return torch_flash_varlen


def make_segments(kernels: list[SDPBackend]) -> AttentionFn:
    """`segment_sdpa` with SDPA limited to `kernels`, tried in that order."""

    def segments_with(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: VisionPlan) -> torch.Tensor:
        with sdpa_kernel(kernels, set_priority=True):
            return segment_sdpa(q, k, v, plan)

    return segments_with


def make_auto(dense: AttentionFn, varlen: AttentionFn | None) -> AttentionFn:
    """`dense` for plans of one run of equal segments (one SDPA call, no padding); `varlen` for the rest."""

    def auto(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: VisionPlan) -> torch.Tensor:
        if varlen is None or len(plan.runs) == 1:
            return dense(q, k, v, plan)
        return varlen(q, k, v, plan)

    return auto


# The single SDPA kernel each forced backend runs.
FORCED_SDPA = {
    "segments-cudnn": SDPBackend.CUDNN_ATTENTION,
    "segments-flash": SDPBackend.FLASH_ATTENTION,
    "segments-efficient": SDPBackend.EFFICIENT_ATTENTION,
}
# `auto`'s kernel order for a one-run plan: cuDNN's Hopper kernel first, then torch's own, math last so it never fails.
AUTO_DENSE_ORDER = [
    SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH,
]
ATTENTION_BACKENDS = ("auto", "segments", "varlen", *FORCED_SDPA)


def select_attention(name: str, device: torch.device, dtype: torch.dtype) -> tuple[str, AttentionFn]:
    """The backend `name` resolves to on this device and dtype, and its function."""
    if name not in ATTENTION_BACKENDS:
        raise ValueError(f"attention={name!r} is not a backend; use one of {ATTENTION_BACKENDS}")
    half_on_cuda = device.type == "cuda" and dtype in (torch.float16, torch.bfloat16)
    if name == "auto":
        if not half_on_cuda:
            return "segments", segment_sdpa
        return name, make_auto(make_segments(AUTO_DENSE_ORDER), make_varlen() if varlen_available() else None)
    if name != "segments" and not half_on_cuda:
        raise ValueError(f"attention={name!r} needs CUDA with fp16/bf16, got {device} {dtype}; use 'segments'")
    if name == "varlen":
        return name, make_varlen()
    if name in FORCED_SDPA:
        return name, make_segments([FORCED_SDPA[name]])
    return name, segment_sdpa

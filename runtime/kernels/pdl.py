"""Programmatic dependent launch (PDL, sm_90 and later) for the Triton kernels of graphed decode steps and frames.

A decode step or a talker frame is a CUDA graph of hundreds of kernels of a few microseconds each, and between two of
them the GPU drains the first, then launches and ramps up the second: ~1 us a boundary (bench/kernels/NOTES.md), a
sixth of a Qwen3-ASR decode step. A kernel launched with PDL may be scheduled while the kernel before it on the stream
is still running. Each of its programs first lets the kernel after it launch (`griddepcontrol.launch_dependents`),
then waits until the kernel before it has completed and its writes are visible (`griddepcontrol.wait`), and only then
loads or stores anything: the order of every memory access between kernels is what it was without PDL, and only the
launch overlaps. A neighbour launched without it (cuBLAS, torch) orders as always.

Off by default until measured on the GPU (bench/kernels/NOTES.md): `OMNIMESH_PDL=1` in a process's environment when
it starts turns it on there (the stages inherit `omnimesh up`'s environment).
"""
from __future__ import annotations

import functools
import os
from typing import Any

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

ENV = "OMNIMESH_PDL"
# read once: a launch asks on every call (thousands an eager prefill step); the interpreter never takes it
ENABLED = os.environ.get(ENV, "0") == "1" and os.environ.get("TRITON_INTERPRET", "0") != "1"
FORCE = False  # the sm_90 compile check (tests/unit/kernels/compile_check.py) compiles the PDL variants on a CPU


@triton.jit
def pdl_enter(PDL: tl.constexpr):
    """A kernel's first statement: with PDL, let the next kernel launch, then wait for the one before to finish."""
    if PDL:
        gdc_launch_dependents()
        gdc_wait()


@triton.jit
def pdl_release(PDL: tl.constexpr):
    """`pdl_enter`'s first half, for a kernel with work to start before it waits (`prefetch_l2` of its weights)."""
    if PDL:
        gdc_launch_dependents()


@triton.jit
def pdl_wait(PDL: tl.constexpr):
    """`pdl_enter`'s second half: nothing the kernel before wrote may be read, nor anything it reads written, before."""
    if PDL:
        gdc_wait()


@triton.jit
def prefetch_l2(ptrs):
    """Asks L2 for the 128-byte line of each pointer and goes on without waiting (no register takes the data). Before
    `pdl_wait`, only for memory no kernel writes (weights): their stream starts while the kernel before finishes."""
    tl.inline_asm_elementwise("prefetch.global.L2 [$1]; // $0 unused", "=r,l", [ptrs], dtype=tl.int32,
                              is_pure=False, pack=1)


@functools.cache
def _capable(index: int) -> bool:
    return torch.cuda.get_device_capability(index) >= (9, 0)


def use_pdl(t: torch.Tensor) -> bool:
    """Whether a kernel on `t`'s device launches with PDL: asked for, and a CUDA device of sm_90 or later."""
    if FORCE:
        return True
    return ENABLED and t.is_cuda and _capable(t.device.index or 0)


def pdl_args(t: torch.Tensor) -> dict[str, Any]:
    """The launch keywords of a kernel that takes a PDL constexpr (and starts with `pdl_enter`, or `pdl_release` ...
    `pdl_wait`): the constexpr and the launch attribute."""
    return {"PDL": True, "launch_pdl": True} if use_pdl(t) else {"PDL": False}

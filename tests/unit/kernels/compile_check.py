"""Compiles every Triton kernel for an H100/H200 (sm_90) on a machine without a GPU, through the real launch wrappers.

The interpreter (interpreter_check.py) checks the kernels' arithmetic but never runs Triton's compiler, so a construct
the compiler rejects, or a tile that spills, would only show on the GPU. Here a stand-in driver reports an sm_90
target and every launch compiles (to cubin, with the bundled ptxas) instead of running; the wrappers run on CPU
tensors, whose values are never read. Prints each kernel's registers and spills (ptxas -v) and fails on a compile
error or a spill. Started by test_kernel_triton_interpreter.py in a fresh process (TRITON_INTERPRET must be unset).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.runtime import driver
from triton.runtime.jit import JITFunction

BF16 = torch.bfloat16
COMPILED: list[tuple[str, object]] = []


class CompileOnlyDriver:
    """The parts of Triton's active driver that compiling needs: an sm_90 target, device 0, a null stream."""

    def get_current_target(self) -> GPUTarget:
        return GPUTarget("cuda", 90, 32)

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int) -> int:
        return 0

    def get_active_torch_device(self) -> torch.device:
        return torch.device("cpu")


def install() -> None:
    """Route launches to compile-only: JITFunction.run with warmup=True compiles and returns before launching."""
    driver.set_active(CompileOnlyDriver())
    original = JITFunction.run

    def compile_only(self, *args, grid, warmup, **kwargs):  # noqa: ANN001, ANN202
        kernel = original(self, *args, grid=grid, warmup=True, **kwargs)
        COMPILED.append((self.fn.__name__, kernel))
        return kernel

    JITFunction.run = compile_only


def ptxas_usage(ptx: str, name: str) -> tuple[int, int]:
    """(registers, spill bytes) of a kernel's PTX as ptxas -v reports them for sm_90a."""
    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        out = subprocess.run([str(ptxas), "-v", "--gpu-name", "sm_90a", str(src), "-o", str(Path(tmp) / "k.o")],
                             capture_output=True, text=True)
    text = out.stdout + out.stderr
    if out.returncode != 0:
        raise RuntimeError(f"ptxas failed on {name}: {text[-2000:]}")
    regs = int(m.group(1)) if (m := re.search(r"Used (\d+) registers", text)) else -1
    spills = sum(int(v) for v in re.findall(r"(\d+) bytes spill (?:stores|loads)", text))
    return regs, spills


def assert_no_spills() -> None:
    """For a test file's own compile check: prints every kernel compiled so far (registers, spills, shared memory)
    and fails on the first that spills."""
    for name, kernel in COMPILED:
        regs, spills = ptxas_usage(kernel.asm["ptx"], name)
        print(f"{name} regs {regs} spill bytes {spills} smem {kernel.metadata.shared}")
        assert spills == 0, f"{name} spills {spills} bytes"


def compile_moe() -> None:
    from runtime.kernels.moe_config import SMALL_DOWN, SMALL_GATE_UP, GemmConfig, MoeConfig
    from runtime.kernels.moe_small_triton import experts_small_triton
    from runtime.kernels.moe_triton import fused_moe_triton

    for experts, hidden, inter, top_k in ((128, 2048, 768, 8), (128, 1024, 384, 6), (8, 64, 32, 2)):  # + demo
        x = torch.zeros(4, hidden, dtype=BF16)
        router = torch.zeros(experts, hidden, dtype=BF16)
        w_gate_up = torch.zeros(experts, 2 * inter, hidden, dtype=BF16)
        w_down = torch.zeros(experts, hidden, inter, dtype=BF16)
        logits = torch.zeros(4, experts, dtype=BF16)
        for tokens, splits in ((1, None), (4, None), (4, 1)):  # down's loop split by the rule, and unsplit
            experts_small_triton(x[:tokens], logits[:tokens], w_gate_up, w_down, top_k, True, SMALL_GATE_UP,
                                 SMALL_DOWN, splits)
        blocked = MoeConfig(16, GemmConfig(64, 128, 4, 4), GemmConfig(64, 128, 4, 3), small_max_tokens=0)
        fused_moe_triton(x, router, w_gate_up, w_down, top_k, True, None, blocked)


def compile_attention() -> None:
    from runtime.kernels.paged_attention_triton import paged_attention_triton

    tables = torch.zeros(2, 4, dtype=torch.int32)
    kv_lens = torch.ones(2, dtype=torch.int32)
    cu = torch.arange(3, dtype=torch.int32)
    for q_heads, kv_heads, head_dim in ((32, 4, 128), (4, 2, 16)):  # the Thinker's, the demo checkpoint's
        kv = torch.zeros(2, 8, 16, kv_heads, head_dim, dtype=BF16)
        for max_q in (1, 64):  # decode rows (16-row tiles), prefill tiles (128 rows)
            q = torch.zeros(2 * max_q, q_heads, head_dim, dtype=BF16)
            for splits in (1, 8):
                paged_attention_triton(q, kv, tables, kv_lens, cu * max_q, max_q, num_splits=splits)


def compile_norms() -> None:
    from runtime.kernels.rmsnorm_triton import (
        fused_add_rmsnorm_router_triton, fused_add_rmsnorm_triton, qk_norm_rope_cache_triton, qk_norm_rope_triton,
    )

    for hidden, experts in ((2048, 128), (64, 8)):  # the Thinker's, the demo checkpoint's
        x = torch.zeros(2, hidden, dtype=BF16)
        w = torch.zeros(hidden, dtype=BF16)
        for residual in (x, None):
            for zero_centred in (False, True):  # Qwen3-Omni's norm, Qwen3.5's
                fused_add_rmsnorm_triton(x, residual, w, zero_centred=zero_centred)
                fused_add_rmsnorm_router_triton(x, residual, w, torch.zeros(experts, hidden, dtype=BF16),
                                                zero_centred=zero_centred)
    qkv = torch.zeros(2, 40 * 128, dtype=BF16)
    q, k, v = qkv[:, :4096].view(2, 32, 128), qkv[:, 4096:4608].view(2, 4, 128), qkv[:, 4608:].view(2, 4, 128)
    hw, cos = torch.zeros(128, dtype=BF16), torch.zeros(2, 128)
    qk_norm_rope_triton(q, k, hw, hw, cos, cos)
    qk_norm_rope_cache_triton(q, k, v, hw, hw, cos, cos, torch.zeros(2, 8, 16, 4, 128, dtype=BF16),
                              torch.zeros(2, dtype=torch.int64))


def compile_deltanet_parts() -> None:
    """Qwen3.5's Gated DeltaNet output norm (32 value heads of 128) and causal conv decode and prefill (8,192
    channels)."""
    from runtime.kernels.causal_conv_triton import causal_conv_decode_triton, causal_conv_prefill_triton
    from runtime.kernels.deltanet_gates_triton import deltanet_gates_triton
    from runtime.kernels.gated_rmsnorm_triton import gated_rmsnorm_triton

    x = torch.zeros(2, 32, 128, dtype=BF16)
    gated_rmsnorm_triton(x, x, torch.zeros(128, dtype=BF16), 1e-6)
    proj = torch.zeros(2, 64, dtype=BF16)
    deltanet_gates_triton(proj[:, :32], proj[:, 32:], torch.zeros(32, dtype=BF16), torch.zeros(32, dtype=BF16))
    causal_conv_decode_triton(torch.zeros(2, 8192, dtype=BF16), torch.zeros(8192, 4, dtype=BF16),
                              torch.zeros(3, 8192, 3, dtype=BF16), torch.zeros(2, dtype=torch.int64))
    rows = torch.zeros(64, dtype=torch.int64)
    causal_conv_prefill_triton(torch.zeros(64, 8192, dtype=BF16), torch.zeros(8192, 4, dtype=BF16),
                               torch.zeros(3, 8192, 3, dtype=BF16), rows, rows)


def compile_dense_step() -> None:
    """The code predictor's persistent step (5 layers of hidden 1024, 16/8 heads of 128, SwiGLU 3072, a 2048-id
    head): one row of two positions, 16 rows of one (the MMA tile's 16 rows), 16 of two (32 rows)."""
    from runtime.kernels.dense_step import DenseStack, DenseStepBuffers, default_tiling
    from runtime.kernels.dense_step_triton import launch_dense_step

    layers, hidden, heads, kv_heads, d, inter, vocab, positions = 5, 1024, 16, 8, 128, 3072, 2048, 32
    e = lambda *shape: torch.zeros(*shape, dtype=BF16)  # noqa: E731
    stack = DenseStack(e(layers, (heads + 2 * kv_heads) * d, hidden), e(layers, hidden, heads * d),
                       e(layers, 2 * inter, hidden), e(layers, hidden, inter), e(layers, hidden), e(layers, hidden),
                       e(layers, d), e(layers, d), e(hidden), heads, kv_heads, d, 1e-6)  # fmt: skip
    head = e(vocab, hidden)
    buffers = DenseStepBuffers.allocate(stack, 16, positions)
    for batch, steps in ((1, 2), (16, 1), (16, 2)):
        launch_dense_step(stack, head, buffers, batch, steps, 0, e(positions, d), e(positions, d),
                          torch.zeros(batch, vocab), default_tiling(stack, head), programs=128)


def compile_pdl_variants() -> list[str]:
    """The decode-path kernels launched with programmatic dependent launch (runtime/kernels/pdl.py): each compiled
    with the launch attribute, and its PTX opening with griddepcontrol's launch_dependents then wait (the skinny
    GEMM's weight prefetch between the two)."""
    from runtime.kernels import pdl
    from runtime.kernels.activation_triton import silu_mul_triton
    from runtime.kernels.skinny_gemm import Epilogue
    from runtime.kernels.skinny_gemm_triton import skinny_gemm_triton
    from runtime.sampler.knobs import WIDTH, RowKnobs
    from runtime.sampler.pick_triton import pick_triton

    first = len(COMPILED)
    pdl.FORCE = True
    try:
        compile_moe()
        compile_attention()
        compile_norms()
        x, w = torch.zeros(2, 2048, dtype=BF16), torch.zeros(4096, 2048, dtype=BF16)
        skinny_gemm_triton(x, w)
        skinny_gemm_triton(x, w, Epilogue.SILU_MUL)
        silu_mul_triton(torch.zeros(2, 2 * 6144, dtype=BF16))
        logits = torch.zeros(2, 2048)  # the code predictor's codebook
        pick_triton(logits, logits, RowKnobs(torch.zeros(2, 5), WIDTH))
    finally:
        pdl.FORCE = False
    wanted = {"_skinny_gemm_kernel", "_add_rmsnorm_kernel", "_add_rmsnorm_router_kernel", "_qk_norm_rope_kernel",
              "_qk_norm_rope_cache_kernel", "_paged_attn_kernel", "_merge_splits_kernel", "_silu_mul_kernel",
              "_small_gate_up_kernel", "_small_down_sum_kernel", "_pick_kernel"}
    failures = []
    for name, kernel in COMPILED[first:]:
        if name not in wanted:
            continue
        wanted.discard(name)
        ptx = kernel.asm["ptx"]
        launch, wait = ptx.find("griddepcontrol.launch_dependents"), ptx.find("griddepcontrol.wait")
        if not (kernel.metadata.launch_pdl and 0 <= launch < wait):
            failures.append(f"{name}: launched with PDL but not launch_dependents then wait in its PTX")
        if name == "_skinny_gemm_kernel" and not launch < ptx.find("prefetch.global.L2") < wait:
            failures.append(f"{name}: its weights' L2 prefetch is not between launch_dependents and wait")
    failures += [f"{name}: no PDL variant compiled" for name in sorted(wanted)]
    return failures


if __name__ == "__main__":
    install()
    torch.set_num_threads(1)
    failures = []
    for check in (compile_moe, compile_attention, compile_norms, compile_deltanet_parts, compile_dense_step,
                  compile_pdl_variants):
        try:
            failures += check() or []
        except Exception as exc:  # noqa: BLE001  report every family, then fail
            failures.append(f"{check.__name__}: {type(exc).__name__}: {exc}")
    seen = set()
    for name, kernel in COMPILED:
        key = (name, kernel.hash)
        if key in seen:
            continue
        seen.add(key)
        regs, spills = ptxas_usage(kernel.asm["ptx"], name)
        print(f"{name:32s} regs {regs:4d} spill bytes {spills:6d} smem {kernel.metadata.shared}")
        if spills:
            failures.append(f"{name} spills {spills} bytes")
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print(f"compiled {len(seen)} kernels for sm_90", os.environ.get("TRITON_INTERPRET", ""))

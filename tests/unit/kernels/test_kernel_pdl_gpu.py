"""GPU: programmatic dependent launch changes no result. A decode layer's chain of Triton kernels (norm, q/k/v, q/k
norm + rope + cache store, split attention and its merge, o with the residual, norm, gate/up + silu, down, the small
MoE) captured in a CUDA graph with every kernel launched with PDL gives, replay after replay, the very bytes of the
same chain launched without it: every kernel waits for the one before it before touching memory."""
from __future__ import annotations

import pytest
import torch

from runtime.kernels import pdl
from runtime.kernels.moe_config import SMALL_DOWN, SMALL_GATE_UP
from runtime.kernels.moe_small_triton import experts_small_triton
from runtime.kernels.paged_attention_triton import paged_attention_triton
from runtime.kernels.rmsnorm_triton import fused_add_rmsnorm_triton, qk_norm_rope_cache_triton
from runtime.kernels.skinny_gemm import Epilogue
from runtime.kernels.skinny_gemm_triton import skinny_gemm_triton
from tests.unit.kernels.kernel_data import needs_cuda

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not needs_cuda(), reason="needs a CUDA device")]
BF16 = torch.bfloat16
ROWS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER, EXPERTS, TOP_K = 4, 2048, 16, 8, 128, 6144, 128, 8
BLOCKS, BLOCK_SIZE, CONTEXT = 64, 16, 200  # 13 blocks a row, no block shared


def weights(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)

    def w(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * scale / shape[-1] ** 0.5).to("cuda", BF16)

    q_cols, kv_cols = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    return {"norm": 1 + w(HIDDEN, scale=0.1), "qkv": w(q_cols + 2 * kv_cols, HIDDEN), "o": w(HIDDEN, q_cols),
            "qn": 1 + w(HEAD_DIM, scale=0.1), "kn": 1 + w(HEAD_DIM, scale=0.1), "gate_up": w(2 * INTER, HIDDEN),
            "down": w(HIDDEN, INTER), "w13": w(EXPERTS, 1536, HIDDEN), "w2": w(EXPERTS, HIDDEN, 768),
            "router": w(EXPERTS, HIDDEN)}


def layer(x: torch.Tensor, res: torch.Tensor, kv: torch.Tensor, p: dict[str, torch.Tensor], cos: torch.Tensor,
          sin: torch.Tensor, slots: torch.Tensor, tables: torch.Tensor, kv_lens: torch.Tensor,
          cu: torch.Tensor) -> torch.Tensor:
    h, res = fused_add_rmsnorm_triton(x, res, p["norm"])
    qkv = skinny_gemm_triton(h, p["qkv"])
    q_cols, kv_cols = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    q = qkv[:, :q_cols].view(ROWS, HEADS, HEAD_DIM)
    k = qkv[:, q_cols:q_cols + kv_cols].view(ROWS, KV_HEADS, HEAD_DIM)
    v = qkv[:, q_cols + kv_cols:].view(ROWS, KV_HEADS, HEAD_DIM)
    q = qk_norm_rope_cache_triton(q, k, v, p["qn"], p["kn"], cos, sin, kv, slots)
    attn = paged_attention_triton(q, kv, tables, kv_lens, cu, 1, num_splits=4)
    x = skinny_gemm_triton(attn.reshape(ROWS, q_cols), p["o"], Epilogue.RESIDUAL, res)
    h, res = fused_add_rmsnorm_triton(x, res, p["norm"])
    up = skinny_gemm_triton(h, p["gate_up"], Epilogue.SILU_MUL)
    x = skinny_gemm_triton(up, p["down"], Epilogue.RESIDUAL, res)
    logits = skinny_gemm_triton(x, p["router"])
    return experts_small_triton(x, logits, p["w13"], p["w2"], TOP_K, True, SMALL_GATE_UP, SMALL_DOWN) + x


def inputs(seed: int) -> tuple:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(ROWS, HIDDEN, generator=g).to("cuda", BF16)
    res = torch.randn(ROWS, HIDDEN, generator=g).to("cuda", BF16)
    kv = (torch.randn(2, BLOCKS, BLOCK_SIZE, KV_HEADS, HEAD_DIM, generator=g) * 0.5).to("cuda", BF16)
    angles = torch.rand(ROWS, HEAD_DIM // 2, generator=g) * 6.28
    cos, sin = (torch.cat([f(angles)] * 2, dim=-1).to("cuda") for f in (torch.cos, torch.sin))
    per_row = -(-CONTEXT // BLOCK_SIZE)
    tables = torch.randperm(BLOCKS, generator=g)[:ROWS * per_row].view(ROWS, per_row).to("cuda", torch.int32)
    kv_lens = torch.full((ROWS,), CONTEXT, dtype=torch.int32, device="cuda")
    slots = (tables[:, (CONTEXT - 1) // BLOCK_SIZE].long() * BLOCK_SIZE + (CONTEXT - 1) % BLOCK_SIZE).contiguous()
    cu = torch.arange(ROWS + 1, dtype=torch.int32, device="cuda")
    return x, res, kv, cos, sin, slots, tables, kv_lens, cu


def graphed(p: dict[str, torch.Tensor], args: tuple, use_pdl: bool, replays: int) -> list[torch.Tensor]:
    """The layer (three deep, each output the next input) captured with or without PDL, replayed `replays` times
    on fresh copies of the inputs; each replay's output."""
    x0, res, kv0, cos, sin, slots, tables, kv_lens, cu = args
    x, kv = x0.clone(), kv0.clone()
    pdl.FORCE = use_pdl
    try:
        def run() -> torch.Tensor:
            y = x
            for _ in range(3):
                y = layer(y, res, kv, p, cos, sin, slots, tables, kv_lens, cu)
            return y

        run()  # warm-up: compiles, and allocates the split-K counters outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = run()
    finally:
        pdl.FORCE = False
    outs = []
    for _ in range(replays):
        x.copy_(x0)
        kv.copy_(kv0)
        graph.replay()
        outs.append(out.clone())
    torch.cuda.synchronize()
    return outs


@pytest.mark.skipif(needs_cuda() and torch.cuda.get_device_capability() < (9, 0), reason="PDL needs sm_90")
def test_a_graph_of_pdl_launches_gives_the_bytes_of_one_without(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pdl, "ENABLED", False)  # PDL exactly where pdl.FORCE asks for it
    p, args = weights(0), inputs(1)
    plain = graphed(p, args, use_pdl=False, replays=2)
    with_pdl = graphed(p, args, use_pdl=True, replays=5)
    assert torch.equal(plain[0], plain[1])
    assert plain[0].isfinite().all() and plain[0].abs().max() > 0
    for out in with_pdl:
        assert torch.equal(out, plain[0])

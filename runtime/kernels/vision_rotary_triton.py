"""Triton kernel: the vision tower's rotate-half rotary on q and k in one launch, straight from the qkv GEMM output."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from runtime.kernels._backend import next_power_of_2
from runtime.kernels.rmsnorm_reference import QK

BLOCK_ROWS = 32  # (token, head) rows per program: two tokens of the released model's 16 heads
NUM_WARPS = 8  # 8 elements per thread and tensor: 64 registers on sm_90, so 32 resident warps per SM


@triton.jit
def _rotate_half(
    x_ptr, out_ptr, x_offsets, out_offsets, mask, cos1, cos2, sin1, sin2, HALF: tl.constexpr,
):
    """One tensor's rows: x1 = x[:HALF], x2 = x[HALF:] become (x1·cos1 − x2·sin1, x2·cos2 + x1·sin2)."""
    x1 = tl.load(x_ptr + x_offsets, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + x_offsets + HALF, mask=mask, other=0.0).to(tl.float32)
    # x·cos + rotate_half(x)·sin with rotate_half(x) = (−x2, x1); a − b·s equals a + (−b)·s exactly in IEEE
    out_dtype = out_ptr.dtype.element_ty
    tl.store(out_ptr + out_offsets, (x1 * cos1 - x2 * sin1).to(out_dtype), mask=mask)
    tl.store(out_ptr + out_offsets + HALF, (x2 * cos2 + x1 * sin2).to(out_dtype), mask=mask)


@triton.jit
def _vision_rotary_kernel(
    q_ptr, k_ptr, cos_ptr, sin_ptr, out_ptr, num_rows, stride_qt, stride_kt, stride_ow,
    NUM_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, HALF: tl.constexpr, HALF_P2: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)  # flat (token, head) pairs
    token = (rows // NUM_HEADS)[:, None]
    # heads lie HEAD_DIM apart in every tensor here: a compile-time stride lets loads and stores be vectorised
    head_offset = (rows % NUM_HEADS)[:, None] * HEAD_DIM
    cols = tl.arange(0, HALF_P2)[None, :]
    mask = (rows < num_rows)[:, None] & (cols < HALF)
    # one cos/sin row per token, shared by its heads and by q and k: loaded once, from cache after the first head
    trig = token * HEAD_DIM + cols
    cos1 = tl.load(cos_ptr + trig, mask=mask, other=0.0).to(tl.float32)
    cos2 = tl.load(cos_ptr + trig + HALF, mask=mask, other=0.0).to(tl.float32)
    sin1 = tl.load(sin_ptr + trig, mask=mask, other=0.0).to(tl.float32)
    sin2 = tl.load(sin_ptr + trig + HALF, mask=mask, other=0.0).to(tl.float32)
    out_offsets = token * (NUM_HEADS * HEAD_DIM) + head_offset + cols
    _rotate_half(q_ptr, out_ptr, token * stride_qt + head_offset + cols, out_offsets, mask,
                 cos1, cos2, sin1, sin2, HALF)
    _rotate_half(k_ptr, out_ptr + stride_ow, token * stride_kt + head_offset + cols, out_offsets, mask,
                 cos1, cos2, sin1, sin2, HALF)


def vision_rotary_triton(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, block_rows: int = BLOCK_ROWS
) -> QK:
    """`vision_rotary_reference` in one launch; q, k [N, H, D] may be token-strided views of a fused qkv output
    (each token's heads contiguous).

    q and k come back as the two halves of one [2, N, H, D] buffer, each a contiguous [N, H, D].
    """
    num_tokens, num_heads, head_dim = q.shape
    assert k.shape == q.shape and head_dim % 2 == 0
    assert q.stride()[1:] == k.stride()[1:] == (head_dim, 1), "each token's heads must be contiguous"
    assert cos.shape == sin.shape == (num_tokens, head_dim)
    cos, sin = cos.contiguous(), sin.contiguous()
    out = torch.empty((2, num_tokens, num_heads, head_dim), dtype=q.dtype, device=q.device)
    num_rows = num_tokens * num_heads
    if num_rows == 0:
        return QK(out[0], out[1])
    half = head_dim // 2
    _vision_rotary_kernel[(triton.cdiv(num_rows, block_rows),)](
        q, k, cos, sin, out, num_rows, q.stride(0), k.stride(0), out.stride(0),
        NUM_HEADS=num_heads, HEAD_DIM=head_dim, HALF=half, HALF_P2=next_power_of_2(half), BLOCK_ROWS=block_rows,
        num_warps=NUM_WARPS,
        # no FMA contraction: each product and the sum round in float32 as eager PyTorch's separate kernels do,
        # which keeps this kernel bit-identical to the reference
        enable_fp_fusion=False,
    )
    return QK(out[0], out[1])

"""The q/k rotary entry point on CPU: transformers' `apply_rotary_pos_emb_vision` bit for bit, on qkv views."""
from __future__ import annotations

import pytest
import torch

from runtime.kernels.vision_rotary import rotate_half_reference, vision_rotary
from services.vision.model import Grid
from services.vision.model.plan import build_plan
from services.vision.model.rotary import inv_frequencies, rotary_cos_sin


def qkv_and_angles(dtype: torch.dtype, heads: int = 2, head_dim: int = 8) -> tuple[torch.Tensor, ...]:
    """q, k as strided views of one [N, 3, H, D] buffer, and the tower's cos/sin for a 2-frame 4×6 video."""
    plan = build_plan([Grid(2, 4, 6)], merge=2, side=8)
    cos, sin = rotary_cos_sin(plan.frame_coords, inv_frequencies(head_dim, 10000.0, torch.device("cpu")))
    gen = torch.Generator().manual_seed(0)
    qkv = torch.randn(plan.num_patches, 3, heads, head_dim, generator=gen).to(dtype)
    return qkv[:, 0], qkv[:, 1], cos[plan.frame_row], sin[plan.frame_row]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_equals_transformers_rotary(dtype: torch.dtype) -> None:
    modeling = pytest.importorskip("transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe")
    q, k, cos, sin = qkv_and_angles(dtype)
    got = vision_rotary(q, k, cos, sin)
    want_q, want_k = modeling.apply_rotary_pos_emb_vision(q, k, cos, sin)
    assert got.q.dtype == dtype and torch.equal(got.q, want_q) and torch.equal(got.k, want_k)


def test_cpu_returns_contiguous_tensors_from_views() -> None:
    q, k, cos, sin = qkv_and_angles(torch.float32)
    assert not q.is_contiguous()
    got = vision_rotary(q, k, cos, sin)
    assert got.q.is_contiguous() and got.k.is_contiguous()
    assert torch.equal(got.k, rotate_half_reference(k, cos, sin))


def test_rotation_keeps_pairs_norms() -> None:
    """Rotate-half turns each (x[i], x[i + D/2]) pair by one angle, so the pair's length is unchanged."""
    q, k, cos, sin = qkv_and_angles(torch.float64)
    out = rotate_half_reference(q, cos.double(), sin.double())
    half = q.shape[-1] // 2

    def pair_norms(x: torch.Tensor) -> torch.Tensor:
        return x[..., :half] ** 2 + x[..., half:] ** 2

    torch.testing.assert_close(pair_norms(out), pair_norms(q))

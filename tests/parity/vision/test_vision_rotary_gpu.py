"""GPU: the fused q/k rotary kernel equals the PyTorch reference bit for bit, at the released model's head shapes."""
from __future__ import annotations

import pytest
import torch

from runtime.kernels.vision_rotary import vision_rotary, vision_rotary_reference
from services.vision.model import Grid, VisionTowerConfig
from services.vision.model.plan import build_plan
from services.vision.model.rotary import inv_frequencies, rotary_cos_sin

pytestmark = pytest.mark.gpu

CFG = VisionTowerConfig()  # the released widths: 16 heads of 72


def real_cos_sin(grids: list[Grid]) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [N, 72] float32 on the GPU for these grids, as the tower builds them."""
    plan = build_plan(grids, CFG.spatial_merge_size, CFG.position_grid_side)
    cos, sin = rotary_cos_sin(plan.frame_coords, inv_frequencies(CFG.head_dim, CFG.rope_theta, torch.device("cpu")))
    return cos[plan.frame_row].cuda(), sin[plan.frame_row].cuda()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("grids", [[Grid(1, 28, 28)] * 8, [Grid(3, 28, 28), Grid(1, 44, 80), Grid(1, 2, 2)]],
                         ids=["images", "mixed"])
def test_fused_rotary_is_bit_identical_on_qkv_views(dtype: torch.dtype, grids: list[Grid]) -> None:
    pytest.importorskip("triton")
    cos, sin = real_cos_sin(grids)
    tokens = cos.shape[0]
    qkv = (4 * torch.randn(tokens, 3 * CFG.hidden_size, device="cuda")).to(dtype)
    qkv = qkv.unflatten(-1, (3, CFG.num_heads, CFG.head_dim))  # [N, 3, H, D]: q and k are strided views
    got = vision_rotary(qkv[:, 0], qkv[:, 1], cos, sin)
    want = vision_rotary_reference(qkv[:, 0], qkv[:, 1], cos, sin)
    # the Triton path writes q and k into one [2, N, H, D] buffer; the reference allocates each on its own
    assert got.q.untyped_storage().data_ptr() == got.k.untyped_storage().data_ptr()
    assert got.q.is_contiguous() and got.k.is_contiguous()
    assert torch.equal(got.q, want.q) and torch.equal(got.k, want.k)


def test_fp32_on_gpu_takes_the_reference() -> None:
    cos, sin = real_cos_sin([Grid(1, 4, 4)])
    qkv = torch.randn(16, 3, CFG.num_heads, CFG.head_dim, device="cuda")
    got = vision_rotary(qkv[:, 0], qkv[:, 1], cos, sin)
    assert got.q.untyped_storage().data_ptr() != got.k.untyped_storage().data_ptr()
    assert torch.equal(got.q, vision_rotary_reference(qkv[:, 0], qkv[:, 1], cos, sin).q)

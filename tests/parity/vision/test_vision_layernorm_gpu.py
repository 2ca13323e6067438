"""GPU: the fused residual add + LayerNorm against the unfused PyTorch reference at the released width (1152), and
the tower taking it for every norm that reads a residual sum."""
from __future__ import annotations

import pytest
import torch

from runtime.kernels.layernorm import add_layernorm, add_layernorm_reference
from services.vision.model import Grid, VisionTower, VisionTowerConfig
from tests.parity.vision.test_vision_tower_gpu import assert_close_bf16

pytestmark = pytest.mark.gpu
layernorm_triton = pytest.importorskip("runtime.kernels.layernorm_triton")  # imports triton

CFG = VisionTowerConfig(out_hidden_size=2048)  # the released widths and eps
SMALL = VisionTowerConfig(depth=3, out_hidden_size=2048, deepstack_visual_indexes=(0, 2))  # real widths, 3 blocks


def case(rows: int, dtype: torch.dtype, residual_stride: int = CFG.hidden_size) -> tuple[torch.Tensor, ...]:
    """A sublayer output y, and a residual stream around 40 (where rounding h and centring both matter), possibly
    the left columns of a wider buffer."""
    torch.manual_seed(rows)
    width = CFG.hidden_size
    y = torch.randn(rows, width, device="cuda").to(dtype)
    residual = (40 + 8 * torch.randn(rows, residual_stride, device="cuda")).to(dtype)[:, :width]
    weight = (1 + 0.3 * torch.randn(width, device="cuda")).to(dtype)
    bias = (0.2 * torch.randn(width, device="cuda")).to(dtype)
    return y, residual, weight, bias


def layer_norm_f64(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    h, weight, bias = h.double(), weight.double(), bias.double()
    centred = h - h.mean(-1, keepdim=True)
    return centred * torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + CFG.layer_norm_eps) * weight + bias


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("rows", "residual_stride"), [(1, 1152), (77, 1152), (4099, 2304), (47_040, 1152)],
                         ids=["one", "few", "strided", "video"])  # 47,040: the 60 s video's patches
def test_fused_matches_the_unfused_reference(dtype: torch.dtype, rows: int, residual_stride: int) -> None:
    y, residual, weight, bias = case(rows, dtype, residual_stride)
    got = add_layernorm(y, residual, weight, bias, CFG.layer_norm_eps)
    want = add_layernorm_reference(y, residual, weight, bias, CFG.layer_norm_eps)
    assert got.residual.is_contiguous() and got.normed.is_contiguous()
    assert torch.equal(got.residual, want.residual)  # the same rounding of h: the residual stream stays bit-exact
    # the norm's float32 statistics are summed in another order than PyTorch's Welford: at most an ulp apart, and
    # no further from LayerNorm in float64 than PyTorch's own
    ulp = torch.finfo(dtype).eps
    torch.testing.assert_close(got.normed.float(), want.normed.float(), rtol=ulp, atol=1e-5)
    exact = layer_norm_f64(want.residual, weight, bias)
    err_fused = (got.normed.double() - exact).abs().mean()
    err_torch = (want.normed.double() - exact).abs().mean()
    assert err_fused <= 1.05 * err_torch, (float(err_fused), float(err_torch))


def refuse(*args: object) -> None:
    raise AssertionError("fp32 must take the PyTorch reference, not the Triton kernel")


def test_fp32_takes_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layernorm_triton, "add_layernorm_triton", refuse)
    y, residual, weight, bias = case(33, torch.float32)
    got = add_layernorm(y, residual, weight, bias, CFG.layer_norm_eps)
    want = add_layernorm_reference(y, residual, weight, bias, CFG.layer_norm_eps)
    assert torch.equal(got.residual, want.residual) and torch.equal(got.normed, want.normed)


def random_state(cfg: VisionTowerConfig) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    with torch.device("meta"):
        shapes = {n: t.shape for n, t in VisionTower(cfg).state_dict().items()}
    shapes["patch_embed.proj.weight"] = torch.Size((cfg.hidden_size, 3, 2, 16, 16))
    return {n: torch.randn(s, generator=gen) * 0.02 for n, s in shapes.items()}


def test_tower_fuses_every_residual_norm_and_matches_the_unfused_tower(monkeypatch: pytest.MonkeyPatch) -> None:
    grids = [Grid(2, 28, 28), Grid(1, 44, 80)]
    patches = torch.randn(sum(g.num_patches for g in grids), SMALL.patch_dim, device="cuda")
    tower = VisionTower.from_state_dict(SMALL, random_state(SMALL), "cuda", torch.bfloat16)
    calls = []
    fused_kernel = layernorm_triton.add_layernorm_triton
    monkeypatch.setattr(layernorm_triton, "add_layernorm_triton", lambda *a: calls.append(1) or fused_kernel(*a))
    fused = tower(patches, grids)
    # embeddings + positions into norm1, then two per block, the last one into the final merger's ln_q
    assert len(calls) == 1 + 2 * SMALL.depth
    monkeypatch.setattr("runtime.kernels.layernorm.use_triton", lambda *tensors: False)
    unfused = tower(patches, grids)
    assert len(calls) == 1 + 2 * SMALL.depth
    assert_close_bf16(fused, unfused)

"""GPU: the FP8 block linears against bf16, per GEMM on the released widths and through the tower.

Tolerances. e4m3 keeps 3 mantissa bits: rounding moves each operand element by up to 2^-4 of its magnitude, ~2.6%
relative RMS per operand on Gaussian-like data, so one GEMM's output moves by ~3.7% (√2 · 2.6%; measured 3.5-3.7%,
cosine ~0.9993). Bounds: 5% and cosine > 0.999 per GEMM. Through the tower the error depends on how large each
block's update is against the residual stream, so two random weight sets bracket it (bounds ~1.5x the errors a CPU
emulation through PyTorch's CPU `torch._scaled_mm` measured on these shapes):
- every tensor N(0, 0.02), LayerNorm weights included (the other GPU tower tests' weights): updates are small
  against the stream; measured 0.5% from the bf16 tower -> bound 2%, cosine > 0.999;
- transformers' init (LayerNorm weight 1, bias 0, linears N(0, 0.02)): updates rival the stream, each block adds its
  GEMMs' full error; measured 3-5% -> bound 7.5%, cosine > 0.997. A trained tower lies between the two.
The norms before qkv and fc1 quantize their rows in the add + LayerNorm pass; that pass equals the norm kernel then
the quantization kernel bit for bit, so the tower's outputs equal those of the FP8 linears quantizing for themselves.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from services.vision.model import Grid, VisionOutput, VisionTower, VisionTowerConfig
from services.vision.model.fp8_linear import Fp8Linear
from services.vision.preprocess import VisionPreprocessor
from runtime.vision_processing import VisionProcessingConfig
from tests.parity.vision.test_vision_tower_gpu import media, no_host_sync

pytestmark = pytest.mark.gpu
BF16 = torch.bfloat16
CFG = VisionTowerConfig(depth=3, out_hidden_size=2048, deepstack_visual_indexes=(0, 1, 2))
GRIDS = [Grid(1, 28, 28), Grid(4, 28, 28), Grid(1, 44, 80)]


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(F.cosine_similarity(a.double().flatten(), b.double().flatten(), dim=0))


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def random_state(hf_init: bool) -> dict[str, torch.Tensor]:
    """Checkpoint-shaped tensors N(0, 0.02); with `hf_init`, LayerNorms at weight 1 and every bias 0 instead."""
    gen = torch.Generator().manual_seed(0)
    with torch.device("meta"):
        shapes = {n: t.shape for n, t in VisionTower(CFG).state_dict().items()}
    shapes["patch_embed.proj.weight"] = torch.Size((CFG.hidden_size, 3, 2, 16, 16))
    state = {n: torch.randn(s, generator=gen) * 0.02 for n, s in shapes.items()}
    if hf_init:
        for name, shape in shapes.items():
            is_norm = "norm" in name or "ln_q" in name
            if name.endswith("bias"):
                state[name] = torch.zeros(shape)
            elif is_norm:
                state[name] = torch.ones(shape)
    return state


def errors(got: VisionOutput, want: VisionOutput) -> list[tuple[float, float]]:
    """(relative error, cosine) of the merged output and of each deepstack output."""
    pairs = [(got.merged, want.merged), *zip(got.deepstack, want.deepstack)]
    for a, _ in pairs:
        assert torch.isfinite(a).all()
    return [(rel_err(a, b), cosine(a, b)) for a, b in pairs]


@pytest.mark.parametrize(("in_features", "out_features", "gelu"),
                         [(1152, 3456, False), (1152, 1152, False), (1152, 4304, False), (4304, 1152, True)],
                         ids=["qkv", "proj", "fc1", "fc2"])
def test_each_block_gemm_tracks_bf16(in_features: int, out_features: int, gelu: bool) -> None:
    gen = torch.Generator().manual_seed(in_features + out_features)
    layer = torch.nn.Linear(in_features, out_features).requires_grad_(False)
    layer.weight.copy_(torch.randn(out_features, in_features, generator=gen) * 0.02)
    layer.bias.copy_(torch.randn(out_features, generator=gen) * 0.02)
    layer = layer.to("cuda", BF16)
    x = torch.randn(4096, in_features, generator=gen).to("cuda", BF16)
    want = layer(F.gelu(x, approximate="tanh") if gelu else x)
    fp8 = Fp8Linear.from_linear(layer)
    got = fp8(x, gelu_tanh=gelu)
    assert got.dtype == BF16 and got.shape == want.shape
    assert rel_err(got, want) < 0.05 and cosine(got, want) > 0.999
    fp8.fast_accum = False  # promotion to float32 in registers: differs from fast accumulation far below e4m3's error
    assert rel_err(fp8(x, gelu_tanh=gelu), got) < 0.01


@pytest.mark.parametrize(("hf_init", "max_rel", "min_cos"), [(False, 0.02, 0.999), (True, 0.075, 0.997)],
                         ids=["small-updates", "transformers-init"])
def test_fp8_tower_tracks_bf16_tower(hf_init: bool, max_rel: float, min_cos: float) -> None:
    state = random_state(hf_init)
    gen = torch.Generator().manual_seed(1)
    patches = torch.randn(sum(g.num_patches for g in GRIDS), CFG.patch_dim, generator=gen).to("cuda", BF16)
    want = VisionTower.from_state_dict(CFG, state, "cuda", BF16)(patches, GRIDS)
    tower = VisionTower.from_state_dict(CFG, state, "cuda", BF16, linear_dtype="fp8")
    assert tower.linear_dtype == "fp8"
    with no_host_sync():
        got = tower(patches, GRIDS)
    for rel, cos in errors(got, want):
        assert rel < max_rel and cos > min_cos, (rel, cos)


def test_fp8_load_runs_the_demo_checkpoint(demo_ckpt: Path) -> None:
    pre = VisionPreprocessor(VisionProcessingConfig.from_checkpoint(demo_ckpt), "cuda")
    patches, grids = pre.batch(media())
    want = VisionTower.load(demo_ckpt, "cuda", BF16)(patches, grids)
    tower = VisionTower.load(demo_ckpt, "cuda", BF16, linear_dtype="fp8")
    assert all(isinstance(block.mlp.linear_fc2, Fp8Linear) for block in tower.blocks)
    got = tower(patches, grids)
    assert got.merged.shape == want.merged.shape and len(got.deepstack) == len(want.deepstack)
    errors(got, want)  # finite everywhere


def test_norms_quantize_for_qkv_and_fc1_and_change_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    import services.vision.model.layers as layers
    import services.vision.model.tower as tower_module
    from runtime.kernels import layernorm_triton

    tower = VisionTower.from_state_dict(CFG, random_state(hf_init=False), "cuda", BF16, linear_dtype="fp8")
    gen = torch.Generator().manual_seed(2)
    patches = torch.randn(sum(g.num_patches for g in GRIDS), CFG.patch_dim, generator=gen).to("cuda", BF16)
    calls = []
    fused_kernel = layernorm_triton.add_layernorm_fp8_triton
    monkeypatch.setattr(layernorm_triton, "add_layernorm_fp8_triton", lambda *a: calls.append(1) or fused_kernel(*a))
    fused = tower(patches, GRIDS)
    assert len(calls) == 2 * CFG.depth  # every norm1 and norm2; the final merger's ln_q stays bf16
    for module in (layers, tower_module):
        monkeypatch.setattr(module, "reads_fp8_rows", lambda layer: False)  # each FP8 linear quantizes its input
    separate = tower(patches, GRIDS)
    assert len(calls) == 2 * CFG.depth
    pairs = [(fused.merged, separate.merged), *zip(fused.deepstack, separate.deepstack)]
    assert all(torch.equal(a, b) for a, b in pairs), errors(fused, separate)

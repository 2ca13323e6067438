"""FP8 block linears on CPU: the linear_dtype checks at load, `Fp8Linear`'s arithmetic through PyTorch's CPU
`torch._scaled_mm`, the tower's swap of its block linears and its norms quantizing the rows those read (the GPU
tests time and bound the real thing)."""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from runtime.kernels.fp8_quant import dequantize_rows, quantize_rows_reference
from services.vision.model import Grid, VisionTower, VisionTowerConfig
from services.vision.model.fp8_linear import Fp8Linear, check_linear_dtype
from services.vision.model.layers import VisionMLP
from tests.unit.vision.test_vision_tower import CFG, random_state

CUDA = torch.device("cuda")


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(F.cosine_similarity(a.double().flatten(), b.double().flatten(), dim=0))


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def linear(in_features: int, out_features: int, seed: int) -> nn.Linear:
    torch.manual_seed(seed)
    layer = nn.Linear(in_features, out_features)
    nn.init.normal_(layer.bias, std=0.5)
    return layer.requires_grad_(False)


def test_unknown_linear_dtype_names_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match=r"linear_dtype='int8' is not supported; use one of \('native', 'fp8'\)"):
        check_linear_dtype("int8", torch.device("cpu"), torch.float32)


def test_native_is_allowed_everywhere() -> None:
    check_linear_dtype("native", torch.device("cpu"), torch.float32)
    check_linear_dtype("native", CUDA, torch.float16)


def test_fp8_on_cpu_says_it_needs_fp8_tensor_cores() -> None:
    with pytest.raises(ValueError, match=r"needs a CUDA GPU with FP8 tensor cores .* loads on cpu; use "
                                         r"linear_dtype='native'"):
        check_linear_dtype("fp8", torch.device("cpu"), torch.bfloat16)


def test_fp8_before_ada_names_the_capability(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))  # an A100
    with pytest.raises(ValueError, match=r"compute capability >= 8\.9.*has compute capability 8\.0"):
        check_linear_dtype("fp8", CUDA, torch.bfloat16)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_fp8_needs_bfloat16(monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))  # an H100/H200
    with pytest.raises(ValueError, match="needs dtype bfloat16"):
        check_linear_dtype("fp8", CUDA, dtype)
    check_linear_dtype("fp8", CUDA, torch.bfloat16)


def test_tower_refuses_fp8_on_cpu_before_touching_weights(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="FP8 tensor cores"):
        VisionTower.from_state_dict(CFG, random_state(CFG), "cpu", torch.bfloat16, linear_dtype="fp8")
    # an empty directory: the check fails before config.json or any weight is read
    with pytest.raises(ValueError, match="FP8 tensor cores"):
        VisionTower.load(tmp_path, "cpu", torch.bfloat16, linear_dtype="fp8")
    with pytest.raises(ValueError, match="not supported"):
        VisionTower.from_state_dict(CFG, random_state(CFG), "cpu", torch.float32, linear_dtype="e4m3")


def test_fp8_linear_needs_widths_divisible_by_16() -> None:
    with pytest.raises(ValueError, match="divisible by 16, got 40 -> 48"):
        Fp8Linear.from_linear(linear(40, 48, seed=0))


def test_fp8_linear_is_the_gemm_of_its_quantized_operands() -> None:
    layer = linear(64, 48, seed=1)
    fp8 = Fp8Linear.from_linear(layer)
    assert fp8.weight.dtype == torch.float8_e4m3fn and fp8.weight_scale.shape == (1, 48)
    x = torch.randn(20, 64) * 3
    want = dequantize_rows(quantize_rows_reference(x)) @ dequantize_rows(quantize_rows_reference(layer.weight)).T
    torch.testing.assert_close(fp8(x), want + layer.bias, rtol=1e-5, atol=1e-5)
    # against the unquantized layer: e4m3 keeps 3 mantissa bits, ~3-4% relative RMS error per GEMM on these inputs
    assert rel_err(fp8(x), layer(x)) < 0.05 and cosine(fp8(x), layer(x)) > 0.999


def test_fp8_linear_reads_gelu_of_its_input_when_asked() -> None:
    fp8 = Fp8Linear.from_linear(linear(64, 32, seed=2))
    x = torch.randn(9, 64) * 2
    assert torch.equal(fp8(x, gelu_tanh=True), fp8(F.gelu(x, approximate="tanh")))


@pytest.mark.parametrize("hidden_act", ["gelu_pytorch_tanh", "gelu"])
def test_fp8_mlp_applies_its_own_gelu(hidden_act: str) -> None:
    """The tanh form fused into fc2's quantization, the exact form before it: both as the unquantized MLP."""
    cfg = VisionTowerConfig(hidden_size=32, intermediate_size=64, num_heads=2, num_position_embeddings=64,
                            depth=1, deepstack_visual_indexes=(0,), hidden_act=hidden_act)
    torch.manual_seed(3)
    mlp = VisionMLP(cfg).requires_grad_(False)
    x = torch.randn(12, 32)
    want = mlp(x)
    fc1, fc2 = Fp8Linear.from_linear(mlp.linear_fc1), Fp8Linear.from_linear(mlp.linear_fc2)
    mlp.linear_fc1, mlp.linear_fc2 = fc1, fc2
    got = mlp(x)
    torch.testing.assert_close(got, fc2(F.gelu(fc1(x), approximate=mlp.approximate)), rtol=0, atol=0)
    assert rel_err(got, want) < 0.08 and cosine(got, want) > 0.995  # two e4m3 GEMMs in a row


def test_tower_swaps_only_the_block_linears() -> None:
    tower = VisionTower.from_state_dict(CFG, random_state(CFG), "cpu", torch.float32)
    grids = [Grid(1, 4, 6), Grid(2, 4, 4)]
    patches = torch.randn(sum(g.num_patches for g in grids), CFG.patch_dim)
    want = tower(patches, grids)
    assert tower.linear_dtype == "native"
    tower.quantize_block_linears()
    assert tower.linear_dtype == "fp8"
    for block in tower.blocks:
        for layer in (block.attn.qkv, block.attn.proj, block.mlp.linear_fc1, block.mlp.linear_fc2):
            assert isinstance(layer, Fp8Linear)
    assert isinstance(tower.patch_embed.proj, nn.Linear)
    merger_layers = [layer for merger in (*tower.merger_list, tower.merger) for layer in merger.mlp]
    assert not any(isinstance(layer, Fp8Linear) for layer in merger_layers)
    got = tower(patches, grids)
    for a, b in [(got.merged, want.merged), *zip(got.deepstack, want.deepstack)]:
        # these weights (LayerNorm weights ~0.2 too) keep each block's update small against the residual stream, so
        # the outputs move far less than one GEMM's ~3.5% (0.2-0.3% measured)
        assert rel_err(a, b) < 0.02 and cosine(a, b) > 0.999


def test_fp8_linear_takes_rows_already_quantized() -> None:
    """The add + LayerNorm before qkv and fc1 hands over `QuantizedRows`: the GEMM reads them as they are."""
    fp8 = Fp8Linear.from_linear(linear(64, 48, seed=4).to(torch.bfloat16))
    x = (torch.randn(10, 64) * 3).to(torch.bfloat16)
    got = fp8(quantize_rows_reference(x))
    assert got.dtype == torch.bfloat16 and got.shape == (10, 48)  # the layer's dtype: the rows carry none
    assert torch.equal(got, fp8(x))


def test_fp8_linear_refuses_gelu_on_rows_already_quantized() -> None:
    fp8 = Fp8Linear.from_linear(linear(64, 32, seed=5))
    with pytest.raises(ValueError, match="gelu_tanh applies while rows are quantized"):
        fp8(quantize_rows_reference(torch.randn(3, 64)), gelu_tanh=True)


def test_fp8_tower_quantizes_inside_the_norms_before_qkv_and_fc1(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every norm1 and norm2 writes e4m3 rows for its FP8 linear (the final merger's ln_q does not), and the outputs
    equal those of the FP8 linears quantizing the norms' rows themselves, bit for bit."""
    import services.vision.model.layers as layers
    import services.vision.model.tower as tower_module

    tower = VisionTower.from_state_dict(CFG, random_state(CFG), "cpu", torch.float32)
    tower.quantize_block_linears()
    grids = [Grid(1, 4, 6), Grid(2, 4, 4)]
    patches = torch.randn(sum(g.num_patches for g in grids), CFG.patch_dim)
    calls = Counter()

    def counted(name: str, fn: Callable) -> Callable:
        def call(*args: object) -> object:
            calls[name] += 1
            return fn(*args)

        return call

    monkeypatch.setattr(layers, "add_layernorm_fp8", counted("fp8", layers.add_layernorm_fp8))
    monkeypatch.setattr(layers, "add_layernorm", counted("plain", layers.add_layernorm))
    got = tower(patches, grids)
    assert calls == {"fp8": 2 * CFG.depth, "plain": 1}
    for module in (layers, tower_module):
        monkeypatch.setattr(module, "reads_fp8_rows", lambda layer: False)  # each FP8 linear quantizes its input
    want = tower(patches, grids)
    assert calls == {"fp8": 2 * CFG.depth, "plain": 2 + 2 * CFG.depth}
    for a, b in [(got.merged, want.merged), *zip(got.deepstack, want.deepstack)]:
        assert torch.equal(a, b)

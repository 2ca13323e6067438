"""Code2Wav's time-major conv layers equal PyTorch's channels-first Conv1d / ConvTranspose1d on the same weights."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from services.talker.model.code2wav_layers import CausalConv, CausalTransConv, ConvNeXt, SnakeBeta
from services.talker.model.code2wav_snake import snake_reference


def randomise(module: nn.Module, seed: int) -> nn.Module:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return module.eval()


@pytest.mark.parametrize(("kernel", "dilation", "groups"), [(7, 1, 1), (7, 3, 1), (1, 1, 1), (7, 1, 6)])
def test_causal_conv_is_left_padded_conv1d(kernel: int, dilation: int, groups: int) -> None:
    conv = randomise(CausalConv(6, 6 if groups > 1 else 5, kernel, dilation, groups), seed=kernel + dilation)
    x = torch.randn(2, 13, 6, generator=torch.Generator().manual_seed(0))  # (B, T, C)
    with torch.no_grad():
        got = conv(x)
        left = (kernel - 1) * dilation
        ref = conv.conv(F.pad(x.transpose(1, 2), (left, 0))).transpose(1, 2)  # channels-first reference
        pre_padded = conv(F.pad(x, (0, 0, left, 0)), padded=True)
    assert got.shape == ref.shape == (2, 13, conv.conv.out_channels)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(pre_padded, got, rtol=0, atol=0)


@pytest.mark.parametrize(("kernel", "stride"), [(16, 8), (6, 3), (2, 2), (9, 3)])
def test_trans_conv_is_trimmed_conv_transpose(kernel: int, stride: int) -> None:
    layer = randomise(CausalTransConv(5, 4, kernel, stride), seed=kernel)
    x = torch.randn(3, 7, 5, generator=torch.Generator().manual_seed(1))  # (B, L, C_in)
    with torch.no_grad():
        got = layer(x)
        full = layer.conv(x.transpose(1, 2))  # (B, C_out, (L-1)*stride + kernel)
        trim = kernel - stride
        ref = full[..., trim : full.shape[-1] - trim].transpose(1, 2)
    assert got.shape == ref.shape == (3, (7 - kernel // stride + 1) * stride, 4)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)


def test_trans_conv_kernel_must_be_a_multiple_of_stride() -> None:
    with pytest.raises(ValueError, match="kernel=5, stride=2"):
        CausalTransConv(4, 4, 5, 2)


def test_derived_weights_follow_a_reload() -> None:
    """The regrouped GEMM weight and the snake coefficients are cached; loading new weights must refresh them."""
    trans, act = randomise(CausalTransConv(4, 3, 4, 2), seed=0), randomise(SnakeBeta(3), seed=1)
    x = torch.randn(1, 5, 4, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        before = act(trans(x))
        trans.load_state_dict(randomise(CausalTransConv(4, 3, 4, 2), seed=3).state_dict())
        act.load_state_dict(randomise(SnakeBeta(3), seed=4).state_dict())
        after = act(trans(x))
        ref = act(trans.conv(x.transpose(1, 2))[..., 2:-2].transpose(1, 2))
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, ref, rtol=1e-5, atol=1e-6)


def test_conv_weight_layout_survives_load_and_cast() -> None:
    """Conv weights are stored (C_out, K, C_in) so cuDNN reads them as NHWC in place; loading or casting keeps that."""
    conv = CausalConv(4, 5, 7)
    conv.load_state_dict({"conv.weight": torch.randn(5, 4, 7), "conv.bias": torch.randn(5)})
    conv.conv.weight.data = conv.conv.weight.data.to(torch.bfloat16)
    assert conv.conv.weight.stride() == (7 * 4, 1, 4)


def test_snake_formula_and_padding() -> None:
    act = randomise(SnakeBeta(3), seed=5)
    x = torch.randn(2, 4, 3, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        alpha, beta = act.alpha.exp(), act.beta.exp()
        ref = x + (1.0 / (beta + 1e-9)) * torch.sin(x * alpha).pow(2)
        got = act(x, left_pad=2)
    assert got.shape == (2, 6, 3)
    assert torch.equal(got[:, :2], torch.zeros(2, 2, 3))
    torch.testing.assert_close(got[:, 2:], ref, rtol=1e-6, atol=1e-6)
    a, inv_b = act.coefficients()
    half = snake_reference(x.bfloat16(), a, inv_b)
    assert half.dtype == torch.bfloat16  # computed in fp32, rounded once
    torch.testing.assert_close(half.float(), snake_reference(x.bfloat16().float(), a, inv_b), rtol=1e-2, atol=1e-2)


def test_convnext_time_major_matches_channels_first() -> None:
    block = randomise(ConvNeXt(8), seed=7)
    x = torch.randn(2, 9, 8, generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        got = block(x)
        h = block.dwconv.conv(F.pad(x.transpose(1, 2), (6, 0))).transpose(1, 2)
        ref = x + block.gamma * block.pwconv2(F.gelu(block.pwconv1(block.norm(h))))
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)

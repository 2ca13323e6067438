"""Code2Wav's conv layers: causal padding (fused or not), trimmed transposed convs, SnakeBeta, input layouts."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from services.talker.model.code2wav import Code2Wav
from services.talker.model.code2wav_layers import CausalConv, CausalTransConv, SnakeBeta
from services.talker.model.code2wav_snake import rows_uniform, snake_reference
from tests.unit.talker.talker_tiny import tiny_config


def randomise(module: nn.Module, seed: int) -> nn.Module:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return module.eval()


@pytest.mark.parametrize(("kernel", "dilation", "groups"), [(7, 1, 1), (7, 3, 1), (1, 1, 1), (7, 1, 6)])
def test_causal_conv_is_left_padded_conv1d(kernel: int, dilation: int, groups: int) -> None:
    conv = randomise(CausalConv(6, 6 if groups > 1 else 5, kernel, dilation, groups), seed=kernel + dilation)
    x = torch.randn(2, 6, 13, generator=torch.Generator().manual_seed(0))  # (B, C, T)
    left = (kernel - 1) * dilation
    with torch.no_grad():
        got = conv(x)
        ref = F.conv1d(F.pad(x, (left, 0)), conv.conv.weight, conv.conv.bias, dilation=dilation, groups=groups)
        pre_padded = conv(F.pad(x, (left, 0)), padded=True)
    assert got.shape == ref.shape == (2, conv.conv.out_channels, 13)
    torch.testing.assert_close(got, ref, rtol=0, atol=0)
    torch.testing.assert_close(pre_padded, got, rtol=0, atol=0)
    # causal: changing the last input step changes only the last output step
    x2 = x.clone()
    x2[..., -1] += 1.0
    with torch.no_grad():
        assert torch.equal(conv(x2)[..., :-1], got[..., :-1])


@pytest.mark.parametrize(("kernel", "stride"), [(16, 8), (6, 3), (2, 2)])
def test_trans_conv_is_trimmed_conv_transpose(kernel: int, stride: int) -> None:
    layer = randomise(CausalTransConv(5, 4, kernel, stride), seed=kernel)
    x = torch.randn(3, 5, 7, generator=torch.Generator().manual_seed(1))  # (B, C_in, L)
    with torch.no_grad():
        got = layer(x)
        full = F.conv_transpose1d(x, layer.conv.weight, layer.conv.bias, stride=stride)
    trim = kernel - stride
    assert got.shape == (3, 4, (7 - 1) * stride + 2 * stride - kernel)
    torch.testing.assert_close(got, full[..., trim : full.shape[-1] - trim], rtol=0, atol=0)
    assert rows_uniform(got)  # the snake after it reads the trimmed view in place


def test_rows_uniform() -> None:
    x = torch.randn(2, 3, 10)
    assert rows_uniform(x) and rows_uniform(x[..., 2:7]) and rows_uniform(x[:1, :, ::1])
    assert not rows_uniform(x[:, :2])  # batch stride no longer C * row stride
    assert not rows_uniform(x.transpose(1, 2).contiguous().transpose(1, 2))  # channels-last
    assert not rows_uniform(x[..., ::2])


def test_snake_coefficients_follow_a_reload() -> None:
    """The snake coefficients are cached; loading new weights must refresh them."""
    act = randomise(SnakeBeta(3), seed=1)
    x = torch.randn(1, 3, 5, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        before = act(x)
        act.load_state_dict(randomise(SnakeBeta(3), seed=4).state_dict())
        after = act(x)
        ref = x + (1.0 / (act.beta.exp() + 1e-9))[:, None] * torch.sin(x * act.alpha.exp()[:, None]).pow(2)
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, ref, rtol=1e-6, atol=1e-6)


def test_snake_formula_and_padding() -> None:
    act = randomise(SnakeBeta(3), seed=5)
    x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        alpha, beta = act.alpha.exp()[:, None], act.beta.exp()[:, None]
        ref = x + (1.0 / (beta + 1e-9)) * torch.sin(x * alpha).pow(2)
        got = act(x, left_pad=2)
    assert got.shape == (2, 3, 6)
    assert torch.equal(got[..., :2], torch.zeros(2, 3, 2))
    torch.testing.assert_close(got[..., 2:], ref, rtol=1e-6, atol=1e-6)
    a, inv_b = act.coefficients()
    half = snake_reference(x.bfloat16(), a, inv_b)
    assert half.dtype == torch.bfloat16  # computed in fp32, rounded once
    torch.testing.assert_close(half.float(), snake_reference(x.bfloat16().float(), a, inv_b), rtol=1e-2, atol=1e-2)


def test_vocoder_convs_read_contiguous_channels_first() -> None:
    """Every conv of the vocoder gets a contiguous `(B, C, T)` input: a strided one (a transposed view) would make
    cuDNN pick its channels-last kernels, which ran the wide late stages 7x slower on the H200."""
    c2w = Code2Wav(tiny_config().code2wav).eval()
    seen: list[tuple[str, bool]] = []
    for name, m in c2w.named_modules():
        if isinstance(m, (nn.Conv1d, nn.ConvTranspose1d)):
            m.register_forward_pre_hook(lambda mod, args, name=name: seen.append((name, args[0].is_contiguous())))
    with torch.no_grad():
        c2w.vocode(torch.randn(2, 5, c2w.cfg.hidden_size).transpose(0, 1).contiguous().transpose(0, 1))
    assert len(seen) == sum(isinstance(m, (nn.Conv1d, nn.ConvTranspose1d)) for m in c2w.modules())
    assert [name for name, contiguous in seen if not contiguous] == []

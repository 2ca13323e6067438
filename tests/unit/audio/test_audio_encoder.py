"""AudioEncoder behaviour beyond parity: a clip's output ignores its batch and the launch size; fp16 stays finite."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from services.audio.model import AudioEncoder, AudioEncoderConfig
from services.audio.model.attention import padded_window_attention
from services.audio.model.layers import FP16_CLAMP, EncoderLayer
from services.audio.model.graphs import CudaGraphs, fill_mel
from services.audio.model.plan import plan_batch, plan_bucketed


@pytest.fixture(scope="module")
def encoder(demo_ckpt: Path) -> AudioEncoder:
    return AudioEncoder.load(demo_ckpt, "cpu", torch.float32)


def test_loads_only_the_audio_tower(encoder: AudioEncoder) -> None:
    names = set(encoder.state_dict())
    assert "stem.conv2d1.weight" in names and "layers.0.self_attn.qkv.weight" in names
    assert not any("visual" in n or "thinker" in n for n in names)
    assert encoder.stem.positions.shape == (13, encoder.config.d_model)


def test_output_ignores_batch_companions_and_launch_size(demo_ckpt: Path, encoder: AudioEncoder) -> None:
    torch.manual_seed(0)
    mels = [torch.randn(128, t) for t in (1234, 30, 60, 2000)]
    batched = encoder(mels)
    small_launches = AudioEncoder.load(demo_ckpt, "cpu", torch.float32, chunks_per_launch=3)(mels)
    for i, mel in enumerate(mels):
        (alone,) = encoder([mel])
        torch.testing.assert_close(batched[i], alone, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(small_launches[i], alone, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype,rel", [(torch.bfloat16, 5e-2), (torch.float16, 1e-2)])
def test_half_precision_on_cpu_stays_close(demo_ckpt: Path, encoder: AudioEncoder, dtype: torch.dtype,
                                           rel: float) -> None:
    torch.manual_seed(2)
    mels = [torch.randn(128, t) for t in (30, 1234, 57)]  # short clips exercise the stem masks in `dtype`
    half = AudioEncoder.load(demo_ckpt, "cpu", dtype)
    for ours, ref in zip(half(mels), encoder(mels)):
        assert ours.dtype == dtype
        assert (ours.float() - ref).abs().max() <= rel * ref.abs().max()


def test_encode_returns_the_packed_outputs(encoder: AudioEncoder) -> None:
    mels = [torch.randn(128, t) for t in (250, 30)]
    plan = encoder.plan([250, 30])
    packed = encoder.encode(mels, plan)
    assert packed.shape == (plan.num_tokens, encoder.config.output_dim) == (33 + 4, encoder.config.output_dim)
    torch.testing.assert_close(torch.cat(encoder(mels)), packed, rtol=0, atol=0)


def test_empty_batch_raises(encoder: AudioEncoder) -> None:
    with pytest.raises(ValueError, match="at least one clip"):
        encoder([])


def test_fp16_residual_is_clamped() -> None:
    config = AudioEncoderConfig(d_model=16, encoder_attention_heads=2, encoder_ffn_dim=32)
    layer = EncoderLayer(config).half()
    with torch.no_grad():
        layer.fc2.bias.fill_(6e4)  # pushes the residual past fp16's range
        layer.fc2.weight.zero_()
    plan = plan_batch([200], config)
    h = torch.full((plan.num_tokens, 16), 6e4, dtype=torch.float16)
    out, normed = layer(h, layer.self_attn_layer_norm(h), plan, padded_window_attention, layer.final_layer_norm)
    assert torch.isfinite(out).all() and out.max().item() == pytest.approx(FP16_CLAMP, rel=1e-3)
    torch.testing.assert_close(normed, layer.final_layer_norm(out))


def test_bucketed_plan_gives_the_eager_tokens(encoder: AudioEncoder) -> None:
    """The CUDA-graph path's computation, run eagerly on CPU: full-chunk padding, masks for short clips, padding
    rows in a window of their own, the mel in a static buffer with stale rows past the clips."""
    torch.manual_seed(3)
    mels = [torch.randn(128, t) for t in (30, 1234, 57)]
    plan = plan_bucketed([m.shape[1] for m in mels], encoder.config)
    static = torch.randn(plan.zero_frame + 1, 128)  # stale frames everywhere...
    static[plan.zero_frame] = 0  # ...but the zero frame, which a graph's buffer keeps from its creation
    fill_mel(static, mels)
    with torch.inference_mode():
        out = encoder.run_plan(static, plan)
    assert out.shape == (plan.num_rows, encoder.config.output_dim)
    torch.testing.assert_close(out[:plan.num_tokens], torch.cat(encoder(mels)), rtol=1e-5, atol=1e-5)


def test_cuda_graphs_need_a_cuda_device(demo_ckpt: Path) -> None:
    with pytest.raises(ValueError, match="cuda_graphs=True needs a CUDA device"):
        AudioEncoder.load(demo_ckpt, "cpu", torch.float32, cuda_graphs=True)


def test_cuda_graph_limits_are_checked(encoder: AudioEncoder) -> None:
    with pytest.raises(ValueError, match="max_chunks >= 1"):
        CudaGraphs(encoder.config, max_chunks=0)
    graphs = CudaGraphs(encoder.config, max_chunks=6)
    assert graphs.fits([500, 99]) and not graphs.fits([500, 101])

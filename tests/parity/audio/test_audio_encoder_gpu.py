"""GPU path of the audio stage against the exact CPU path: bf16 varlen attention, padded SDPA, fp16, on-device
log-mel, and no host sync anywhere in features + encoder (`torch.cuda.set_sync_debug_mode("error")`)."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from services.audio.features import LogMelExtractor, MelConfig
from services.audio.model import AudioEncoder
from services.audio.model.attention import varlen_available
from tests.parity.audio.audio_reference import MIXED_SAMPLES, assert_close, clip

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")
FRAMES = [3000, 790, 30, 1234, 57, 200, 6001]


@pytest.fixture(scope="module")
def cpu_encoder(demo_ckpt: Path) -> AudioEncoder:
    return AudioEncoder.load(demo_ckpt, "cpu", torch.float32)


@pytest.fixture(scope="module")
def mels() -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [torch.randn(128, t) for t in FRAMES]


@pytest.fixture(scope="module")
def no_tf32() -> Iterator[None]:
    """Exact fp32 on the GPU: cuDNN convolutions default to TF32."""
    before = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before


def run_on(encoder: AudioEncoder, mels: list[torch.Tensor]) -> list[torch.Tensor]:
    return [out.float().cpu() for out in encoder([m.to(encoder.device) for m in mels])]


def test_auto_backend_on_cuda_bf16_is_varlen() -> None:
    assert varlen_available(CUDA, torch.bfloat16), "torch.nn.attention.varlen is missing: the GPU path falls back"


@pytest.mark.parametrize("attention", ["auto", "padded"])
@pytest.mark.parametrize("dtype,rel", [(torch.bfloat16, 5e-2), (torch.float16, 1e-2)])
def test_half_precision_matches_cpu_fp32(demo_ckpt: Path, cpu_encoder: AudioEncoder, mels: list[torch.Tensor],
                                         attention: str, dtype: torch.dtype, rel: float) -> None:
    gpu = AudioEncoder.load(demo_ckpt, CUDA, dtype, attention=attention)
    for ours, ref in zip(run_on(gpu, mels), cpu_encoder(mels)):
        assert_close(ours, ref, rel=rel)  # CPU bf16 of the same demo model lands at ~1.2e-2


def test_fp32_padded_matches_cpu(demo_ckpt: Path, cpu_encoder: AudioEncoder, mels: list[torch.Tensor],
                                 no_tf32: None) -> None:
    gpu = AudioEncoder.load(demo_ckpt, CUDA, torch.float32, attention="padded")
    for ours, ref in zip(run_on(gpu, mels), cpu_encoder(mels)):
        assert_close(ours, ref, rel=1e-4)


def test_log_mel_on_gpu_matches_cpu(demo_ckpt: Path) -> None:
    config = MelConfig.from_checkpoint(demo_ckpt)
    clips = [torch.from_numpy(clip(n, seed=i)) for i, n in enumerate(MIXED_SAMPLES)]
    cpu = LogMelExtractor(config, "cpu")(clips)
    gpu = LogMelExtractor(config, CUDA)([c.to(CUDA) for c in clips])
    for ours, ref in zip(gpu, cpu):
        assert_close(ours.cpu(), ref, rel=1e-4)


def test_sync_debug_mode_catches_a_sync() -> None:
    """The guard below is real: an `.item()` under it raises."""
    x = torch.ones(1, device=CUDA)
    torch.cuda.set_sync_debug_mode("error")
    try:
        with pytest.raises(RuntimeError):
            x.item()
    finally:
        torch.cuda.set_sync_debug_mode(0)


@pytest.mark.parametrize("attention", ["auto", "padded"])
def test_features_and_forward_have_no_host_sync(demo_ckpt: Path, attention: str) -> None:
    extractor = LogMelExtractor(MelConfig.from_checkpoint(demo_ckpt), CUDA)
    encoder = AudioEncoder.load(demo_ckpt, CUDA, torch.bfloat16, attention=attention)
    waves = [torch.from_numpy(clip(n, seed=i)).to(CUDA) for i, n in enumerate(MIXED_SAMPLES)]
    encoder(extractor(waves))  # warm-up: lazy CUDA/cuDNN initialisation may sync once
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        outs = encoder(extractor(waves))
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    assert [o.shape[0] for o in outs] == [encoder.plan([n // 160]).num_tokens for n in MIXED_SAMPLES]
    assert all(torch.isfinite(o).all() for o in outs)

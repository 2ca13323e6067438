"""GPU path of the audio stage against the exact CPU path: bf16 varlen attention, padded SDPA, fp16, on-device
log-mel, CUDA-graph replay against the eager path, and no host sync anywhere in features + encoder
(`torch.cuda.set_sync_debug_mode("error")`)."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from services.audio.features import LogMelExtractor, MelConfig
from services.audio.model import AudioEncoder
from services.audio.model.attention import varlen_available
from services.audio.model.graphs import CudaGraphs
from services.audio.model.layers import add_layernorm
from services.audio.model.stem import bias_gelu_, conv1_gelu, conv1_gelu_reference
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
    assert varlen_available(CUDA, torch.bfloat16), "flash attention is missing: the GPU path falls back"


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


@pytest.fixture(scope="module")
def graphed_pair(demo_ckpt: Path) -> tuple[AudioEncoder, AudioEncoder]:
    """(eager, graphed) bf16 encoders of the same weights."""
    eager = AudioEncoder.load(demo_ckpt, CUDA, torch.bfloat16)
    return eager, AudioEncoder.load(demo_ckpt, CUDA, torch.bfloat16, cuda_graphs=True)


@pytest.mark.parametrize("frames", [[500], [401], [30], [1234, 57], [99, 800, 5], [3200]])
def test_cuda_graph_replay_matches_eager(graphed_pair: tuple[AudioEncoder, AudioEncoder], frames: list[int]) -> None:
    eager, graphed = graphed_pair
    torch.manual_seed(sum(frames))
    mels = [torch.randn(128, t, device=CUDA) for t in frames]
    replays = graphed.graphs.replays
    for _ in range(2):  # the capture's own replay, then a plain one
        for ours, ref in zip(graphed(mels), eager(mels)):
            assert ours.shape == ref.shape
            assert_close(ours.float().cpu(), ref.float().cpu(), rel=2e-2)  # other conv/GEMM shapes, other rounding
    assert graphed.graphs.replays == replays + 2


def test_cuda_graph_fp32_matches_cpu(demo_ckpt: Path, cpu_encoder: AudioEncoder, no_tf32: None) -> None:
    """Exact arithmetic (fp32, padded attention): the graph's bucketed layout changes nothing."""
    graphed = AudioEncoder.load(demo_ckpt, CUDA, torch.float32, attention="padded", cuda_graphs=True)
    torch.manual_seed(5)
    mels = [torch.randn(128, t) for t in (30, 1234, 57)]
    for ours, ref in zip(run_on(graphed, mels), cpu_encoder(mels)):
        assert_close(ours, ref, rel=1e-4)
    assert graphed.graphs.captures == 1


def test_one_graph_per_bucket_lru_bounded_and_big_batches_eager(demo_ckpt: Path) -> None:
    graphed = AudioEncoder.load(demo_ckpt, CUDA, torch.bfloat16, cuda_graphs=True)
    graphed.graphs = CudaGraphs(graphed.config, max_chunks=8, max_graphs=2)
    mel = lambda t: torch.randn(128, t, device=CUDA)  # noqa: E731
    for frames in (500, 401, 477):  # one bucket: (5,)
        graphed([mel(frames)])
    assert graphed.graphs.captures == 1 and graphed.graphs.replays == 3
    graphed([mel(200)])
    graphed([mel(30)])  # a third bucket evicts the least recently used, (5,)
    assert list(graphed.graphs.graphs) == [(2,), (0,)] and graphed.graphs.captures == 3
    graphed([mel(900)])  # 9 chunks > max_chunks: eager
    assert graphed.graphs.replays == 5


def test_graph_replay_has_no_host_sync(graphed_pair: tuple[AudioEncoder, AudioEncoder]) -> None:
    _, graphed = graphed_pair
    mels = [torch.randn(128, 480, device=CUDA)]
    graphed(mels)  # capture (synchronises by design)
    torch.cuda.synchronize()
    replays = graphed.graphs.replays
    torch.cuda.set_sync_debug_mode("error")
    try:
        (out,) = graphed([torch.randn(128, 433, device=CUDA)])
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    assert graphed.graphs.replays == replays + 1 and out.shape[0] == graphed.token_counts([433])[0]
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("masked", [False, True])
def test_stem_triton_kernels_match_references_at_real_width(masked: bool) -> None:
    """bf16 at the checkpoint's 480 channels and 100-frame chunks (the interpreter check covers fp32/fp16 logic)."""
    gen = torch.Generator(device=CUDA).manual_seed(0)
    padded = torch.nn.functional.pad(torch.randn(6, 100, 128, device=CUDA, generator=gen), (1, 1, 1, 1))
    weight = torch.nn.functional.pad(torch.randn(480, 9, device=CUDA, generator=gen) / 3, (0, 7))
    bias = torch.randn(480, device=CUDA, generator=gen) / 10
    mask = (torch.arange(50, device=CUDA)[None, :] < torch.arange(6, device=CUDA)[:, None] * 9).float()
    mask = mask if masked else None
    bf = lambda t: None if t is None else t.to(torch.bfloat16)  # noqa: E731
    got = conv1_gelu(bf(padded), bf(weight), bf(bias), bf(mask))
    ref = conv1_gelu_reference(padded, weight, bias, mask)
    assert_close(got.float().cpu(), ref.cpu(), rel=1e-2)
    x = torch.randn(6, 480, 25, 32, device=CUDA, generator=gen).contiguous(memory_format=torch.channels_last)
    mask2 = None if mask is None else mask[:, ::2]
    ref2 = bias_gelu_(x.clone(), bias, mask2)
    got2 = bias_gelu_(bf(x), bf(bias), bf(mask2))
    assert_close(got2.float().cpu(), ref2.cpu(), rel=1e-2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fused_add_layernorm_matches_reference_at_real_width(dtype: torch.dtype) -> None:
    gen = torch.Generator(device=CUDA).manual_seed(1)
    norm = torch.nn.LayerNorm(1280, device=CUDA)
    with torch.no_grad():
        norm.weight.normal_(generator=gen)
        norm.bias.normal_(generator=gen)
    x, residual = (torch.randn(2, 300, 1280, device=CUDA, generator=gen) * 30).to(dtype)
    ref_h, ref_y = add_layernorm(x.float(), residual.float(), norm, clamp=40.0)  # fp32 CUDA: the reference path
    h, y = add_layernorm(x, residual, norm.to(dtype), clamp=40.0)
    assert_close(h.float().cpu(), ref_h.cpu(), rel=1e-2)
    assert_close(y.float().cpu(), ref_y.cpu(), rel=2e-2)

"""AuT encoder benchmark: ours vs transformers' audio tower on the same random weights and clips; writes a JSON result.

    python bench/audio/bench_audio_encoder.py --out bench/results/audio_encoder_h200.json   # real dims, bf16, GPU
    python bench/audio/bench_audio_encoder.py --tiny --out /tmp/audio_tiny.json             # CPU smoke test

Workloads (issue 4): 8 concurrent 60 s clips (audio-s per wall-s), one 5 s clip (latency), a 600 s clip plus seven
2 s clips (peak memory). Inputs are log-mels (the front end is timed on its own), so both towers see the same
tensors; transformers gets them the way `get_audio_features` packs them. Medians over `--iters` after `--warmup`.
Host syncs in one forward are counted with `torch.cuda.set_sync_debug_mode("warn")`. On CUDA our encoder runs as the
service builds it (CUDA graphs on): each row says which path served it ("cuda_graph" for the 5 s clip), and a
workload served by a graph is measured again with graphs off ("ours_eager").
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from services.audio.features import LogMelExtractor, MelConfig
from services.audio.model import AudioEncoder, AudioEncoderConfig

REAL = AudioEncoderConfig()  # the released checkpoint's audio_config
TINY = AudioEncoderConfig(d_model=32, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=64,
                          downsample_hidden_size=8, output_dim=64)
# name -> clip lengths in mel frames (100 per second)
WORKLOADS = {
    "throughput_8x60s": [6000] * 8,
    "latency_1x5s": [500],
    "memory_600s_plus_7x2s": [60000] + [200] * 7,
}
TINY_WORKLOADS = {"throughput_8x6s": [600] * 8, "latency_1x5s": [500], "memory_60s_plus_7x2s": [6000] + [200] * 7}


def timed(fn: Callable[[], Any], device: torch.device, warmup: int, iters: int) -> dict[str, float]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    times.sort()
    return {"median_ms": 1e3 * statistics.median(times), "p90_ms": 1e3 * times[int(0.9 * (len(times) - 1))],
            "min_ms": 1e3 * times[0]}


def peak_gib(fn: Callable[[], Any], device: torch.device) -> float | None:
    """Peak allocated GiB during `fn`, weights included (only this tower's weights are on the device then)."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() / 2**30


def count_syncs(fn: Callable[[], Any], device: torch.device) -> int | None:
    if device.type != "cuda":
        return None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode(0)
    # torch's own "sync debug mode is a prototype" notice (printed once per process) is not a sync
    return sum("synchronizing CUDA operation" in str(w.message) for w in caught)


def measure(fn: Callable[[], Any], audio_seconds: float, device: torch.device,
            args: argparse.Namespace) -> dict[str, Any]:
    row: dict[str, Any] = timed(fn, device, args.warmup, args.iters)
    row["peak_gib"] = peak_gib(fn, device)
    row["host_syncs"] = count_syncs(fn, device)
    row["audio_s_per_s"] = audio_seconds / (row["median_ms"] / 1e3)
    return row


def _release(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def hf_tower(config: AudioEncoderConfig, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    """transformers' AuT with random weights (sdpa), built on the device."""
    from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import Qwen3OmniMoeAudioEncoderConfig
    from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import Qwen3OmniMoeAudioEncoder

    fields = {k: v for k, v in vars(config).items() if k != "layer_norm_eps"}
    hf_config = Qwen3OmniMoeAudioEncoderConfig(**fields)
    hf_config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(device):
        return Qwen3OmniMoeAudioEncoder(hf_config).to(dtype).eval()


def measure_ours(encoder: AudioEncoder, frames: list[int], audio_seconds: float, device: torch.device,
                 args: argparse.Namespace) -> dict[str, Any]:
    """`measure` of our encoder, and which path served the workload (a CUDA graph replay or eager launches)."""
    mels = [torch.randn(128, t, device=encoder.device) for t in frames]
    replays = encoder.graphs.replays if encoder.graphs is not None else 0
    row = measure(lambda: encoder(mels), audio_seconds, device, args)
    used_graph = encoder.graphs is not None and encoder.graphs.replays > replays
    row["path"] = "cuda_graph" if used_graph else "eager"
    return row


def run_hf(tower: torch.nn.Module, frames: list[int], device: torch.device, dtype: torch.dtype) -> Callable[[], Any]:
    packed = torch.randn(128, sum(frames), device=device, dtype=dtype)  # get_audio_features' packed layout
    lens = torch.tensor(frames, device=device)

    def call() -> Any:
        with torch.inference_mode():
            return tower(packed, feature_lens=lens)

    return call


def bench_front_end(frames: list[int], device: torch.device, args: argparse.Namespace) -> dict[str, float]:
    extractor = LogMelExtractor(MelConfig(), device)
    waves = [torch.randn(t * 160, device=device) * 0.1 for t in frames]
    return timed(lambda: extractor(waves), device, args.warmup, args.iters)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tiny", action="store_true", help="tiny dims on CPU: a smoke test of this script")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--skip-hf", action="store_true", help="do not run transformers' tower")
    parser.add_argument("--chunks-per-launch", type=int, default=64)
    parser.add_argument("--no-graphs", action="store_true", help="eager launches only, no CUDA-graph replay")
    args = parser.parse_args()
    device = torch.device("cpu" if args.tiny or not torch.cuda.is_available() else "cuda")
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    config, loads = (TINY, TINY_WORKLOADS) if args.tiny else (REAL, WORKLOADS)
    if args.tiny:
        args.warmup, args.iters = min(args.warmup, 1), min(args.iters, 3)

    hf = hf_tower(config, device, dtype)
    state = {name: t.detach().to("cpu") for name, t in hf.state_dict().items()}
    hf.to("cpu")  # only one tower's weights on the device while it is measured
    ours = AudioEncoder.from_state_dict(config, state, device, dtype, chunks_per_launch=args.chunks_per_launch,
                                        cuda_graphs=device.type == "cuda" and not args.no_graphs)
    results = {name: {"clips": len(frames), "audio_seconds": sum(frames) / 100} for name, frames in loads.items()}
    for name, frames in loads.items():
        row = results[name]
        row["ours"] = measure_ours(ours, frames, row["audio_seconds"], device, args)
        if row["ours"]["path"] == "cuda_graph":  # the same encoder with graphs off, for comparison
            graphs, ours.graphs = ours.graphs, None
            row["ours_eager"] = measure_ours(ours, frames, row["audio_seconds"], device, args)
            ours.graphs = graphs
        row["front_end"] = bench_front_end(frames, device, args)
    del ours
    if not args.skip_hf:
        _release(device)
        hf.to(device)
        for name, frames in loads.items():
            row = results[name]
            row["transformers"] = measure(run_hf(hf, frames, device, dtype), row["audio_seconds"], device, args)
            row["speedup_vs_transformers"] = row["transformers"]["median_ms"] / row["ours"]["median_ms"]

    report = {
        "benchmark": "audio_encoder",
        "commit": _commit(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "torch": torch.__version__,
        "dtype": str(dtype).removeprefix("torch."),
        "config": vars(config),
        "warmup": args.warmup,
        "iters": args.iters,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(results, indent=2))


def _commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


if __name__ == "__main__":
    main()

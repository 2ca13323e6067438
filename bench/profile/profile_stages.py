"""Kernel profiles of the stage workloads at real dims (random bf16): where each forward's device time goes.

    python bench/profile/profile_stages.py --out DIR [--stages vision audio talker code2wav]

Per workload: wall ms of one call (synchronised), device ms summed over kernels, kernel count, and the
25 kernels taking most device time. Written as text to DIR/profile-<stage>.txt; read by people, not tests.
"""
from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

import torch
from torch.profiler import ProfilerActivity, profile


def kernel_table(fn: Callable[[], Any], iters: int = 3) -> str:
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - start) * 1e3 / iters
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            row = totals[event.name[:110]]
            row[0] += event.device_time / 1e3
            row[1] += 1
    device_ms = sum(t for t, _ in totals.values())
    count = sum(n for _, n in totals.values())
    lines = [f"wall {wall:.2f} ms  device {device_ms:.2f} ms  kernels {count}"]
    for name, (ms, n) in sorted(totals.items(), key=lambda kv: -kv[1][0])[:25]:
        lines.append(f"  {ms:8.3f} ms {n:6d}x  {name}")
    return "\n".join(lines)


def vision() -> dict[str, Callable[[], Any]]:
    from bench.vision.bench_vision_tower import REAL, random_state, workloads
    from services.vision.model import VisionTower

    tower = VisionTower.from_state_dict(REAL, random_state(REAL, 0), torch.device("cuda"), torch.bfloat16)
    out = {}
    for work in workloads(False):
        n = sum(g.num_patches for g in work.grids)
        patches = torch.randn(n, REAL.patch_dim, device="cuda", dtype=torch.bfloat16)
        out[work.name] = (lambda p=patches, g=work.grids: tower(p, g))
    return out


def audio() -> dict[str, Callable[[], Any]]:
    from bench.audio.bench_audio_encoder import REAL, WORKLOADS, hf_tower
    from services.audio.model import AudioEncoder

    state = hf_tower(REAL, torch.device("cpu"), torch.bfloat16).state_dict()
    enc = AudioEncoder.from_state_dict(REAL, state, torch.device("cuda"), torch.bfloat16)
    out = {}
    for name, frames in WORKLOADS.items():
        mels = [torch.randn(128, t, device="cuda") for t in frames]
        out[name] = (lambda m=mels: enc(m))
    return out


def talker_model():
    from bench.talker.bench_talker import random_model, real_config
    from services.talker.model.config import parse_talker_config

    return random_model(parse_talker_config(real_config()), "cuda", torch.bfloat16)


def talker() -> dict[str, Callable[[], Any]]:
    from bench.talker.bench_talker import prompt
    from services.talker.model.generate import TalkerRunner
    from services.talker.model.sampling import TalkerSampling

    model = talker_model()
    out = {}
    for batch in (1, 8, 32):
        runner = TalkerRunner(model, batch, 400, fast=True, cuda_graphs=True)
        runner.capture_graphs()
        runner.suppress[model.cfg.tokens.codec_eos] = True
        states = [runner.start(prompt(i, 20), 500 + i, TalkerSampling(seed=i), max_frames=10**6) for i in range(batch)]
        for s in states:
            for t in range(300):
                s.push_text(2000 + t)
        out[f"talker_step_b{batch}"] = (lambda r=runner, st=states: r.step(st))
    return out


def code2wav() -> dict[str, Callable[[], Any]]:
    model = talker_model()
    c2w = model.code2wav
    out = {}
    for batch, frames in ((1, 15), (1, 36), (8, 36)):
        codes = torch.randint(0, model.cfg.code2wav.codebook_size, (batch, 16, frames), device="cuda")
        out[f"code2wav_b{batch}_{frames}frames"] = (lambda c=codes: c2w(c))
    return out


STAGES = {"vision": vision, "audio": audio, "talker": talker, "code2wav": code2wav}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--stages", nargs="+", default=list(STAGES), choices=list(STAGES))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for stage in args.stages:
        lines = []
        with torch.inference_mode():
            for name, fn in STAGES[stage]().items():
                lines.append(f"== {name}\n{kernel_table(fn)}")
                print(lines[-1], flush=True)
        (args.out / f"profile-{stage}.txt").write_text("\n".join(lines) + "\n")
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

"""Text->speech through the gateway (docs/benchmarks.md, "text->speech"): closed loop at each concurrency, real
processes.

Each level's measured phase runs until at least 10 x c requests have finished and 30 s have passed (docs/benchmarks.md),
and its throughput is taken over that phase, while all c streams are busy. Per level: audio seconds produced per
wall second, time to first audio (p50/p99), real-time factor per request, streaming viability (share of chunks
that arrived before the previous one would have finished playing), and what each process did over the phase
(`processes`: the engines' steps and batches a second, mean step time and rows a batch, a talker batch being a frame;
every process's CPU and its event loop's).
`--tiny` runs the demo checkpoint on CPU (a smoke test); `--model DIR` any checkpoint on the configured devices;
`--random-weights` the released dims with random weights, written as a checkpoint first (no real checkpoint needed):

    PYTHONPATH=.:protos python3 bench/talker/bench_speech_mesh.py --random-weights --device cuda --dtype bfloat16 \
        --thinker-kv-gib 8 --out bench/results/speech-mesh-h200.json          # add --talker-device cuda:1 on two GPUs
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

if __package__ in (None, ""):  # run as a script: make the repo root importable for `bench.*`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import grpc  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402

from bench.moe_routing import ROUTING_MODES  # noqa: E402
from bench.talker.balanced_checkpoint import checkpoint_routing, thinker_checkpoint_routing  # noqa: E402
from bench.talker.random_checkpoint import (checkpoint_bytes, real_speech_config,  # noqa: E402
                                            write_random_speech_checkpoint)
from bench.talker.hf_speech_baseline import hf_speech  # noqa: E402
from bench.thinker.gateway_loop import Mesh  # noqa: E402
from bench.thinker.stage_counters import StageReading, phase_summary  # noqa: E402
from bench.thinker.workload import percentile  # noqa: E402
from omnimesh.v1 import common_pb2, omni_pb2, omni_pb2_grpc  # noqa: E402
from runtime.checkpoint.demo_config import demo_config  # noqa: E402
from runtime.config import SpeechConfig, from_dict  # noqa: E402
from runtime.model_path import resolve_model  # noqa: E402

SAMPLE_RATE = 24_000
# random weights pick the codec EOS about once in 2,049 frames: most answers run to the frame cap
RANDOM_WEIGHTS_MAX_FRAMES = 250  # 20 s of audio
SENTENCES = ["Tell me about the sea.", "Describe a quiet morning in the mountains.", "What makes a good friend?",
             "Explain how rain forms.", "Say something kind to a stranger."]


@dataclass
class SpeechRecord:
    start: float
    measured: bool
    chunks: list[tuple[float, float]] = field(default_factory=list)  # (arrival, seconds of audio)
    end: float | None = None

    @property
    def audio_seconds(self) -> float:
        return sum(s for _, s in self.chunks)

    def viable_share(self) -> float | None:
        """Share of chunks (after the first) that arrived before the audio before them ran out."""
        if len(self.chunks) < 2:
            return None
        play_end, on_time = self.chunks[0][0] + self.chunks[0][1], 0
        for arrival, seconds in self.chunks[1:]:
            on_time += arrival <= play_end
            play_end = max(play_end, arrival) + seconds
        return on_time / (len(self.chunks) - 1)


def request(index: int, text_tokens: int, voice: str) -> omni_pb2.ChatRequest:
    msg = omni_pb2.Message(role="user", content=[omni_pb2.ContentPart(text=SENTENCES[index % len(SENTENCES)])])
    return omni_pb2.ChatRequest(
        messages=[msg], sampling=common_pb2.SamplingParams(max_tokens=text_tokens, seed=index),
        output_modalities=[omni_pb2.MODALITY_TEXT, omni_pb2.MODALITY_AUDIO], voice=voice,
        speech_sampling=common_pb2.SamplingParams(seed=index))  # the talker's defaults, seeded


@dataclass
class Phase:
    """A level's measured phase: it starts with the first measured request and stops taking new ones once both
    `requests` measured requests have finished and `seconds` have passed (docs/benchmarks.md: at least 10 x c requests
    or 30 s); `stop` is then when that happened, so [start, stop] is a window with all c streams busy."""
    requests: int
    seconds: float
    # read at the start and at the stop: each process's engine counters and CPU times (Mesh.readings)
    read: Callable[[], dict[str, StageReading]] | None = None
    start: float | None = None
    stop: float | None = None
    readings: list[dict[str, StageReading]] = field(default_factory=list)

    def begin(self) -> None:
        self.start = time.perf_counter()
        self.readings.append(self.read() if self.read else {})

    def end(self) -> None:
        self.stop = time.perf_counter()
        self.readings.append(self.read() if self.read else {})

    def processes(self) -> dict[str, dict[str, Any]]:
        """What each process did over the phase (stage_counters.phase_summary)."""
        start, stop = self.readings
        return {name: phase_summary(start[name], stop[name], self.stop - self.start) for name in stop}


async def closed_loop(address: str, concurrency: int, warmup: int, phase: Phase, text_tokens: int,
                      voice: str) -> list[SpeechRecord]:
    records: list[SpeechRecord] = []
    counter = iter(range(10**9))

    def phase_over() -> bool:
        if phase.stop is None and phase.start is not None:
            finished = sum(r.measured and r.end is not None for r in records)
            if finished >= phase.requests and time.perf_counter() - phase.start >= phase.seconds:
                phase.end()
        return phase.stop is not None

    async def worker(stub: omni_pb2_grpc.OmniStub) -> None:
        while not phase_over():
            index = next(counter)
            if index >= warmup and phase.start is None:
                phase.begin()
            rec = SpeechRecord(time.perf_counter(), index >= warmup)
            records.append(rec)
            async for ev in stub.Chat(request(index, text_tokens, voice)):
                if ev.HasField("audio") and ev.audio.pcm16:
                    rec.chunks.append((time.perf_counter(), len(ev.audio.pcm16) / 2 / SAMPLE_RATE))
                elif ev.HasField("error"):
                    raise RuntimeError(f"request {index}: {ev.error.code} {ev.error.message}")
            rec.end = time.perf_counter()

    async with grpc.aio.insecure_channel(address) as channel:
        stub = omni_pb2_grpc.OmniStub(channel)
        await asyncio.gather(*(worker(stub) for _ in range(concurrency)))
    return records


def summarize(records: list[SpeechRecord], phase: Phase, concurrency: int) -> dict[str, Any]:
    """Audio seconds per second over the phase's window (chunks that arrived in it, from any request); latencies
    and real-time factors over the measured requests, each to its end (those still running at the stop included)."""
    done = [r for r in records if r.measured and r.end is not None and r.chunks]
    t0, t1 = phase.start, phase.stop
    audio = sum(s for r in records for t, s in r.chunks if t0 <= t <= t1)
    ttfa = [r.chunks[0][0] - r.start for r in done]
    rtf = [(r.end - r.start) / r.audio_seconds for r in done if r.audio_seconds > 0]
    viable = [v for r in done if (v := r.viable_share()) is not None]
    return {"concurrency": concurrency, "requests": len(done), "window_s": t1 - t0, "processes": phase.processes(),
            "audio_s_per_s": audio / (t1 - t0), "ttfa_ms_p50": percentile(ttfa, 50) * 1e3,
            "ttfa_ms_p99": percentile(ttfa, 99) * 1e3, "rtf_p50": percentile(rtf, 50),
            "streaming_viability": sum(viable) / len(viable) if viable else None,
            "raw": [{"ttfa_ms": (r.chunks[0][0] - r.start) * 1e3, "e2e_s": r.end - r.start,
                     "audio_s": r.audio_seconds} for r in done]}


class RandomCheckpoint(NamedTuple):
    dir: Path
    bytes: int
    write_s: float


def write_random_checkpoint(args: argparse.Namespace) -> RandomCheckpoint:
    """The released dims (demo dims with --tiny), random weights drawn on the thinker's device, in /dev/shm when
    it has room (the stages then read from memory), else the tmp dir or --ckpt-dir."""
    t0 = time.perf_counter()
    config = demo_config() if args.tiny else real_speech_config()
    dtype = getattr(torch, args.dtype)
    need = checkpoint_bytes(config, dtype) + (1 << 30)
    candidates = [args.ckpt_dir] if args.ckpt_dir else [Path("/dev/shm"), Path(tempfile.gettempdir())]
    for base in candidates:
        base.mkdir(parents=True, exist_ok=True)
        if shutil.disk_usage(base).free >= need:
            out = Path(tempfile.mkdtemp(prefix="speech-random-", dir=base))
            break
    else:
        raise OSError(f"no room for a {need / 2**30:.1f} GiB checkpoint in {[str(c) for c in candidates]}; "
                      f"pass --ckpt-dir on a filesystem with that much free")
    nbytes = write_random_speech_checkpoint(out, args.device, dtype, seed=0, config=config)
    return RandomCheckpoint(out, nbytes, time.perf_counter() - t0)


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return platform.processor() or "cpu"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench_speech_mesh", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    weights = p.add_mutually_exclusive_group()
    weights.add_argument("--model", default=None, help="checkpoint dir or 'demo' (the default)")
    weights.add_argument("--random-weights", action="store_true",
                         help="the released dims (demo dims with --tiny), random weights written to --ckpt-dir first")
    p.add_argument("--ckpt-dir", type=Path, default=None,
                   help="where --random-weights writes (~68 GB in bf16; default: /dev/shm, else tmp); removed after")
    p.add_argument("--tiny", action="store_true", help="demo dims, short answers: a smoke test")
    p.add_argument("--device", default="cpu", help="device of the thinker stage (and the talker's by default)")
    p.add_argument("--talker-device", default=None, help="device of the talker stage, e.g. cuda:1 (default: --device)")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--thinker-kv-gib", type=float, default=0.0, help="thinker KV cache (0: the stage's default)")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--text-tokens", type=int, default=64, help="text tokens per answer (the speech follows them)")
    p.add_argument("--max-frames", type=int, default=None,
                   help=f"codec frames per answer at most (default 4095; {RANDOM_WEIGHTS_MAX_FRAMES} with "
                        "--random-weights, which seldom end an answer themselves)")
    p.add_argument("--warmup", type=int, default=None,
                   help="unmeasured requests first at each level (default: one per stream, so a level measured first "
                        "on a fresh mesh does not carry its cold start)")
    p.add_argument("--measured", type=int, default=0,
                   help="measured requests per level at least (default 10 x concurrency; 2 x with --tiny)")
    p.add_argument("--min-seconds", type=float, default=30.0,
                   help="the measured phase lasts at least this long (0 with --tiny)")
    p.add_argument("--routing", choices=ROUTING_MODES, default="balanced",
                   help="with --random-weights: balanced (default) calibrates the talker's routers to spread a batch "
                        "as a trained model's do (bench/talker/balance.py); native serves the drawn ones")
    p.add_argument("--voice", default="ethan")
    p.add_argument("--speech", nargs="+", type=speech_variant, default=[{}], metavar="KEY=VALUE[,KEY=VALUE]",
                   help="the talker's speech settings (the config's defaults where unset); several: a mesh each, on "
                        "the same checkpoint, e.g. --speech decodes_in_flight=1 decodes_in_flight=4,"
                        "prioritize_frames=true")
    p.add_argument("--log-level", default="INFO",
                   help="the mesh's; DEBUG adds every request's timelines to the mesh log (the gateway's: prompt, "
                        "thinker conditioning, first text, first audio; the talker's: row, prefill, frames)")
    p.add_argument("--hf-requests", type=int, default=0,
                   help="requests through transformers' generate at batch 1 afterwards, for the ratio (0 skips)")
    args = p.parse_args(argv)
    args.talker_device = args.talker_device or args.device
    if args.max_frames is None:
        args.max_frames = RANDOM_WEIGHTS_MAX_FRAMES if args.random_weights else 4095
    if args.tiny:
        args.concurrency, args.text_tokens, args.max_frames, args.min_seconds = [1, 2], 6, 12, 0.0
    return args


def speech_variant(text: str) -> dict[str, Any]:
    """'key=value,key=value' -> the talker speech settings it names (SpeechConfig fields, values read as YAML)."""
    pairs = [item.partition("=") for item in filter(None, text.split(","))]
    if any(not sep for _, sep, _ in pairs):
        raise argparse.ArgumentTypeError(f"{text!r}: use KEY=VALUE[,KEY=VALUE]")
    variant = {key: yaml.safe_load(value) for key, _, value in pairs}
    try:
        from_dict(SpeechConfig, variant, "talker.speech.")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return variant


def mesh_stages(args: argparse.Namespace, speech: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(thinker section, other sections) of the mesh config; `speech`: the talker's settings past the frame cap."""
    thinker: dict[str, Any] = {"device": args.device, "dtype": args.dtype}
    if args.thinker_kv_gib:
        thinker["engine"] = {"kv_cache_bytes": int(args.thinker_kv_gib * 2**30)}
    talker = {"device": args.talker_device, "dtype": args.dtype, "speech": {"max_frames": args.max_frames, **speech}}
    return thinker, {"talker": talker}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    checkpoint = write_random_checkpoint(args) if args.random_weights else None
    routed = thinker_routed = None
    if checkpoint:  # before the mesh loads the checkpoint: a balanced run serves calibrated routers
        dtype = getattr(torch, args.dtype)
        routed = checkpoint_routing(checkpoint.dir, args.routing, args.talker_device, dtype, args.concurrency,
                                    4 if args.tiny else 16)
        if args.routing == "balanced":
            sizes = {"prompts": 16, "decoded": 4, "decoded_tokens": 8} if args.tiny else {}
            thinker_routed = thinker_checkpoint_routing(checkpoint.dir, args.device, dtype, **sizes)
    model_dir = checkpoint.dir if checkpoint else resolve_model(args.model or "demo")
    workdir = Path(tempfile.mkdtemp(prefix="bench-speech-"))
    mesh_log = args.out.with_suffix(".mesh.log")  # beside the result: it comes back from the GPU machine with it
    args.out.parent.mkdir(parents=True, exist_ok=True)
    levels = []
    try:
        with open(mesh_log, "w") as log:
            for index, speech in enumerate(args.speech):
                thinker, stages = mesh_stages(args, speech)
                (run_dir := workdir / f"mesh-{index}").mkdir()
                mesh = Mesh(model_dir, thinker, run_dir, log, ready_timeout_s=900, stages=stages,
                            log_level=args.log_level)
                try:
                    for c in args.concurrency:
                        phase = Phase(args.measured or (2 if args.tiny else 10) * c, args.min_seconds,
                                      mesh.readings)
                        warmup = c if args.warmup is None else args.warmup
                        records = asyncio.run(closed_loop(mesh.address, c, warmup, phase, args.text_tokens,
                                                          args.voice))
                        levels.append({**summarize(records, phase, c), "speech": speech})
                        print(json.dumps({k: v for k, v in levels[-1].items() if k != "raw"}), flush=True)
                finally:
                    mesh.stop()
        config = json.loads((model_dir / "config.json").read_text())  # read before the checkpoint is removed
    finally:
        if checkpoint:
            shutil.rmtree(checkpoint.dir, ignore_errors=True)
    result = {"benchmark": "text_to_speech_through_gateway", "commit": _commit(), "date": time.strftime("%FT%TZ"),
              "device": args.device, "talker_device": args.talker_device,
              "device_names": {"thinker": device_name(args.device), "talker": device_name(args.talker_device)},
              "command": " ".join(["bench/talker/bench_speech_mesh.py", *(argv or sys.argv[1:])]),
              "flags": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
              "model": "random (std 0.02)" if checkpoint else args.model or "demo", "dtype": args.dtype,
              "max_frames": args.max_frames, "text_tokens": args.text_tokens, "mesh_log": str(mesh_log),
              "speech_defaults": asdict(SpeechConfig()),
              "levels": levels}
    if checkpoint:
        result["checkpoint"] = {"bytes": checkpoint.bytes, "write_s": checkpoint.write_s,
                                "dims": "demo" if args.tiny else "released"}
        result["routing"], result["routing_calibration"] = routed["routing"], routed["calibration"]
        result["thinker_routing_calibration"] = thinker_routed
    # written before the baseline runs, so a run cut short by a time limit still leaves the mesh's numbers
    args.out.write_text(json.dumps(result, indent=1))
    if args.hf_requests:
        # after the mesh is gone (transformers needs the whole device), at the dims of the checkpoint it served
        hf = hf_speech(config, torch.device(args.device), getattr(torch, args.dtype), args.hf_requests,
                       args.text_tokens, args.max_frames, args.voice)
        result["transformers"] = hf
        c1 = next((lv for lv in levels if lv["concurrency"] == 1), None)
        if c1 is not None:
            result["c1_audio_s_per_s_over_transformers"] = c1["audio_s_per_s"] / hf["audio_s_per_s"]
        args.out.write_text(json.dumps(result, indent=1))
    return result


def _commit() -> str:
    """HEAD, or $OMNIMESH_COMMIT where the copy has no git history (the GPU machine)."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5).stdout.strip()
    except OSError:
        head = ""
    return head if len(head) == 40 else os.environ.get("OMNIMESH_COMMIT", "unknown")


if __name__ == "__main__":
    main()

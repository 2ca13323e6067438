"""Text->speech through the gateway (benchmarks.md "text->speech"): closed loop at each concurrency, real processes.

Per level: audio seconds produced per wall second, time to first audio (p50/p99), real-time factor per request,
and streaming viability (share of chunks that arrived before the previous one would have finished playing).
`--tiny` runs the demo checkpoint on CPU (a smoke test); `--model DIR` any checkpoint on the configured devices.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from bench.thinker.gateway_loop import Mesh
from bench.thinker.workload import percentile
from omnimesh.v1 import common_pb2, omni_pb2, omni_pb2_grpc

SAMPLE_RATE = 24_000
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


async def closed_loop(address: str, concurrency: int, warmup: int, measured: int, text_tokens: int,
                      voice: str) -> list[SpeechRecord]:
    records: list[SpeechRecord] = []
    counter = iter(range(10**9))

    async def worker(stub: omni_pb2_grpc.OmniStub) -> None:
        while sum(r.measured and r.end is not None for r in records) < measured:
            index = next(counter)
            rec = SpeechRecord(time.perf_counter(), warmup <= index < warmup + measured)
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


def summarize(records: list[SpeechRecord], concurrency: int) -> dict[str, Any]:
    done = [r for r in records if r.measured and r.end is not None and r.chunks]
    t0, t1 = min(r.start for r in done), max(r.end for r in done)
    audio = sum(s for r in records for t, s in r.chunks if t0 <= t <= t1)
    ttfa = [r.chunks[0][0] - r.start for r in done]
    rtf = [(r.end - r.start) / r.audio_seconds for r in done if r.audio_seconds > 0]
    viable = [v for r in done if (v := r.viable_share()) is not None]
    return {"concurrency": concurrency, "requests": len(done), "window_s": t1 - t0,
            "audio_s_per_s": audio / (t1 - t0), "ttfa_ms_p50": percentile(ttfa, 50) * 1e3,
            "ttfa_ms_p99": percentile(ttfa, 99) * 1e3, "rtf_p50": percentile(rtf, 50),
            "streaming_viability": sum(viable) / len(viable) if viable else None,
            "raw": [{"ttfa_ms": (r.chunks[0][0] - r.start) * 1e3, "e2e_s": r.end - r.start,
                     "audio_s": r.audio_seconds} for r in done]}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="bench_speech_mesh", description=__doc__)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--model", default="demo", help="checkpoint dir or 'demo'")
    p.add_argument("--tiny", action="store_true", help="demo checkpoint on CPU, short answers: a smoke test")
    p.add_argument("--device", default="cpu", help="device of the thinker and talker stages")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--text-tokens", type=int, default=64, help="text tokens per answer (the speech follows them)")
    p.add_argument("--max-frames", type=int, default=4095, help="codec frames per answer at most")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--measured", type=int, default=0, help="per level; default 2 x concurrency")
    p.add_argument("--voice", default="ethan")
    args = p.parse_args(argv)
    if args.tiny:
        args.concurrency, args.text_tokens, args.max_frames = [1, 2], 6, 12
    from runtime.model_path import resolve_model

    model_dir = resolve_model(args.model)
    stage = {"device": args.device, "dtype": args.dtype}
    workdir = Path(tempfile.mkdtemp(prefix="bench-speech-"))
    with open(workdir / "mesh.log", "w") as log:
        mesh = Mesh(model_dir, stage, workdir, log, ready_timeout_s=900,
                    stages={"talker": {**stage, "speech": {"max_frames": args.max_frames}}})
        try:
            levels = [summarize(asyncio.run(closed_loop(mesh.address, c, args.warmup, args.measured or 2 * c,
                                                        args.text_tokens, args.voice)), c) for c in args.concurrency]
        finally:
            mesh.stop()
    result = {"benchmark": "text_to_speech_through_gateway", "commit": _commit(), "date": time.strftime("%FT%TZ"),
              "device": args.device, "command": " ".join(["bench/talker/bench_speech_mesh.py", *(argv or sys.argv[1:])]),
              "model": args.model, "text_tokens": args.text_tokens, "levels": levels}
    args.out.write_text(json.dumps(result, indent=1))
    return result


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5).stdout.strip()
    except OSError:
        return "unknown"


if __name__ == "__main__":
    main()

"""Soak: many mixed requests through a whole mesh in waves, with each process's memory, open files and threads read
after every wave. What it answers: does anything grow with the number of requests served (a leak a day of traffic
would turn into an OOM kill at 3 a.m.)?

The mix, by request index: text; an image; an audio clip; a video heard with its sound track; every fourth asks for
speech; every fifth is cancelled by the client after its first event; every seventh asks for 400 tokens with a 0.5 s
deadline, so it ends mid-generation (DEADLINE_EXCEEDED). `growth` compares the last wave with the second (the first
warms allocators and caches).

    PYTHONPATH=.:protos python3 bench/soak/soak_mesh.py --waves 6 --per-wave 200 --out bench/results/soak.json
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repo root importable for `bench.*`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import grpc  # noqa: E402

from bench.thinker.gateway_loop import Mesh  # noqa: E402
from omnimesh.v1 import common_pb2, omni_pb2, omni_pb2_grpc  # noqa: E402
from runtime.model_path import resolve_model  # noqa: E402
from tests.integration.media_files import mp4_with_sound, png, wav  # noqa: E402

STAGES = {"vision": {"enabled": True}, "audio": {"enabled": True},
          "talker": {"enabled": True, "speech": {"max_frames": 24}}}
EXPECTED = {"OK", "CANCELLED", "DEADLINE_EXCEEDED"}
KINDS = ("text", "image", "audio", "video")


def process_reading(pid: int) -> dict[str, int]:
    """Resident MiB, open file descriptors and threads of one process, from /proc."""
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {"rss_mib": int(status["VmRSS"].split()[0]) // 1024, "fds": len(os.listdir(f"/proc/{pid}/fd")),
            "threads": int(status["Threads"])}


class Mix:
    def __init__(self) -> None:
        self.media = {"image": png(), "audio": wav(), "video": mp4_with_sound()}

    def request(self, i: int) -> tuple[omni_pb2.ChatRequest, float | None]:
        kind = KINDS[(i + i // 4) % 4]  # shifted every four, so the speech requests (i % 4 == 0) take every kind
        parts = [] if kind == "text" else [omni_pb2.ContentPart(**{kind: omni_pb2.Media(data=self.media[kind])})]
        parts.append(omni_pb2.ContentPart(text=f"Tell me about item {i}."))
        outputs = [omni_pb2.MODALITY_TEXT] + ([omni_pb2.MODALITY_AUDIO] if i % 4 == 0 else [])
        late = i % 7 == 0  # asks for far more than its deadline allows: it ends mid-generation
        sampling = common_pb2.SamplingParams(max_tokens=400 if late else 8, ignore_eos=late, seed=i)
        request = omni_pb2.ChatRequest(messages=[omni_pb2.Message(role="user", content=parts)],
                                       output_modalities=outputs, use_audio_in_video=kind == "video",
                                       sampling=sampling)
        return request, (0.5 if late else 120.0)


async def one(stub: omni_pb2_grpc.OmniStub, request: omni_pb2.ChatRequest, timeout: float, cancel: bool) -> str:
    call = stub.Chat(request, timeout=timeout)
    try:
        async for _ in call:
            if cancel:
                call.cancel()
                return "CANCELLED"
        return "OK"
    except grpc.aio.AioRpcError as err:
        return err.code().name


async def wave(address: str, mix: Mix, first: int, count: int, concurrency: int) -> Counter:
    codes: Counter = Counter()
    async with grpc.aio.insecure_channel(address) as channel:
        stub = omni_pb2_grpc.OmniStub(channel)
        for start in range(first, first + count, concurrency):
            batch = [(*mix.request(i), i % 5 == 0) for i in range(start, min(start + concurrency, first + count))]
            codes.update(await asyncio.gather(*(one(stub, r, t, c) for r, t, c in batch)))
    return codes


def growth(waves: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Last wave minus the second, per process and reading."""
    base, last = waves[min(1, len(waves) - 1)]["processes"], waves[-1]["processes"]
    return {name: {k: last[name][k] - base[name][k] for k in last[name]} for name in last}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="demo", help="checkpoint directory, or demo (the default)")
    p.add_argument("--waves", type=int, default=6)
    p.add_argument("--per-wave", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    mix = Mix()
    with tempfile.TemporaryDirectory() as tmp:
        log = open(Path(tmp) / "mesh.log", "w")  # noqa: SIM115 - closed with the mesh below
        mesh = Mesh(resolve_model(args.model), {}, Path(tmp), log, 600.0, stages=STAGES)
        waves: list[dict[str, Any]] = []
        try:
            for w in range(args.waves):
                t0 = time.monotonic()
                codes = asyncio.run(wave(mesh.address, mix, w * args.per_wave, args.per_wave, args.concurrency))
                waves.append({"requests": args.per_wave, "seconds": round(time.monotonic() - t0, 2),
                              "codes": dict(codes),
                              "processes": {n: process_reading(s["pid"]) for n, s in mesh.ports.items()}})
                print(json.dumps(waves[-1]), flush=True)
        finally:
            exit_code = mesh.stop()
            log.close()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    unexpected = {code: n for w in waves for code, n in w["codes"].items() if code not in EXPECTED}
    result = {"bench": "soak_mesh", "commit": commit, "device": f"CPU ({platform.processor() or platform.machine()}, "
              f"{os.cpu_count()} cores)", "model": args.model, "command": " ".join(sys.argv),
              "waves": waves, "growth": growth(waves), "unexpected_codes": unexpected, "mesh_exit_code": exit_code}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps({"growth": result["growth"], "unexpected_codes": unexpected}))


if __name__ == "__main__":
    main()

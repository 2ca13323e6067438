"""Soak: many mixed requests through a whole mesh in waves, with each process's memory, open files and threads read
after every wave. What it answers: does anything grow with the number of requests served (a leak a day of traffic
would turn into an OOM kill at 3 a.m.)?

The mix, by request index: text; an image; an audio clip; a video heard with its sound track; every fourth asks for
speech; every fifth is cancelled by the client after its first event; every seventh asks for 400 tokens with a 0.5 s
deadline, so it ends mid-generation (DEADLINE_EXCEEDED). Every third goes through the HTTP front with the `openai`
package instead (`http_lane.py`; `--no-http` leaves it out), half of those the client stays for answered whole. A
second after each wave the gateway must hold no open stream: a client gone without its call cancelled would leave one
generating (a late request's 400 tokens take longer than that). `growth` compares the last wave with the second
(the first warms allocators and caches).

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
import openai  # noqa: E402

from bench.soak import http_lane  # noqa: E402
from bench.thinker.gateway_loop import Mesh  # noqa: E402
from gateway.cli.remote_bench.workloads import Request  # noqa: E402
from omnimesh import Audio, Image, Video  # noqa: E402
from omnimesh.v1 import common_pb2, omni_pb2, omni_pb2_grpc  # noqa: E402
from runtime.model_path import resolve_model  # noqa: E402
from tests.integration.media_files import mp4_with_sound, png, wav  # noqa: E402
from tests.integration.mesh_process import metric_value, scrape  # noqa: E402

STAGES = {"vision": {"enabled": True}, "audio": {"enabled": True},
          "talker": {"enabled": True, "speech": {"max_frames": 24}}}
EXPECTED = {"OK", "CANCELLED", "DEADLINE_EXCEEDED", "http_OK", "http_CANCELLED"}
SETTLE_S = 1.0  # how long the gateway may take to close the streams of a finished wave
KINDS = ("text", "image", "audio", "video")


def process_reading(pid: int) -> dict[str, int]:
    """Resident MiB, open file descriptors and threads of one process, from /proc."""
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {"rss_mib": int(status["VmRSS"].split()[0]) // 1024, "fds": len(os.listdir(f"/proc/{pid}/fd")),
            "threads": int(status["Threads"])}


class Mix:
    def __init__(self) -> None:
        self.media = {"image": Image(png(), "image/png"), "audio": Audio(wav(), "audio/wav"),
                      "video": Video(mp4_with_sound(), "video/mp4")}

    @staticmethod
    def kind(i: int) -> str:
        return KINDS[(i + i // 4) % 4]  # shifted every four, so the speech requests (i % 4 == 0) take every kind

    def request(self, i: int) -> tuple[omni_pb2.ChatRequest, float | None]:
        kind = self.kind(i)
        parts = [] if kind == "text" else [omni_pb2.ContentPart(**{kind: omni_pb2.Media(data=self.media[kind].data)})]
        parts.append(omni_pb2.ContentPart(text=f"Tell me about item {i}."))
        outputs = [omni_pb2.MODALITY_TEXT] + ([omni_pb2.MODALITY_AUDIO] if i % 4 == 0 else [])
        late = i % 7 == 0  # asks for far more than its deadline allows: it ends mid-generation
        sampling = common_pb2.SamplingParams(max_tokens=400 if late else 8, ignore_eos=late, seed=i)
        request = omni_pb2.ChatRequest(messages=[omni_pb2.Message(role="user", content=parts)],
                                       output_modalities=outputs, use_audio_in_video=kind == "video",
                                       sampling=sampling)
        return request, (0.5 if late else 120.0)

    async def over_http(self, client: openai.AsyncOpenAI, i: int) -> str:
        kind = self.kind(i)
        request = Request(f"Tell me about item {i}.", self.media.get(kind), speak=i % 4 == 0)
        cancel = i % 5 == 0  # a client leaving after the first chunk needs a stream; every other one is answered whole
        return await http_lane.one(client, request, late=i % 7 == 0, cancel=cancel, stream=cancel or i % 6 != 2,
                                   use_audio_in_video=kind == "video", seed=i)


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


async def wave(address: str, http_url: str | None, mix: Mix, first: int, count: int, concurrency: int) -> Counter:
    codes: Counter = Counter()
    http = None if http_url is None else openai.AsyncOpenAI(base_url=http_url, api_key="none", max_retries=0)
    async with grpc.aio.insecure_channel(address) as channel:
        stub = omni_pb2_grpc.OmniStub(channel)

        def call(i: int) -> Any:
            if http is not None and i % 3 == 2:
                return mix.over_http(http, i)
            request, timeout = mix.request(i)
            return one(stub, request, timeout, i % 5 == 0)

        for start in range(first, first + count, concurrency):
            batch = range(start, min(start + concurrency, first + count))
            codes.update(await asyncio.gather(*(call(i) for i in batch)))
    if http is not None:
        await http.close()
    return codes


def settled_in_flight(metrics_port: int) -> float:
    """The gateway's open streams once they had `SETTLE_S` to close: 0 unless a finished request left one open."""
    deadline = time.monotonic() + SETTLE_S
    while (n := metric_value(scrape(metrics_port), "omnimesh_requests_in_flight")) > 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    return n


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
    p.add_argument("--no-http", action="store_true", help="no HTTP front: every request over gRPC")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    mix = Mix()
    with tempfile.TemporaryDirectory() as tmp:
        log = open(Path(tmp) / "mesh.log", "w")  # noqa: SIM115 - closed with the mesh below
        mesh = Mesh(resolve_model(args.model), {}, Path(tmp), log, 600.0, stages=STAGES,
                    extra_args=() if args.no_http else ("--http-port", "0"))
        http_url = None if args.no_http else f"http://127.0.0.1:{mesh.ports['http']['http_port']}/v1"
        waves: list[dict[str, Any]] = []
        try:
            for w in range(args.waves):
                t0 = time.monotonic()
                codes = asyncio.run(wave(mesh.address, http_url, mix, w * args.per_wave, args.per_wave,
                                         args.concurrency))
                waves.append({"requests": args.per_wave, "seconds": round(time.monotonic() - t0, 2),
                              "codes": dict(codes),
                              "gateway_in_flight_after": settled_in_flight(mesh.ports["gateway"]["metrics_port"]),
                              "processes": {n: process_reading(s["pid"]) for n, s in mesh.ports.items()}})
                print(json.dumps(waves[-1]), flush=True)
        finally:
            exit_code = mesh.stop()
            log.close()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    unexpected = {code: n for w in waves for code, n in w["codes"].items() if code not in EXPECTED}
    left_open = [w["gateway_in_flight_after"] for w in waves]
    result = {"bench": "soak_mesh", "commit": commit, "device": f"CPU ({platform.processor() or platform.machine()}, "
              f"{os.cpu_count()} cores)", "model": args.model, "command": " ".join(sys.argv),
              "waves": waves, "growth": growth(waves), "unexpected_codes": unexpected,
              "streams_left_open": max(left_open, default=0), "mesh_exit_code": exit_code}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps({"growth": result["growth"], "unexpected_codes": unexpected,
                      "streams_left_open": result["streams_left_open"]}))


if __name__ == "__main__":
    main()

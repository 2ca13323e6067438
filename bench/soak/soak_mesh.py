"""Soak: many mixed requests through a whole mesh in waves, with each process's memory, open files and threads read
after every wave. What it answers: does anything grow with the number of requests served (a leak a day of traffic
would turn into an OOM kill at 3 a.m.)?

The mix, by request index, from what the deployment says it serves (`Info`): text and each media kind it hears (an
image, an audio clip, a video, heard with its sound track where the model hears audio), rotating; every fourth asks
for speech where it speaks; every fifth is cancelled by the client after its first event; every seventh asks for 400
tokens with a 0.5 s deadline, so it ends mid-generation (DEADLINE_EXCEEDED). Every third goes through the HTTP front
with the `openai` package instead (`http_lane.py`; `--no-http` leaves it out), half of those the client stays for
answered whole. On a Qwen3-ASR deployment another third is a transcription, whole (`Transcribe`) or streamed as PCM
with partial results (`TranscribeStream`), and half the HTTP lane goes to `/v1/audio/transcriptions`,
cancelled and late by the same rules. A second after each wave the gateway must hold no open stream and each thinker
no running or waiting request: a client gone without its call cancelled would leave one generating (a late
request's 400 tokens take longer than that), and a request the engine never let go of would hold its KV blocks and,
on a hybrid model, its state slot. `growth` compares the last wave with the second (the first warms allocators and
caches).

    PYTHONPATH=.:protos python3 bench/soak/soak_mesh.py --waves 6 --per-wave 200 --out bench/results/soak.json
    PYTHONPATH=.:protos python3 bench/soak/soak_mesh.py --model demo-qwen3.5 --out bench/results/soak-qwen3.5.json
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
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
import numpy as np  # noqa: E402
import openai  # noqa: E402

from bench.soak import http_lane  # noqa: E402
from bench.thinker.gateway_loop import Mesh  # noqa: E402
from gateway.cli.remote_bench.workloads import Request  # noqa: E402
from omnimesh import Audio, AsyncClient, Client, Image, MeshInfo, OmnimeshError, Video  # noqa: E402
from omnimesh.v1 import common_pb2, omni_pb2, omni_pb2_grpc  # noqa: E402
from runtime.model_path import resolve_model  # noqa: E402
from tests.integration.media_files import mp4_with_sound, png, wav  # noqa: E402
from tests.integration.mesh_process import metric_value, scrape  # noqa: E402

STAGES = {"vision": {"enabled": True}, "audio": {"enabled": True},
          "talker": {"enabled": True, "speech": {"max_frames": 24}}}
EXPECTED = {"OK", "CANCELLED", "DEADLINE_EXCEEDED", "http_OK", "http_CANCELLED",
            "transcribe_OK", "transcribe_CANCELLED", "transcribe_DEADLINE_EXCEEDED",
            "http_transcribe_OK", "http_transcribe_CANCELLED"}
SETTLE_S = 1.0  # how long the gateway and the thinkers may take to let go of a finished wave's requests
MEDIA_KINDS = ("image", "audio", "video")
PCM_RATE, PCM_PIECE_S = 16_000, 0.25
SYSTEM = "You are a patient assistant who answers in one short sentence. " * 6


def process_reading(pid: int) -> dict[str, int]:
    """Resident MiB, open file descriptors and threads of one process, from /proc."""
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {"rss_mib": int(status["VmRSS"].split()[0]) // 1024, "fds": len(os.listdir(f"/proc/{pid}/fd")),
            "threads": int(status["Threads"])}


class Mix:
    def __init__(self, info: MeshInfo) -> None:
        media = {"image": Image(png(), "image/png"), "audio": Audio(wav(), "audio/wav"),
                 "video": Video(mp4_with_sound(), "video/mp4")}
        self.kinds = ("text", *(k for k in MEDIA_KINDS if k in info.input_modalities))
        self.media = {k: media[k] for k in self.kinds if k != "text"}
        self.speaks = "audio" in info.output_modalities
        self.hears_video = "audio" in info.input_modalities  # a video's sound track goes to the audio stage
        self.transcribes = info.transcribes

    def kind(self, i: int) -> str:
        # shifted every four, so the speech requests (i % 4 == 0) take every kind
        return self.kinds[(i + i // 4) % len(self.kinds)]

    def speak(self, i: int) -> bool:
        return self.speaks and i % 4 == 0

    def request(self, i: int) -> tuple[omni_pb2.ChatRequest, float | None]:
        kind = self.kind(i)
        parts = [] if kind == "text" else [omni_pb2.ContentPart(**{kind: omni_pb2.Media(data=self.media[kind].data)})]
        parts.append(omni_pb2.ContentPart(text=f"Tell me about item {i}."))
        outputs = [omni_pb2.MODALITY_TEXT] + ([omni_pb2.MODALITY_AUDIO] if self.speak(i) else [])
        late = i % 7 == 0  # asks for far more than its deadline allows: it ends mid-generation
        sampling = common_pb2.SamplingParams(max_tokens=400 if late else 8, ignore_eos=late, seed=i)
        # every other request opens with the same system turn: a prefix cache hit (on a hybrid model, a restored
        # state snapshot) under the same cancels and deadlines as the rest
        system = [omni_pb2.Message(role="system", content=[omni_pb2.ContentPart(text=SYSTEM)])] if i % 2 == 0 else []
        request = omni_pb2.ChatRequest(messages=[*system, omni_pb2.Message(role="user", content=parts)],
                                       output_modalities=outputs, use_audio_in_video=self.heard(kind),
                                       sampling=sampling)
        return request, deadline_s(late)

    def heard(self, kind: str) -> bool:
        return kind == "video" and self.hears_video

    async def over_http(self, client: openai.AsyncOpenAI, i: int) -> str:
        cancel = i % 5 == 0  # a client leaving after the first chunk needs a stream; every other one is answered whole
        if self.transcribes and i % 6 == 5:  # half the HTTP lane (i % 3 == 2) of a Qwen3-ASR deployment
            return await http_lane.transcription(client, self.media["audio"].data, late=i % 7 == 0, cancel=cancel,
                                                 stream=cancel or i % 12 == 5)
        kind = self.kind(i)
        request = Request(f"Tell me about item {i}.", self.media.get(kind), speak=self.speak(i))
        return await http_lane.one(client, request, late=i % 7 == 0, cancel=cancel, stream=cancel or i % 6 != 2,
                                   use_audio_in_video=self.heard(kind), seed=i)

    async def transcription(self, client: AsyncClient, i: int) -> str:
        """A Qwen3-ASR transcription: the clip whole, or (odd i) streamed as PCM pieces with partial results."""
        late = i % 7 == 0
        kwargs: dict[str, Any] = {"max_tokens": 400 if late else 8, "ignore_eos": late, "seed": i,
                                  "timeout": deadline_s(late)}
        events = (client.transcribe_pcm_stream(pcm_pieces(i), PCM_RATE, partial_every_s=2 * PCM_PIECE_S, **kwargs)
                  if i % 2 else client.transcribe_stream(self.media["audio"], **kwargs))
        try:
            async with contextlib.aclosing(events):  # leaving early cancels the call
                async for _ in events:
                    if i % 5 == 0:
                        return "transcribe_CANCELLED"
            return "transcribe_OK"
        except OmnimeshError as err:
            return f"transcribe_{err.code.name}"


def deadline_s(late: bool) -> float:
    """A gRPC call's deadline: a late one's the HTTP lane's LATE_S, so both lanes cut their late answers alike."""
    return http_lane.LATE_S if late else 120.0


def pcm_pieces(seed: int, seconds: float = 1.5) -> list[bytes]:
    """16-bit mono PCM of a tone in noise, in PCM_PIECE_S pieces, as a recorder would send it."""
    t = np.arange(int(seconds * PCM_RATE)) / PCM_RATE
    samples = 0.3 * np.sin(2 * np.pi * 330 * t) + np.random.default_rng(seed).normal(0, 0.05, t.shape)
    pcm = (np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes()
    piece = int(PCM_PIECE_S * PCM_RATE) * 2
    return [pcm[k:k + piece] for k in range(0, len(pcm), piece)]


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
    async with grpc.aio.insecure_channel(address) as channel, AsyncClient(address) as client:
        stub = omni_pb2_grpc.OmniStub(channel)

        def call(i: int) -> Any:
            if http is not None and i % 3 == 2:
                return mix.over_http(http, i)
            if mix.transcribes and i % 3 == 1:
                return mix.transcription(client, i)
            request, timeout = mix.request(i)
            return one(stub, request, timeout, i % 5 == 0)

        for start in range(first, first + count, concurrency):
            batch = range(start, min(start + concurrency, first + count))
            codes.update(await asyncio.gather(*(call(i) for i in batch)))
    if http is not None:
        await http.close()
    return codes


def settled(metrics_port: int, names: tuple[str, ...]) -> float:
    """The sum of the gauges `names` once they had `SETTLE_S` to reach 0: 0 unless a finished request was kept."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        text = scrape(metrics_port)
        held = sum(metric_value(text, name) for name in names)
        if held == 0 or time.monotonic() >= deadline:
            return held
        time.sleep(0.1)


def prefix_hits(mesh: Mesh) -> float:
    """The thinkers' prefix cache hits since they started, in tokens: the shared system turn must keep hitting."""
    return sum(metric_value(scrape(p["metrics_port"]), "omnimesh_prefix_cache_hits_total")
               for name, p in mesh.ports.items() if name.startswith("thinker"))


def held_after(mesh: Mesh) -> dict[str, float]:
    """What each process still holds once a wave is over: the gateway's open streams, each thinker's requests and
    (a hybrid model) state slots."""
    return {name: settled(p["metrics_port"], ("omnimesh_requests_in_flight",) if name == "gateway" else
                          ("omnimesh_requests_running", "omnimesh_queue_depth", "omnimesh_state_slot_usage_ratio"))
            for name, p in mesh.ports.items() if name == "gateway" or name.startswith("thinker")}


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
    with tempfile.TemporaryDirectory() as tmp:
        log = open(Path(tmp) / "mesh.log", "w")  # noqa: SIM115 - closed with the mesh below
        mesh = Mesh(resolve_model(args.model), {}, Path(tmp), log, 600.0, stages=STAGES,
                    extra_args=() if args.no_http else ("--http-port", "0"))
        http_url = None if args.no_http else f"http://127.0.0.1:{mesh.ports['http']['http_port']}/v1"
        with Client(mesh.address) as client:
            info = client.info(timeout=30)
        mix = Mix(info)
        waves: list[dict[str, Any]] = []
        try:
            for w in range(args.waves):
                t0 = time.monotonic()
                codes = asyncio.run(wave(mesh.address, http_url, mix, w * args.per_wave, args.per_wave,
                                         args.concurrency))
                waves.append({"requests": args.per_wave, "seconds": round(time.monotonic() - t0, 2),
                              "codes": dict(codes),
                              "held_after": held_after(mesh),
                              "prefix_hit_tokens_so_far": prefix_hits(mesh),
                              "processes": {n: process_reading(s["pid"]) for n, s in mesh.ports.items()}})
                print(json.dumps(waves[-1]), flush=True)
        finally:
            exit_code = mesh.stop()
            log.close()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    unexpected = {code: n for w in waves for code, n in w["codes"].items() if code not in EXPECTED}
    held = {name: max(w["held_after"][name] for w in waves) for name in waves[0]["held_after"]} if waves else {}
    result = {"bench": "soak_mesh", "commit": commit, "device": f"CPU ({platform.processor() or platform.machine()}, "
              f"{os.cpu_count()} cores)", "model": args.model, "model_family": info.model_family,
              "mix": {"kinds": mix.kinds, "speech": mix.speaks, "transcribe": mix.transcribes},
              "command": " ".join(sys.argv),
              "waves": waves, "growth": growth(waves), "unexpected_codes": unexpected,
              "held_after_waves": held, "mesh_exit_code": exit_code}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps({"growth": result["growth"], "unexpected_codes": unexpected,
                      "held_after_waves": held}))


if __name__ == "__main__":
    main()

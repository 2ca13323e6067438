"""Does hostile input stall other streams, or leave the gateway bigger? The gateway's event loop serves every stream:
while the hostile corpus goes in, a probe asks the gateway's grpc.health.v1 Check every 10 ms (answered on that
loop, so its latency is the loop's stall) and a well-behaved chat streams tokens beside it (its largest gap between
events). The gateway's RSS is read before, at its peak, and after (issue 20's targets: no stall over 100 ms, RSS
back within 10% of its start).

The corpus, each sent `--rounds` times (sizes scaled by --scale for a smoke run): a 5 MB text, a text at the
1 Mi-character cap (tokenized in full before the context refuses it), twelve 8000x8000 PNGs, and 1 MiB of request
bytes that are no protobuf.

    PYTHONPATH=.:protos python3 bench/soak/hostile_stall.py --out bench/results/hostile-stall-cpu.json
"""
from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repo root importable for `bench.*`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import grpc  # noqa: E402
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402
from PIL import Image  # noqa: E402

from bench.soak.soak_mesh import process_reading  # noqa: E402
from bench.thinker.gateway_loop import Mesh  # noqa: E402
from bench.thinker.workload import percentile  # noqa: E402
from gateway.chat_input import MAX_TEXT_CHARS  # noqa: E402
from omnimesh.v1 import common_pb2, omni_pb2, omni_pb2_grpc  # noqa: E402
from runtime.model_path import resolve_model  # noqa: E402

STAGES = {"vision": {"enabled": True}, "audio": {"enabled": True}}


def corpus(scale: float) -> dict[str, bytes | omni_pb2.ChatRequest]:
    """Each hostile request by name: serialized bytes for the undecodable one, messages for the rest."""
    side = max(64, int(8000 * scale))
    buf = io.BytesIO()
    Image.new("RGB", (side, side), (90, 160, 30)).save(buf, format="PNG")
    png = omni_pb2.ContentPart(image=omni_pb2.Media(data=buf.getvalue()))

    def chat(*parts: omni_pb2.ContentPart) -> omni_pb2.ChatRequest:
        return omni_pb2.ChatRequest(messages=[omni_pb2.Message(role="user", content=list(parts))],
                                    sampling=common_pb2.SamplingParams(max_tokens=4))

    # text at the gateway's cap (a longer one is refused before it is read): tokenized, then over the context
    at_cap = "word " * int(MAX_TEXT_CHARS // 5 * scale)
    return {"oversized_text": chat(omni_pb2.ContentPart(text="word " * int(1_000_000 * scale))),
            "text_at_the_cap": chat(omni_pb2.ContentPart(text=at_cap)),
            "twelve_large_pngs": chat(*[png] * 12, omni_pb2.ContentPart(text="what?")),
            "undecodable_bytes": b"\x0a\xff\xff\xff\xff\x0f" + os.urandom(int((1 << 20) * scale))}


async def probe(stub: health_pb2_grpc.HealthStub, stop: asyncio.Event, out: list[float]) -> None:
    while not stop.is_set():
        t0 = time.perf_counter()
        await stub.Check(health_pb2.HealthCheckRequest(), timeout=30)
        out.append(time.perf_counter() - t0)
        await asyncio.sleep(0.01)


async def steady_stream(stub: omni_pb2_grpc.OmniStub, stop: asyncio.Event, gaps: list[float]) -> None:
    """A well-behaved client: short chats, back to back; every gap between two events of one chat (its time to first
    token is a prefill, not a stall)."""
    request = omni_pb2.ChatRequest(messages=[omni_pb2.Message(role="user", content=[
        omni_pb2.ContentPart(text="Tell me a story")])], sampling=common_pb2.SamplingParams(max_tokens=32,
                                                                                            ignore_eos=True))
    while not stop.is_set():
        last = None
        async for _ in stub.Chat(request, timeout=60):
            now = time.perf_counter()
            if last is not None:
                gaps.append(now - last)
            last = now


async def hostile(channel: grpc.aio.Channel, requests: dict[str, Any], rounds: int) -> dict[str, list[str]]:
    stub = omni_pb2_grpc.OmniStub(channel)
    raw = channel.unary_stream("/omnimesh.v1.Omni/Chat", request_serializer=lambda b: b,
                               response_deserializer=omni_pb2.ChatEvent.FromString)
    codes: dict[str, list[str]] = {name: [] for name in requests}
    for _ in range(rounds):
        for name, req in requests.items():
            call = raw(req, timeout=120) if isinstance(req, bytes) else stub.Chat(req, timeout=120)
            try:
                [_ async for _ in call]
                codes[name].append("OK")
            except grpc.aio.AioRpcError as err:
                codes[name].append(err.code().name)
    return codes


async def measure(address: str, requests: dict[str, Any], rounds: int, gateway_pid: int,
                  baseline_s: float) -> dict[str, Any]:
    async with grpc.aio.insecure_channel(address, options=[("grpc.max_send_message_length", 64 << 20)]) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        omni = omni_pb2_grpc.OmniStub(channel)
        phases: dict[str, Any] = {}
        rss = {"start_mib": process_reading(gateway_pid)["rss_mib"]}
        for phase in ("idle", "hostile"):
            stop = asyncio.Event()
            probes: list[float] = []
            gaps: list[float] = []
            tasks = [asyncio.create_task(probe(health, stop, probes)),
                     asyncio.create_task(steady_stream(omni, stop, gaps))]
            peak = [rss["start_mib"]]

            async def watch_rss() -> None:
                while not stop.is_set():
                    peak.append(process_reading(gateway_pid)["rss_mib"])
                    await asyncio.sleep(0.1)

            tasks.append(asyncio.create_task(watch_rss()))
            codes = None
            if phase == "idle":
                await asyncio.sleep(baseline_s)
            else:
                codes = await hostile(channel, requests, rounds)
            stop.set()
            await asyncio.gather(*tasks)
            phases[phase] = {"probes": len(probes), "health_ms_p50": _ms(percentile(probes, 50)),
                             "health_ms_p99": _ms(percentile(probes, 99)), "health_ms_max": _ms(max(probes)),
                             "stream_gap_ms_p99": _ms(percentile(gaps, 99)), "stream_gap_ms_max": _ms(max(gaps)),
                             "rss_peak_mib": max(peak), **({"codes": codes} if codes else {})}
        await asyncio.sleep(2.0)  # frees that wait on a request's end (media budget, heap trim)
        rss["after_mib"] = process_reading(gateway_pid)["rss_mib"]
        rss["after_over_start"] = rss["after_mib"] / rss["start_mib"]
        return {"phases": phases, "gateway_rss": rss}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1e3, 2)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="demo", help="checkpoint directory, or demo (the default)")
    p.add_argument("--rounds", type=int, default=3, help="times the whole corpus is sent")
    p.add_argument("--scale", type=float, default=1.0, help="sizes of the corpus (0.05 for a smoke run)")
    p.add_argument("--baseline-s", type=float, default=5.0, help="seconds measured idle first")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    requests = corpus(args.scale)
    with tempfile.TemporaryDirectory() as tmp:
        log = open(Path(tmp) / "mesh.log", "w")  # noqa: SIM115 - closed with the mesh below
        mesh = Mesh(resolve_model(args.model), {}, Path(tmp), log, 600.0, stages=STAGES)
        try:
            result = asyncio.run(measure(mesh.address, requests, args.rounds, mesh.ports["gateway"]["pid"],
                                         args.baseline_s))
        finally:
            result_exit = mesh.stop()
            log.close()
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    out = {"bench": "hostile_stall", "commit": commit, "device": f"CPU ({platform.processor() or platform.machine()}, "
           f"{os.cpu_count()} cores)", "model": args.model, "command": " ".join(["python3 bench/soak/hostile_stall.py",
                                                                                *(argv or sys.argv[1:])]),
           "targets": {"stall_ms": 100, "rss_after_over_start": 1.10}, **result, "mesh_exit_code": result_exit}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1))
    print(json.dumps({k: out[k] for k in ("phases", "gateway_rss")}, indent=1))
    return out


if __name__ == "__main__":
    main()

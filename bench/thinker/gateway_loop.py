"""Through-the-gateway runs: `omnimesh up` as real processes, driven by a closed loop of grpc.aio Chat streams."""
from __future__ import annotations

import asyncio
import json
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import grpc
import yaml

from bench.thinker.stage_counters import StageReading, measured_phase, read_stage
from bench.thinker.workload import RequestRecord, read_timing, summarize
from omnimesh.v1 import common_pb2, omni_pb2, omni_pb2_grpc

MESH_PREFIX = "OMNIMESH_MESH "


class Mesh:
    """`python -m gateway.cli.main up` on a model dir; stderr goes to `log`. By default a thinker-only deployment
    (text->text); `stages` adds sections (e.g. `{"talker": {...}}` for speech), `extra_args` go to `up` (e.g. an HTTP
    front: `("--http-port", "0")`)."""

    def __init__(self, model_dir: Path, thinker: dict[str, Any], workdir: Path, log: TextIO,
                 ready_timeout_s: float, stages: dict[str, Any] | None = None, log_level: str = "INFO",
                 extra_args: Sequence[str] = ()) -> None:
        config = workdir / "bench_mesh.yaml"
        off = {"enabled": False}
        mesh = {"thinker": thinker, "vision": off, "audio": off, "talker": off, **(stages or {})}
        config.write_text(yaml.safe_dump(mesh))
        cmd = [sys.executable, "-m", "gateway.cli.main", "up", "--model", str(model_dir), "--config", str(config),
               "--port", "0", "--ready-timeout", str(ready_timeout_s), "--log-level", log_level, *extra_args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
        self.ports = self._wait_ready(ready_timeout_s)
        gateway = self.ports.get("gateway") or self.ports["gateway-0"]  # gateway replicas share gateway-0's port
        self.address = f"127.0.0.1:{gateway['grpc_port']}"
        threading.Thread(target=self._drain, daemon=True).start()  # keep the pipe from filling

    def _wait_ready(self, timeout_s: float) -> dict[str, Any]:
        result: dict[str, Any] = {}

        def read() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                if line.startswith(MESH_PREFIX):
                    result.update(json.loads(line[len(MESH_PREFIX):]))
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout_s)
        if not result:
            self.stop()
            raise RuntimeError(f"the mesh did not come up within {timeout_s:.0f} s (exit {self.proc.poll()})")
        return result

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for _ in self.proc.stdout:
            pass

    def readings(self) -> dict[str, StageReading]:
        """Each process's step, queue and encoder counters and CPU times now, by name (`stage_counters`)."""
        return {name: read_stage(p["pid"], p["metrics_port"] if p.get("metrics_port", -1) > 0 else None)
                for name, p in self.ports.items()}

    def stop(self, timeout_s: float = 30.0) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def chat_request(text: str, max_tokens: int, seed: int | None = None) -> omni_pb2.ChatRequest:
    """Greedy; with `seed`, the deployment's default sampling on that seed."""
    msg = omni_pb2.Message(role="user", content=[omni_pb2.ContentPart(text=text)])
    sampling = (common_pb2.SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True) if seed is None
                else common_pb2.SamplingParams(seed=seed, max_tokens=max_tokens, ignore_eos=True))
    return omni_pb2.ChatRequest(messages=[msg], sampling=sampling, output_modalities=[omni_pb2.MODALITY_TEXT])


async def _one(stub: omni_pb2_grpc.OmniStub, request: omni_pb2.ChatRequest, rec: RequestRecord) -> None:
    call = stub.Chat(request)
    async for ev in call:
        if ev.HasField("text"):
            rec.add(time.perf_counter(), len(ev.text.token_ids))
        elif ev.HasField("error"):
            raise RuntimeError(f"request {rec.index}: {ev.error.code} {ev.error.message}")
    rec.end = time.perf_counter()
    await read_timing(call, rec)


async def closed_loop(address: str, make_request: Callable[[int], Any], concurrency: int,
                      warmup: int, measured: int, first_index: int = 0,
                      call: Callable[[omni_pb2_grpc.OmniStub, Any, RequestRecord], Awaitable[None]] = _one,
                      channels: int = 1, think_s: float = 0.0) -> list[RequestRecord]:
    """`concurrency` workers; each starts a new request when its last one ends, until the measured ones are done.
    `call` runs one request and fills its record (default: a Chat stream; bench/asr passes a Transcribe one).
    `channels`: connections the workers take in turn, as that many clients would open (gateway replicas sharing a
    port each serve the connections the kernel gives them). `think_s`: each worker waits a uniform 0..think_s
    before each request, as users do, so arrivals spread over the engine's steps instead of following the tokens
    that ended the last request (bench/thinker/late_launch_model.py)."""
    records: list[RequestRecord] = []
    counter = iter(range(first_index, first_index + 10**9))
    done = asyncio.Event()
    remaining = [measured]
    think = random.Random(first_index)

    async def worker(stub: omni_pb2_grpc.OmniStub) -> None:
        while not done.is_set():
            if think_s:
                await asyncio.sleep(think.uniform(0, think_s))
            index = next(counter)
            request = make_request(index)  # before the clock starts: building a prompt is the client's own time
            rec = RequestRecord(index, time.perf_counter(), warmup <= index - first_index < warmup + measured)
            records.append(rec)
            await call(stub, request, rec)
            if rec.measured:
                remaining[0] -= 1
                if remaining[0] == 0:
                    done.set()

    # a subchannel pool of its own keeps each channel on its own connection (by default equal channels share one)
    opened = [grpc.aio.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
              for _ in range(max(1, min(channels, concurrency)))]
    try:
        stubs = [omni_pb2_grpc.OmniStub(channel) for channel in opened]
        tasks = [asyncio.create_task(worker(stubs[i % len(stubs)])) for i in range(concurrency)]
        finished = asyncio.create_task(done.wait())
        await asyncio.wait([finished, *tasks], return_when=asyncio.FIRST_COMPLETED)
        for t in tasks:
            if t.done() and t.exception() is not None:
                raise t.exception()
        for t in tasks:
            t.cancel()  # load-keeping extras still running: cancelled, which frees their KV
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await asyncio.gather(*(channel.close() for channel in opened))
    return records


def run_level(address: str, make_request: Callable[[int], omni_pb2.ChatRequest], concurrency: int, warmup: int,
              measured: int, first_index: int, think_s: float = 0.0) -> dict[str, Any]:
    records = asyncio.run(closed_loop(address, make_request, concurrency, warmup, measured, first_index,
                                      think_s=think_s))
    out = summarize(records, concurrency)
    out["next_index"] = first_index + len(records)
    return out


def run_level_with_stages(mesh: Mesh, make_request: Callable[[int], omni_pb2.ChatRequest], concurrency: int,
                          warmup: int, measured: int, first_index: int, think_s: float = 0.0) -> dict[str, Any]:
    """`run_level` on the mesh, with what each of its processes did over the level (`stages`: engine steps and
    their mean time, queue, CPU of each thread: bench/thinker/stage_counters.py), warm-up requests included."""
    with measured_phase(mesh.readings) as phase:
        out = run_level(mesh.address, make_request, concurrency, warmup, measured, first_index, think_s)
    return out | {"stages": phase.stages}

"""Where a media request's host time goes on its way through the mesh, at the bench's real sizes (issue 18).

The path: the gateway decodes the client's image or video (header checks, PyAV/PIL decode, resize) on worker threads,
sends the uint8 frames to the vision stage, reads its embeddings back and sends them on to the thinker. Every hop is
real gRPC on loopback through the real clients and wire code (gateway/clients/, services/vision/wire.py,
services/thinker/wire.py, runtime/tensor_codec.py). The vision tower and the thinker's model are not run: the vision
stage answers with synthetic bf16 embeddings of the real shape ([tokens, --hidden]), the thinker stage reads the whole
prompt stream and finishes. This process is the gateway (one asyncio loop on its main thread); the two stages share
one child process, each call measured alone.

Per stage and request: `loop_cpu_s` is CPU on the owning process's event-loop thread (time that blocks every other
stream of that process), `cpu_s` that process's CPU on all its threads (worker threads, PyAV's decoder threads,
gRPC's own), `fresh_mb` the memory that process newly wrote (minor page faults x 4 KiB): every process here maps
blocks of 1 MiB and more fresh (gateway/media/heap.py) with transparent huge pages off, so each full copy of a
payload into a new buffer shows up, `copies` = fresh_mb / the payload (copies into reused memory, such as gRPC's
own slice buffers, do not). The stage processes do not map fresh in production, so their CPU here is an upper
bound. Numbers are the median over --reps requests, each with media of its own.

    .venv/bin/python bench/gateway/media_path.py --reps 3 > /tmp/media_path.json
"""
from __future__ import annotations

import argparse
import asyncio
import ctypes
import ctypes.util
import json
import multiprocessing as mp
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import grpc  # noqa: E402
from grpc_health.v1 import health, health_pb2, health_pb2_grpc  # noqa: E402
import torch  # noqa: E402

from omnimesh.v1 import common_pb2, thinker_pb2, thinker_pb2_grpc, vision_pb2, vision_pb2_grpc  # noqa: E402
from runtime.channels import open_channel  # noqa: E402
from runtime.chat_template import MediaSpan  # noqa: E402
from runtime.checkpoint.qwen3_5.processor_files import preprocessor_config, video_preprocessor_config  # noqa: E402
from runtime.engine.sampling_params import SamplingOptions  # noqa: E402
from runtime.metrics import Metrics  # noqa: E402
from runtime.vision_processing import VisionProcessingConfig  # noqa: E402
from gateway.chat_input import MediaBytes  # noqa: E402
from gateway.clients.encoders import VisionClient  # noqa: E402
from gateway.clients.thinker import ThinkerClient, ThinkerPrompt  # noqa: E402
from gateway.cli.remote_bench.workloads import moving_mp4, photo_like_jpeg  # noqa: E402
from gateway.media.heap import map_large_blocks  # noqa: E402
from gateway.media.vision import VisionMediaConfig  # noqa: E402
from gateway.media_prep import MediaPipeline, thinker_media  # noqa: E402
from gateway.routing.router import ThinkerRouter  # noqa: E402
from services.thinker.wire import _read_media  # noqa: E402
from services.vision.model.tower import VisionOutput  # noqa: E402
from services.vision.service import FinishedOut, ItemOut  # noqa: E402
try:
    from services.vision.servicer import add_to_server as add_vision  # noqa: E402
except ImportError:  # a tree from before the stage registered its own handlers (to measure "before")
    add_vision = vision_pb2_grpc.add_VisionServicer_to_server
from services.vision.wire import read_items, read_start, to_pb  # noqa: E402

PAGE = resource.getpagesize()
_PR_SET_THP_DISABLE = 41  # prctl option (linux/prctl.h)
MAX_MESSAGE = 64 << 20


class Meter:
    """CPU of the calling thread and of the process, wall time and fresh pages over a span of work."""

    def __enter__(self) -> Meter:
        self._t = (time.thread_time(), time.process_time(), time.perf_counter(),
                   resource.getrusage(resource.RUSAGE_SELF).ru_minflt)
        return self

    def __exit__(self, *exc: object) -> None:
        t0, p0, w0, f0 = self._t
        self.result = {"loop_cpu_s": time.thread_time() - t0, "cpu_s": time.process_time() - p0,
                       "wall_s": time.perf_counter() - w0,
                       "fresh_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) * PAGE / 1e6}


# ---- the stages' process (child) ----

class VisionStage(vision_pb2_grpc.VisionServicer):
    """The vision stage's wire (start checks, frame chunks reassembled, embeddings chunked out) around no tower."""

    def __init__(self, hidden: int, report: Any) -> None:
        self.hidden, self.report, self.rows_out = hidden, report, None  # rows_out None: the real token count

    async def Encode(self, request_iterator: AsyncIterator[vision_pb2.VisionRequest],
                     context: grpc.aio.ServicerContext) -> AsyncIterator[vision_pb2.VisionResponse]:
        with Meter() as rx:
            head = await read_start(request_iterator, PROCESSING, 1 << 30)
            inp = await read_items(request_iterator, head)
        rows = self.rows_out or head.num_patches // PROCESSING.merge_size ** 2
        merged = synthetic(rows, self.hidden)  # made outside the meters: the tower's output, not the path's work
        with Meter() as tx:
            for msg in to_pb(ItemOut(0, VisionOutput(merged, []))):
                yield msg
            for msg in to_pb(FinishedOut(0.0, 0.0)):
                yield msg
        self.report.send({"frames_in": rx.result, "frames_mb": inp.items[0].frames.numel() / 1e6,
                          "embeddings_out": tx.result})


class ThinkerStage(thinker_pb2_grpc.ThinkerServicer):
    """The thinker's read of a prompt's media (services/thinker/wire.py), then `finished`."""

    def __init__(self, hidden: int, report: Any) -> None:
        self.hidden, self.report = hidden, report

    async def Generate(self, request_iterator: AsyncIterator[thinker_pb2.GenerateRequest],
                       context: grpc.aio.ServicerContext) -> AsyncIterator[thinker_pb2.GenerateResponse]:
        with Meter() as rx:
            start = (await anext(request_iterator)).start
            announced = {f"media.{i}.embeddings": (s.length, self.hidden) for i, s in enumerate(start.media)}
            tensors = await _read_media(request_iterator, announced)
        self.report.send({"embeddings_in": rx.result, "mb": sum(t.numel() * t.element_size()
                                                               for t in tensors.values()) / 1e6})
        yield thinker_pb2.GenerateResponse(finished=thinker_pb2.GenerateFinished(
            finish_reason=common_pb2.FINISH_REASON_STOP, usage=common_pb2.Usage()))


_SYNTHETIC: dict[tuple[int, int], torch.Tensor] = {}


def synthetic(rows: int, hidden: int) -> torch.Tensor:
    if (rows, hidden) not in _SYNTHETIC:
        _SYNTHETIC[(rows, hidden)] = torch.randn(rows, hidden, generator=torch.Generator().manual_seed(rows)
                                                 ).to(torch.bfloat16)
    return _SYNTHETIC[(rows, hidden)]


def count_copies() -> None:
    """Every block of 1 MiB and more mapped fresh, as the gateway does (gateway/media/heap.py), and in 4 KiB pages:
    a transparent huge page faults 2 MiB in at once and hid most copies from the page-fault count."""
    map_large_blocks()
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if libc.prctl(_PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0:
        print("prctl(PR_SET_THP_DISABLE) failed: fresh_mb may undercount", file=sys.stderr)


def serve_stages(hidden: int, conn: Any) -> None:
    count_copies()

    async def main() -> None:
        opts = [("grpc.max_receive_message_length", MAX_MESSAGE), ("grpc.max_send_message_length", MAX_MESSAGE)]
        server = grpc.aio.server(options=opts)
        vision = VisionStage(hidden, conn)
        add_vision(vision, server)  # as services/vision/build.py registers the stage
        thinker_pb2_grpc.add_ThinkerServicer_to_server(ThinkerStage(hidden, conn), server)
        status = health.aio.HealthServicer()  # the gateway routes to a thinker replica once it says SERVING
        health_pb2_grpc.add_HealthServicer_to_server(status, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        await status.set("", health_pb2.HealthCheckResponse.SERVING)
        conn.send(port)
        loop = asyncio.get_running_loop()
        while (command := await loop.run_in_executor(None, conn.recv)) != "stop":
            vision.rows_out = command  # "rows": how many embedding rows the vision stage answers with
        await server.stop(0)

    asyncio.run(main())


PROCESSING = VisionProcessingConfig.from_dicts(preprocessor_config(), video_preprocessor_config())


# ---- the gateway (this process) ----

class Gateway:
    def __init__(self, port: int, conn: Any) -> None:
        self.conn = conn
        target = f"127.0.0.1:{port}"
        metrics = Metrics("gateway", "bench")
        self.vision = VisionClient(open_channel(target, MAX_MESSAGE), metrics)
        self.router = ThinkerRouter((target,), lambda ep: open_channel(ep.target, MAX_MESSAGE), "least_load", 8,
                                    metrics, wait_s=5.0, resolve_s=10.0)
        self.thinker = ThinkerClient(self.router, metrics)
        self.media = MediaPipeline(VisionMediaConfig.from_processing(PROCESSING), self.vision, 0, None, 0.0)

    async def request(self, kind: str, data: bytes, index: int) -> dict[str, Any]:
        """One media request's stages, each measured alone; the stages' own measures come back over the pipe."""
        m = media_bytes(kind, data)
        with Meter() as header:
            await asyncio.to_thread(self.media.header_tokens, [m])
            await asyncio.to_thread(self.media.footprint, [m], False)
        with Meter() as decode:
            decoded = await self.media.decode([m])
        item = decoded[0].vision
        frames_mb = item.frames.numel() / 1e6
        self.conn.send(1)  # the vision stage answers one row: this call is (almost) only the frames going out
        with Meter() as frames_out:
            await self.vision.encode(f"f{index}", [item], 0, 60.0)
        stage_frames = self.conn.recv()
        self.conn.send(None)
        with Meter() as round_trip:
            encoded = await self.media.encode(f"v{index}", decoded, 60.0)
        stage_full = self.conn.recv()
        emb = encoded[0].embeddings
        emb_mb = emb.numel() * emb.element_size() / 1e6
        spans = layout(decoded[0], emb.shape[0])
        with Meter() as to_thinker:
            pbs, tensors = thinker_media(spans, decoded, encoded)
            prompt = ThinkerPrompt(f"t{index}", [0] * (spans[-1].start + spans[-1].length + 8), pbs, tensors)
            async for _ in self.thinker.generate(prompt, SamplingOptions(), False, 60.0):
                pass
        stage_thinker = self.conn.recv()
        # the embeddings coming back: the full round trip less the frames-only one
        emb_in = {k: round_trip.result[k] - frames_out.result[k] for k in frames_out.result}
        return {
            "payload_mb": {"frames": frames_mb, "embeddings": emb_mb, "embedding_rows": int(emb.shape[0])},
            "stages": [
                stage("gateway: header checks (token count, footprint)", "gateway", "worker thread",
                      header.result, 0.0),
                stage("gateway: decode + resize to uint8 frames", "gateway", "worker thread", decode.result,
                      frames_mb),
                stage("gateway: frames -> vision (chunk, serialize, send)", "gateway", "event loop",
                      frames_out.result, frames_mb),
                stage("vision: frames in (parse, reassemble)", "vision", "event loop",
                      stage_frames["frames_in"], frames_mb),
                stage("vision: embeddings out (chunk, serialize, send)", "vision", "event loop",
                      stage_full["embeddings_out"], emb_mb),
                stage("gateway: embeddings in (parse, reassemble)", "gateway", "event loop", emb_in, emb_mb),
                stage("gateway: embeddings -> thinker (spans, chunk, serialize, send)", "gateway", "event loop",
                      to_thinker.result, emb_mb),
                stage("thinker: embeddings in (parse, reassemble)", "thinker", "event loop",
                      stage_thinker["embeddings_in"], emb_mb),
            ],
        }


def media_bytes(kind: str, data: bytes) -> MediaBytes:
    return MediaBytes(kind=kind, data=data, mime_type="image/jpeg" if kind == "image" else "video/mp4",
                      field=f"messages[0].content[0].{kind}")


def layout(d: Any, rows: int) -> list[MediaSpan]:
    """The prompt's spans of the item: one per temporal patch for a Qwen3.5 video (gateway/video_frames.py), else
    one; offsets as lay_out_frames leaves them (timestamp text and vision start/end tokens between frames)."""
    if not d.timestamps:
        return [MediaSpan(d.kind, 4, rows, 0)]
    per_frame = rows // len(d.timestamps)
    return [MediaSpan(d.kind, 4 + k * (per_frame + 8), per_frame, 0) for k in range(len(d.timestamps))]


def stage(name: str, process: str, thread: str, measured: dict[str, float], payload_mb: float) -> dict[str, Any]:
    out: dict[str, Any] = {"stage": name, "process": process, "runs_on": thread, **measured}
    if payload_mb:
        out["copies"] = measured["fresh_mb"] / payload_mb
    return out


def median_stages(runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("loop_cpu_s", "cpu_s", "wall_s", "fresh_mb", "copies")
    stages = []
    for i, first in enumerate(runs[0]["stages"]):
        row = {k: first[k] for k in ("stage", "process", "runs_on")}
        for k in keys:
            if k in first:
                row[k] = round(statistics.median(r["stages"][i][k] for r in runs), 4)
        stages.append(row)
    loop = {p: round(sum(s["loop_cpu_s"] for s in stages if s["process"] == p and s["runs_on"] == "event loop"), 4)
            for p in ("gateway", "vision", "thinker")}
    return {"payload_mb": runs[0]["payload_mb"], "stages": stages, "event_loop_cpu_s_per_request": loop}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    parent, child = mp.Pipe()
    proc = mp.get_context("spawn").Process(target=serve_stages, args=(args.hidden, child), daemon=True)
    proc.start()
    port = parent.recv()
    gateway = Gateway(port, parent)
    await gateway.router.start()
    while not all(r.serving for r in gateway.router.replicas.values()):
        await asyncio.sleep(0.05)
    makers: dict[str, Callable[[int], bytes]] = {"image": photo_like_jpeg, "video": moving_mp4}
    out: dict[str, Any] = {}
    try:
        for kind in args.workloads:
            media = [makers[kind](1000 + i) for i in range(args.reps + 1)]
            await gateway.request(kind, media[-1], -1)  # warm-up: first-call imports and channel setup
            runs = [await gateway.request(kind, media[i], i) for i in range(args.reps)]
            out[kind] = {"media_bytes": len(media[0]), **median_stages(runs)}
    finally:
        parent.send("stop")
        proc.join(10)
        await gateway.router.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3, help="requests per workload (median reported)")
    ap.add_argument("--hidden", type=int, default=4096, help="embedding width (Qwen3.5 9B: 4096)")
    ap.add_argument("--workloads", nargs="+", default=["image", "video"], choices=["image", "video"])
    args = ap.parse_args()
    count_copies()
    torch.set_num_threads(1)  # the gateway's tensor work is copies; one thread as on a loop
    result = {"machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
                          "python": platform.python_version(), "grpc": grpc.__version__, "torch": torch.__version__},
              "hidden": args.hidden, "reps": args.reps, **asyncio.run(run(args))}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

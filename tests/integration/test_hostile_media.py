"""Hostile media against a real mesh with a vision stage, on loopback: limits read from headers refuse before any
pixel is decoded, and decoded media count against the gateway's budget."""
from __future__ import annotations

import asyncio
import io
import time
from pathlib import Path

import av
import grpc
import numpy as np
import pytest
import yaml
from PIL import Image

from google.rpc import error_details_pb2
from grpc_status import rpc_status

from omnimesh.v1 import common_pb2, omni_pb2, omni_pb2_grpc
from tests.integration.client import chat_error, collect
from tests.integration.mesh_process import OMNIMESH, Proc, start
from tests.integration.status_checks import assert_invalid_argument


@pytest.fixture(scope="module")
def vision_mesh(demo_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Proc:
    from gateway.cli.up import MESH_PREFIX

    cfg = tmp_path_factory.mktemp("vision_mesh") / "mesh.yaml"
    cfg.write_text(yaml.safe_dump({  # a budget of 1 MiB, and a vision stage that waits 1.5 s to batch each image
        "gateway": {"max_media_bytes": 1 << 20},
        "vision": {"encoder": {"batch_wait_ms": 1500.0}},
        "audio": {"enabled": False}, "talker": {"enabled": False},
        "thinker": {"engine": {"kv_cache_bytes": 16 << 20, "max_model_len": 1024}}}))
    proc = start([OMNIMESH, "up", "--model", str(demo_ckpt), "--port", "0", "--config", str(cfg)], MESH_PREFIX,
                 timeout=240)
    yield proc
    assert proc.stop() == 0


def addr(mesh: Proc) -> str:
    return f"127.0.0.1:{mesh.ports['gateway']['grpc_port']}"


def request(*media: omni_pb2.ContentPart) -> omni_pb2.ChatRequest:
    return omni_pb2.ChatRequest(messages=[omni_pb2.Message(role="user", content=[
        *media, omni_pb2.ContentPart(text="what is it?")])])


def test_images_that_cannot_fit_are_refused_from_their_headers(vision_mesh: Proc) -> None:
    """Twelve 4000x4000 PNGs (each ~1,000 tokens once resized) against a 1,024-token context: refused from their
    headers at once, where decoding them first took seconds."""
    buf = io.BytesIO()
    Image.new("RGB", (4000, 4000), (90, 160, 30)).save(buf, format="PNG")
    part = omni_pb2.ContentPart(image=omni_pb2.Media(data=buf.getvalue()))
    t0 = time.monotonic()
    err = asyncio.run(chat_error(addr(vision_mesh), request(*[part] * 12), timeout=60))
    took = time.monotonic() - t0
    assert_invalid_argument(err, "messages", ["by their headers", "context is 1024 tokens"])
    assert took < 2.0, f"refused after {took:.1f} s"


def test_a_video_holding_more_frames_than_its_duration_allows(vision_mesh: Proc) -> None:
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as out:  # 1,500 frames in a header's 1.5 s
        stream = out.add_stream("mpeg4", rate=1000)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        for k in range(1500):
            out.mux(stream.encode(av.VideoFrame.from_ndarray(np.full((32, 32, 3), k % 256, np.uint8),
                                                             format="rgb24")))
        out.mux(stream.encode())
    part = omni_pb2.ContentPart(video=omni_pb2.Media(data=buf.getvalue()))
    err = asyncio.run(chat_error(addr(vision_mesh), request(part), timeout=60))
    assert_invalid_argument(err, "messages[0].content[0].video", ["holds 1500 frames", "1000 frames a second"])


def test_media_past_the_gateway_budget_wait_their_turn(vision_mesh: Proc) -> None:
    """One 512x512 image holds ~2 MiB decoded (over the 1 MiB budget, admitted alone); a second request while the
    first is encoding is RESOURCE_EXHAUSTED with RetryInfo naming the budget; once the first is answered, the next
    is served."""
    buf = io.BytesIO()
    Image.new("RGB", (512, 512), (10, 200, 90)).save(buf, format="PNG")
    part = omni_pb2.ContentPart(image=omni_pb2.Media(data=buf.getvalue()))
    req = request(part)
    req.sampling.CopyFrom(common_pb2.SamplingParams(max_tokens=2))

    async def scenario():
        async with grpc.aio.insecure_channel(addr(vision_mesh)) as channel:
            stub = omni_pb2_grpc.OmniStub(channel)
            first = asyncio.create_task(collect(stub, req, timeout=60))
            await asyncio.sleep(0.5)  # decoded and waiting for its vision batch
            refused = await chat_error(addr(vision_mesh), req, timeout=60)
            tokens, _ = await first
            again, _ = await collect(stub, req, timeout=60)
            return refused, tokens, again

    refused, tokens, again = asyncio.run(scenario())
    assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused.details()
    assert "over its limit gateway.max_media_bytes=1048576; retry shortly" in refused.details()
    assert any(d.Is(error_details_pb2.RetryInfo.DESCRIPTOR) for d in rpc_status.from_call(refused).details)
    assert len(tokens) == 2 and len(again) == 2


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_gateway_memory_returns_after_bursts_of_large_images(demo_ckpt: Path, tmp_path: Path) -> None:
    """Bursts of 3000x3000 images, each decoded (~60 MB at its peak) then refused as too long with its text, leave
    the warmed gateway's RSS within 10% of where it started: decoding's freed heap is handed back once no request
    holds media (it stayed at 3.5x before)."""
    from gateway.cli.up import MESH_PREFIX

    cfg = tmp_path / "mesh.yaml"
    cfg.write_text(yaml.safe_dump({
        "audio": {"enabled": False}, "talker": {"enabled": False},
        "thinker": {"engine": {"kv_cache_bytes": 128 << 20, "max_model_len": 10000, "max_batch_tokens": 4096}}}))
    mesh = start([OMNIMESH, "up", "--model", str(demo_ckpt), "--port", "0", "--config", str(cfg)], MESH_PREFIX,
                 timeout=240)
    buf = io.BytesIO()
    Image.linear_gradient("L").resize((3000, 3000)).convert("RGB").save(buf, format="PNG")  # 8,836 tokens
    req = request(omni_pb2.ContentPart(image=omni_pb2.Media(data=buf.getvalue())))
    req.messages[0].content[-1].text = "word " * 1500  # with it the prompt passes the 10,000-token context

    async def burst(n: int) -> list[grpc.StatusCode]:
        return [e.code() for e in await asyncio.gather(*(chat_error(addr(mesh), req, timeout=60) for _ in range(n)))]

    try:
        # warm: the decode threads (and their heaps) a burst needs exist before the measure starts
        assert asyncio.run(burst(6)) == [grpc.StatusCode.INVALID_ARGUMENT] * 6
        time.sleep(1.5)
        pid = mesh.ports["gateway"]["pid"]
        start_mb = rss_mb(pid)
        for _ in range(3):
            assert asyncio.run(burst(6)) == [grpc.StatusCode.INVALID_ARGUMENT] * 6
        deadline = time.monotonic() + 6  # collected and trimmed 2 s after the last request lets go of its media
        while rss_mb(pid) > start_mb * 1.1 and time.monotonic() < deadline:
            time.sleep(0.25)
        assert rss_mb(pid) <= start_mb * 1.1, (start_mb, rss_mb(pid))
    finally:
        assert mesh.stop() == 0

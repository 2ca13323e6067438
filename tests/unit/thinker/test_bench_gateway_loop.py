"""The text bench's closed loop times a request from its send: making the request (a long prompt is tokenized to an
exact length) is the client's own work, not the server's time to first token."""
from __future__ import annotations

import asyncio
import time

from bench.thinker import gateway_loop
from bench.thinker.workload import RequestRecord


def test_a_request_is_made_before_its_clock_starts() -> None:
    made_at: dict[int, float] = {}
    started_at: dict[int, float] = {}

    def make(index: int) -> int:
        time.sleep(0.02)  # a slow prompt builder
        made_at[index] = time.perf_counter()
        return index

    async def call(stub: object, request: int, rec: RequestRecord) -> None:
        started_at[request] = rec.start
        rec.add(time.perf_counter(), 1)
        rec.end = time.perf_counter()

    records = asyncio.run(gateway_loop.closed_loop("127.0.0.1:1", make, concurrency=1, warmup=1, measured=2,
                                                   call=call))
    assert [r.index for r in records] == [0, 1, 2]
    assert all(started_at[i] >= made_at[i] for i in started_at)  # the 20 ms of making is outside every TTFT

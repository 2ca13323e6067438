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


def test_think_time_spaces_a_clients_requests_and_stays_out_of_their_clocks() -> None:
    """With think_s a worker waits a uniform 0..think_s before each request (arrivals spread over the engine's
    steps); without, the next request follows the last one's end at once."""
    def gaps(think_s: float) -> list[float]:
        records: list[RequestRecord] = []

        async def call(stub: object, request: int, rec: RequestRecord) -> None:
            records.append(rec)
            await asyncio.sleep(0.001)
            rec.add(time.perf_counter(), 1)
            rec.end = time.perf_counter()

        asyncio.run(gateway_loop.closed_loop("127.0.0.1:1", lambda i: i, concurrency=1, warmup=0, measured=12,
                                             call=call, think_s=think_s))
        return [b.start - a.end for a, b in zip(records, records[1:])]

    spaced = gaps(0.05)
    assert all(0 <= g < 0.05 + 0.05 for g in spaced) and max(spaced) > 0.01  # drawn, not a constant 0
    assert max(gaps(0.0)) < 0.01

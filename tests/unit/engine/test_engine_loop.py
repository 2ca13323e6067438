"""EngineLoop over a fake StepCore: delivery, commands, cancel, drain, failure, stall, warm-up, metrics. Each real
core (TokenCore, SpeechCore) is tested on the loop in its own area."""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

import pytest

from runtime.engine.engine_loop import EngineLoop
from runtime.engine.request_stream import RequestStream
from runtime.engine.step_core import Abort, Add, CoreLoad, Output, StepCore, StepResult, StepStats
from runtime.errors import Unavailable
from runtime.metrics import Metrics


class Extend:
    """The fake core's own command: `n` more outputs for request `key`."""

    def __init__(self, key: int, n: int) -> None:
        self.key, self.n = key, n


class FakeCore(StepCore):
    """A request is a number of outputs; each step gives every live request its next one ("key:i"). Records the
    commands it was given and the thread each call ran on; can be told to fail at a step or to sleep in each."""

    thread_name = "fake-engine"
    stage = "talker"

    def __init__(self, delay: float = 0.001, fail_at_step: int | None = None, owed: bool = False) -> None:
        self.delay = delay
        self.fail_at_step = fail_at_step
        self.owed = owed  # fail_all hands back one output the failed step had made
        self.left: dict[int, int] = {}
        self.made: dict[int, int] = {}
        self.commands: list[object] = []
        self.threads: set[str] = set()
        self.steps = 0
        self.failed_with: BaseException | None = None
        self.release = threading.Event()  # a step waits on it when `hold` is set
        self.hold = False
        self.defer: list[float] = []  # step_due_in's answers, one a step, then 0
        self.stepped_with: list[set[int]] = []  # the live requests each step saw

    def thread_started(self) -> None:
        self.threads.add(threading.current_thread().name)

    def apply(self, command: object) -> None:
        self.commands.append(command)
        if isinstance(command, Add):
            self.left[command.key] = command.request
            self.made[command.key] = 0
        elif isinstance(command, Abort):
            self.left.pop(command.key, None)
        elif isinstance(command, Extend) and command.key in self.left:
            self.left[command.key] += command.n

    @property
    def has_work(self) -> bool:
        return bool(self.left)

    def step_due_in(self) -> float:
        return self.defer.pop(0) if self.defer else 0.0

    def step(self) -> StepResult:
        assert self.left, "step() called without work"
        self.threads.add(threading.current_thread().name)
        self.stepped_with.append(set(self.left))
        if self.hold:
            self.release.wait(10)
        if self.fail_at_step is not None and self.steps >= self.fail_at_step:
            raise RuntimeError("device lost")
        self.steps += 1
        time.sleep(self.delay)
        outputs = []
        for key in list(self.left):
            self.left[key] -= 1
            outputs.append(Output(key, f"{key}:{self.made[key]}", self.left[key] == 0))
            self.made[key] += 1
            if self.left[key] == 0:
                del self.left[key]
        return StepResult(outputs, StepStats(self.delay, len(outputs), len(outputs), 0, 0, len(self.left), None))

    def fail_all(self, error: BaseException) -> list[Output]:
        self.failed_with = error
        owed = [Output(key, "owed", False) for key in self.left] if self.owed else []
        self.left.clear()
        return owed

    def load(self) -> CoreLoad:
        return CoreLoad(0, len(self.left), None)


async def drain(stream: RequestStream, timeout: float = 10.0) -> list[object]:
    out = []
    while not stream.finished:
        item = await stream.next(timeout)
        assert item is not None, "stream stalled"
        out.append(item)
    return out


def on_loop(loop: EngineLoop, body: Callable[[], object]) -> object:
    try:
        return asyncio.run(body())  # type: ignore[arg-type]
    finally:
        loop.close()


def test_each_stream_gets_its_own_outputs_in_order_from_the_engine_thread() -> None:
    core, steps = FakeCore(), []
    loop = EngineLoop(core, on_step=steps.append)

    async def main() -> list[list[object]]:
        streams = [loop.submit(k, 2 + k, f"r{k}") for k in range(3)]
        return await asyncio.gather(*(drain(s) for s in streams))

    assert on_loop(loop, main) == [[f"{k}:{i}" for i in range(2 + k)] for k in range(3)]
    assert core.threads == {"fake-engine"} and len(steps) == core.steps == 4
    assert not loop.is_alive and loop.failure is None


def test_a_step_reaches_each_event_loop_in_one_call() -> None:
    loop, posts = EngineLoop(FakeCore()), []

    async def main() -> None:
        aio = asyncio.get_running_loop()
        post = aio.call_soon_threadsafe

        def counting(callback: Callable[..., object], *args: object) -> asyncio.Handle:
            posts.append(len(args[0]))
            return post(callback, *args)

        aio.call_soon_threadsafe = counting  # type: ignore[method-assign]
        streams = [loop.submit(k, 5) for k in range(4)]
        await asyncio.gather(*(drain(s) for s in streams))

    on_loop(loop, main)
    assert posts == [4] * 5  # four streams' outputs per step, one post


def test_commands_reach_the_core_in_order_and_none_after_the_end() -> None:
    core = FakeCore(delay=0.01)
    loop = EngineLoop(core)

    async def main() -> list[object]:
        stream = loop.submit(7, 1)
        stream.send(Extend(7, 2))
        items = await drain(stream)
        stream.send(Extend(7, 5))  # ended: not sent
        return items

    assert on_loop(loop, main) == ["7:0", "7:1", "7:2"]
    assert [type(c).__name__ for c in core.commands] == ["Add", "Extend"]


def test_closing_a_stream_aborts_its_request_and_the_loop_sleeps_again() -> None:
    core = FakeCore(delay=0.005)
    loop = EngineLoop(core)

    async def main() -> None:
        async with loop.submit(1, 10_000) as stream:
            assert await stream.next(5) == "1:0"
        assert stream.finished
        end = time.monotonic() + 5
        while core.left:
            assert time.monotonic() < end, "abort never applied"
            await asyncio.sleep(0.005)

    on_loop(loop, main)
    assert isinstance(core.commands[-1], Abort) and loop._streams == {} and loop.failure is None
    steps = core.steps
    time.sleep(0.05)
    assert core.steps == steps  # no work: the thread waits for a command instead of stepping


def test_a_step_the_core_defers_takes_the_commands_that_arrive_meanwhile() -> None:
    core = FakeCore()
    core.defer = [0.3]
    loop = EngineLoop(core)

    async def main() -> float:
        first = loop.submit(1, 2)
        await asyncio.sleep(0.1)  # inside the 300 ms the core asked for
        second = loop.submit(2, 2)
        began = time.monotonic()
        await asyncio.gather(drain(first), drain(second))
        return time.monotonic() - began

    assert on_loop(loop, main) < 5
    assert core.stepped_with[0] == {1, 2}  # the first step waited, and ran with the request that came meanwhile


def test_a_stop_while_a_step_is_deferred_ends_the_loop_at_once() -> None:
    core = FakeCore()
    core.defer = [30.0]
    loop = EngineLoop(core)

    async def main() -> None:
        loop.submit(1, 2)
        await asyncio.sleep(0.05)

    began = time.monotonic()
    on_loop(loop, main)  # closes the loop: a stop command in the queue it waits on
    assert time.monotonic() - began < 5 and not loop.is_alive and core.steps == 0


def test_an_abort_while_a_step_is_deferred_leaves_nothing_to_step() -> None:
    core = FakeCore()
    core.defer = [0.3]
    loop = EngineLoop(core)

    async def main() -> None:
        async with loop.submit(1, 2):
            await asyncio.sleep(0.05)  # closed unread inside the wait: an Abort
        await asyncio.sleep(0.5)

    on_loop(loop, main)
    assert core.steps == 0 and isinstance(core.commands[-1], Abort) and loop.failure is None


def test_a_failing_core_ends_every_stream_with_unavailable_after_what_it_owed() -> None:
    core = FakeCore(fail_at_step=2, owed=True)
    loop = EngineLoop(core)

    async def main() -> tuple[list[list[object]], BaseException]:
        streams = [loop.submit(k, 100) for k in range(3)]
        results = []
        for s in streams:
            items = []
            with pytest.raises(Unavailable, match="the talker engine has failed: RuntimeError\\('device lost'\\)"):
                while True:
                    items.extend(await asyncio.wait_for(s.take(), 10))
            assert s.finished
            results.append(items)
        with pytest.raises(Unavailable, match="device lost") as late:
            await loop.submit(9, 1).next(1)
        return results, late.value

    results, late = on_loop(loop, main)
    assert results == [[f"{k}:0", f"{k}:1", "owed"] for k in range(3)]
    assert isinstance(loop.failure, RuntimeError) and core.failed_with is loop.failure and not loop.is_alive
    assert late.stage == "talker" and loop._streams == {}


def test_requests_queued_when_the_core_dies_are_failed_too() -> None:
    core = FakeCore(fail_at_step=0)
    core.hold = True  # the first step waits, so the second request is still queued when it fails
    loop = EngineLoop(core)

    async def main() -> None:
        first = loop.submit(1, 3)
        while not core.left:
            await asyncio.sleep(0.001)
        second = loop.submit(2, 3)
        core.release.set()
        for s in (first, second):
            with pytest.raises(Unavailable):
                await asyncio.wait_for(s.next(), 10)

    on_loop(loop, main)
    assert [type(c).__name__ for c in core.commands] == ["Add"]  # the queued Add was failed, not applied


def test_a_failed_thread_start_fails_the_construction() -> None:
    class NoDevice(FakeCore):
        def thread_started(self) -> None:
            raise OSError("no device")

    with pytest.raises(RuntimeError, match="the talker engine failed its warm-up") as caught:
        EngineLoop(NoDevice())
    assert isinstance(caught.value.__cause__, OSError)


def test_a_stream_whose_event_loop_is_gone_is_dropped_and_aborted(caplog: pytest.LogCaptureFixture) -> None:
    core = FakeCore(delay=0.005)
    loop = EngineLoop(core)

    async def submit() -> RequestStream:
        stream = loop.submit(3, 10_000, "gone-1")
        assert await stream.next(5) is not None
        return stream

    try:
        with caplog.at_level(logging.WARNING, logger="runtime.engine.engine_loop"):
            asyncio.run(submit())  # its event loop closes under the running request
            end = time.monotonic() + 5
            while core.left:
                assert time.monotonic() < end, "the orphaned request was never aborted"
                time.sleep(0.005)
        assert any("dropping request gone-1" in r.getMessage() for r in caplog.records)
        assert loop._streams == {} and loop.failure is None and loop.is_alive  # the loop carries on
    finally:
        loop.close()


def test_the_heartbeat_names_a_step_that_hangs() -> None:
    core = FakeCore()
    core.hold = True
    loop = EngineLoop(core)

    async def main() -> None:
        stream = loop.submit(1, 1)
        while not core.left:
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.05)
        assert isinstance(loop.heartbeat.stuck(0.01), TimeoutError)  # inside a step for 50 ms
        core.release.set()
        await drain(stream)
        assert loop.heartbeat.stuck(0.01) is None  # between steps

    on_loop(loop, main)


def test_step_stats_reach_the_metrics_and_a_core_without_kv_sets_no_kv_series() -> None:
    metrics = Metrics("talker", "r0")
    loop = EngineLoop(FakeCore(), metrics)
    labels = {"stage": "talker", "replica": "r0", "model_name": ""}

    async def main() -> None:
        await asyncio.gather(*(drain(loop.submit(k, 3)) for k in range(2)))

    on_loop(loop, main)
    value = lambda name: metrics.registry.get_sample_value(name, labels)  # noqa: E731
    assert value("omnimesh_step_time_seconds_count") == 3 and value("omnimesh_batch_size_sum") == 6
    assert value("omnimesh_requests_running") == 0 and value("omnimesh_queue_depth") == 0
    assert value("omnimesh_kv_usage_ratio") is None and value("omnimesh_batch_tokens_count") is None


def test_a_slow_step_is_logged_naming_the_stage(caplog: pytest.LogCaptureFixture) -> None:
    loop = EngineLoop(FakeCore(delay=0.0))
    loop._step_hooks[0].threshold_s = 0.0  # every step is "slow"

    async def main() -> None:
        await drain(loop.submit(1, 1))

    with caplog.at_level(logging.WARNING, logger="runtime.engine.slow_steps"):
        on_loop(loop, main)
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("talker: a step took") and "1 rows" in line and "KV" not in line

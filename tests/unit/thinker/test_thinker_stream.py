"""ThinkerService streaming over a real EngineLoop and a scripted model: coalesced batches keep tokens, text and
logprobs aligned and in order; stop tokens, stop strings, cancellation and a dead engine end streams as before."""
from __future__ import annotations

import asyncio
import logging
import re
import time
from pathlib import Path

import pytest
import torch

from runtime.engine.block_manager import BlockManager
from runtime.engine.engine import Engine
from runtime.engine.engine_loop import EngineLoop
from runtime.engine.sampling_params import SamplingOptions
from runtime.engine.scheduler import ScheduledBatch, Scheduler, SchedulerLimits
from runtime.engine.sequence import FinishReason, Sequence
from runtime.engine.token_core import TokenCore
from runtime.errors import Unavailable
from runtime.metrics import Metrics
from runtime.tokenizer import Tokenizer
from services.thinker.request import ThinkerRequest
from services.thinker.service import FinishedOut, GenerateInput, ThinkerService, TokensOut

SENTENCE = " The cat and the dog went to the park on a day when it was not very hot."


class ScriptedRunner:
    """Row i of a step picks script[len(output_ids) % len(script)], more sharply at each position (so every
    token's logprob is its own); sleeps `delay` per step; raises at step `fail_at_step`."""

    def __init__(self, script: list[int], width: int, delay: float) -> None:
        self.script = script
        self.width = width
        self.delay = delay
        self.device = torch.device("cpu")
        self.steps = 0
        self.fail_at_step: int | None = None

    def row_logits(self, position: int) -> torch.Tensor:
        row = torch.zeros(self.width)
        row[self.script[position % len(self.script)]] = 8.0 + 0.05 * position
        return row

    def run(self, batch: ScheduledBatch) -> torch.Tensor:
        if self.fail_at_step is not None and self.steps >= self.fail_at_step:
            raise RuntimeError("device lost")
        self.steps += 1
        time.sleep(self.delay)
        rows = [self.row_logits(len(r.seq.output_ids)) for r in batch.rows if r.samples]
        return torch.stack(rows) if rows else torch.zeros(0, self.width)

    def release(self, seq: Sequence) -> None:
        pass


@pytest.fixture(scope="module")
def tok(demo_ckpt: Path) -> Tokenizer:
    return Tokenizer.from_dir(demo_ckpt)


def make_service(tok: Tokenizer, script: list[int], flush_s: float, delay: float = 0.002
                 ) -> tuple[ThinkerService, ScriptedRunner]:
    runner = ScriptedRunner(script, max([*script, *tok.eos_token_ids]) + 1, delay)
    scheduler = Scheduler(SchedulerLimits(8, 256, 1000), BlockManager(128, 16))
    service = ThinkerService(EngineLoop(TokenCore(Engine(scheduler, runner))), tok, Metrics("thinker", "test"), 1000,
                             flush_s, max_in_flight=8)
    return service, runner


def request(sampling: SamplingOptions, prompt: tuple[int, ...] = (9707, 11, 1879)) -> GenerateInput:
    req = ThinkerRequest(torch.zeros(3, len(prompt), dtype=torch.long), 0, [])
    return GenerateInput("req-1", list(prompt), sampling, req)


def generate(service: ThinkerService, inp: GenerateInput) -> list[TokensOut | FinishedOut]:
    async def main() -> list[TokensOut | FinishedOut]:
        return [out async for out in service.generate(inp)]

    try:
        return asyncio.run(main())
    finally:
        service.engine.close()


def split(outs: list[TokensOut | FinishedOut]) -> tuple[list[TokensOut], FinishedOut]:
    assert isinstance(outs[-1], FinishedOut) and all(isinstance(o, TokensOut) for o in outs[:-1])
    return outs[:-1], outs[-1]  # type: ignore[return-value]


@pytest.mark.parametrize("flush_s", [0.0, 0.03])
def test_batches_keep_tokens_text_and_logprobs_in_order(tok: Tokenizer, flush_s: float) -> None:
    script = tok.encode(SENTENCE)
    service, runner = make_service(tok, script, flush_s)
    sampling = SamplingOptions(temperature=0.0, max_tokens=len(script), ignore_eos=True, logprobs=True,
                               top_logprobs=2)
    batches, done = split(generate(service, request(sampling)))
    ids = [t for b in batches for t in b.token_ids]
    assert ids == script and "".join(b.text for b in batches) == tok.decode(script)
    for b in batches:  # each batch carries one logprob per token, for that token
        assert [lp[0] for lp in b.logprobs] == b.token_ids
        assert all(top[0][0] == t for t, _, top in b.logprobs)
    expected = [torch.log_softmax(runner.row_logits(p), -1)[t].item() for p, t in enumerate(script)]
    assert [lp[1] for b in batches for lp in b.logprobs] == pytest.approx(expected, abs=1e-5)
    assert len(batches[0].token_ids) == 1  # the first token is never held
    if flush_s:
        assert len(batches) < len(script) / 2, "a 30 ms window over 2 ms steps must gather tokens"
    assert done.reason is FinishReason.LENGTH and done.completion_tokens == len(script)


def test_the_stop_token_is_reported_but_not_shown(tok: Tokenizer) -> None:
    words = tok.encode(SENTENCE)[:6]
    eos = tok.eos_token_ids[0]
    service, _ = make_service(tok, words + [eos], flush_s=0.03)
    batches, done = split(generate(service, request(SamplingOptions(temperature=0.0, max_tokens=100))))
    assert [t for b in batches for t in b.token_ids] == words + [eos]
    assert "".join(b.text for b in batches) == tok.decode(words)
    assert done.reason is FinishReason.STOP and done.completion_tokens == len(words) + 1


def test_an_ignored_eos_stays_text_when_a_stop_token_id_ends_the_same_batch(tok: Tokenizer) -> None:
    a, b, stop = tok.encode(SENTENCE)[:3]
    eos = tok.eos_token_ids[0]
    service, _ = make_service(tok, [a, eos, b, stop], flush_s=5.0)  # everything after the first token: one batch
    sampling = SamplingOptions(temperature=0.0, max_tokens=100, ignore_eos=True, stop_token_ids=frozenset({stop}))
    batches, done = split(generate(service, request(sampling)))
    assert [bt.token_ids for bt in batches] == [[a], [eos, b, stop]]
    assert "".join(bt.text for bt in batches) == tok.decode([a, eos, b])
    assert done.reason is FinishReason.STOP


def test_a_stop_string_cuts_the_text_and_aborts_the_sequence(tok: Tokenizer) -> None:
    script = tok.encode(SENTENCE)
    service, runner = make_service(tok, script, flush_s=0.01)
    sampling = SamplingOptions(temperature=0.0, max_tokens=900, ignore_eos=True, stop_strings=(" park",))
    batches, done = split(generate(service, request(sampling)))
    assert "".join(b.text for b in batches) == SENTENCE[:SENTENCE.index(" park")]
    assert done.reason is FinishReason.STOP and runner.steps < 100  # aborted, not run to max_tokens
    assert service.engine.core.engine.scheduler.blocks.num_free_blocks == 128


def test_leaving_the_stream_early_aborts_the_sequence_and_frees_its_slot(tok: Tokenizer) -> None:
    service, _ = make_service(tok, tok.encode(SENTENCE), flush_s=0.01)
    blocks = service.engine.core.engine.scheduler.blocks
    sampling = SamplingOptions(temperature=0.0, max_tokens=900, ignore_eos=True)

    async def main() -> None:
        outs = service.generate(request(sampling))
        assert isinstance(await anext(outs), TokensOut)
        await outs.aclose()  # what a cancelled gRPC call does to the handler's generator
        assert service._in_flight == 0
        end = time.monotonic() + 5.0
        while blocks.num_free_blocks != 128:
            assert time.monotonic() < end, "the abandoned sequence kept its KV"
            await asyncio.sleep(0.005)

    try:
        asyncio.run(main())
    finally:
        service.engine.close()


def test_a_dead_engine_fails_the_stream_as_unavailable(tok: Tokenizer) -> None:
    service, runner = make_service(tok, tok.encode(SENTENCE), flush_s=0.01)
    runner.fail_at_step = 4
    with pytest.raises(Unavailable, match="device lost"):
        generate(service, request(SamplingOptions(temperature=0.0, max_tokens=900, ignore_eos=True)))


def test_a_debug_log_gives_each_requests_timeline(tok: Tokenizer, caplog: pytest.LogCaptureFixture) -> None:
    script = tok.encode(SENTENCE)[:5]
    service, _ = make_service(tok, script, flush_s=0.0)
    with caplog.at_level(logging.DEBUG, logger="services.thinker.service"):
        generate(service, request(SamplingOptions(temperature=0.0, max_tokens=5, ignore_eos=True)))
    [line] = [r.getMessage() for r in caplog.records if r.name == "services.thinker.service"]
    assert re.fullmatch(r"request req-1: 3 prompt tokens \(0 cached\), first scheduled \+[\d.]+ ms, talker "
                        r"conditioning none, first token \+[\d.]+ ms, end \+[\d.]+ ms; 5 tokens", line), line

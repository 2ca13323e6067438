"""Our Thinker's logits equal transformers' on packed prefill, batched paged decode, and chunked prefill."""
from __future__ import annotations

import torch

from services.thinker.model import ThinkerLM
from tests.parity.thinker.thinker_paged_runner import PagedRunner
from tests.parity.thinker.thinker_reference import ReferenceRun

TOL = dict(rtol=1e-5, atol=1e-5)
DECODE_STEPS = 5


def test_packed_prefill_of_three_prompts_matches_reference(
    thinker_lm: ThinkerLM, reference_runs: list[ReferenceRun]
) -> None:
    runner = PagedRunner(thinker_lm, seed=1)
    results = runner.step([runner.text_feed(seq, run.prompt) for seq, run in enumerate(reference_runs)])
    for run, result in zip(reference_runs, results):
        torch.testing.assert_close(result.logits, run.prefill_logits, **TOL)


def test_batched_decode_through_paged_cache_matches_reference_steps(
    thinker_lm: ThinkerLM, reference_runs: list[ReferenceRun]
) -> None:
    runner = PagedRunner(thinker_lm, seed=2)
    results = runner.step([runner.text_feed(seq, run.prompt) for seq, run in enumerate(reference_runs)])
    for run, result in zip(reference_runs, results):
        torch.testing.assert_close(result.logits[-1], run.step_logits[0], **TOL)
    for step in range(DECODE_STEPS):
        # Teacher-forced on the reference's tokens, so each step compares like with like.
        feeds = [runner.text_feed(seq, [run.tokens[step]]) for seq, run in enumerate(reference_runs)]
        for run, result in zip(reference_runs, runner.step(feeds)):
            torch.testing.assert_close(result.logits[0], run.step_logits[step + 1], **TOL)


def test_chunked_prefill_mixed_with_decode_rows_equals_one_shot(
    thinker_lm: ThinkerLM, reference_runs: list[ReferenceRun]
) -> None:
    short, long = reference_runs[0], reference_runs[2]
    runner = PagedRunner(thinker_lm, seed=3)
    runner.step([runner.text_feed(0, short.prompt)])
    fresh = PagedRunner(thinker_lm, seed=4)
    one_shot = fresh.step([fresh.text_feed(0, long.prompt)])[0].logits
    bounds = [0, 7, 16, len(long.prompt)]
    chunks = []
    for step, (start, end) in enumerate(zip(bounds, bounds[1:])):
        # Each long-prompt chunk rides with a decode row of the short prompt, as the engine's mixed steps do.
        decode, chunk = runner.step(
            [runner.text_feed(0, [short.tokens[step]]), runner.text_feed(1, long.prompt[start:end])]
        )
        torch.testing.assert_close(decode.logits[0], short.step_logits[step + 1], **TOL)
        chunks.append(chunk.logits)
    chunked = torch.cat(chunks)
    torch.testing.assert_close(chunked, one_shot, **TOL)
    torch.testing.assert_close(chunked, long.prefill_logits, **TOL)

"""The same Thinker on CUDA (fp32, TF32 off) matches the reference's packed prefill and batched decode logits."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from services.thinker.model import ThinkerLM
from tests.parity.thinker.thinker_paged_runner import PagedRunner
from tests.parity.thinker.thinker_reference import ReferenceRun


@pytest.mark.gpu
def test_cuda_prefill_and_decode_match_reference(
    demo_ckpt: Path, reference_runs: list[ReferenceRun], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    model = ThinkerLM.load(demo_ckpt, device="cuda")
    runner = PagedRunner(model, seed=8)
    prompts = [runner.text_feed(seq, run.prompt) for seq, run in enumerate(reference_runs)]
    for run, result in zip(reference_runs, runner.step(prompts)):
        torch.testing.assert_close(result.logits.cpu(), run.prefill_logits, rtol=1e-4, atol=1e-4)
    for step in range(3):
        feeds = [runner.text_feed(seq, [run.tokens[step]]) for seq, run in enumerate(reference_runs)]
        for run, result in zip(reference_runs, runner.step(feeds)):
            torch.testing.assert_close(result.logits[0].cpu(), run.step_logits[step + 1], rtol=1e-4, atol=1e-4)

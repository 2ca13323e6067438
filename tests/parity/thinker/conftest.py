"""Fixtures for Thinker parity: our model on the demo checkpoint and the reference's runs on a few text prompts."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from services.thinker.model import ThinkerLM
from tests.parity.thinker.thinker_reference import NEW_TOKENS, ReferenceRun, chat_prompt


@pytest.fixture(scope="session")
def thinker_lm(demo_ckpt: Path) -> ThinkerLM:
    return ThinkerLM.load(demo_ckpt)


@pytest.fixture(scope="session")
def text_prompts() -> list[list[int]]:
    """Three chat prompts of different lengths (12, 17, 25 tokens)."""
    return [chat_prompt(n, seed) for seed, n in enumerate((4, 9, 17))]


@pytest.fixture(scope="session")
def reference_runs(hf_omni: Any, text_prompts: list[list[int]]) -> list[ReferenceRun]:
    runs = []
    for prompt in text_prompts:
        input_ids = torch.tensor([prompt])
        mask = torch.ones_like(input_ids)
        with torch.inference_mode():
            prefill = hf_omni.thinker(input_ids=input_ids, attention_mask=mask).logits[0]
            gen = hf_omni.thinker.generate(
                input_ids=input_ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False,
                output_logits=True, return_dict_in_generate=True,
            )
        # The demo checkpoint is fixed, so whether an EOS shows up early is too; the tests expect none.
        assert gen.sequences.shape[1] == len(prompt) + NEW_TOKENS, "reference stopped early; pick other prompts"
        runs.append(ReferenceRun(
            prompt=prompt,
            prefill_logits=prefill.float(),
            step_logits=[step[0].float() for step in gen.logits],
            tokens=gen.sequences[0, len(prompt):].tolist(),
        ))
    return runs

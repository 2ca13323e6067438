"""Qwen3.5 demo checkpoints (dense, MoE) in our HybridLM and in transformers, fp32 on CPU. Do not mutate."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from services.thinker.model.hybrid_lm import HybridLM
from tests.parity.qwen3_5.hybrid_harness import NEW_TOKENS, PROMPTS, Reference, reference


@pytest.fixture(scope="session", params=["dense", "moe"])
def variant(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="session")
def hybrid_ckpt(variant: str, request: pytest.FixtureRequest) -> Path:
    return request.getfixturevalue("qwen3_5_moe_ckpt" if variant == "moe" else "qwen3_5_ckpt")


@pytest.fixture(scope="session")
def hybrid_lm(hybrid_ckpt: Path) -> HybridLM:
    return HybridLM.load(hybrid_ckpt, dtype=torch.float32, use_kernels=False)


@pytest.fixture(scope="session")
def hf_hybrid(hybrid_ckpt: Path, variant: str):
    transformers = pytest.importorskip("transformers")
    cls = (transformers.Qwen3_5MoeForConditionalGeneration if variant == "moe"
           else transformers.Qwen3_5ForConditionalGeneration)
    return cls.from_pretrained(hybrid_ckpt, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def references(hf_hybrid) -> list[Reference]:
    """transformers' prefill logits and greedy run of each of PROMPTS (NEW_TOKENS tokens)."""
    return [reference(hf_hybrid, prompt, NEW_TOKENS) for prompt in PROMPTS]

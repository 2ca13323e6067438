"""A step's decode rows and prefill tokens as slices (views) when each is one run, as the scheduler packs them, and
as index tensors otherwise: both select the same packed tokens."""
from __future__ import annotations

import pytest
import torch

from runtime.checkpoint.qwen3_5.demo_config import demo_config
from services.thinker.model.config import ThinkerConfig
from services.thinker.model.linear_state import LinearStateCache, build_state_context


@pytest.mark.parametrize(("q_lens", "sliced"), [
    ([1, 1, 5, 3], True),  # decode rows first: the scheduler's order
    ([5, 3, 1], True),  # decode rows after the prefill chunks
    ([4, 2], True),  # prefill only
    ([1, 5, 1, 3], False),  # interleaved: gathers
])
def test_parts_select_the_same_tokens_as_the_indexes(q_lens: list[int], sliced: bool) -> None:
    hybrid = ThinkerConfig.from_dict(demo_config()).hybrid
    cache = LinearStateCache(hybrid, num_slots=len(q_lens), dtype=torch.float32, device="cpu")
    ctx = build_state_context(cache, q_lens, list(range(len(q_lens))), [True] * len(q_lens), "cpu")
    decode, prefill = ctx.parts
    assert isinstance(prefill, slice) == sliced and isinstance(decode, slice) == sliced
    tokens = torch.arange(sum(q_lens))
    assert torch.equal(tokens[decode], ctx.decode_rows) and torch.equal(tokens[prefill], ctx.prefill_rows)

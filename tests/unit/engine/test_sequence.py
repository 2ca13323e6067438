"""Sequence: token bookkeeping across prompt and output."""
from __future__ import annotations

import pytest

from tests.unit.engine.engine_fakes import GREEDY, make_seq
from runtime.engine.sequence import Sequence, SequenceStatus


def test_empty_prompt_is_rejected() -> None:
    with pytest.raises(ValueError, match="at least one prompt token"):
        Sequence(1, "r", [], GREEDY)


def test_counts_and_token_lookup_span_prompt_and_output() -> None:
    seq = make_seq([10, 11, 12])
    seq.output_ids += [20, 21]
    seq.num_computed_tokens = 3
    assert (seq.num_prompt_tokens, seq.num_tokens, seq.num_uncomputed_tokens) == (3, 5, 2)
    assert [seq.token_id(i) for i in range(5)] == [10, 11, 12, 20, 21]
    assert seq.token_ids(0, 2) == [10, 11]
    assert seq.token_ids(2, 5) == [12, 20, 21]
    assert seq.token_ids(3, 5) == [20, 21]


def test_prompt_is_copied_and_state_starts_waiting() -> None:
    prompt = [1, 2]
    seq = make_seq(prompt)
    prompt.append(3)
    assert seq.prompt_ids == [1, 2]
    assert seq.status is SequenceStatus.WAITING and not seq.is_finished and seq.finish_reason is None
    assert "waiting" in repr(seq) and "tokens=2" in repr(seq)

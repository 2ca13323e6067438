"""Which waiting requests share a talker prefill: queue order, free rows, the padded-token budget."""
from services.talker.prefill_batch import prefill_batch


def test_every_ready_request_joins_within_rows_and_budget():
    assert prefill_batch([20, 30, 25], free_rows=8, max_tokens=4096) == [0, 1, 2]


def test_requests_without_text_are_skipped_not_blocking():
    assert prefill_batch([None, 20, None, 30], free_rows=8, max_tokens=4096) == [1, 3]


def test_free_rows_cap_the_batch():
    assert prefill_batch([20, 20, 20], free_rows=2, max_tokens=4096) == [0, 1]
    assert prefill_batch([20], free_rows=0, max_tokens=4096) == []


def test_padding_to_the_longest_counts_against_the_budget():
    # 2 x 30 = 60 fits; a third row makes 3 x 40 = 120 > 100, so the batch ends there (it goes first next time)
    assert prefill_batch([30, 20, 40, 10], free_rows=8, max_tokens=100) == [0, 1]


def test_a_prompt_longer_than_the_budget_still_starts_alone():
    assert prefill_batch([500, 10], free_rows=8, max_tokens=100) == [0]
    assert prefill_batch([10, 500], free_rows=8, max_tokens=100) == [0]


def test_nothing_ready_is_an_empty_batch():
    assert prefill_batch([None, None], free_rows=4, max_tokens=100) == []
    assert prefill_batch([], free_rows=4, max_tokens=100) == []

"""PrefillGraphs' static buckets (run eagerly on CPU): padding rows and positions change nothing a request sees."""
from __future__ import annotations

import pytest
import torch

from services.talker.model.frame_graphs import batch_buckets
from services.talker.model.load import TalkerModel
from services.talker.model.prefill_graphs import PrefillGraphs
from tests.unit.talker.talker_tiny import tiny_talker


@pytest.fixture(scope="module")
def model() -> TalkerModel:
    return tiny_talker()


def _prompts(model: TalkerModel, lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded random prompts (B, T, hidden) and their positions (3, B, T) (0..L-1 per row, 0 after)."""
    hidden, width = model.cfg.lm.hidden_size, max(lengths)
    x = torch.zeros(len(lengths), width, hidden)
    positions = torch.zeros(3, len(lengths), width)
    for row, length in enumerate(lengths):
        x[row, :length] = torch.randn(length, hidden)
        positions[:, row, :length] = torch.arange(length, dtype=torch.float32)
    return x, positions


def test_buckets_are_the_smallest_that_hold_the_batch(model: TalkerModel) -> None:
    kv = model.lm.new_kv(8, 300)
    graphs = PrefillGraphs(model.lm, kv, batch_buckets(8), max_tokens=512, capture=False)
    assert graphs.bucket_for(1, 20) == (1, 32) and graphs.bucket_for(3, 33) == (4, 64)
    assert graphs.bucket_for(8, 64) == (8, 64)
    assert graphs.bucket_for(8, 65) is None  # 8 x 128 is past the token budget
    assert graphs.bucket_for(1, 300) is None  # 512 positions do not fit a slot of 300
    assert graphs.bucket_for(9, 10) is None  # more rows than any bucket


def test_padded_bucket_prefill_equals_the_plain_forward(model: TalkerModel) -> None:
    torch.manual_seed(0)
    lengths, slots = [5, 17, 11], torch.tensor([2, 0, 3])
    x, positions = _prompts(model, lengths)
    with torch.no_grad():
        plain_kv = model.lm.new_kv(5, 80)
        plain = model.lm(x, positions, plain_kv, slots, slots * 0)
        kv = model.lm.new_kv(5, 80)
        graphs = PrefillGraphs(model.lm, kv, batch_buckets(5), max_tokens=4096, capture=False)
        # a larger batch first, so the second run meets stale values in its bucket's padding
        graphs.run(*_prompts(model, [30, 3, 9, 20]), torch.tensor([1, 2, 3, 4]))
        got = graphs.run(x, positions, slots)
    assert got is not None and got.shape[:2] == (3, 32)  # bucket (4, 32): 3 real rows, padded to 32 positions
    for row, length in enumerate(lengths):
        torch.testing.assert_close(got[row, :length], plain[row, :length], atol=1e-5, rtol=1e-5)
        for layer in range(len(kv.layers)):
            ours, ref = kv.read(layer, slots[row : row + 1], length), plain_kv.read(layer, slots[row : row + 1], length)
            torch.testing.assert_close(ours[0], ref[0], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(ours[1], ref[1], atol=1e-5, rtol=1e-5)


def test_padding_rows_write_only_the_scratch_slot(model: TalkerModel) -> None:
    kv = model.lm.new_kv(5, 80)
    graphs = PrefillGraphs(model.lm, kv, batch_buckets(5), max_tokens=4096, capture=False)
    with torch.no_grad():
        graphs.run(*_prompts(model, [4, 9, 2, 7]), torch.tensor([0, 1, 2, 3]))  # fills bucket (4, 32)
        for layer in kv.layers:
            layer.zero_()
        # bucket (4, 32) again with one padding row, whose stale inputs (the fourth prompt) are not zeros
        graphs.run(*_prompts(model, [4, 9, 2]), torch.tensor([0, 1, 2]))
    for layer in range(len(kv.layers)):
        for slot in (3, 4):
            k, v = kv.read(layer, torch.tensor([slot]), 80)
            assert not k.any() and not v.any()
        assert kv.read(layer, torch.tensor([kv.scratch_slot]), 32)[0].any()  # the padding row's writes went here


def test_a_batch_no_bucket_holds_is_left_to_the_caller(model: TalkerModel) -> None:
    graphs = PrefillGraphs(model.lm, model.lm.new_kv(2, 80), batch_buckets(2), max_tokens=32, capture=False)
    x, positions = _prompts(model, [20, 20])  # 2 x 32 > 32 tokens
    assert graphs.run(x, positions, torch.tensor([0, 1])) is None


def test_capture_refuses_the_expert_loop_it_cannot_capture(model: TalkerModel) -> None:
    model.lm.use_grouped_mm(False)
    with pytest.raises(ValueError, match="use_grouped_mm"):
        PrefillGraphs(model.lm, model.lm.new_kv(2, 80), batch_buckets(2), max_tokens=256, capture=True)

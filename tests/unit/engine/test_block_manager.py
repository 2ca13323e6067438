"""BlockManager: blocks per computed token, grow and free accounting, flat slots."""
from __future__ import annotations

import pytest

from tests.unit.engine.engine_fakes import make_seq
from runtime.engine.block_manager import BlockManager


def test_needs_at_least_one_block() -> None:
    with pytest.raises(ValueError, match="num_blocks=0"):
        BlockManager(0, 16)


@pytest.mark.parametrize(("computed", "new", "held", "need"), [
    (0, 0, 0, 0),
    (0, 1, 0, 1),
    (0, 4, 0, 1),  # exactly one block
    (0, 5, 0, 2),  # one past the boundary
    (4, 1, 1, 1),  # the 5th token opens block 2
    (3, 1, 1, 0),  # the 4th token still fits
    (8, 0, 2, 0),
    (0, 9, 0, 3),
    (2, 6, 1, 1),  # 8 tokens: 2 blocks, 1 held
    (0, 1, 3, 0),  # holding more than needed never goes negative
])
def test_blocks_needed_at_boundaries(computed: int, new: int, held: int, need: int) -> None:
    bm = BlockManager(10, 4)
    seq = make_seq(20)
    seq.num_computed_tokens = computed
    seq.block_table = list(range(held))
    assert bm.blocks_needed(seq, new) == need


def test_grow_takes_blocks_and_free_returns_them() -> None:
    bm = BlockManager(4, 4)
    a, b = make_seq(20), make_seq(20)
    bm.grow(a, 5)
    assert len(a.block_table) == 2 and bm.num_free_blocks == 2
    assert bm.usage_ratio == pytest.approx(0.5)
    a.num_computed_tokens = 5
    bm.grow(a, 3)  # 8 tokens: still 2 blocks
    assert len(a.block_table) == 2
    bm.grow(b, 8)
    assert bm.num_free_blocks == 0 and bm.usage_ratio == 1.0
    assert set(a.block_table).isdisjoint(b.block_table)
    assert sorted(a.block_table + b.block_table) == [0, 1, 2, 3]
    bm.free(a)
    assert a.block_table == [] and bm.num_free_blocks == 2
    bm.free(b)
    assert bm.num_free_blocks == 4 and bm.usage_ratio == 0.0


def test_grow_past_free_raises_and_takes_nothing() -> None:
    bm = BlockManager(2, 4)
    seq = make_seq(20)
    assert not bm.can_grow(seq, 9)
    with pytest.raises(RuntimeError, match="needs 3 blocks, 2 free"):
        bm.grow(seq, 9)
    assert seq.block_table == [] and bm.num_free_blocks == 2
    assert bm.can_grow(seq, 8)


def test_free_of_a_sequence_without_blocks_is_a_no_op() -> None:
    bm = BlockManager(3, 4)
    seq = make_seq(3)
    bm.free(seq)
    assert bm.num_free_blocks == 3


def test_freed_blocks_are_reused() -> None:
    bm = BlockManager(2, 4)
    a = make_seq(8)
    bm.grow(a, 8)
    taken = set(a.block_table)
    bm.free(a)
    b = make_seq(8)
    bm.grow(b, 8)
    assert set(b.block_table) == taken


def test_slot_maps_through_the_block_table() -> None:
    bm = BlockManager(8, 4)
    seq = make_seq(12)
    seq.block_table = [5, 2, 7]
    assert [bm.slot(seq, i) for i in range(12)] == [20, 21, 22, 23, 8, 9, 10, 11, 28, 29, 30, 31]


def test_slot_past_the_table_is_an_error() -> None:
    bm = BlockManager(8, 4)
    seq = make_seq(12)
    seq.block_table = [1]
    with pytest.raises(IndexError):
        bm.slot(seq, 4)

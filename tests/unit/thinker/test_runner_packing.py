"""The runner's host-side packing of a step: the [3, T] position table (generated rows as ranges, one tensor a run;
prompt rows from the request's M-RoPE table; in row order, as the per-row tensors it replaced made them), and the
pending tokens' copy into the step's ids."""
from __future__ import annotations

import torch

from services.thinker.runner import _Packed, _positions


class Request:
    def __init__(self, num_prompt: int, rope_delta: int, seed: int) -> None:
        self.positions = torch.randint(0, 1000, (3, num_prompt), generator=torch.Generator().manual_seed(seed))
        self.rope_delta = rope_delta


def expected(req: Request, num_prompt: int, start: int, stop: int) -> torch.Tensor:
    gen = torch.arange(max(start, num_prompt), max(stop, num_prompt)) + req.rope_delta
    return torch.cat([req.positions[:, start:min(stop, num_prompt)], gen.unsqueeze(0).expand(3, -1)], dim=1)


def table(rows: list[tuple[Request, int, int, int]]) -> torch.Tensor:
    packed = _Packed([], [_positions(*row) for row in rows], [], [], [], [], [], [], [])
    out = packed.position_table()
    assert out.is_contiguous()  # to_device copies it into pinned memory of its own strides
    return out


def test_decode_rows_prefill_chunks_and_a_chunk_that_crosses_into_generated_rows() -> None:
    a, b, c = Request(10, -3, 0), Request(6, 4, 1), Request(8, 0, 2)
    rows = [(a, 10, 12, 13), (b, 6, 9, 10), (c, 8, 2, 6), (a, 10, 13, 14), (c, 8, 6, 11), (b, 6, 10, 11)]
    got = table(rows)
    assert got.dtype == torch.long and got.shape == (3, 1 + 1 + 4 + 1 + 5 + 1)
    assert torch.equal(got, torch.cat([expected(*row) for row in rows], dim=1))
    assert isinstance(_positions(a, 10, 12, 13), range)  # a decode row makes no tensor of its own


def test_all_decode_rows_are_one_tensor_and_a_lone_prompt_chunk_is_its_own_slice() -> None:
    reqs = [Request(5, d, d) for d in range(4)]
    rows = [(r, 5, 7 + i, 8 + i) for i, r in enumerate(reqs)]
    assert torch.equal(table(rows), torch.cat([expected(*row) for row in rows], dim=1))
    lone = (reqs[0], 5, 0, 5)
    assert torch.equal(table([lone]), reqs[0].positions)


def fill(rows: list[int], src: list[int]) -> torch.Tensor:
    from runtime.engine.engine import PendingTokens
    from services.thinker.runner import ThinkerRunner

    ids = torch.arange(100, 106)
    packed = _Packed([], [], [], [], [], [], [], rows, src)
    ThinkerRunner._fill_pending(None, ids, packed, PendingTokens(torch.tensor([7, 8, 9, 10]), {}))
    return ids


def test_pending_tokens_land_on_their_rows_in_order_or_not() -> None:
    assert fill([0, 1, 2], [0, 1, 2]).tolist() == [7, 8, 9, 103, 104, 105]  # steady decode: one slice copy
    assert fill([0, 2, 5], [3, 0, 1]).tolist() == [10, 101, 7, 103, 104, 8]  # rows joined, left or reordered
    assert fill([1, 2], [0, 1]).tolist() == [100, 7, 8, 103, 104, 105]  # a prefill row first: not the identity

"""Gated DeltaNet's causal conv over every prefill row of a step at once (`causal_conv_prefill_rows` along a
`conv_prefill_plan`) against the row-by-row definition: outputs and the held inputs left in each slot."""
from __future__ import annotations

import pytest
import torch

from runtime.kernels.causal_conv import causal_conv_prefill, causal_conv_prefill_rows, conv_prefill_plan


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kernel", [4, 2])
def test_rows_at_once_equal_row_by_row(kernel: int, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(kernel)
    channels, num_slots = 24, 7
    rows = [(5, 1), (2, 2), (6, 9), (0, 3)]  # (slot, tokens): rows shorter than K-1 take windows from held inputs
    x = torch.randn(sum(n for _, n in rows), channels, generator=gen).to(dtype)
    weight = torch.randn(channels, kernel, generator=gen).to(dtype)
    states = torch.randn(num_slots, channels, kernel - 1, generator=gen).to(dtype)
    want_states = states.clone()
    want, at = [], 0
    for slot, n in rows:
        want.append(causal_conv_prefill(x[at:at + n], weight, want_states, slot))
        at += n
    plan = conv_prefill_plan([n for _, n in rows], [s for s, _ in rows], kernel, torch.device("cpu"))
    got = causal_conv_prefill_rows(x, weight, states, plan)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1.6e-2, "atol": 1e-2}
    torch.testing.assert_close(got, torch.cat(want), **tol)
    assert torch.equal(states, want_states)  # held inputs move whole: the slots rows do not hold stay as they were

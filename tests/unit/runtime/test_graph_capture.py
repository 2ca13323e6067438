"""GraphCapture: warm-ups off the capture, the captured call's outputs rewritten by each replay, one pool."""
from __future__ import annotations

import pytest
import torch

from runtime.graph_capture import GraphCapture


def test_a_capture_needs_a_warm_up() -> None:
    with pytest.raises(ValueError, match="warmups=0: at least 1"):
        GraphCapture(warmups=0)


@pytest.mark.gpu
@pytest.mark.parametrize("thread_local", [False, True])
def test_warm_ups_run_before_the_capture_and_replays_rewrite_its_outputs(thread_local: bool) -> None:
    x = torch.ones(4, device="cuda")
    calls = []

    def run() -> torch.Tensor:
        calls.append(torch.cuda.is_current_stream_capturing())
        return x * 2

    capturer = GraphCapture(torch.device("cuda"), warmups=3, thread_local=thread_local)
    graph, out = capturer.capture(run)
    assert calls == [False, False, False, True] and capturer.mode == ("thread_local" if thread_local else "global")
    x.fill_(5)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, torch.full((4,), 10.0, device="cuda"))

"""Capturing a CUDA graph the way every replayed path here needs it: warmed up first, off the capture."""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch

T = TypeVar("T")


def capture_graph(run: Callable[[], T], pool: tuple[int, int] | None) -> tuple[torch.cuda.CUDAGraph, T]:
    """Runs `run` twice on a side stream (Triton compiles, cuBLAS picks its kernels and sizes its workspaces outside
    the capture), then captures one call into a graph drawing on `pool`; returns the graph and what the captured
    call returned (buffers that every replay rewrites)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            run()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        out = run()
    return graph, out

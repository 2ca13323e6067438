"""Capturing CUDA graphs the way every replayed path here needs it: warmed up first, off the capture, into one memory
pool per owner, with the capture mode its threads need. Every stage's graphs (thinker steps, talker frames and
prefills, Code2Wav chunks, audio encoder batches) are captured through it."""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch

T = TypeVar("T")


class GraphCapture:
    """The graphs of one owner (a runner, a decoder): they replay one at a time, so they share a memory pool.

    `warmups`: calls run on a side stream before each capture (Triton compiles, cuBLAS/cuDNN pick their kernels and
    size their workspaces outside the capture; a path whose first call does all of that needs one).
    `thread_local`: capture in torch's "thread_local" error mode, for owners that capture while other threads may
    use the GPU (the engine thread beside the event loop's, an encoder beside its front end); in the default
    "global" mode such work would void the capture.
    """

    def __init__(self, device: torch.device | None = None, warmups: int = 2, thread_local: bool = False) -> None:
        if warmups < 1:
            raise ValueError(f"GraphCapture warmups={warmups}: at least 1 (a first call may allocate or compile)")
        self.device = device
        self.warmups = warmups
        self.mode = "thread_local" if thread_local else "global"
        self.pool = torch.cuda.graph_pool_handle()

    def capture(self, run: Callable[[], T]) -> tuple[torch.cuda.CUDAGraph, T]:
        """Runs `run` `warmups` times on a side stream, then captures one call; returns the graph and what the
        captured call returned (buffers that every replay rewrites)."""
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(self.warmups):
                run()
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool, capture_error_mode=self.mode):
            out = run()
        return graph, out

"""CUDA-graph replay of the whole AuT forward for small batches, where launching ~400 kernels one by one from
Python costs ten times the GPU time (one 5 s clip: ~2 ms of kernels, ~20 ms of host).

One graph per bucket (`plan.bucket_key`: the clips' chunk counts), so every clip of 4-5 s shares one graph: the
plan's tensors (`plan_bucketed`, whose shapes depend only on the bucket) and the mel frames are copied into the
graph's static buffers before each replay. Graphs share one memory pool (each output is copied out right after
its replay, and replays never overlap) and the least recently used one is dropped past `max_graphs`.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import torch

from services.audio.model.config import AudioEncoderConfig
from services.audio.model.plan import AudioBatchPlan, bucket_chunks, bucket_key, plan_bucketed
from runtime.graph_capture import GraphCapture
from runtime.transfer import to_device
from services.audio.transfer import StagedTensors

DEFAULT_GRAPH_CHUNKS = 32  # largest batch replayed, in 1 s chunks; bigger ones keep the GPU busy from eager Python
DEFAULT_MAX_GRAPHS = 16

# (stacked mel [rows, mel_bins], plan on the device) -> [plan.num_rows, output_dim]
Forward = Callable[[torch.Tensor, AudioBatchPlan], torch.Tensor]


@dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph
    mel: torch.Tensor  # static [bucket frames + 1, mel_bins]; the last row stays zero (the plan's zero frame)
    plan: StagedTensors  # the static plan's tensors
    out: torch.Tensor  # static [rows, output_dim]


class CudaGraphs:
    """Captures and replays the forward of batches of at most `max_chunks` chunks on one CUDA device."""

    def __init__(self, config: AudioEncoderConfig, max_chunks: int = DEFAULT_GRAPH_CHUNKS,
                 max_graphs: int = DEFAULT_MAX_GRAPHS) -> None:
        if max_chunks < 1 or max_graphs < 1:
            raise ValueError(f"CUDA graphs need max_chunks >= 1 and max_graphs >= 1, got {max_chunks}, {max_graphs}: "
                             f"pass cuda_graphs=False to the encoder to turn them off")
        self.config = config
        self.max_chunks = max_chunks
        self.max_graphs = max_graphs
        self.graphs: OrderedDict[tuple[int, ...], _Graph] = OrderedDict()
        self.captures = 0
        self.replays = 0
        self._capturer: GraphCapture | None = None  # made at the first capture: its memory pool is CUDA's

    def fits(self, frame_counts: list[int]) -> bool:
        return bucket_chunks(bucket_key(frame_counts, self.config.chunk_frames)) <= self.max_chunks

    def run(self, forward: Forward, mels: list[torch.Tensor], device: torch.device,
            dtype: torch.dtype) -> torch.Tensor:
        """[sum of token counts, output_dim] for `mels` ([mel_bins, T_i] each), by replaying the bucket's graph
        (captured first if new). Only for a CUDA `device`; the output is a fresh tensor."""
        assert device.type == "cuda", "CUDA graphs are captured on CUDA devices only"
        frame_counts = [mel.shape[1] for mel in mels]
        key = bucket_key(frame_counts, self.config.chunk_frames)
        plan = plan_bucketed(frame_counts, self.config)
        entry = self.graphs.get(key)
        if entry is None:
            entry = self._capture(forward, key, plan, device, dtype)
        else:
            self.graphs.move_to_end(key)
            entry.plan.refill(plan.tensors(dtype))
        fill_mel(entry.mel, mels)
        entry.graph.replay()
        self.replays += 1
        return entry.out[:plan.num_tokens].clone()

    def _capture(self, forward: Forward, key: tuple[int, ...], plan: AudioBatchPlan, device: torch.device,
                 dtype: torch.dtype) -> _Graph:
        if self._capturer is None:
            # one warm-up (cuBLAS/cuDNN pick kernels, make workspaces); thread-local: another thread's CUDA work
            # (the log-mel front end, another stage) must not void the capture
            self._capturer = GraphCapture(device, warmups=1, thread_local=True)
        while len(self.graphs) >= self.max_graphs:
            self.graphs.popitem(last=False)
        staged = StagedTensors(plan.tensors(dtype), device)
        static_plan = plan.with_tensors(staged.views)
        mel = torch.zeros(plan.zero_frame + 1, self.config.num_mel_bins, device=device, dtype=dtype)
        graph, out = self._capturer.capture(lambda: forward(mel, static_plan))
        entry = _Graph(graph, mel, staged, out)
        self.graphs[key] = entry
        self.captures += 1
        return entry


def fill_mel(static: torch.Tensor, mels: list[torch.Tensor]) -> None:
    """Packs the clips' frames (time-major, in the graph's dtype) into the first rows of the static mel."""
    row = 0
    for mel in mels:
        if mel.device != static.device:
            mel = to_device(mel, static.device)
        static[row:row + mel.shape[1]].copy_(mel.t())
        row += mel.shape[1]

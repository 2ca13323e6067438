"""Where a decode step's device time goes: graph replay time per bucket, and kernel time by name under the profiler."""
from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch

from services.thinker.graphs import StepGraph
from services.thinker.runner import ThinkerRunner


def _load_decode(runner: ThinkerRunner, g: StepGraph, rows: int, kv_len: int, seed: int) -> None:
    """Random tokens over `kv_len` cached tokens each, read from distinct real blocks; the new token's K/V goes to
    the scratch block (kv_len is rounded so it opens a fresh block), so no cached K/V is overwritten."""
    graphs = runner.graphs
    bs = graphs.block_size
    full = (kv_len - 1) // bs
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, 100_000, (rows,), generator=gen).tolist()
    tables = [[(r * full + i) % graphs.scratch_block for i in range(full)] + [graphs.scratch_block]
              for r in range(rows)]
    positions = torch.full((3, rows), full * bs, dtype=torch.long)
    graphs.prepare(g, ids, positions, [1] * rows, [full * bs + 1] * rows, tables)


def replay_ms(runner: ThinkerRunner, rows: int, kv_len: int, iters: int = 20) -> float | None:
    """Mean device time of `iters` back-to-back replays of the decode graph for `rows`, in ms."""
    g = runner.graphs.decode.get(rows) if runner.graphs is not None else None
    if g is None or g.graph is None:
        return None
    _load_decode(runner, g, rows, kv_len, seed=rows)
    for _ in range(3):
        g.graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        g.graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / iters


def kernel_breakdown(runner: ThinkerRunner, rows: int, kv_len: int, iters: int = 5, top: int = 14) -> dict[str, Any]:
    """Per-step device time by kernel family over `iters` replays of the decode graph for `rows`."""
    g = runner.graphs.decode.get(rows) if runner.graphs is not None else None
    if g is None or g.graph is None:
        return {}
    _load_decode(runner, g, rows, kv_len, seed=rows + 1)
    g.graph.replay()
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            g.graph.replay()
        torch.cuda.synchronize()
    by_name: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            by_name[ev.name] += ev.time_range.elapsed_us()
            counts[ev.name] += 1
    total = sum(by_name.values())
    rows_out = sorted(by_name.items(), key=lambda kv: -kv[1])[:top]
    replay = replay_ms(runner, rows, kv_len)  # kernels and the gaps between them
    return {"rows": rows, "kv_len": kv_len, "kernels_per_step": sum(counts.values()) / iters,
            "device_us_per_step": total / iters, "replay_us_per_step": None if replay is None else replay * 1e3,
            "top": [{"kernel": name[:90], "us_per_step": us / iters, "calls_per_step": counts[name] / iters,
                     "share": us / total if total else 0.0} for name, us in rows_out]}

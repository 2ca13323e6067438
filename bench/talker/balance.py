"""Random talker weights routed like a trained, load-balanced model (bench/moe_routing.py says why drawn ones are
not), and the distinct experts a talker decode step's rows read, for a result file's routing record.

Both run on the eager reference loop, where each layer's `Router` module routes. The fused frame step (the GPU
path) reads the very same weight tensor (services/talker/model/fused.py keeps `moe.gate.weight`), so a router
calibrated in place is calibrated on both paths, and the eager loop's picks are the fused path's
(tests/parity/talker holds the two paths to the same codes).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any

import torch

from bench.moe_routing import CALIBRATIONS, distinct_per_layer, uniform_experts
from services.talker.model.load import TalkerModel
from services.talker.model.moe import Router

RouterCalls = list[list[tuple[torch.Tensor, torch.Tensor]]]  # per layer, per call: (inputs [T, H], experts [T, k])


def talker_routers(model: TalkerModel) -> list[Router]:
    return [layer.mlp.gate for layer in model.lm.layers]


@contextmanager
def recorded_routing(model: TalkerModel) -> Iterator[RouterCalls]:
    """While open, every router call's inputs and picked experts, per layer (forward hooks, removed on exit)."""
    calls: RouterCalls = [[] for _ in talker_routers(model)]

    def hook(layer: int, module: Router, args: tuple[torch.Tensor, ...], output: tuple[torch.Tensor, ...]) -> None:
        calls[layer].append((args[0].detach(), output[1].detach()))

    handles = [r.register_forward_hook(partial(hook, i)) for i, r in enumerate(talker_routers(model))]
    try:
        yield calls
    finally:
        for h in handles:
            h.remove()


@torch.no_grad()
def balance_talker_routing(model: TalkerModel, drive: Callable[[], None], how: str = "whiten",
                           per_layer: bool = True) -> dict[str, Any]:  # fmt: skip
    """Calibrates every router on the inputs it sees while `drive()` runs the eager loop. `per_layer` (default):
    one pass per layer in order, pass p fitting router p (from its drawn weights) while every router before it is
    final, so each is fitted on the inputs the finished routers upstream produce. Otherwise two passes over all
    layers at once (the second on what the first's routers produced), which fits the deep routers on inputs of
    upstream routers that then change: at real dims on an H100 that read 35.2 / 55.5 / 78.3 experts a layer at 8 /
    16 / 32 rows against 40.8 / 68.6 / 100.5 uniform, the last layers least; one pass per layer reads 40.5 / 68.2 /
    99.3 (bench/talker/routing_probe.py). `how` names a bench/moe_routing.py calibration. -> what was done."""
    t0 = time.perf_counter()
    routers = talker_routers(model)
    drawn = [r.weight.detach().clone() for r in routers]
    schedule = [[layer] for layer in range(len(routers))] if per_layer else [list(range(len(routers)))] * 2
    tokens = 0
    for layers in schedule:
        with recorded_routing(model) as calls:
            drive()
        for layer in layers:
            inputs = torch.cat([x for x, _ in calls[layer]])
            routers[layer].weight.copy_(drawn[layer])
            CALIBRATIONS[how](routers[layer].weight, inputs)
            tokens = inputs.shape[0]
    order = "one pass per layer in order" if per_layer else "two passes over all layers"
    return {"calibration": f"talker routers calibrated ({how}) on their inputs, {order} (bench/talker/balance.py)",
            "tokens_per_router_pass": tokens, "passes": len(schedule), "seconds": time.perf_counter() - t0}


def decode_experts_touched(calls: RouterCalls, num_experts: int, top_k: int,
                           row_counts: Sequence[int]) -> dict[str, Any]:
    """Per row count r: distinct experts a layer read in the recorded calls of exactly r rows (decode steps of an
    r-row batch), averaged over layers and steps, beside the uniform expectation."""
    out: dict[str, Any] = {}
    for r in row_counts:
        steps = [torch.stack([layer[i][1] for layer in calls]) for i in range(len(calls[0]))
                 if calls[0][i][1].shape[0] == r]  # each [L, r, k]
        if not steps:
            continue
        by_layer = torch.stack([distinct_per_layer(s, num_experts).float() for s in steps]).mean(dim=0)
        out[str(r)] = {"measured": by_layer.mean().item(), "uniform": uniform_experts(num_experts, top_k, r),
                       "steps": len(steps), "from_rows": "exact", "by_layer": [round(v, 2) for v in by_layer.tolist()]}
    return out

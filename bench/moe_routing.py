"""How a benchmark on random weights proves its MoE routing is a trained model's: the distinct experts a decode step's
rows read, counted from the router's own top-k, beside what uniform routing predicts; and the calibration that makes
random routers spread a batch evenly.

Random N(0, 0.02) weights route a token by its hidden state, and the hidden states of a random model share a large
common component (every layer adds the same kind of noise to every row). The router's logits along that component
are the same for every row, so a batch piles onto the experts it favours: 32 rows read ~80 of 112 expected experts
on a narrow prompt vocabulary, and a decode step then runs under the uniform-routing HBM floor. A trained router is
load-balanced by its auxiliary loss; `calibrate_routers` gives a random one the same property by removing, once at
load, the direction of the mean router input from each router's weights (the serving path, kernels and graphs are
untouched: only weight values change).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

ROW_COUNTS = (1, 4, 8, 16, 32)
BALANCED_TOLERANCE = 0.05  # measured within 5% of the uniform expectation at every row count
ROUTING_MODES = ("balanced", "native")


def uniform_experts(num_experts: int, top_k: int, rows: int) -> float:
    """Distinct experts a layer reads, expected, when each of `rows` tokens picks `top_k` of `num_experts` uniformly
    (without replacement): each expert is missed by a row with probability 1 - k/E."""
    return num_experts * (1 - (1 - top_k / num_experts) ** rows)


def distinct_per_layer(experts: torch.Tensor, num_experts: int) -> torch.Tensor:
    """experts: [L, rows, k] ids -> [L] distinct experts each layer reads for those rows."""
    layers = experts.shape[0]
    hit = torch.zeros(layers, num_experts, dtype=torch.bool, device=experts.device)
    hit.scatter_(1, experts.reshape(layers, -1).long(), True)
    return hit.sum(dim=1)


def is_moe(module: nn.Module) -> bool:
    """The thinker's SparseMoE: a `gate` router Linear, `top_k`, and a `forward_fused` path beside `route`."""
    return hasattr(module, "gate") and hasattr(module, "top_k") and hasattr(module, "route")


def moe_layers(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if is_moe(m)]


Calibration = Callable[[torch.Tensor, torch.Tensor], None]  # (weight [E, H], its inputs [T, H]) -> in place


class RouterTap:
    """While installed, records the experts every token's router picks in each MoE layer (bench-only: it wraps the
    modules' methods on the instance and puts them back on exit). With `calibrate` it also calibrates each router
    on the batch that passes through it, before that batch is routed (see module doc)."""

    def __init__(self, layers: Sequence[nn.Module], calibrate: Calibration | None = None) -> None:
        self.layers = list(layers)
        self.calibrate = calibrate
        self.records: list[list[torch.Tensor]] = [[] for _ in self.layers]  # per layer: [T, k] per forward

    @contextmanager
    def installed(self) -> Iterator[RouterTap]:
        for i, moe in enumerate(self.layers):
            moe.route = self._wrap_route(i, moe.route)
            moe.forward_fused = self._wrap_fused(i, moe, moe.forward_fused)
        try:
            yield self
        finally:
            for moe in self.layers:
                del moe.route, moe.forward_fused  # back to the class's methods

    def _wrap_route(self, i: int, route: Any) -> Any:
        def tapped(x: torch.Tensor) -> Any:
            if self.calibrate:
                self.calibrate(self.layers[i].gate.weight, x)
            routing = route(x)
            self.records[i].append(routing.experts.to(torch.int16))
            return routing
        return tapped

    def _wrap_fused(self, i: int, moe: nn.Module, fused: Any) -> Any:
        def tapped(x: torch.Tensor, logits: torch.Tensor | None = None) -> torch.Tensor:
            if self.calibrate:  # the fused norm computed the logits with the old weights: route with the new
                self.calibrate(moe.gate.weight, x)
                logits = None
            if logits is None:
                logits = F.linear(x, moe.gate.weight)
            self.records[i].append(torch.topk(logits, moe.top_k, dim=-1).indices.to(torch.int16))
            return fused(x, logits)
        return tapped

    def take(self) -> torch.Tensor:
        """[L, T, k] expert ids of every token routed since the last take (forwards concatenated), on the host."""
        out = torch.stack([torch.cat(r) for r in self.records]).cpu()
        self.records = [[] for _ in self.layers]
        return out


@torch.no_grad()
def remove_mean_direction(weight: torch.Tensor, x: torch.Tensor) -> None:
    """weight [E, H] -= (weight @ u) u^T with u the unit mean of the router inputs x [T, H], in place."""
    mean = x.float().mean(dim=0)
    u = mean / mean.norm().clamp_min(1e-12)
    w = weight.float()
    weight.copy_((w - torch.outer(w @ u, u)).to(weight.dtype))


@torch.no_grad()
def whiten_inputs(weight: torch.Tensor, x: torch.Tensor, shrinkage: float = 0.1) -> None:
    """weight [E, H] <- weight @ M, M = C^-1/2 (I - u u^T): the mean direction u of the inputs x [T, H] removed and
    what is left whitened (C its covariance, shrunk towards its mean variance so directions the sample barely saw
    are not blown up), then rescaled to the logit spread it had. Every output then sees uncorrelated inputs of unit
    variance: no direction of a random model's hidden states favours some outputs over others."""
    xf = x.float()
    mean = xf.mean(dim=0)
    u = mean / mean.norm().clamp_min(1e-12)
    centred = xf - torch.outer(xf @ u, u)  # [T, H]
    cov = centred.T @ centred / max(1, xf.shape[0] - 1)
    cov += shrinkage * cov.diagonal().mean() * torch.eye(cov.shape[0], device=cov.device)
    vals, vecs = torch.linalg.eigh(cov)
    m = (vecs * vals.rsqrt()) @ vecs.T  # C^-1/2
    m = m - torch.outer(m @ u, u)  # after the projection: (C^-1/2)(I - u u^T)
    w = weight.float()
    new = w @ m
    spread = (xf @ w.T).std() / (xf @ new.T).std().clamp_min(1e-12)
    weight.copy_((new * spread).to(weight.dtype))


CALIBRATIONS: dict[str, Calibration] = {"mean": remove_mean_direction, "whiten": whiten_inputs,
                                         "whiten-light": partial(whiten_inputs, shrinkage=0.01)}


def step_experts_touched(steps: Iterable[Sequence[tuple[int, int]]], experts: dict[int, torch.Tensor],
                         num_experts: int, top_k: int, row_counts: Sequence[int] = ROW_COUNTS) -> dict[str, Any]:
    """Per row count r: distinct experts a layer reads in a decode step of r rows, averaged over layers and steps.

    steps: each decode step's rows as (sequence id, position of the token the step fed in); experts: per sequence
    [L, T, k] router picks at every position. Steps of exactly r rows count where the run had them; otherwise the
    first r rows of every larger step stand in (recorded as `from_rows`)."""
    steps = [list(s) for s in steps]
    out: dict[str, Any] = {}
    for r in row_counts:
        exact = [s for s in steps if len(s) == r]
        larger = [s[:r] for s in steps if len(s) > r]
        chosen = exact or larger
        if not chosen:
            continue
        by_layer = torch.stack([distinct_per_layer(torch.stack([experts[seq][:, pos] for seq, pos in rows], dim=1),
                                                   num_experts).float() for rows in chosen]).mean(dim=0)  # [L]
        out[str(r)] = {"measured": by_layer.mean().item(), "uniform": uniform_experts(num_experts, top_k, r),
                       "steps": len(chosen), "from_rows": "exact" if exact else "first rows of larger steps",
                       "by_layer": [round(v, 2) for v in by_layer.tolist()]}
    return out


def routing_record(mode: str, touched: dict[str, Any], how: str) -> dict[str, Any]:
    """The `routing` entry of a result file; `balanced_within_5pct` says whether every row count is within 5%."""
    if mode not in ROUTING_MODES:
        raise ValueError(f"routing mode {mode!r}: expected one of {ROUTING_MODES}")
    ok = bool(touched) and all(abs(v["measured"] - v["uniform"]) <= BALANCED_TOLERANCE * v["uniform"]
                               for v in touched.values())
    return {"mode": mode, "experts_touched": touched, "balanced_within_5pct": ok, "how": how}


def validate_routing_record(record: dict[str, Any]) -> None:
    """Raises ValueError naming what a result file's `routing` entry lacks (the schema tests and readers rely on)."""
    if record.get("mode") not in ROUTING_MODES:
        raise ValueError(f"routing.mode must be one of {ROUTING_MODES}, got {record.get('mode')!r}")
    touched = record.get("experts_touched")
    if not isinstance(touched, dict) or not touched:
        raise ValueError("routing.experts_touched must map row counts to {measured, uniform}")
    for rows, v in touched.items():
        if not rows.isdigit() or not isinstance(v, dict):
            raise ValueError(f"routing.experts_touched[{rows!r}] must be a row count mapping to a dict")
        for key in ("measured", "uniform"):
            if not isinstance(v.get(key), (int, float)) or v[key] <= 0:
                raise ValueError(f"routing.experts_touched[{rows!r}].{key} must be a positive number")
    if not isinstance(record.get("balanced_within_5pct"), bool):
        raise ValueError("routing.balanced_within_5pct must be true or false")

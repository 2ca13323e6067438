"""Balanced routing in the benchmarks (bench/moe_routing.py, bench/thinker/balance.py, routing_replay.py): the
counting itself, the calibration, the balanced workload on demo dims, and the result file's routing record."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from bench.moe_routing import (
    RouterTap, distinct_per_layer, moe_layers, remove_mean_direction, routing_record, step_experts_touched,
    uniform_experts, validate_routing_record, whiten_inputs,
)
from bench.thinker import engine_loop
from bench.thinker.balance import balance_routing
from bench.thinker.random_model import random_model
from bench.thinker.routing_replay import replay_experts, trace_experts_touched
from bench.thinker.workload import PromptMaker
from runtime.checkpoint.demo_config import demo_config
from runtime.config import EngineConfig
from runtime.engine.sequence import Sequence
from services.thinker.model import ThinkerLM

CPU = torch.device("cpu")


def wide_moe_config() -> dict:
    """Demo dims with the released router shape (128 experts, top-8), so counts can reach 8 and beyond."""
    config = copy.deepcopy(demo_config())
    config["thinker_config"]["text_config"].update(num_experts=128, num_experts_per_tok=8)
    return config


def test_uniform_expectation() -> None:
    assert uniform_experts(128, 8, 1) == pytest.approx(8)
    assert uniform_experts(128, 8, 32) == pytest.approx(111.77, abs=0.01)
    assert uniform_experts(8, 2, 4) == pytest.approx(8 * (1 - 0.75**4))


def test_distinct_per_layer_counts_each_layer() -> None:
    experts = torch.tensor([[[0, 1], [1, 2]], [[3, 3], [3, 3]]])  # [L=2, rows=2, k=2]
    assert distinct_per_layer(experts, 8).tolist() == [3, 1]


def test_a_router_forced_to_one_set_counts_top_k(demo_ckpt: Path) -> None:
    """Zero router weights: every token ties on every expert and topk picks the same 8: a step reads 8."""
    model = random_model(wide_moe_config(), CPU, torch.float32)
    for moe in moe_layers(model):
        moe.gate.weight.data.zero_()
    maker = PromptMaker(demo_ckpt, 24)
    sequences = {i: maker.make(i).token_ids for i in range(8)}
    experts = replay_experts(model, sequences)
    steps = [[(i, pos) for i in range(8)] for pos in range(10, 24)]
    touched = step_experts_touched(steps, experts, 128, 8, row_counts=(1, 8))
    assert touched["1"]["measured"] == touched["8"]["measured"] == 8
    assert routing_record("balanced", touched, "test")["balanced_within_5pct"] is False


def test_uniform_picks_count_the_expectation() -> None:
    gen = torch.Generator().manual_seed(0)
    experts = {s: torch.stack([torch.stack([torch.randperm(128, generator=gen)[:8] for _ in range(50)])
                               for _ in range(3)]) for s in range(32)}  # [L=3, T=50, k=8] uniform picks
    steps = [[(s, pos) for s in range(32)] for pos in range(50)]
    touched = step_experts_touched(steps, experts, 128, 8)
    for rows, v in touched.items():
        assert v["measured"] == pytest.approx(v["uniform"], rel=0.02), rows
    assert touched["32"]["from_rows"] == "exact" and touched["4"]["from_rows"] == "first rows of larger steps"
    assert routing_record("balanced", touched, "test")["balanced_within_5pct"] is True


def test_router_tap_restores_the_modules(demo_ckpt: Path) -> None:
    model = ThinkerLM.load(demo_ckpt)
    layers = moe_layers(model)
    tap = RouterTap(layers)
    with tap.installed():
        assert all("route" in vars(m) for m in layers)
    assert not any("route" in vars(m) or "forward_fused" in vars(m) for m in layers)


@pytest.mark.parametrize("calibrate", [remove_mean_direction, whiten_inputs])
def test_calibration_spreads_a_batch_that_shares_one_direction(calibrate) -> None:  # noqa: ANN001
    """Inputs dominated by one shared direction (as a random model's hidden states are) pile onto few experts;
    calibrated on them, the router spreads 32 rows as uniform routing would."""
    gen = torch.Generator().manual_seed(1)
    h, e, rows = 64, 128, 32
    common = torch.randn(h, generator=gen) * 4
    x = common + torch.randn(4096, h, generator=gen) * 0.5  # [T, H]
    weight = torch.randn(e, h, generator=gen) * 0.02

    def touched(w: torch.Tensor) -> float:
        picks = torch.topk(x @ w.T, 8, dim=-1).indices.view(-1, rows, 8)  # [steps, rows, k]
        return distinct_per_layer(picks, e).float().mean().item()

    before = touched(weight)
    calibrate(weight, x)
    assert before < 0.7 * uniform_experts(e, 8, rows)
    assert touched(weight) == pytest.approx(uniform_experts(e, 8, rows), rel=0.05)


def test_balanced_workload_routes_demo_dims_like_uniform(demo_ckpt: Path) -> None:
    """The benchmark's path on demo dims with the released router shape: calibrated random weights, ordinary-token
    prompts, greedy decoding on the engine, counted by replay: within 5% of uniform at 4 and 8 rows."""
    config = wide_moe_config()
    model = random_model(config, CPU, torch.float32)
    maker = PromptMaker(demo_ckpt, 24)
    balance_routing(model, maker, CPU, torch.float32, prompts=64, decoded=16, decoded_tokens=16)
    eng = EngineConfig(max_num_seqs=8, max_batch_tokens=512, kv_cache_bytes=16 << 20, max_model_len=256,
                       cuda_graphs=False)
    engine = engine_loop.build_engine(model, eng, CPU, torch.float32)
    options = engine_loop.workload_sampling("greedy", 12)

    def make(i: int) -> Sequence:
        ids = maker.make(i).token_ids
        return engine_loop.text_sequence(i, ids, options, engine_loop.text_request(ids, model.cfg), "t")

    trace = engine_loop.DecodeTrace()
    engine_loop.run_level(engine, make, 8, 0, 16, 0, trace)
    touched = trace_experts_touched(model, trace, row_counts=(4, 8))
    record = routing_record("balanced", touched, "test")
    validate_routing_record(record)
    assert record["balanced_within_5pct"], touched


def test_routing_record_schema() -> None:
    good = routing_record("native", {"8": {"measured": 40.0, "uniform": 51.6}}, "test")
    validate_routing_record(good)
    assert good["balanced_within_5pct"] is False
    with pytest.raises(ValueError, match="routing mode"):
        routing_record("uniform", {}, "test")
    for broken, field in (({**good, "mode": "fast"}, "routing.mode"), ({**good, "experts_touched": {}}, "experts"),
                          ({**good, "experts_touched": {"x": {"measured": 1, "uniform": 1}}}, "row count"),
                          ({**good, "experts_touched": {"8": {"measured": 0, "uniform": 1}}}, "measured"),
                          ({**good, "balanced_within_5pct": "yes"}, "balanced_within_5pct")):
        with pytest.raises(ValueError, match=field):
            validate_routing_record(broken)

"""bench/talker/balance.py: calibrated talker routers spread a decode batch closer to uniform than the drawn ones,
the record says so in the shared schema, and the fused frame path reads the calibrated weights."""
from __future__ import annotations

import torch

from bench.moe_routing import validate_routing_record
from bench.talker.bench_talker import calibrate_routing, random_model, routing
from runtime.checkpoint.demo_config import demo_config
from services.talker.model.config import parse_talker_config
from services.talker.model.fused import talker_weights


def test_calibrated_routers_read_closer_to_uniform_and_the_fused_path_sees_them() -> None:
    raw = demo_config()
    raw["talker_config"]["text_config"].update(num_experts=32, num_experts_per_tok=2, moe_intermediate_size=16)
    torch.manual_seed(0)
    model = random_model(parse_talker_config(raw), "cpu", torch.float32)
    with torch.no_grad():
        native = routing(model, "native", [8], 4)
        done = calibrate_routing(model, 8, 4)
        balanced = routing(model, "balanced", [8], 4)
    for record in (native, balanced):
        validate_routing_record(record)
    before, after = native["experts_touched"]["8"], balanced["experts_touched"]["8"]
    assert before["uniform"] == after["uniform"] and after["steps"] == 4
    assert abs(after["measured"] - after["uniform"]) < abs(before["measured"] - before["uniform"]), (before, after)
    assert done["tokens_per_router_pass"] > 0
    fused = talker_weights(model.lm)
    assert all(w.router.data_ptr() == layer.mlp.gate.weight.data_ptr() for w, layer in zip(fused, model.lm.layers))

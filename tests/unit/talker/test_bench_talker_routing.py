"""bench/talker/balance.py: calibrated talker routers spread a decode batch closer to uniform than the drawn ones,
the record says so in the shared schema, and the fused frame path reads the calibrated weights."""
from __future__ import annotations

import pytest
import torch

from bench.moe_routing import validate_routing_record
from bench.talker.bench_talker import calibrate_routing, prompt, random_model, routing, row_tokens
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


def test_rows_of_a_batch_share_no_words_and_draw_the_same_ones_every_run() -> None:
    """The routing rule: a batch whose rows see the same tokens routes to fewer experts than a trained router."""
    prompts = [set(prompt(i, 20).prompt_ids) for i in range(8)]
    texts = [row_tokens(i, 64, 1) for i in range(8)]
    header = prompts[0] & prompts[1] & prompts[2]  # the chat template's own tokens
    for i in range(8):
        for j in range(i + 1, 8):
            assert len((prompts[i] & prompts[j]) - header) <= 1  # 20 draws from ~149k ids: a collision is rare
            assert sum(a == b for a, b in zip(texts[i], texts[j])) <= 1
    assert row_tokens(3, 64, 1) == texts[3] and row_tokens(3, 20, 0) != row_tokens(3, 20, 1)[:20]


def test_routing_probe_records_each_variant_from_the_same_drawn_weights(tmp_path) -> None:  # noqa: ANN001
    from bench.talker.routing_probe import main, parse_variant

    variants = ["whiten:all:2", "mean:layers:2", "whiten:all:2"]
    out = main(["--tiny", "--batches", "4", "--frames", "2", "--variants", *variants,
                "--out", str(tmp_path / "probe.json")])
    assert [v["name"] for v in out["variants"]] == variants
    for record in (out["native"], *(v["routing"] for v in out["variants"])):
        validate_routing_record(record)
    first, _, again = (v["routing"]["experts_touched"] for v in out["variants"])
    assert first == again  # each variant starts from the drawn routers, not from the one before
    assert out["command"].startswith("bench/talker/routing_probe.py --tiny")
    for bad in ("whiten:sideways:2", "whiten:all", "shout:all:2", "whiten:all:0"):
        with pytest.raises(ValueError, match="expected HOW:ORDER:FRAMES"):
            parse_variant(bad)

"""The thinker-replicas benchmark end to end on CPU: two replicas, both gateways, one level, a result file that
names what the lead's GPU run will report."""
from __future__ import annotations

import json
from pathlib import Path

from bench.thinker.bench_replicas import main, parse_args, thinker_section
from runtime.model_path import resolve_model


def test_tiny_run_compares_both_policies_on_the_same_replicas(tmp_path: Path) -> None:
    out = tmp_path / "replicas.json"
    main(["--tiny", "--out", str(out), "--concurrency", "2", "--turns", "2", "--conversations-per-stream", "2",
          "--system-tokens", "48", "--context-tokens", "40", "--user-tokens", "16",
          "--output-tokens", "3"])
    result = json.loads(out.read_text())
    assert {"commit", "date", "device", "command", "workload", "replicas", "levels"} <= set(result)
    demo = json.loads((resolve_model("demo") / "config.json").read_text())["thinker_config"]["text_config"]
    assert result["decoder_layers"] == demo["num_hidden_layers"]  # read from the checkpoint served
    assert result["workload"]["context_tokens"] == 40
    (level,) = result["levels"]
    for policy in ("prefix_aware", "round_robin"):
        run = level[policy]
        assert run["requests"] == 2 * 2 and run["ttft_ms_p50"] > 0 and run["output_tok_s"] > 0
        assert 0 < run["prefix_hit_rate"] < 1 and len(run["replicas"]) == 2
        assert set(run["ttft_ms_p50_by_turn"]) == {"0", "1"} and set(run["replica_steps"]) == {"thinker-0", "thinker-1"}
        assert sum(r["steps_per_s"] for r in run["replica_steps"].values()) > 0
        assert all(1 <= n <= 4 for n in run["tokens_per_request"])  # each answer's length drawn from [1, 4]
    robin = level["round_robin"]["routed"]
    assert len(robin) == 2 and all(k.startswith("decision=round_robin") for k in robin)  # both replicas, in turn
    assert "ttft_p50_reduction" in level and result["mesh_exit"] == 0


def test_a_hybrid_checkpoint_on_cpu_devices_routes_by_its_kept_states(tmp_path: Path) -> None:
    """`--model` on CPU devices with Qwen3.5 (its config has no thinker_config), two state snapshots a replica."""
    out = tmp_path / "replicas-qwen3.5.json"
    model = resolve_model("demo-qwen3.5")
    main(["--model", str(model), "--devices", "cpu", "cpu", "--out", str(out), "--concurrency", "2", "--turns", "2",
          "--conversations-per-stream", "2", "--system-tokens", "48", "--user-tokens", "16", "--output-tokens", "3",
          "--state-snapshots", "2"])
    result = json.loads(out.read_text())
    assert result["decoder_layers"] == json.loads((model / "config.json").read_text())["text_config"][
        "num_hidden_layers"]
    assert result["replicas"]["dtype"] == "float32" and result["replicas"]["engine"]["num_state_snapshots"] == 2
    (level,) = result["levels"]
    assert all(level[policy]["requests"] == 4 for policy in ("prefix_aware", "round_robin"))
    assert level["prefix_aware"]["prefix_hit_rate"] > 0 and result["mesh_exit"] == 0


def test_late_launch_reaches_the_replicas_engine_section() -> None:
    for flags, want in (([], None), (["--late-launch"], True)):
        section = thinker_section(parse_args(["--tiny", "--out", "replicas.json", *flags]))
        assert section["engine"].get("late_launch") is want

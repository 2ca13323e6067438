"""The Thinker benchmark end to end on CPU (`omnimesh bench --tiny`: engine-only, transformers, real gateway
processes), and the random-weight checkpoint it writes for the gateway run at real dims."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bench.moe_routing import validate_routing_record
from bench.thinker.random_model import random_state, write_checkpoint
from bench.thinker.workload import PromptMaker
from gateway.cli.main import main as omnimesh
from runtime.checkpoint.demo_config import demo_config
from services.thinker.model import ThinkerConfig, ThinkerLM


def test_tiny_bench_through_the_cli(tmp_path: Path) -> None:
    out = tmp_path / "thinker.json"
    code = omnimesh(["bench", "--tiny", "--out", str(out), "--concurrency", "1", "2", "--output-tokens", "5",
                     "--long-prompt-tokens", "40", "--long-output-tokens", "3", "--long-requests", "1",
                     "--hf-batches", "1", "--min-measured", "2", "--measured-per-stream", "1"])
    assert code == 0
    result = json.loads(out.read_text())
    assert {"commit", "date", "device", "command", "workload", "engine", "gateway", "transformers",
            "summary"} <= set(result)
    assert result["command"].startswith("omnimesh bench --out") and " --tiny" in result["command"]
    for mode in ("engine", "gateway"):
        levels = result[mode]["levels"]
        assert [lv["concurrency"] for lv in levels] == [1, 2]
        for lv in levels:
            assert lv["requests"] == 2 and lv["output_tok_s"] > 0 and lv["ttft_ms_p50"] > 0
            assert all(r["tokens"] == 5 for r in lv["raw"])  # EOS ignored: every request runs to its length
            timed = {name for r in lv["raw"] if r["gateway_timing_ms"] for name in r["gateway_timing_ms"]}
            assert ("first_token" in timed and "thinker.queue" in timed) == (mode == "gateway"), timed
        assert result[mode]["long_prompt"]["requests"] == 1
    # the gateway's long prompts again with one token each: every thinker step of that level is a prefill
    alone = result["gateway"]["long_prompt_first_token"]
    assert alone["requests"] == 1 and alone["tokens_per_request"] == [1]
    assert alone["stages"]["thinker"]["rows_per_batch"] == 1 and alone["stages"]["thinker"]["step_ms_mean"] > 0
    assert "step_ms_mean" in result["gateway"]["levels"][0]["stages"]["thinker"]
    assert result["errors"] == {} and result["engine"]["levels"][0]["decode_steps"]["steps"] > 0
    assert [r["batch"] for r in result["transformers"]["runs"]] == [1]
    assert result["transformers"]["runs"][0]["experts_touched"]["measured"] == 2  # demo: top-2 at one row
    assert "c1_over_transformers_b1" in result["summary"]["engine"]
    validate_routing_record(result["routing"])
    assert result["routing"]["mode"] == "balanced" and set(result["routing"]["experts_touched"]) == {"1", "2"}


def test_sampled_requests_take_the_models_defaults_seeded(tmp_path: Path) -> None:
    """`--sampling model`: every request, engine and gateway alike, samples with the deployment's defaults."""
    out = tmp_path / "sampled.json"
    code = omnimesh(["bench", "--tiny", "--out", str(out), "--concurrency", "2", "--output-tokens", "4",
                     "--long-prompt-tokens", "0", "--skip-hf", "--sampling", "model", "--min-measured", "2",
                     "--measured-per-stream", "1"])
    assert code == 0
    result = json.loads(out.read_text())
    assert result["workload"]["sampling"] == "model" and result["workload"]["greedy"] is False
    for mode in ("engine", "gateway"):
        (level,) = result[mode]["levels"]
        assert level["requests"] == 2 and all(r["tokens"] == 4 for r in level["raw"])


def test_random_checkpoint_loads_back_exactly(tmp_path: Path, demo_ckpt: Path) -> None:
    config = demo_config()
    cfg = ThinkerConfig.from_dict(config)
    # the kernel path holds q/k/v_proj as views of one fused weight: each must still be saved on its own
    model = ThinkerLM.from_state_dict(cfg, random_state(cfg, torch.device("cpu"), torch.float32, seed=3),
                                      use_kernels=True)
    nbytes = write_checkpoint(model, config, tmp_path / "ckpt", demo_ckpt, shard_bytes=1 << 20)
    index = json.loads((tmp_path / "ckpt" / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1 and nbytes == index["metadata"]["total_size"]
    assert all(name.startswith("thinker.") for name in index["weight_map"])
    loaded = ThinkerLM.load(tmp_path / "ckpt")
    want = model.state_dict()
    for name, tensor in loaded.state_dict().items():
        assert torch.equal(tensor, want[name]), name
    assert (tmp_path / "ckpt" / "tokenizer.json").exists() and (tmp_path / "ckpt" / "chat_template.json").exists()


@pytest.mark.parametrize("routing", ["balanced", "native"])
def test_prompts_have_exactly_the_asked_length(demo_ckpt: Path, routing: str) -> None:
    for length in (32, 1024):
        maker = PromptMaker(demo_ckpt, length, routing)
        prompts = [maker.make(i) for i in range(0, 200, 7 if length == 32 else 37)]
        assert all(len(p.token_ids) == length for p in prompts)
        # distinct first words, so no two prompts share a cached prefix block
        assert len({p.token_ids[3] for p in prompts}) == min(len(prompts), len(maker.first_words))
    if routing == "balanced":  # drawn over the vocabulary's ordinary tokens: tens of thousands, not 40
        assert len(maker.words) > 10_000 and len(set(maker.make(0).token_ids)) > 20

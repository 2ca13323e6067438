"""bench/thinker/bench_lm.py end to end on CPU with the families' demo-size decoders (--tiny): our engine serves
transformers' own tensors (no copy), both are timed on the same prompts, and the result file says what ran."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bench.thinker.bench_lm import main as bench_lm
from bench.thinker.bench_lm import served_model, transformers_model
from bench.thinker.lm_families import FAMILIES
from bench.thinker.roofline import model_step_bytes
from services.thinker.model import ThinkerConfig
from tests.parity.qwen3_5.hybrid_harness import HybridRunner
from tests.parity.thinker.thinker_forced import forced_steps


@pytest.mark.parametrize("family", ["qwen3.5-9b", "qwen3-asr-1.7b"])
def test_tiny_family_bench(tmp_path: Path, family: str) -> None:
    out = tmp_path / "lm.json"
    bench_lm(["--family", family, "--tiny", "--out", str(out), "--concurrency", "1", "2", "--output-tokens", "4",
              "--hf-batches", "1", "--hf-new-tokens", "3", "--min-measured", "2", "--measured-per-stream", "1"])
    result = json.loads(out.read_text())
    assert result["errors"] == {} and result["family"] == family
    assert result["command"].startswith(f"python bench/thinker/bench_lm.py --family {family}")
    assert (result["hybrid"] is not None) == family.startswith("qwen3.5")
    levels = result["engine"]["levels"]
    assert [lv["concurrency"] for lv in levels] == [1, 2]
    assert all(lv["requests"] == 2 and all(r["tokens"] == 4 for r in lv["raw"]) for lv in levels)
    (run,) = result["transformers"]["runs"]
    assert run["batch"] == 1 and run["new_tokens"] == 3 and run["output_tok_s"] > 0
    summary = result["summary"]["engine"]
    assert summary["c1_over_transformers_b1"] > 0 and summary["c2_requests_s"] > 0 and "meets" not in summary


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_served_model_reads_transformers_tensors(family: str) -> None:
    fam = FAMILIES[family](True)
    hf = transformers_model(fam, torch.device("cpu"), torch.float32)
    ours = served_model(hf, ThinkerConfig.from_dict(fam.root), torch.device("cpu"))
    theirs = {t.data_ptr() for t in hf.state_dict().values()}
    assert all(p.data_ptr() in theirs for p in ours.parameters())  # one copy of the weights, shared
    prompt = [151644, 872, 198, 9707, 11, 1879]
    with torch.inference_mode():
        want = hf(input_ids=torch.tensor([prompt])).logits[0].float()
    if ours.cfg.hybrid is not None:
        got = HybridRunner(ours).step([(0, prompt)])[0]
    else:
        got = forced_steps(ours, [prompt], None, 0).logits[0][0][None]
        want = want[-1:]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)  # the same model: names and layouts map


def test_step_bytes_count_each_weight_once() -> None:
    """Dense, tied (Qwen3-ASR): every weight once, the table once for the head and one row per token for the
    embedding; no experts, no state."""
    fam = FAMILIES["qwen3-asr-1.7b"](True)
    model = served_model(transformers_model(fam, torch.device("cpu"), torch.float32),
                         ThinkerConfig.from_dict(fam.root), torch.device("cpu"))
    table = model.embed_tokens.weight
    others = sum(p.numel() * 4 for n, p in model.named_parameters(remove_duplicate=False)
                 if not n.startswith(("embed_tokens.", "lm_head.")))
    need = model_step_bytes(model, rows=3, kv_tokens=10)
    assert need["state"] == 0 and need["experts_per_layer"] == 0
    assert need["weights"] == pytest.approx(others + table.numel() * 4 + 3 * table.shape[1] * 4)
    cfg = model.cfg
    assert need["kv"] == 10 * cfg.num_layers * 2 * cfg.num_kv_heads * cfg.head_dim * 4

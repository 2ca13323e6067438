"""CUDA-graph buckets in EngineConfig: rungs a step can never reach are rejected at load, saying why."""
from __future__ import annotations

from pathlib import Path

import pytest

from runtime.config import EngineConfig, load_mesh_config


def test_prefill_rung_past_the_step_budget_is_rejected_at_load(tmp_path: Path) -> None:
    path = tmp_path / "mesh.yaml"
    path.write_text("thinker:\n  engine:\n    max_batch_tokens: 1024\n    prefill_token_buckets: [256, 512, 2048]\n")
    with pytest.raises(ValueError) as err:
        load_mesh_config(path)
    message = str(err.value)
    assert "thinker.engine.prefill_token_buckets" in message
    assert "rung 2048 exceeds max_batch_tokens (1024)" in message and "never" in message


def test_decode_bucket_past_max_num_seqs_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"bucket 64 exceeds max_num_seqs \(32\).*could never be replayed"):
        EngineConfig(max_num_seqs=32, decode_batch_buckets=(1, 8, 64))


@pytest.mark.parametrize("ladder", [(0, 8), (16, 8), (8, 8)])
def test_ladders_must_be_positive_and_increasing(ladder: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="strictly increasing"):
        EngineConfig(prefill_token_buckets=ladder)


def test_valid_ladders_and_the_default_decode_buckets() -> None:
    cfg = load_mesh_config(overrides={"thinker.engine.max_num_seqs": 48,
                                      "thinker.engine.prefill_token_buckets": [64, 512, 2048]}).thinker.engine
    assert cfg.prefill_token_buckets == (64, 512, 2048)
    assert cfg.graph_decode_buckets == (1, 2, 4, 8, 16, 32, 48)  # powers of two, then max_num_seqs itself
    assert EngineConfig(max_num_seqs=128, decode_batch_buckets=(1, 2, 4, 8, 16, 32, 64, 128)).graph_decode_buckets[
        -1] == 128
    assert EngineConfig(max_num_seqs=1).graph_decode_buckets == (1,)

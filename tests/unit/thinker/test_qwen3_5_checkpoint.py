"""bench/thinker/qwen3_5_checkpoint.py at the demo dims: the whole checkpoint it writes for the gateway runs is one
the mesh recognises and every Qwen3.5 stage loads (the released-dims run differs only in the config's numbers)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.thinker.lm_families import FAMILIES
from bench.thinker.qwen3_5_checkpoint import write_random_qwen3_5
from runtime.checkpoint.family import read_family
from services.thinker.model.hybrid_lm import HybridLM
from services.thinker.model.loader import load_thinker_lm
from services.vision.encoder import VisionEncoder


@pytest.mark.parametrize("moe", [False, True])
def test_written_checkpoint_loads_in_every_stage(tmp_path: Path, moe: bool) -> None:
    info = write_random_qwen3_5(tmp_path, moe, tiny=True, device=torch.device("cpu"), dtype=torch.float32)
    assert info["parameters"] > 0 and info["family"] == ("qwen3.5-35b-a3b" if moe else "qwen3.5-9b")
    family = read_family(tmp_path)
    assert family.family == "qwen3.5" and family.stages == ("vision", "thinker")
    lm = load_thinker_lm(tmp_path)
    assert isinstance(lm, HybridLM) and (lm.cfg.num_experts > 0) == moe
    encoder = VisionEncoder.load(tmp_path, torch.device("cpu"), torch.float32)
    assert encoder.tower.cfg.depth == 2 and encoder.tower.cfg.out_hidden_size == lm.cfg.hidden_size


def test_released_dims() -> None:
    vision = FAMILIES["qwen3.5-9b"](False).root["vision_config"]
    assert (vision["depth"], vision["hidden_size"], vision["out_hidden_size"]) == (27, 1152, 4096)

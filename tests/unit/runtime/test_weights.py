"""`load_component`: one component's tensors by prefix, from a single file or from index-listed shards."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from runtime.weights import INDEX_FILE, SINGLE_FILE, load_component, shard_files_for_prefix

# One shard per stage, as a real multi-shard checkpoint roughly groups them.
SHARD_OF_PREFIX = {
    "thinker.": "model-00001-of-00003.safetensors",
    "talker.": "model-00002-of-00003.safetensors",
    "code2wav.": "model-00003-of-00003.safetensors",
}


def all_tensors(ckpt: Path) -> dict[str, torch.Tensor]:
    with safe_open(str(ckpt / SINGLE_FILE), framework="pt") as f:
        return {name: f.get_tensor(name) for name in f.keys()}


@pytest.fixture(scope="module")
def sharded_ckpt(demo_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo checkpoint re-saved as three shards plus `model.safetensors.index.json`."""
    out = tmp_path_factory.mktemp("sharded")
    tensors = all_tensors(demo_ckpt)
    weight_map: dict[str, str] = {}
    for prefix, shard in SHARD_OF_PREFIX.items():
        part = {n: t for n, t in tensors.items() if n.startswith(prefix)}
        save_file(part, str(out / shard), metadata={"format": "pt"})
        weight_map.update({n: shard for n in part})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    (out / INDEX_FILE).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    shutil.copy(demo_ckpt / "config.json", out / "config.json")
    return out


def test_prefix_is_stripped_and_filtered(demo_ckpt: Path) -> None:
    visual = load_component(demo_ckpt, "thinker.visual.")
    assert "patch_embed.proj.weight" in visual
    assert tuple(visual["patch_embed.proj.weight"].shape) == (32, 3, 2, 16, 16)
    assert not any(name.startswith("thinker.") or "language_model" in name for name in visual)


def test_component_prefixes_partition_the_checkpoint(demo_ckpt: Path) -> None:
    tensors = all_tensors(demo_ckpt)
    parts = [load_component(demo_ckpt, p) for p in ("thinker.", "talker.", "code2wav.")]
    assert sum(len(p) for p in parts) == len(tensors)


def test_sharded_equals_single(demo_ckpt: Path, sharded_ckpt: Path) -> None:
    for prefix in ("thinker.model.layers.1.", "talker.code_predictor.", "code2wav."):
        single = load_component(demo_ckpt, prefix)
        sharded = load_component(sharded_ckpt, prefix)
        assert single.keys() == sharded.keys()
        assert all(torch.equal(single[n], sharded[n]) for n in single)


def test_only_shards_holding_the_prefix_are_opened(sharded_ckpt: Path) -> None:
    assert shard_files_for_prefix(sharded_ckpt, "talker.") == [sharded_ckpt / SHARD_OF_PREFIX["talker."]]
    assert len(shard_files_for_prefix(sharded_ckpt, "")) == 3


def test_dtype_cast_applies_to_floats(demo_ckpt: Path) -> None:
    head = load_component(demo_ckpt, "thinker.lm_head.", dtype=torch.bfloat16)
    assert head["weight"].dtype == torch.bfloat16 and tuple(head["weight"].shape) == (152064, 64)


def test_unknown_prefix_raises(demo_ckpt: Path, sharded_ckpt: Path) -> None:
    for ckpt in (demo_ckpt, sharded_ckpt):
        with pytest.raises(KeyError, match="no tensor named"):
            load_component(ckpt, "nonexistent.")


def test_directory_without_weights_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="neither"):
        load_component(tmp_path, "thinker.")

"""Loads one component's tensors from an HF-format checkpoint directory (safetensors shards), by name prefix."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"


def shard_files_for_prefix(ckpt_dir: Path, prefix: str) -> list[Path]:
    """The shards that hold at least one tensor under `prefix`, read from the index when there is one."""
    ckpt_dir = Path(ckpt_dir)
    index = ckpt_dir / INDEX_FILE
    if index.exists():
        weight_map: dict[str, str] = json.loads(index.read_text())["weight_map"]
        names = sorted({shard for name, shard in weight_map.items() if name.startswith(prefix)})
        return [ckpt_dir / name for name in names]
    single = ckpt_dir / SINGLE_FILE
    if single.exists():
        return [single]
    raise FileNotFoundError(f"{ckpt_dir} has neither {INDEX_FILE} nor {SINGLE_FILE}; is it an HF checkpoint directory?")


def load_component(
    ckpt_dir: Path, prefix: str, device: torch.device | str = "cpu", dtype: torch.dtype | None = None
) -> dict[str, torch.Tensor]:
    """Every tensor whose name starts with `prefix`, keyed by the rest of its name.

    Only the shards that hold the prefix are opened, so a stage never reads another stage's weights.
    Floating tensors are cast to `dtype` when given; integer tensors keep theirs.
    """
    tensors: dict[str, torch.Tensor] = {}
    for shard in shard_files_for_prefix(Path(ckpt_dir), prefix):
        with safe_open(str(shard), framework="pt", device="cpu") as f:
            for name in f.keys():
                if not name.startswith(prefix):
                    continue
                t = f.get_tensor(name)
                if dtype is not None and t.is_floating_point():
                    t = t.to(dtype)
                tensors[name[len(prefix):]] = t.to(device)
    if not tensors:
        raise KeyError(f"no tensor named {prefix!r}* in {ckpt_dir}")
    return tensors

"""Tile configs for the Triton fused MoE: tuned per device and expert shape (JSON in configs/), else a safe default."""
from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import NamedTuple

CONFIG_DIR = Path(__file__).parent / "configs"
# Up to this many tokens the MoE takes the grouping-free small path (moe_small_triton: top-k inside gate_up, the top-k
# sum inside down, 2 launches), past it the grouped GEMMs (routing, grouping, gate_up, down, sum: 5 launches). H200,
# Thinker shapes, per MoE layer in CUDA graphs: small 37.7 / 54.3 / 89.7 / 150.5 us at 1 / 2 / 4 / 8 tokens, grouped
# 39.6 / 56.8 / 96.5 / 141.2 (bench_kernels.py `small_path_ms`, `grouped_path_ms`; results/kernels-...-align-moe.json).
SMALL_PATH_MAX_TOKENS = 4


class GemmConfig(NamedTuple):
    """Tile shape and pipelining of one grouped GEMM (BLOCK_M is the alignment's, shared by both GEMMs)."""

    block_n: int
    block_k: int
    num_warps: int
    num_stages: int


# Small-path tiles (BLOCK_M is 16: every token of the batch is a row). gate_up: 8 experts x 768/32 tiles keep every SM
# busy at one token; down: one token's 2048 outputs in 32-wide tiles are 64 programs, each streaming 8 experts, which
# down_splits then splits 5 ways (H100, bench_moe_small_splits.py: 8% faster at one token than 16-wide unsplit tiles).
SMALL_GATE_UP = GemmConfig(32, 128, 4, 4)
SMALL_DOWN = GemmConfig(32, 128, 4, 4)


class MoeConfig(NamedTuple):
    """Everything the Triton MoE needs to launch for one batch size."""

    block_m: int
    gate_up: GemmConfig
    down: GemmConfig
    small_max_tokens: int = SMALL_PATH_MAX_TOKENS  # up to this many tokens the small path (0: never)
    small_gate_up: GemmConfig = SMALL_GATE_UP
    small_down: GemmConfig = SMALL_DOWN


def shape_key(num_experts: int, hidden: int, inter: int, top_k: int) -> str:
    return f"E{num_experts}_H{hidden}_I{inter}_K{top_k}"


def device_file(device_name: str) -> Path:
    """configs/fused_moe_<device name with non-alphanumerics as '_'>.json, e.g. fused_moe_NVIDIA_H200.json."""
    return CONFIG_DIR / f"fused_moe_{re.sub(r'[^A-Za-z0-9]+', '_', device_name).strip('_')}.json"


def default_config(num_tokens: int, num_experts: int, top_k: int) -> MoeConfig:
    """An untuned config that is correct everywhere and reasonable on Hopper; rows per expert pick the row block."""
    rows_per_expert = num_tokens * top_k / max(num_experts, 1)
    if rows_per_expert <= 16:
        return MoeConfig(16, GemmConfig(32, 128, 4, 4), GemmConfig(64, 128, 4, 3))
    if rows_per_expert <= 64:
        return MoeConfig(32, GemmConfig(64, 64, 4, 4), GemmConfig(64, 64, 4, 4))
    return MoeConfig(64, GemmConfig(64, 64, 4, 3), GemmConfig(128, 64, 4, 3))


def config_from_json(entry: dict) -> MoeConfig:
    """Entries written before the small path existed lack its keys and get its defaults (a grouping choice they
    carry, `align_small_max_pairs`, is ignored: one grouping kernel is left)."""
    return MoeConfig(
        int(entry["block_m"]),
        GemmConfig(*(int(v) for v in entry["gate_up"])),
        GemmConfig(*(int(v) for v in entry["down"])),
        int(entry.get("small_max_tokens", SMALL_PATH_MAX_TOKENS)),
        GemmConfig(*(int(v) for v in entry.get("small_gate_up", SMALL_GATE_UP))),
        GemmConfig(*(int(v) for v in entry.get("small_down", SMALL_DOWN))),
    )


def config_to_json(cfg: MoeConfig) -> dict:
    return {
        "block_m": cfg.block_m,
        "gate_up": list(cfg.gate_up),
        "down": list(cfg.down),
        "small_max_tokens": cfg.small_max_tokens,
        "small_gate_up": list(cfg.small_gate_up),
        "small_down": list(cfg.small_down),
    }


@functools.cache
def load_tuned(path: Path) -> dict[str, dict[int, MoeConfig]]:
    """shape key -> {batch-size bucket: config}; empty when the file does not exist."""
    if not path.exists():
        return {}
    raw = json.loads(path.read_text())
    return {
        key: {int(m): config_from_json(entry) for m, entry in buckets.items()}
        for key, buckets in raw["shapes"].items()
    }


def pick_bucket(buckets: dict[int, MoeConfig], num_tokens: int) -> MoeConfig:
    """The smallest tuned batch size >= num_tokens (configs for a larger M stay valid), else the largest."""
    at_least = [m for m in buckets if m >= num_tokens]
    return buckets[min(at_least) if at_least else max(buckets)]


@functools.lru_cache(maxsize=4096)
def moe_config(
    num_experts: int, hidden: int, inter: int, top_k: int, num_tokens: int, device_name: str,
    path: Path | None = None,
) -> MoeConfig:
    """The tuned config for this device and shape at this batch size, or `default_config` when none was tuned."""
    tuned = load_tuned(path or device_file(device_name)).get(shape_key(num_experts, hidden, inter, top_k))
    if not tuned:
        return default_config(num_tokens, num_experts, top_k)
    return pick_bucket(tuned, num_tokens)

"""A per-user cache of built Qwen3.5 demo checkpoints, keyed like the Omni one (builder sources, library versions)."""
from __future__ import annotations

import hashlib
from pathlib import Path

from runtime.checkpoint.demo_cache import builder_fingerprint, cached_build, default_cache_dir
from runtime.checkpoint.qwen3_5.demo import build_qwen3_5_demo_checkpoint

PACKAGE_DIR = Path(__file__).parent


def qwen3_5_fingerprint(seed: int) -> str:
    h = hashlib.sha256(builder_fingerprint(seed).encode())
    for source in sorted(PACKAGE_DIR.glob("*.py")):
        h.update(source.name.encode())
        h.update(source.read_bytes())
    return h.hexdigest()[:16]


def cached_qwen3_5_demo_checkpoint(seed: int = 0, moe: bool = False, cache_dir: Path | None = None) -> Path:
    """A built Qwen3.5 demo checkpoint for `seed` (MoE with `moe`), built on first use. Treat it as read-only."""
    root = cache_dir or default_cache_dir()
    name = f"qwen3_5{'-moe' if moe else ''}-seed{seed}-{qwen3_5_fingerprint(seed)}"
    return cached_build(root / name, lambda d: build_qwen3_5_demo_checkpoint(d, seed=seed, moe=moe))

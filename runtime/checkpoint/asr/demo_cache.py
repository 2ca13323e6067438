"""A per-user cache of built Qwen3-ASR demo checkpoints, keyed like the Omni one (builder sources, library versions)."""
from __future__ import annotations

import hashlib
from pathlib import Path

from runtime.checkpoint.asr.demo import build_asr_demo_checkpoint
from runtime.checkpoint.demo_cache import builder_fingerprint, cached_build, default_cache_dir

ASR_PACKAGE_DIR = Path(__file__).parent


def asr_fingerprint(seed: int) -> str:
    h = hashlib.sha256(builder_fingerprint(seed).encode())
    for source in sorted(ASR_PACKAGE_DIR.glob("*.py")):
        h.update(source.name.encode())
        h.update(source.read_bytes())
    return h.hexdigest()[:16]


def cached_asr_demo_checkpoint(seed: int = 0, cache_dir: Path | None = None) -> Path:
    """A built Qwen3-ASR demo checkpoint for `seed`, built on first use. Treat it as read-only."""
    root = cache_dir or default_cache_dir()
    return cached_build(root / f"asr-seed{seed}-{asr_fingerprint(seed)}",
                        lambda d: build_asr_demo_checkpoint(d, seed=seed))

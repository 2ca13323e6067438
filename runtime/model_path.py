"""Where a stage finds its checkpoint: a directory, or the demo checkpoint built once into a cache directory."""
from __future__ import annotations

import os
from pathlib import Path

DEMO = "demo"
DEMO_ASR = "demo-asr"
DEMO_SEED = 0


def cache_dir() -> Path:
    """$OMNIMESH_CACHE, else ~/.cache/omnimesh (read when called, never at import)."""
    return Path(os.environ.get("OMNIMESH_CACHE") or Path.home() / ".cache" / "omnimesh")


def resolve_model(model: str) -> Path:
    """The checkpoint directory for `model`: a path, "demo" or "demo-asr" (built into the cache on first use)."""
    if model == DEMO_ASR:
        from runtime.checkpoint.asr.demo_cache import cached_asr_demo_checkpoint

        return cached_asr_demo_checkpoint(DEMO_SEED, cache_dir() / "demo_ckpt")
    if model == DEMO:
        from runtime.checkpoint.demo_cache import cached_demo_checkpoint  # builds with transformers: import lazily

        return cached_demo_checkpoint(DEMO_SEED, cache_dir() / "demo_ckpt")
    path = Path(model).expanduser()
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"model {model!r}: no config.json there; pass an HF Qwen3-Omni or Qwen3-ASR "
                                f"checkpoint directory, 'demo' or 'demo-asr'")
    return path

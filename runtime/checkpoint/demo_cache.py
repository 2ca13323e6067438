"""A per-user cache of built demo checkpoints, keyed by the builder's source and library versions."""
from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from runtime.checkpoint.demo import build_demo_checkpoint

PACKAGE_DIR = Path(__file__).parent


def default_cache_dir() -> Path:
    return Path.home() / ".cache" / "omnimesh" / "demo_ckpt"


def builder_fingerprint(seed: int) -> str:
    """Changes whenever the bytes the builder writes could change: its own source, torch, transformers, seed."""
    h = hashlib.sha256(f"seed={seed}".encode())
    for name in ("torch", "transformers", "tokenizers", "safetensors"):
        h.update(f"{name}={metadata.version(name)}".encode())
    for source in sorted(PACKAGE_DIR.glob("*.py")):
        h.update(source.name.encode())
        h.update(source.read_bytes())
    return h.hexdigest()[:16]


def cached_demo_checkpoint(seed: int = 0, cache_dir: Path | None = None) -> Path:
    """A built demo checkpoint for `seed`, built on first use. Treat the returned directory as read-only."""
    root = cache_dir or default_cache_dir()
    return cached_build(root / f"seed{seed}-{builder_fingerprint(seed)}", lambda d: build_demo_checkpoint(d, seed=seed))


def cached_build(target: Path, build: Callable[[Path], None]) -> Path:
    """`target`, built on first use by `build` into a staging directory beside it, then renamed into place."""
    if (target / "model.safetensors").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".building-"))
    build(staging)
    try:
        # Atomic publish; if a concurrent process won the race, keep its copy (the bytes are identical).
        staging.rename(target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def copy_demo_checkpoint(out_dir: Path, seed: int = 0) -> Path:
    """A private, writable copy of the cached demo checkpoint at `out_dir`."""
    shutil.copytree(cached_demo_checkpoint(seed), out_dir, dirs_exist_ok=True)
    return Path(out_dir)

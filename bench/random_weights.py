"""A checkpoint's weights from transformers' own random init, built where it is fast, beside our own config.json.

The random-weight benchmarks (bench/asr, bench/thinker/qwen3_5_checkpoint.py) write our config and processor files,
then need the weights of transformers' model class for that config. The demo init (runtime/checkpoint/demo_init.py)
draws every tensor on the CPU in fp32 from one generator so parity tests see every block; a throughput run needs none
of that, and building billions of parameters on the GPU in bf16 takes seconds where the demo's way takes minutes.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import torch


def redraw_non_finite(model: torch.nn.Module, seed: int) -> int:
    """Redraws any parameter the init left non-finite (a tensor a class leaves `torch.empty` holds whatever memory
    it got); -> how many were redrawn."""
    gen = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
    redrawn = 0
    with torch.no_grad():
        for p in model.parameters():
            if not torch.isfinite(p).all():
                p.normal_(0.0, 0.02, generator=gen)
                redrawn += 1
    return redrawn


def write_random_weights(out_dir: Path, model_class: type, config_class: type, device: torch.device,
                         dtype: torch.dtype, seed: int = 0, max_shard_size: str = "5GB") -> int:
    """Builds `model_class` from the config.json already in `out_dir` on `device`, and saves its weights there
    (safetensors shards and their index); config.json stays ours, not transformers' re-spelling. -> parameters."""
    config = config_class.from_pretrained(out_dir)
    torch.manual_seed(seed)
    with torch.device(device):
        model = model_class._from_config(config, dtype=dtype).eval()
    redraw_non_finite(model, seed)
    params = sum(p.numel() for p in model.parameters())
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        model.save_pretrained(tmp, max_shard_size=max_shard_size)
        for f in Path(tmp).iterdir():
            if f.name.endswith((".safetensors", ".safetensors.index.json")):
                shutil.move(str(f), out_dir / f.name)
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return params

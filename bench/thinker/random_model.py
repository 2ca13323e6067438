"""The Thinker at real dims with random bf16 weights: in memory, or written as a thinker-only checkpoint dir."""
from __future__ import annotations

import json
import shutil
import struct
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from runtime.checkpoint.demo_config import demo_config
from runtime.weights import INDEX_FILE
from services.thinker.model import ThinkerConfig, ThinkerLM

# Non-weight files of the demo checkpoint a random-weight dir takes over (tokenizer, template, processors).
COPIED_FILES = ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.json",
                "preprocessor_config.json", "video_preprocessor_config.json")
HEAD_NAME = "lm_head.weight"


def real_config() -> dict[str, Any]:
    """The released Qwen3-Omni-30B-A3B thinker LM dims (docs/model-dims.md) on the demo layout."""
    cfg = demo_config()
    thinker = cfg["thinker_config"]
    thinker["text_config"].update(
        vocab_size=152064, hidden_size=2048, intermediate_size=768, num_hidden_layers=48, num_attention_heads=32,
        num_key_value_heads=4, head_dim=128, moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8,
        norm_topk_prob=True, rms_norm_eps=1e-6, max_position_embeddings=65536,
        rope_scaling={"rope_type": "default", "mrope_section": [24, 20, 20], "interleaved": True,
                      "mrope_interleaved": True},
        rope_theta=1e6,
    )  # fmt: skip
    thinker["audio_config"]["output_dim"] = 2048
    thinker["vision_config"]["out_hidden_size"] = 2048
    cfg["talker_config"]["thinker_hidden_size"] = 2048
    return cfg


def random_state(cfg: ThinkerConfig, device: torch.device, dtype: torch.dtype, seed: int = 0) -> dict[str, Any]:
    """ThinkerLM's state dict drawn at std 0.02 (norm weights 1): routing comes out near uniform over experts."""
    with torch.device("meta"):
        shapes = {name: t.shape for name, t in ThinkerLM(cfg).state_dict().items()}
    gen = torch.Generator(device=device).manual_seed(seed)
    state = {}
    for name, shape in shapes.items():
        t = torch.empty(shape, device=device, dtype=dtype)
        if name.endswith("norm.weight"):
            t.fill_(1.0)
        else:
            t.normal_(0.0, 0.02, generator=gen)
        state[name] = t
    return state


def random_model(config: dict[str, Any], device: torch.device, dtype: torch.dtype, seed: int = 0) -> ThinkerLM:
    """Built through ThinkerLM.from_state_dict, so the GPU path is selected exactly as at a real load."""
    cfg = ThinkerConfig.from_dict(config)
    return ThinkerLM.from_state_dict(cfg, random_state(cfg, device, dtype, seed), device)


def checkpoint_name(name: str) -> str:
    """Our state-dict name -> the checkpoint's (experts stay fused: `mlp.experts.gate_up_proj`, which loads as is)."""
    if name == HEAD_NAME:
        return "thinker.lm_head.weight"
    for part in ("gate_up_proj", "down_proj"):
        if name.endswith(f".mlp.{part}"):
            name = name.replace(f".mlp.{part}", f".mlp.experts.{part}")
    return "thinker.model." + name


def write_checkpoint(model: ThinkerLM, config: dict[str, Any], out_dir: Path, template_dir: Path,
                     shard_bytes: int = 2 << 30, workers: int = 8) -> int:
    """Write `model`'s weights (thinker.* only) as safetensors shards + index, `config`, and the template dir's
    tokenizer and processor files. Each shard's tensors reach the host one at a time. -> bytes written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in COPIED_FILES:
        if (template_dir / name).exists():
            shutil.copy(template_dir / name, out_dir / name)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    state = model.state_dict()
    shards: list[list[str]] = [[]]
    size = 0
    for name, t in state.items():
        nbytes = t.numel() * t.element_size()
        if shards[-1] and size + nbytes > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    files = [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    jobs = [({checkpoint_name(n): state[n] for n in names}, out_dir / file) for names, file in zip(shards, files)]
    # shards in parallel: device-to-host copies and file writes release the GIL, and one stream of them runs at
    # ~1 GB/s (61 GB took 64 s on the H200 machine)
    with ThreadPoolExecutor(max_workers=min(workers, len(jobs))) as pool:
        total = sum(pool.map(lambda job: write_safetensors(*job), jobs))
    weight_map = {name: file for (tensors, _), file in zip(jobs, files) for name in tensors}
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out_dir / INDEX_FILE).write_text(json.dumps(index, indent=2))
    return total


def write_safetensors(tensors: dict[str, torch.Tensor], path: Path) -> int:
    """The safetensors layout (u64 header size, JSON header padded to 8 bytes, raw data in header order), streamed
    from device tensors one by one: no whole-shard host buffer and no extra copy, unlike save_file. -> data bytes."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, t in tensors.items():
        nbytes = t.numel() * t.element_size()
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-(len(raw) + 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for t in tensors.values():
            # .cpu() gives each tensor its own bytes: q/k/v_proj are views of one fused weight on the GPU path
            host = t.detach().to("cpu").contiguous()
            f.write(host.view(torch.uint8).numpy().data if host.numel() else b"")
    return offset


def overwrite_safetensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    """Writes `tensors` over the same-named ones of an existing safetensors file, in place: each must match the
    stored dtype and shape (a calibration that changes weight values, not the layout)."""
    with open(path, "r+b") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        for name, t in tensors.items():
            entry = header[name]
            if entry["dtype"] != _DTYPES[t.dtype] or entry["shape"] != list(t.shape):
                raise ValueError(f"{path.name}:{name} is {entry['dtype']}{entry['shape']}, not "
                                 f"{_DTYPES[t.dtype]}{list(t.shape)}")
            f.seek(8 + size + entry["data_offsets"][0])
            f.write(t.detach().to("cpu").contiguous().view(torch.uint8).numpy().data)


def overwrite_in_checkpoint(ckpt_dir: Path, tensors: dict[str, torch.Tensor]) -> None:
    """overwrite_safetensors for tensors named as the checkpoint's index names them, each in the shard holding it."""
    weight_map = json.loads((Path(ckpt_dir) / INDEX_FILE).read_text())["weight_map"]
    by_shard: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in tensors.items():
        by_shard.setdefault(weight_map[name], {})[name] = tensor
    for shard, part in by_shard.items():
        overwrite_safetensors(Path(ckpt_dir) / shard, part)


_DTYPES = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32", torch.int64: "I64",
           torch.int32: "I32"}

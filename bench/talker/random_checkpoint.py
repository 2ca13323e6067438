"""A checkpoint dir for the text->speech mesh at the released Qwen3-Omni dims with random weights: the thinker LM,
the talker (with its code predictor) and Code2Wav. No vision or audio tower: a text->speech mesh loads neither.

Names are the released checkpoint's (what transformers' Qwen3OmniMoeForConditionalGeneration writes) for `talker.*`
and `code2wav.*`: one tensor per expert and projection, `talker.model.*` beside the top-level `talker.codec_head`
and projections. The thinker keeps its experts fused (bench/thinker/random_model.py), which its loader takes as is.
"""
from __future__ import annotations

import json
import math
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import torch

from bench.talker.bench_talker import real_config as talker_real_config
from bench.thinker.random_model import COPIED_FILES, checkpoint_name, write_safetensors
from bench.thinker.random_model import real_config as thinker_real_config
from runtime.weights import INDEX_FILE
from services.talker.model.code2wav import Code2Wav
from services.talker.model.code_predictor import CodePredictor
from services.talker.model.config import parse_talker_config
from services.talker.model.talker_lm import TalkerLM
from services.thinker.model import ThinkerConfig, ThinkerLM

STD = 0.02  # every tensor but the norm gains, which are 1 (as bench/thinker and bench/talker draw them)
# TalkerLM parameters the checkpoint keeps beside `talker.model.*` (split_talker_state strips `model.` from the rest)
TALKER_OUTSIDE_MODEL = ("codec_head.", "text_projection.", "hidden_projection.")
_FUSED_EXPERTS = re.compile(r"^(layers\.\d+\.mlp\.experts)\.(gate_up_proj|down_proj)$")
_SEEDS_PER_RUN = 1_000_000  # shard i of run `seed` draws from seed * this + i: no two (seed, shard) pairs share one


class TensorSpec(NamedTuple):
    name: str  # as stored in the checkpoint
    shape: tuple[int, ...]


def real_speech_config() -> dict[str, Any]:
    """config.json at the released dims: the thinker's (bench/thinker), the talker's and Code2Wav's (bench/talker)."""
    cfg = thinker_real_config()
    speech = talker_real_config()
    cfg["talker_config"] = speech["talker_config"]
    cfg["code2wav_config"] = speech["code2wav_config"]
    return cfg


def check_config(config: dict[str, Any]) -> None:
    """The talker reads the thinker's embeddings and hidden states: their widths must agree."""
    thinker = config["thinker_config"]["text_config"]["hidden_size"]
    talker = config["talker_config"]["thinker_hidden_size"]
    if talker != thinker:
        raise ValueError(f"talker_config.thinker_hidden_size={talker} differs from thinker_config.text_config."
                         f"hidden_size={thinker}; set it to {thinker}")


def thinker_specs(config: dict[str, Any]) -> list[TensorSpec]:
    """`thinker.model.*` and `thinker.lm_head.weight`: exactly what ThinkerLM.load reads."""
    with torch.device("meta"):
        state = ThinkerLM(ThinkerConfig.from_dict(config)).state_dict()
    return [TensorSpec(checkpoint_name(name), tuple(t.shape)) for name, t in state.items()]


def talker_specs(config: dict[str, Any]) -> list[TensorSpec]:
    """`talker.*` and `code2wav.*`: what load_talker_model reads (it takes the embeddings from the thinker's)."""
    cfg = parse_talker_config(config)
    with torch.device("meta"):
        lm, predictor, code2wav = TalkerLM(cfg.lm), CodePredictor(cfg.code_predictor), Code2Wav(cfg.code2wav)
    specs = [spec for name, t in lm.state_dict().items() for spec in _talker_lm_specs(name, tuple(t.shape))]
    specs += [TensorSpec(_predictor_name(name), tuple(t.shape)) for name, t in predictor.state_dict().items()]
    specs += [TensorSpec("code2wav." + name, tuple(t.shape)) for name, t in code2wav.state_dict().items()]
    return specs


def _talker_lm_specs(name: str, shape: tuple[int, ...]) -> list[TensorSpec]:
    """One TalkerLM tensor -> its checkpoint tensors; fused experts come apart (load.fuse_experts inverted)."""
    if name.startswith(TALKER_OUTSIDE_MODEL):
        return [TensorSpec("talker." + name, shape)]
    m = _FUSED_EXPERTS.match(name)
    if m is None:
        return [TensorSpec("talker.model." + name, shape)]
    prefix = f"talker.model.{m[1]}"
    num_experts, rows, cols = shape
    if m[2] == "down_proj":  # [E, H, I]
        return [TensorSpec(f"{prefix}.{e}.down_proj.weight", (rows, cols)) for e in range(num_experts)]
    # gate_up_proj [E, 2I, H]: the gate's I rows, then the up projection's
    return [TensorSpec(f"{prefix}.{e}.{part}_proj.weight", (rows // 2, cols))
            for e in range(num_experts) for part in ("gate", "up")]


def talker_router_name(layer: int) -> str:
    """The checkpoint name of a talker layer's router."""
    return _talker_lm_specs(f"layers.{layer}.mlp.gate.weight", ())[0].name


def _predictor_name(name: str) -> str:
    return "talker.code_predictor." + (name if name.startswith("lm_head.") else "model." + name)


def speech_checkpoint_specs(config: dict[str, Any]) -> list[TensorSpec]:
    check_config(config)
    return thinker_specs(config) + talker_specs(config)


def checkpoint_bytes(config: dict[str, Any], dtype: torch.dtype) -> int:
    """Bytes of tensor data the writer produces for `config` (to pick a directory with room)."""
    return sum(math.prod(s.shape) for s in speech_checkpoint_specs(config)) * dtype.itemsize


def plan_shards(specs: list[TensorSpec], itemsize: int, shard_bytes: int) -> list[list[TensorSpec]]:
    """Consecutive tensors up to `shard_bytes` a shard (a larger tensor gets a shard of its own)."""
    shards: list[list[TensorSpec]] = [[]]
    size = 0
    for spec in specs:
        nbytes = math.prod(spec.shape) * itemsize
        if shards[-1] and size + nbytes > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(spec)
        size += nbytes
    return shards


def random_tensors(specs: list[TensorSpec], device: torch.device, dtype: torch.dtype,
                   seed: int) -> dict[str, torch.Tensor]:
    """One shard's tensors at std 0.02 (norm gains 1), drawn on `device` from a generator of its own."""
    gen = torch.Generator(device=device).manual_seed(seed)
    tensors = {}
    for spec in specs:
        t = torch.empty(spec.shape, device=device, dtype=dtype)
        if spec.name.endswith("norm.weight"):
            t.fill_(1.0)
        else:
            t.normal_(0.0, STD, generator=gen)
        tensors[spec.name] = t
    return tensors


def write_random_speech_checkpoint(out_dir: Path, device: torch.device | str, dtype: torch.dtype, seed: int = 0,
                                   config: dict[str, Any] | None = None, template_dir: Path | None = None,
                                   shard_bytes: int = 2 << 30, workers: int = 8) -> int:
    """Write safetensors shards + index, `config` (default: the released dims) as config.json, and the template
    dir's tokenizer and processor files (default: the demo checkpoint's). -> bytes of tensor data written.

    Shards are drawn on `device` and written `workers` at a time, so at most ~workers x shard_bytes is held
    there at once (16 GiB by default, against ~67 GB for the whole checkpoint in bf16). Same arguments, same bytes.
    """
    config = real_speech_config() if config is None else config
    if template_dir is None:
        from runtime.model_path import resolve_model  # builds the demo checkpoint on first use: only when asked

        template_dir = resolve_model("demo")
    device = torch.device(device)
    shards = plan_shards(speech_checkpoint_specs(config), dtype.itemsize, shard_bytes)
    files = [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    def write(i: int) -> int:
        tensors = random_tensors(shards[i], device, dtype, seed * _SEEDS_PER_RUN + i)
        return write_safetensors(tensors, out_dir / files[i])

    # shards in parallel: device-to-host copies and file writes release the GIL (~1 GB/s for one stream)
    with ThreadPoolExecutor(max_workers=min(workers, len(shards))) as pool:
        total = sum(pool.map(write, range(len(shards))))
    if device.type == "cuda":
        torch.cuda.empty_cache()  # the stages that load this next run in other processes on the same GPU
    weight_map = {spec.name: file for shard, file in zip(shards, files) for spec in shard}
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out_dir / INDEX_FILE).write_text(json.dumps(index, indent=2))
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    for name in COPIED_FILES:
        if (Path(template_dir) / name).exists():
            shutil.copy(Path(template_dir) / name, out_dir / name)
    return total

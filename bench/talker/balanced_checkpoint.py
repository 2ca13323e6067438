"""Balanced routing for a mesh benchmark on random weights: the stages load their routers from the checkpoint, so
they are calibrated here, in the benchmark process, and written back over the drawn ones before the mesh starts:
the thinker's routers and LM head as bench_thinker calibrates them (bench/thinker/balance.py), the talker's as
bench_talker does (bench/talker/balance.py). The talker's routing record is counted in this process on the
calibrated weights, with bench_talker's prompts at each measured concurrency's batch: the mesh's own talker rows
are conditioned on the thinker's states instead, which the record says."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from bench.talker.bench_talker import calibrate_routing, routing
from bench.thinker.balance import balance_routing, write_calibrated
from bench.thinker.workload import PromptMaker
from bench.talker.random_checkpoint import talker_router_name
from bench.thinker.random_model import overwrite_in_checkpoint
from services.talker.model.load import load_talker_model
from services.thinker.model import ThinkerLM

THINKER_PROMPT_TOKENS = 64  # calibration prompts: the speech benchmark's questions are this short


def checkpoint_routing(ckpt_dir: Path, mode: str, device: str, dtype: torch.dtype, batches: list[int],
                       frames: int) -> dict[str, Any]:
    """The routing record of the random checkpoint in `ckpt_dir`; with mode "balanced" its talker routers are first
    calibrated, in place. -> {calibration (None when native), routing}."""
    t0 = time.perf_counter()
    model = load_talker_model(ckpt_dir, device, dtype)
    model.lm.use_grouped_mm(device.startswith("cuda"))
    with torch.no_grad():
        calibration = calibrate_routing(model, max(batches), frames) if mode == "balanced" else None
        record = routing(model, mode, batches, frames)
    if calibration is not None:
        overwrite_in_checkpoint(ckpt_dir, {talker_router_name(i): layer.mlp.gate.weight
                                           for i, layer in enumerate(model.lm.layers)})
        calibration["seconds"] = time.perf_counter() - t0
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()  # the stages that load the checkpoint next run in other processes on this GPU
    record["how"] += ("; counted in the benchmark process on bench_talker's prompts (the mesh's talker rows are "
                      "conditioned on the thinker's states)")
    return {"calibration": calibration, "routing": record}


def thinker_checkpoint_routing(ckpt_dir: Path, device: str, dtype: torch.dtype, prompts: int = 512, decoded: int = 64,
                               decoded_tokens: int = 128) -> dict[str, Any]:
    """Calibrates the thinker routers and LM head of the random checkpoint in `ckpt_dir` in place (the checkpoint
    holds the demo tokenizer, which the calibration prompts use). -> what was done."""
    model = ThinkerLM.load(ckpt_dir, device, dtype)
    maker = PromptMaker(ckpt_dir, THINKER_PROMPT_TOKENS, "balanced")
    with torch.no_grad():
        done = balance_routing(model, maker, torch.device(device), dtype, prompts, decoded, decoded_tokens)
    write_calibrated(model, ckpt_dir)
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return done

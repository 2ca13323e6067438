"""Random Thinker weights made to route like a trained, load-balanced model (bench/moe_routing.py says why they
don't): every router and the LM head whitened on their inputs, in two passes.

Measured on one H200 at real dims (bench/results/2026-12-03-thinker-routing-probe-h200*.json), distinct experts a
layer reads in a 32-row decode step, uniform expectation 111.8: 39 on the native workload, 44 with prompts over
the whole vocabulary, 80 with the mean direction removed from the routers, 100 whitened on prompts, 110 whitened
again on decoded sequences (a decode step's router inputs sit late in their sequences, where prompts' do not)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from bench.moe_routing import CALIBRATIONS, moe_layers
from bench.thinker import engine_loop
from bench.thinker.random_model import checkpoint_name, overwrite_in_checkpoint
from bench.thinker.routing_replay import replay_experts
from bench.thinker.workload import PromptMaker
from runtime.config import EngineConfig
from runtime.engine.sequence import Sequence
from services.thinker.model import ThinkerConfig, ThinkerLM

CALIBRATION_FIRST_INDEX = 10**7  # prompt indices no measured run uses


def calibrated_weights(model: ThinkerLM) -> dict[str, torch.Tensor]:
    """The tensors a calibration changes: every router and the LM head."""
    out = {f"router{i}": moe.gate.weight for i, moe in enumerate(moe_layers(model))}
    out["lm_head"] = model.lm_head.weight
    return out


def calibrate_on(model: ThinkerLM, sequences: dict[int, list[int]], how: str = "whiten", head: bool = True) -> None:
    """Calibrate each router (and the head) on its inputs over `sequences`, in one pack (see replay_experts)."""
    replay_experts(model, sequences, max_batch_tokens=sum(map(len, sequences.values())),
                   calibrate=CALIBRATIONS[how], calibrate_head=head)


def decode_greedy(engine: Any, maker: PromptMaker, cfg: ThinkerConfig, first_index: int, count: int,
                  max_tokens: int, rows: int = 32) -> dict[int, list[int]]:
    """Prompt and generated tokens of `count` greedy sequences decoded `rows` at a time."""
    options = engine_loop.workload_sampling("greedy", max_tokens)

    def make(index: int) -> Sequence:
        ids = maker.make(index).token_ids
        return engine_loop.text_sequence(index, ids, options, engine_loop.text_request(ids, cfg), "calibrate")

    trace = engine_loop.DecodeTrace()
    engine_loop.run_level(engine, make, rows, 0, count, first_index, trace)
    return trace.tokens


def balance_routing(model: ThinkerLM, maker: PromptMaker, device: torch.device, dtype: torch.dtype,
                    prompts: int = 512, decoded: int = 64, decoded_tokens: int = 128) -> dict[str, Any]:
    """Pass 1 on `prompts` workload prompts; then `decoded` sequences generated with it, and pass 2 on those from
    the drawn weights. An eager engine of its own decodes (1 GiB of KV), freed before the measured one is built.
    -> what was done, for the result file."""
    t0 = time.perf_counter()
    drawn = {k: w.detach().clone() for k, w in calibrated_weights(model).items()}
    first = CALIBRATION_FIRST_INDEX
    calibrate_on(model, {i: maker.make(i).token_ids for i in range(first, first + prompts)})
    eng = EngineConfig(max_num_seqs=32, max_batch_tokens=2048, kv_cache_bytes=1 << 30, max_model_len=1024,
                       cuda_graphs=False)
    engine = engine_loop.build_engine(model, eng, device, dtype)
    sequences = decode_greedy(engine, maker, model.cfg, first + prompts, decoded, decoded_tokens)
    del engine
    for key, w in calibrated_weights(model).items():
        w.copy_(drawn[key])
    del drawn
    calibrate_on(model, sequences)
    return {"calibration": "routers and LM head whitened on their inputs (bench/thinker/balance.py)",
            "pass1_prompts": prompts, "pass2_decoded_sequences": decoded, "pass2_tokens_each": decoded_tokens,
            "seconds": time.perf_counter() - t0}


def write_calibrated(model: ThinkerLM, ckpt_dir: Path) -> None:
    """Writes the calibrated routers and LM head over the drawn ones in the random checkpoint `ckpt_dir` was written
    from (bench/thinker/random_model.py names), in place: a stage that loads it next serves the calibrated weights."""
    names = {id(t): name for name, t in model.state_dict(keep_vars=True).items()}
    overwrite_in_checkpoint(ckpt_dir, {checkpoint_name(names[id(t)]): t for t in calibrated_weights(model).values()})

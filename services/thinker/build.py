"""Assembles the thinker stage: model, KV cache, engine, service and servicer on a StageServer."""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import NamedTuple
from pathlib import Path

import torch

from omnimesh.v1 import common_pb2, thinker_pb2_grpc
from runtime.build_info import build_string
from runtime.config import EngineConfig, MeshConfig
from runtime.engine.block_manager import BlockManager
from runtime.engine.cache_events import CacheEventLog
from runtime.engine.engine import Engine, ModelRunner
from runtime.engine.engine_loop import EngineLoop
from runtime.engine.scheduler import Scheduler, SchedulerLimits
from runtime.engine.state_prefix import StatePrefixCache
from runtime.engine.state_slots import StateSlots
from runtime.engine.token_core import TokenCore
from runtime.server import StageServer
from runtime.stage_device import stage_device
from runtime.tokenizer import Tokenizer
from services.thinker.cache_report import CacheReporter
from services.thinker.graphs import GraphSettings
from services.thinker.model import ThinkerLM
from services.thinker.model.hybrid_lm import HybridLM
from services.thinker.model.linear_state import LinearStateCache
from services.thinker.model.loader import load_thinker_lm
from services.thinker.parallel.launch import load_parallel_thinker, rank_devices
from services.thinker.parallel.runner import ParallelRunner
from services.thinker.parallel.rank_shard import RankShard
from services.thinker.runner import ThinkerRunner
from services.thinker.service import ThinkerService
from services.thinker.servicer import ThinkerServicer

log = logging.getLogger(__name__)
SERVICE_NAME = "omnimesh.v1.Thinker"
STALL_OFF_TIMEOUT_S = 1200.0  # tensor-parallel collectives' timeout when stall_timeout_s is 0 (never stalled)


class EngineParts(NamedTuple):
    engine: Engine
    scheduler: Scheduler
    max_model_len: int  # the checkpoint's context, capped by what the KV cache holds
    num_blocks: int
    block_bytes: int
    max_running: int  # sequences that run at once: max_num_seqs, or a hybrid model's state slots


def build_engine(model: ThinkerLM | HybridLM, eng: EngineConfig, device: torch.device, dtype: torch.dtype,
                 wrap_runner: Callable[[ThinkerRunner], ModelRunner] = lambda runner: runner,
                 turn_end_tokens: frozenset[int] = frozenset()) -> EngineParts:
    """The KV cache sized from `eng`, CUDA graphs captured when asked, the scheduler and the engine. A hybrid model
    (Qwen3.5) also gets `eng.state_slots` state slots, a prefix cache only with state snapshots (taken where a prompt's
    turns end, at `turn_end_tokens`, and at its last full block), and decode graphs only."""
    per_block = ThinkerRunner.kv_bytes_per_block(model, eng.block_size, dtype)
    num_blocks = eng.num_kv_blocks or max(1, eng.kv_cache_bytes // per_block)
    capacity = num_blocks * eng.block_size
    max_model_len = min(model.cfg.max_position_embeddings, eng.max_model_len or capacity, capacity)
    hybrid = model.cfg.hybrid
    graphs = GraphSettings(eng.graph_decode_buckets, eng.prefill_token_buckets, eng.max_num_seqs,
                           max_model_len, eng.max_batch_tokens) if eng.cuda_graphs else None
    num_slots = eng.state_slots if hybrid is not None else 0
    snapshots = eng.num_state_snapshots if hybrid is not None and eng.enable_prefix_cache else 0
    if hybrid is not None:
        log.info("thinker: %d linear-attention state slots and %d snapshots (%.1f MiB), prefix cache %s; a hybrid "
                 "model's prefill steps run without CUDA graphs", num_slots, snapshots,
                 (num_slots + snapshots) * LinearStateCache.bytes_per_slot(hybrid, dtype) / 2**20,
                 "on" if snapshots else "off")
    if isinstance(model, RankShard):
        runner = ParallelRunner(model, num_blocks, eng.block_size, device, dtype, graphs, num_slots, snapshots)
    else:
        runner = ThinkerRunner(model, num_blocks, eng.block_size, device, dtype, graphs, num_slots, snapshots)
    prefix_cache = eng.enable_prefix_cache and (hybrid is None or snapshots > 0)
    blocks = BlockManager(num_blocks, eng.block_size, prefix_cache, CacheEventLog())
    scheduler = Scheduler(SchedulerLimits(eng.max_num_seqs, eng.max_batch_tokens, max_model_len), blocks,
                          StateSlots(num_slots) if hybrid is not None else None,
                          StatePrefixCache(snapshots, blocks, turn_end_tokens, CacheEventLog()) if snapshots else None)
    return EngineParts(Engine(scheduler, wrap_runner(runner), eng.late_launch), scheduler, max_model_len, num_blocks,
                       per_block, num_slots or eng.max_num_seqs)


def build_thinker_service(mesh: MeshConfig, model_dir: Path, server: StageServer
                          ) -> tuple[ThinkerService, ThinkerLM | HybridLM, CacheReporter]:  # fmt: skip
    stage = mesh.thinker
    eng = stage.engine
    device = stage_device(stage.device, stage.cpu_threads)
    dtype = getattr(torch, stage.dtype)
    if stage.tensor_parallel > 1:  # collectives time out as a hung step would (a dead or stuck rank fails the step)
        model = load_parallel_thinker(model_dir, stage.tensor_parallel, device, dtype, stage.cpu_threads,
                                      stage.stall_timeout_s or STALL_OFF_TIMEOUT_S)
    else:
        model = load_thinker_lm(model_dir, device=device, dtype=dtype)
    tokenizer = Tokenizer.from_dir(model_dir)
    # a chat turn ends in an end-of-turn token (<|im_end|>, among the EOS ids): a hybrid model's prefix cache keeps
    # its state there, so a shared system prompt or a chat's earlier turns serve prompts that go on differently
    parts = build_engine(model, eng, device, dtype, turn_end_tokens=frozenset(tokenizer.eos_token_ids))
    engine = EngineLoop(TokenCore(parts.engine), server.metrics)
    service = ThinkerService(engine, tokenizer, server.metrics, parts.max_model_len,
                             eng.token_flush_ms / 1000, parts.max_running + eng.max_waiting_seqs)
    log.info("thinker: %d KV blocks of %d tokens (%.1f MiB), max_model_len %d, on %s %s, %s path", parts.num_blocks,
             eng.block_size, parts.num_blocks * parts.block_bytes / 2**20, parts.max_model_len, device, stage.dtype,
             "kernel" if model.use_kernels else "reference")
    return service, model, CacheReporter(parts.scheduler, lambda: server.draining)


async def build_thinker(mesh: MeshConfig, model_dir: Path, server: StageServer) -> Callable[[], None]:
    service, model, cache = build_thinker_service(mesh, model_dir, server)
    cfg = model.cfg
    stage_ranks = mesh.thinker.tensor_parallel  # its devices are the ranks' (KV blocks: each rank's)
    info = common_pb2.StageInfo(
        stage="thinker", replica=server.replica, model=mesh.model, build=build_string(),
        device=",".join(map(str, rank_devices(service.engine.core.engine.runner.device, stage_ranks))),
        dims={"hidden_size": cfg.hidden_size, "vocab_size": cfg.vocab_size, "num_layers": cfg.num_layers,
              "num_experts": cfg.num_experts, "num_deepstack": cfg.num_deepstack,
              "accept_hidden_layer": cfg.accept_hidden_layer or 0},
        limits={"max_model_len": service.max_model_len, "max_num_seqs": mesh.thinker.engine.max_num_seqs,
                "max_batch_tokens": mesh.thinker.engine.max_batch_tokens,
                "num_kv_blocks": service.engine.core.engine.scheduler.blocks.num_blocks,
                "tensor_parallel": stage_ranks})
    servicer = ThinkerServicer(service, cfg, mesh.gateway.sampling, info, cache)
    server.add_service(thinker_pb2_grpc.add_ThinkerServicer_to_server, servicer, SERVICE_NAME)
    server.not_serving_when("the thinker engine", lambda: service.engine.failure, service.engine.heartbeat,
                            mesh.thinker.stall_timeout_s)
    if isinstance(model, RankShard):  # a worker that dies while idle takes the stage down too
        driver = model.driver
        server.not_serving_when("a tensor-parallel rank", lambda: driver.failure, service.engine.heartbeat, 0)

        def close() -> None:
            service.engine.close()
            driver.close()
        return close
    return service.engine.close

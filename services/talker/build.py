"""Assembles the talker stage: model, runner (KV slots), engine, service and servicer on a StageServer."""
from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import torch

from omnimesh.v1 import common_pb2, talker_pb2_grpc
from runtime.build_info import build_string
from runtime.config import MeshConfig, SpeechConfig
from runtime.engine.engine_loop import EngineLoop
from runtime.server import StageServer
from runtime.stage_device import stage_device
from runtime.tokenizer import Tokenizer
from services.talker.model.generate import TalkerRunner
from services.talker.model.load import TalkerModel, load_talker_model
from services.talker.model.prompt import ASSISTANT_PREAMBLE
from services.talker.prompt_check import PromptLimits
from services.talker.request import SAMPLE_RATE
from services.talker.service import TalkerService
from services.talker.servicer import TalkerServicer
from services.talker.speech_core import SpeechCore
from services.talker.voices import voice_names
from services.talker.wire import SpeakLimits

log = logging.getLogger(__name__)
SERVICE_NAME = "omnimesh.v1.Talker"


def build_talker_service(mesh: MeshConfig, model_dir: Path, server: StageServer) -> tuple[TalkerService, TalkerModel]:
    stage = mesh.talker
    speech = stage.speech
    device = stage_device(stage.device, stage.cpu_threads)
    model = load_talker_model(model_dir, device=device, dtype=getattr(torch, stage.dtype))
    runner = build_runner(model, speech)
    thinker_eos = frozenset(Tokenizer.from_dir(model_dir).eos_token_ids) | {model.cfg.thinker_eos}
    engine = EngineLoop(SpeechCore(runner, speech, thinker_eos), server.metrics)  # warms up before serving
    log.info("talker: %d rows x %d positions, frames per chunk %d then %d (context %d), voices %s, on %s %s",
             speech.max_rows, runner.kv.capacity, speech.first_chunk_frames, speech.chunk_frames,
             speech.left_context_frames, voice_names(model.cfg), device, stage.dtype)
    return TalkerService(engine, server.metrics, speech.max_rows + speech.max_waiting), model


def build_runner(model: TalkerModel, speech: SpeechConfig) -> TalkerRunner:
    """The talker's runner on `model` with its graphs captured (frames, prefill, Code2Wav chunks) where they apply."""
    # a slot holds the user turns, the assistant preamble and one position per frame (the last one unused)
    capacity = speech.max_prompt_tokens + ASSISTANT_PREAMBLE + speech.max_frames + 1
    # the fused frame step needs the Triton kernels (CUDA, half precision); elsewhere the reference loop runs
    fast = speech.cuda_graphs and model.device.type == "cuda" and model.dtype in (torch.bfloat16, torch.float16)
    model.lm.use_grouped_mm(fast)  # grouped GEMMs instead of a loop over experts: no host sync, so capturable
    # the fast frame is stepped deferred: its codes are read while the next step's host work runs
    runner = TalkerRunner(model, speech.max_rows, capacity, fast=fast, cuda_graphs=fast,
                          prefill_tokens=speech.max_prefill_tokens, defer=fast, ahead=fast and speech.frames_ahead)
    runner.capture_graphs()
    receptive = model.code2wav.conv_receptive_frames()
    if speech.left_context_frames < receptive:
        log.warning("talker: left_context_frames=%d is below Code2Wav's receptive field of %d frames: chunk "
                    "boundaries will differ slightly from a full decode", speech.left_context_frames, receptive)
    if speech.cuda_graphs and model.device.type == "cuda":  # streamed Code2Wav chunks replay graphs captured now
        model.code2wav.enable_cuda_graphs(speech.max_rows).warm_up(speech.first_chunk_frames, speech.chunk_frames,
                                                                   speech.left_context_frames)  # fmt: skip
    return runner


def stage_info(mesh: MeshConfig, server: StageServer, model: TalkerModel) -> common_pb2.StageInfo:
    cfg, speech = model.cfg, mesh.talker.speech
    return common_pb2.StageInfo(
        stage="talker", replica=server.replica, model=mesh.model, build=build_string(), device=str(model.device),
        dims={"hidden_size": cfg.lm.hidden_size, "thinker_hidden_size": cfg.lm.thinker_hidden_size,
              "thinker_vocab_size": model.embed_table.shape[0], "num_layers": cfg.lm.num_layers,
              "num_experts": cfg.lm.num_experts, "num_code_groups": cfg.num_code_groups,
              "codebook_size": cfg.code_predictor.vocab_size, "accept_hidden_layer": cfg.accept_hidden_layer,
              "sample_rate": SAMPLE_RATE, "samples_per_frame": model.code2wav.samples_per_frame},
        limits={"max_rows": speech.max_rows, "max_frames": speech.max_frames,
                "max_prompt_tokens": speech.max_prompt_tokens, "first_chunk_frames": speech.first_chunk_frames,
                "chunk_frames": speech.chunk_frames, "left_context_frames": speech.left_context_frames},
        voices=voice_names(cfg))


async def build_talker(mesh: MeshConfig, model_dir: Path, server: StageServer) -> Callable[[], None]:
    service, model = build_talker_service(mesh, model_dir, server)
    limits = SpeakLimits(PromptLimits(model.cfg, model.embed_table.shape[0], mesh.talker.speech.max_prompt_tokens),
                         mesh.talker.speech, voice_names(model.cfg))
    servicer = TalkerServicer(service, limits, stage_info(mesh, server, model))
    server.add_service(talker_pb2_grpc.add_TalkerServicer_to_server, servicer, SERVICE_NAME)
    server.not_serving_when("the talker engine", lambda: service.engine.failure, service.engine.heartbeat,
                            mesh.talker.stall_timeout_s)
    return service.engine.close

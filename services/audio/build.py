"""Assembles the audio stage: log-mel front end, AuT encoder, batching service and servicer on a StageServer."""
from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import torch

from omnimesh.v1 import audio_pb2_grpc, common_pb2
from runtime.build_info import build_string
from runtime.config import MeshConfig
from runtime.server import StageServer
from runtime.stage_device import stage_device
from services.audio.features import LogMelExtractor, MelConfig
from services.audio.model import AudioEncoder
from services.audio.service import AudioService
from services.audio.servicer import AudioServicer

log = logging.getLogger(__name__)
SERVICE_NAME = "omnimesh.v1.Audio"


def build_audio_service(mesh: MeshConfig, model_dir: Path, server: StageServer) -> AudioService:
    stage = mesh.audio
    device = stage_device(stage.device, stage.cpu_threads)
    # CUDA graphs: short requests would otherwise wait on Python launching ~400 kernels one by one
    encoder = AudioEncoder.load(model_dir, device=device, dtype=getattr(torch, stage.dtype),
                                cuda_graphs=device.type == "cuda")
    mel = MelConfig.from_checkpoint(model_dir)
    if mel.feature_size != encoder.config.num_mel_bins:
        raise ValueError(f"{model_dir}: preprocessor_config.json feature_size={mel.feature_size} but the audio encoder "
                         f"takes num_mel_bins={encoder.config.num_mel_bins}; use the checkpoint's own preprocessor")
    extractor = LogMelExtractor(mel, device)
    service = AudioService(extractor, encoder, server.metrics, stage.encoder)
    limits = service.limits
    log.info("audio: AuT %d layers -> %d, on %s %s; batches up to %.0f s, requests up to %.0f s",
             encoder.config.encoder_layers, encoder.config.output_dim, device, stage.dtype,
             limits.max_batch_seconds, limits.max_request_seconds)
    return service


def stage_info(mesh: MeshConfig, server: StageServer, service: AudioService) -> common_pb2.StageInfo:
    cfg, limits = service.encoder.config, service.limits
    return common_pb2.StageInfo(
        stage="audio", replica=server.replica, model=mesh.model, build=build_string(),
        device=str(service.encoder.device),
        dims={"output_dim": cfg.output_dim, "num_mel_bins": cfg.num_mel_bins,
              "sampling_rate": service.mel_config.sampling_rate},
        limits={"max_batch_seconds": int(limits.max_batch_seconds),
                "max_request_seconds": int(limits.max_request_seconds),
                "min_samples": limits.min_samples})


async def build_audio(mesh: MeshConfig, model_dir: Path, server: StageServer) -> Callable[[], None]:
    service = build_audio_service(mesh, model_dir, server)
    servicer = AudioServicer(service, stage_info(mesh, server, service))
    server.add_service(audio_pb2_grpc.add_AudioServicer_to_server, servicer, SERVICE_NAME)
    server.not_serving_when("the audio encoder", lambda: service.batcher.fatal_error, service.batcher.heartbeat,
                            mesh.audio.stall_timeout_s)
    return service.close

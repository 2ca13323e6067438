"""Assembles the vision stage: tower and preprocessor, batching service and servicer on a StageServer."""
from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import torch

from omnimesh.v1 import common_pb2
from runtime.build_info import build_string
from runtime.config import MeshConfig
from runtime.server import StageServer
from runtime.stage_device import stage_device
from services.vision.encoder import VisionEncoder
from services.vision.service import VisionService
from services.vision.servicer import VisionServicer, add_to_server

log = logging.getLogger(__name__)
SERVICE_NAME = "omnimesh.v1.Vision"


def stage_info(service: VisionService, mesh: MeshConfig, replica: str) -> common_pb2.StageInfo:
    tower, processing = service.encoder.tower, service.processing
    return common_pb2.StageInfo(
        stage="vision", replica=replica, model=mesh.model, build=build_string(), device=str(tower.device),
        dims={"out_hidden_size": tower.cfg.out_hidden_size, "num_deepstack": len(tower.cfg.deepstack_visual_indexes),
              "patch_size": processing.patch_size, "merge_size": processing.merge_size,
              "temporal_patch_size": processing.temporal_patch_size},
        limits={"max_batch_patches": service.max_batch_patches, "max_request_patches": service.max_request_patches})


async def build_vision(mesh: MeshConfig, model_dir: Path, server: StageServer) -> Callable[[], None]:
    stage = mesh.vision
    device = stage_device(stage.device, stage.cpu_threads)
    encoder = VisionEncoder.load(model_dir, device, getattr(torch, stage.dtype), linear_dtype=stage.linear_dtype)
    service = VisionService(encoder, server.metrics, stage.encoder)
    log.info("vision: tower of %d blocks on %s %s (%s attention, %s block linears), %d patches per forward, %d per "
             "request", encoder.tower.cfg.depth, encoder.tower.device, stage.dtype, encoder.tower.attention_backend,
             encoder.tower.linear_dtype, service.max_batch_patches, service.max_request_patches)
    servicer = VisionServicer(service, stage_info(service, mesh, server.replica))
    server.add_service(add_to_server, servicer, SERVICE_NAME)
    server.not_serving_when("the vision encoder", lambda: service.batcher.fatal_error, service.batcher.heartbeat,
                            mesh.vision.stall_timeout_s)
    return service.close

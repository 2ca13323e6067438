"""Assembles the gateway: stage channels, prompt builder, OmniService and its servicer on a StageServer."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from omnimesh.v1 import common_pb2, omni_pb2, omni_pb2_grpc
from runtime.build_info import build_string
from runtime.channels import open_channel
from runtime.config import MeshConfig
from runtime.server import StageServer
from gateway.clients.thinker import ThinkerClient
from gateway.prompt import PromptBuilder
from gateway.service import OmniService
from gateway.servicer import OmniServicer

SERVICE_NAME = "omnimesh.v1.Omni"


async def build_gateway(mesh: MeshConfig, model_dir: Path, server: StageServer) -> Callable[[], None]:
    if not mesh.thinker.address:
        raise ValueError("config field thinker.address is empty: the gateway needs the thinker's target "
                         "(e.g. 127.0.0.1:50052 or dns:///thinker:50051); pass --thinker-addr")
    thinker_channel = open_channel(mesh.thinker.address, mesh.gateway.server.max_message_bytes)
    thinker = ThinkerClient(thinker_channel, server.metrics)
    served_inputs: frozenset[str] = frozenset()  # encoder routing lands with the vision and audio stages
    service = OmniService(PromptBuilder.from_dir(model_dir), thinker, server.metrics, mesh.gateway.stage_timeout_s,
                          served_inputs, serves_audio_out=False)
    info = omni_pb2.OmniInfo(
        gateway=common_pb2.StageInfo(stage="gateway", replica=server.replica, model=mesh.model, build=build_string()),
        input_modalities=["text", *sorted(served_inputs)], output_modalities=[omni_pb2.MODALITY_TEXT])
    server.add_service(omni_pb2_grpc.add_OmniServicer_to_server, OmniServicer(service, mesh.gateway, info),
                       SERVICE_NAME)
    return lambda: None


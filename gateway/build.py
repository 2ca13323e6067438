"""Assembles the gateway: stage channels, prompt builder, OmniService and its servicer on a StageServer."""
from __future__ import annotations

import json
from dataclasses import replace
from collections.abc import Callable
from functools import partial
from pathlib import Path

import grpc

from omnimesh.v1 import common_pb2, omni_pb2
from runtime.build_info import build_string
from runtime.channels import open_channel
from runtime.checkpoint.family import read_family
from runtime.config import MeshConfig
from runtime.server import StageServer
from runtime.tls import stage_channel_credentials
from runtime.vision_processing import VisionProcessingConfig
from gateway.clients.encoders import AudioClient, VisionClient
from gateway.clients.talker import TalkerClient
from gateway.clients.thinker import ThinkerClient
from gateway.routing.router import ThinkerRouter
from gateway.media.vision import VisionMediaConfig
from gateway.media_prep import MediaPipeline
from gateway.prompt import PromptBuilder
from gateway.reasoning import ReasoningMarkers
from gateway.request_decode import SERVICE_NAME, add_omni_servicer
from gateway.service import OmniService
from gateway.servicer import OmniServicer
from gateway.transcribe import TranscribeService
from gateway.transcribe_windows import window_samples

QWEN3_ASR_MIN_SAMPLES = 8000


async def build_gateway(mesh: MeshConfig, model_dir: Path, server: StageServer,
                        stage_token: str = "") -> Callable[[], None]:
    """`stage_token`: sent on every stage call (runtime/stage_auth.py); empty when the stages want none."""
    dial = partial(open_channel, max_message_bytes=mesh.gateway.server.max_message_bytes, token=stage_token,
                   credentials=stage_channel_credentials(mesh.gateway.stage_tls))
    gw = mesh.gateway
    router = ThinkerRouter(mesh.thinker.targets, lambda ep: dial(ep.target, authority=ep.authority),
                           gw.thinker_routing, gw.thinker_routing_margin, server.metrics, gw.stage_timeout_s,
                           gw.thinker_resolve_s)
    await router.start()
    thinker = ThinkerClient(router, server.metrics)
    checkpoint = read_family(model_dir)
    media = build_media_pipeline(mesh, model_dir, checkpoint.thinker, server, dial)
    talker = None
    if mesh.talker.enabled and mesh.talker.address:
        talker = TalkerClient(dial(mesh.talker.address), server.metrics)
    prompts = PromptBuilder.from_dir(model_dir, mesh.gateway.allow_special_tokens)
    service = OmniService(prompts, thinker, media, talker, server.metrics, mesh.gateway.stage_timeout_s,
                          ReasoningMarkers.of(prompts.tokenizer, prompts.template))
    served_inputs = media.served_inputs
    family = checkpoint.family
    info = omni_pb2.OmniInfo(
        gateway=common_pb2.StageInfo(stage="gateway", replica=server.replica, model=mesh.model, build=build_string()),
        model_family=family,
        input_modalities=["text", *sorted(served_inputs)],
        output_modalities=[omni_pb2.MODALITY_TEXT] + ([omni_pb2.MODALITY_AUDIO] if talker else []))
    add = partial(add_omni_servicer, max_request_bytes=mesh.gateway.server.max_message_bytes)
    transcriber = TranscribeService(service, family, mesh.gateway.max_audio_seconds,
                                    stream_window_samples=window_samples(checkpoint.thinker.get("audio_config") or {}))
    server.add_service(add, OmniServicer(service, mesh.gateway, info, transcriber), SERVICE_NAME)
    return lambda: None


def build_media_pipeline(mesh: MeshConfig, model_dir: Path, thinker_config: dict, server: StageServer,
                         dial: Callable[[str], grpc.aio.Channel]) -> MediaPipeline:
    """Media input is served once its encoder stage is enabled and has an address to route to. thinker_config: the
    checkpoint's thinker section (runtime.checkpoint.family.read_family)."""
    gw = mesh.gateway
    vision = audio = vision_cfg = None
    if mesh.vision.enabled and mesh.vision.address:
        vision = VisionClient(dial(mesh.vision.address), server.metrics)
        processing = VisionMediaConfig.from_processing(VisionProcessingConfig.from_checkpoint(model_dir))
        vision_cfg = replace(processing, video_max_frames=min(processing.video_max_frames, gw.max_video_frames),
                             video_fps=gw.video_fps)
    if mesh.audio.enabled and mesh.audio.address:
        audio = AudioClient(dial(mesh.audio.address), server.metrics)
    vision_config = thinker_config.get("vision_config") or {}
    num_deepstack = len(vision_config.get("deepstack_visual_indexes", []))
    return MediaPipeline(vision_cfg, vision, num_deepstack, audio, gw.max_audio_seconds, gw.max_media_bytes,
                         audio_min_samples(model_dir))


def audio_min_samples(model_dir: Path) -> int:
    """Qwen3-ASR's feature extractor zero-pads clips shorter than its `min_length` samples (8000: 0.5 s)."""
    path = model_dir / "preprocessor_config.json"
    raw = json.loads(path.read_text()) if path.exists() else {}
    if raw.get("feature_extractor_type") != "Qwen3ASRFeatureExtractor":
        return 0
    return int(raw.get("min_length", QWEN3_ASR_MIN_SAMPLES))


"""The AuT encoder model: config, host-side batch plan, conv stem, windowed transformer."""
from __future__ import annotations

from runtime.audio_lengths import audio_token_count
from services.audio.model.config import AudioEncoderConfig
from services.audio.model.encoder import AudioEncoder
from services.audio.model.plan import AudioBatchPlan, plan_batch

__all__ = ["AudioBatchPlan", "AudioEncoder", "AudioEncoderConfig", "audio_token_count", "plan_batch"]

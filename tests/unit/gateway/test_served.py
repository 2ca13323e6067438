"""What a deployment serves is decided before any stage is called, with an error that says what to do instead."""
from __future__ import annotations

import asyncio

import pytest

from omnimesh.v1 import omni_pb2
from runtime.config import SamplingDefaults
from runtime.errors import Unimplemented
from runtime.metrics import Metrics
from gateway.chat_input import MediaBytes, chat_input_from_pb
from gateway.media_prep import MediaPipeline
from gateway.service import OmniService


def chat(*parts: omni_pb2.ContentPart, audio_out: bool = False, in_video: bool = False):
    modalities = [omni_pb2.MODALITY_TEXT] + ([omni_pb2.MODALITY_AUDIO] if audio_out else [])
    req = omni_pb2.ChatRequest(messages=[omni_pb2.Message(role="user", content=list(parts))],
                               output_modalities=modalities, use_audio_in_video=in_video)
    return chat_input_from_pb(req, SamplingDefaults())


def service(talker: object | None) -> OmniService:
    return OmniService(prompts=None, thinker=None, media=None, talker=talker, metrics=Metrics("gateway", "t"),
                       stage_timeout_s=1.0)


VIDEO = omni_pb2.ContentPart(video=omni_pb2.Media(data=b"x"))
TEXT = omni_pb2.ContentPart(text="hi")


def test_audio_output_without_a_talker_is_unimplemented() -> None:
    with pytest.raises(Unimplemented, match="output_modalities"):
        service(None).check_served(chat(TEXT, audio_out=True))


def test_a_video_heard_with_its_sound_is_served_for_text_and_speech() -> None:
    service(object()).check_served(chat(VIDEO, TEXT, in_video=True))
    service(object()).check_served(chat(VIDEO, TEXT, audio_out=True, in_video=True))


def test_hearing_a_video_without_an_audio_stage_is_unimplemented() -> None:
    vision_only = MediaPipeline(None, object(), 0, None, 600.0)  # type: ignore[arg-type]
    video = MediaBytes("video", b"x", "", "messages[0].content[0].video")
    with pytest.raises(Unimplemented, match="use_audio_in_video: .* needs the audio stage"):
        asyncio.run(vision_only.decode([video], use_audio_in_video=True))
    audio = MediaBytes("audio", b"x", "", "messages[0].content[1].audio")
    with pytest.raises(Unimplemented, match=r"messages\[0\].content\[1\].audio: audio input is not served .* image, "
                                            r"video\)"):
        asyncio.run(vision_only.decode([video, audio]))

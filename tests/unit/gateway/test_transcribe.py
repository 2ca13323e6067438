"""Transcribe's request checks and how the model's `language <Name><asr_text><text>` answer becomes events."""
from __future__ import annotations

import asyncio

import pytest

from omnimesh.v1 import common_pb2, omni_pb2
from runtime.config import SamplingDefaults
from runtime.errors import InvalidArgument, Unimplemented
from gateway.service import TextEvent
from gateway.transcribe import (
    AnswerSplitter,
    LanguageEvent,
    TranscribeService,
    TranscriptEvent,
    transcribe_input_from_pb,
)

ASR_TEXT_ID = 151704


def request(**fields) -> omni_pb2.TranscribeRequest:
    return omni_pb2.TranscribeRequest(audio=omni_pb2.Media(data=b"RIFF...."), **fields)


def run(splitter: AnswerSplitter, pieces: list[tuple[str, list[int]]]) -> list:
    out = [ev for text, ids in pieces for ev in splitter.feed(TextEvent(text, ids, []))]
    return out + splitter.finish()


def test_detected_language_then_transcript_only() -> None:
    events = run(AnswerSplitter(None, ASR_TEXT_ID), [("language", [11528]), (" English", [6364]),
                                                     ("<asr_text>Mr", [ASR_TEXT_ID, 12275]), (".", [13])])
    assert events == [LanguageEvent("English"), TextEvent("Mr", [12275], []), TextEvent(".", [13], []),
                      TranscriptEvent("English", "Mr.")]


def test_forced_language_is_announced_first_and_every_token_is_transcript() -> None:
    events = run(AnswerSplitter("German", ASR_TEXT_ID), [("Guten", [1]), (" Tag", [2])])
    assert events[0] == LanguageEvent("German") and events[-1] == TranscriptEvent("German", "Guten Tag")


def test_silence_and_an_answer_without_the_marker() -> None:
    assert run(AnswerSplitter(None, ASR_TEXT_ID), [("language None<asr_text>", [1, 2, ASR_TEXT_ID])]) == [
        LanguageEvent(""), TranscriptEvent("", "")]
    assert run(AnswerSplitter(None, ASR_TEXT_ID), [("just text", [5, 6])]) == [
        LanguageEvent(""), TextEvent("just text", [5, 6], []), TranscriptEvent("", "just text")]


def test_request_becomes_the_transcription_chat() -> None:
    job = transcribe_input_from_pb(request(language="en", context="Quilter"), SamplingDefaults())
    assert job.language == "English" and job.chat.continue_final and job.chat.sampling.temperature == 0.0
    assert [t.role for t in job.chat.turns] == ["system", "user", "assistant"]
    assert job.chat.turns[-1].parts == ("language English<asr_text>",)
    plain = transcribe_input_from_pb(request(sampling=common_pb2.SamplingParams(temperature=0.7)), SamplingDefaults())
    assert [t.role for t in plain.chat.turns] == ["user", "assistant"] and plain.chat.sampling.temperature == pytest.approx(0.7)


@pytest.mark.parametrize("req, field", [
    (omni_pb2.TranscribeRequest(), "audio.data"),
    (request(language="xx"), "language"),
    (request(context="w" * 10_001), "context"),
    (request(request_id="r" * 129), "request_id"),
    (request(sampling=common_pb2.SamplingParams(top_p=7)), "sampling.top_p"),
])
def test_bad_fields_are_invalid_argument_naming_them(req: omni_pb2.TranscribeRequest, field: str) -> None:
    with pytest.raises(InvalidArgument, match=rf"^{field}: "):
        transcribe_input_from_pb(req, SamplingDefaults())


def test_an_omni_deployment_does_not_transcribe() -> None:
    job = transcribe_input_from_pb(request(), SamplingDefaults())

    async def first() -> None:
        async for _ in TranscribeService(service=None, family="qwen3-omni").transcribe(job, None):  # type: ignore
            pass

    with pytest.raises(Unimplemented, match="serves qwen3-omni, not a Qwen3-ASR model"):
        asyncio.run(first())


def test_context_over_its_token_cap_is_invalid_argument() -> None:
    class Tokens:
        @staticmethod
        def encode(text: str, allow_special: bool = True) -> list[int]:
            return list(range(len(text.split())))

    class Service:
        prompts = type("Prompts", (), {"tokenizer": Tokens()})()

    job = transcribe_input_from_pb(request(context="w " * 2049), SamplingDefaults())

    async def first() -> None:
        async for _ in TranscribeService(Service(), family="qwen3-asr").transcribe(job, None):  # type: ignore
            pass

    with pytest.raises(InvalidArgument, match=r"^context: is 2049 tokens; at most 2048"):
        asyncio.run(first())


class FakeChat:
    """An OmniService whose chat answers each window with a canned `language <Name><asr_text>` reply."""

    def __init__(self, replies: list[list[tuple[str, list[int]]]]) -> None:
        self.replies = replies
        self.chats: list = []
        tokens = type("Tokens", (), {"token_id": staticmethod(lambda text: ASR_TEXT_ID),
                                     "encode": staticmethod(lambda text, allow_special=True: [])})()
        self.prompts = type("Prompts", (), {"tokenizer": tokens})()

    async def chat(self, chat, timeout):
        from gateway.service import DoneEvent, UsageEvent

        reply = self.replies[len(self.chats)]
        self.chats.append(chat)
        for text, ids in reply:
            yield TextEvent(text, ids, [])
        yield UsageEvent(common_pb2.Usage(prompt_tokens=10, completion_tokens=len(reply)))
        yield DoneEvent(common_pb2.FINISH_REASON_STOP)


def test_long_audio_is_transcribed_window_by_window() -> None:
    import io

    import numpy as np
    import soundfile as sf

    from gateway.long_audio import RATE

    samples = np.full(RATE * 25, 0.1, dtype=np.float32)
    samples[RATE * 9:RATE * 9 + 1600] = 0  # a quiet point before the first 10 s window ends
    buf = io.BytesIO()
    sf.write(buf, samples, RATE, format="WAV", subtype="FLOAT")
    fake = FakeChat([[("language English<asr_text>", [1, ASR_TEXT_ID]), ("one", [5])],
                     [("language German<asr_text>two", [1, ASR_TEXT_ID, 6])],
                     [("language English<asr_text>", [1, ASR_TEXT_ID]), ("three", [7])]])
    job = transcribe_input_from_pb(omni_pb2.TranscribeRequest(audio=omni_pb2.Media(data=buf.getvalue())),
                                   SamplingDefaults())

    async def collect() -> list:
        service = TranscribeService(fake, family="qwen3-asr", window_s=10.0)  # type: ignore[arg-type]
        return [ev async for ev in service.transcribe(job, None)]

    events = asyncio.run(collect())
    assert [ev for ev in events if isinstance(ev, LanguageEvent)] == [LanguageEvent("English")]
    assert [ev.token_ids for ev in events if isinstance(ev, TextEvent)] == [[5], [6], [7]]
    assert TranscriptEvent("English", "one two three") in events
    assert events[-2].usage.prompt_tokens == 30 and events[-1].finish_reason == common_pb2.FINISH_REASON_STOP
    lengths = [sf.info(io.BytesIO(c.turns[-2].parts[0].data)).frames for c in fake.chats]
    assert lengths[0] == RATE * 9 + 800 and sum(lengths) == samples.shape[0] and max(lengths) <= RATE * 10
    assert [c.request_id for c in fake.chats] == [f"{job.chat.request_id}-{i}" for i in range(3)]


def test_cut_points_land_in_quiet_and_bound_every_piece() -> None:
    import numpy as np

    from gateway.long_audio import RATE, cut_points, header_seconds, wav_bytes

    rng = np.random.default_rng(0)
    samples = rng.standard_normal(RATE * 61).astype(np.float32)
    samples[RATE * 27:RATE * 27 + 3200] *= 1e-3
    starts = cut_points(samples, window_s=30.0, search_s=5.0)
    assert starts[:2] == [0, RATE * 27 + 800] and all(b - a <= RATE * 30 for a, b in zip(starts, starts[1:]))
    assert samples.shape[0] - starts[-1] <= RATE * 30
    assert cut_points(samples[:RATE * 30], 30.0) == [0]
    assert header_seconds(wav_bytes(samples)) == 61.0 and header_seconds(b"junk") == 0.0

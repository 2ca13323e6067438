"""chat_input_from_pb: a valid request in domain form, and a named InvalidArgument for every bad field."""
from __future__ import annotations

import pytest

from omnimesh.v1 import common_pb2, omni_pb2
from gateway.chat_input import ChatInput, MediaBytes, chat_input_from_pb
from runtime.config import SamplingDefaults
from runtime.errors import InvalidArgument

DEFAULTS = SamplingDefaults()


def text(t: str) -> omni_pb2.ContentPart:
    return omni_pb2.ContentPart(text=t)


def media(kind: str, data: bytes = b"\x89PNG", mime: str = "") -> omni_pb2.ContentPart:
    return omni_pb2.ContentPart(**{kind: omni_pb2.Media(data=data, mime_type=mime)})


def request(*messages: omni_pb2.Message, **kw: object) -> omni_pb2.ChatRequest:
    return omni_pb2.ChatRequest(messages=list(messages), **kw)


def user(*parts: omni_pb2.ContentPart) -> omni_pb2.Message:
    return omni_pb2.Message(role="user", content=list(parts))


def bad(req: omni_pb2.ChatRequest) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as info:
        chat_input_from_pb(req, DEFAULTS)
    return info.value


def test_a_full_request() -> None:
    req = request(
        omni_pb2.Message(role="system", content=[text("be brief")]),
        user(text("what is this?"), media("image", b"img", "image/png"), media("audio", b"wav"),
             media("video", b"mp4")),
        omni_pb2.Message(role="assistant", content=[text("a cat")]),
        request_id="req-1", voice="ethan", return_codes=True, use_audio_in_video=True,
        output_modalities=[omni_pb2.MODALITY_TEXT, omni_pb2.MODALITY_AUDIO],
        sampling=common_pb2.SamplingParams(temperature=0.0, seed=7),
    )
    inp = chat_input_from_pb(req, DEFAULTS)
    assert isinstance(inp, ChatInput) and inp.request_id == "req-1"
    assert [t.role for t in inp.turns] == ["system", "user", "assistant"]
    assert inp.turns[0].parts == ("be brief",)
    assert inp.turns[1].parts[0] == "what is this?"
    assert inp.media == [
        MediaBytes("image", b"img", "image/png", "messages[1].content[1].image"),
        MediaBytes("audio", b"wav", "", "messages[1].content[2].audio"),
        MediaBytes("video", b"mp4", "", "messages[1].content[3].video"),
    ]
    assert inp.want_audio and inp.voice == "ethan" and inp.return_codes and inp.use_audio_in_video
    assert inp.sampling.is_greedy and inp.sampling.seed == 7


def test_defaults_text_only_and_a_fresh_request_id() -> None:
    a = chat_input_from_pb(request(user(text("hi"))), DEFAULTS)
    b = chat_input_from_pb(request(user(text("hi"))), DEFAULTS)
    assert not a.want_audio and a.voice == "" and not a.return_codes and not a.use_audio_in_video
    assert a.request_id and a.request_id != b.request_id
    assert a.sampling.temperature == pytest.approx(DEFAULTS.temperature) and a.sampling.top_k == DEFAULTS.top_k
    assert a.media == []


def test_audio_only_output_still_counts_as_wanting_audio() -> None:
    req = request(user(text("hi")), output_modalities=[omni_pb2.MODALITY_AUDIO])
    assert chat_input_from_pb(req, DEFAULTS).want_audio


def test_empty_text_beside_media_is_fine() -> None:
    inp = chat_input_from_pb(request(user(text(""), media("image"))), DEFAULTS)
    assert inp.turns[0].parts[0] == "" and len(inp.media) == 1


def test_no_messages() -> None:
    err = bad(request())
    assert err.violations[0].field == "messages" and "is empty" in err.violations[0].description


@pytest.mark.parametrize("role", ["", "bot", "User", "tool"])
def test_bad_role(role: str) -> None:
    err = bad(request(user(text("ok")), omni_pb2.Message(role=role, content=[text("x")])))
    assert err.violations[0].field == "messages[1].role"
    assert repr(role) in err.message and "system, user, assistant" in err.message


def test_empty_content() -> None:
    err = bad(request(omni_pb2.Message(role="user")))
    assert err.violations[0].field == "messages[0].content" and "at least one content part" in err.message


def test_a_part_with_nothing_set() -> None:
    err = bad(request(user(text("a"), omni_pb2.ContentPart())))
    assert err.violations[0].field == "messages[0].content[1]"
    assert "sets none of text, image, audio, video" in err.message


@pytest.mark.parametrize("kind", ["image", "audio", "video"])
def test_media_without_bytes(kind: str) -> None:
    err = bad(request(user(text("look"), media(kind, b"", "image/png"))))
    assert err.violations[0].field == f"messages[0].content[1].{kind}.data"
    assert "send the file's bytes" in err.message


def test_only_empty_text() -> None:
    err = bad(request(user(text(""), text(""))))
    assert err.violations[0].field == "messages[0].content" and "only empty text" in err.message


def test_unspecified_output_modality() -> None:
    err = bad(request(user(text("hi")), output_modalities=[omni_pb2.MODALITY_TEXT, omni_pb2.MODALITY_UNSPECIFIED]))
    assert err.violations[0].field == "output_modalities"


def test_bad_sampling_is_named_under_sampling() -> None:
    err = bad(request(user(text("hi")), sampling=common_pb2.SamplingParams(top_p=2.0)))
    assert err.violations[0].field == "sampling.top_p"


def test_the_first_bad_message_is_reported() -> None:
    err = bad(request(user(text("ok")), omni_pb2.Message(role="user"), omni_pb2.Message(role="x")))
    assert err.violations[0].field == "messages[1].content"


@pytest.mark.parametrize(("req", "field", "words"), [
    (request(*[user(text("a"))] * 1025), "messages", "has 1025 messages; at most 1024"),
    (request(user(*[media("image")] * 65)), "messages", "hold 65 media items; at most 64 in all"),
    (request(user(text("a" * 600_000)), user(text("b" * 600_000))), "messages",
     "hold 1200000 characters of text; at most 1048576 in all"),
    (request(user(text("a")), output_modalities=[1, 2, 1]), "output_modalities", "has 3 entries; at most 2"),
    (request(user(text("a")), voice="v" * 65), "voice", "has 65 characters; at most 64"),
    (request(user(text("a")), request_id="r" * 129), "request_id", "has 129 characters; at most 128"),
    (request(user(media("audio", mime="a" * 129))), "messages[0].content[0].audio.mime_type",
     "has 129 characters; at most 128"),
])
def test_every_string_and_repeated_field_has_a_cap(req: omni_pb2.ChatRequest, field: str, words: str) -> None:
    err = bad(req)
    assert [v.field for v in err.violations] == [field]
    assert words in err.message and len(err.message) < 120


def test_a_long_role_is_echoed_as_a_prefix() -> None:
    err = bad(request(omni_pb2.Message(role="x" * 100_000, content=[text("a")])))
    assert err.message == (f"messages[0].role: is {'x' * 32!r}... (100000 characters); must be one of system, user, "
                           "assistant")


@pytest.mark.parametrize(("speech", "field"), [
    (common_pb2.SamplingParams(temperature=float("inf")), "speech_sampling.temperature"),
    (common_pb2.SamplingParams(top_p=1.5), "speech_sampling.top_p"),
    (common_pb2.SamplingParams(logprobs=True), "speech_sampling.logprobs"),
])
def test_speech_sampling_is_checked_with_the_request(speech: common_pb2.SamplingParams, field: str) -> None:
    assert [v.field for v in bad(request(user(text("a")), speech_sampling=speech)).violations] == [field]
    ok = chat_input_from_pb(request(user(text("a")), speech_sampling=common_pb2.SamplingParams(
        temperature=0.0, top_k=5, top_p=0.5, repetition_penalty=1.1, seed=3, max_tokens=40)), DEFAULTS)
    assert ok.speech_sampling is not None and ok.speech_sampling.max_tokens == 40

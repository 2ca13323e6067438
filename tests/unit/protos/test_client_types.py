"""The client's plain types: requests built from Python values, events read from protobuf, audio as numpy and WAV."""
from __future__ import annotations

import io
import wave

import numpy as np
import pytest

from omnimesh import Audio, AudioDelta, Image, Message, Reply, Sampling, TextDelta
from omnimesh.events import event_from_pb
from omnimesh.messages import ChatOptions, chat_request
from omnimesh.v1 import common_pb2, omni_pb2


def test_request_keeps_parts_in_order_and_sets_only_given_sampling_fields() -> None:
    req = chat_request([Message.system("Be brief."), Message.user(Image(b"png", "image/png"), "What is it?")],
                       Sampling(max_tokens=8, top_logprobs=3, stop=("x",)), ChatOptions(speak=True, voice="ethan"))
    assert [m.role for m in req.messages] == ["system", "user"]
    assert [p.WhichOneof("part") for p in req.messages[1].content] == ["image", "text"]
    assert req.sampling.max_tokens == 8 and req.sampling.logprobs and req.sampling.top_logprobs == 3
    assert not req.sampling.HasField("temperature") and list(req.sampling.stop) == ["x"]
    assert list(req.output_modalities) == [omni_pb2.MODALITY_TEXT, omni_pb2.MODALITY_AUDIO] and req.voice == "ethan"
    assert not req.HasField("speech_sampling")


def test_dict_messages_and_a_bare_string() -> None:
    req = chat_request({"role": "user", "content": [Audio(b"wav"), "Transcribe"]}, Sampling(), ChatOptions())
    assert [p.WhichOneof("part") for p in req.messages[0].content] == ["audio", "text"]
    assert chat_request("Hi", Sampling(), ChatOptions()).messages[0].content[0].text == "Hi"
    with pytest.raises(TypeError, match=r"messages\[0\]"):
        chat_request([42], Sampling(), ChatOptions())
    with pytest.raises(TypeError, match=r"messages\[0\].content\[0\]"):
        chat_request({"role": "user", "content": [b"raw"]}, Sampling(), ChatOptions())


def test_audio_event_as_numpy_and_wav() -> None:
    pcm = np.array([0, 16384, -32768, 32767], dtype="<i2")
    event = event_from_pb(omni_pb2.ChatEvent(audio=common_pb2.AudioChunk(pcm16=pcm.tobytes(), sample_rate=24000)))
    assert isinstance(event, AudioDelta)
    assert event.samples.tolist() == pcm.tolist()
    assert event.float32().tolist() == [0.0, 0.5, -1.0, 32767 / 32768]
    with wave.open(io.BytesIO(event.wav())) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (24000, 1, 2)
        assert w.readframes(4) == pcm.tobytes()


def test_logprob_token_text_replaces_a_partial_character() -> None:
    lp = common_pb2.TokenLogprob(token_id=5, logprob=-0.5, token=b"\xe5\x9c",
                                 top=[common_pb2.TopLogprob(token_id=6, logprob=-0.1, token=b" hi")])
    event = event_from_pb(omni_pb2.ChatEvent(text=omni_pb2.TextDelta(text="", token_ids=[5], logprobs=[lp])))
    assert isinstance(event, TextDelta)
    (got,) = event.logprobs
    assert got.token == "\ufffd" and got.bytes == b"\xe5\x9c" and got.top[0].token == " hi"


def test_reply_gathers_audio_and_text() -> None:
    reply = Reply()
    for i, text in enumerate(("a", "b")):
        reply.add(TextDelta(text, (i,)))
        reply.add(AudioDelta(np.full(3, i, dtype="<i2").tobytes(), 24000, i))
    assert reply.text == "ab" and reply.token_ids == [0, 1] and reply.audio.tolist() == [0, 0, 0, 1, 1, 1]
    assert reply.wav().startswith(b"RIFF")

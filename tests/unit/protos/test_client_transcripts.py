"""The client's transcription types: the request from Python values, events read from protobuf, a reply gathered."""
from __future__ import annotations

from pathlib import Path

from omnimesh import Audio, Language, Sampling, TextDelta, Transcript, TranscriptReply
from omnimesh.events import Done, Usage
from omnimesh.transcripts import transcribe_request, transcript_event_from_pb
from omnimesh.v1 import common_pb2, omni_pb2


def test_request_from_bytes_path_or_audio(tmp_path: Path) -> None:
    req = transcribe_request(b"wav", "en", "Quilter", Sampling(max_tokens=9), "r1")
    assert (req.audio.data, req.language, req.context, req.request_id) == (b"wav", "en", "Quilter", "r1")
    assert req.sampling.max_tokens == 9 and not req.sampling.HasField("temperature")
    (tmp_path / "a.wav").write_bytes(b"RIFF")
    assert transcribe_request(tmp_path / "a.wav", "", "", Sampling(), "").audio.mime_type in ("audio/x-wav",
                                                                                           "audio/wav")
    assert transcribe_request(Audio(b"x", "audio/flac"), "", "", Sampling(), "").audio.mime_type == "audio/flac"


def test_events_and_reply() -> None:
    pbs = [omni_pb2.TranscribeEvent(language="English"),
           omni_pb2.TranscribeEvent(text=omni_pb2.TextDelta(text="Hi", token_ids=[1, 2])),
           omni_pb2.TranscribeEvent(transcript=omni_pb2.Transcript(language="English", text="Hi")),
           omni_pb2.TranscribeEvent(usage=common_pb2.Usage(prompt_tokens=40, completion_tokens=2)),
           omni_pb2.TranscribeEvent(done=omni_pb2.Done(finish_reason=common_pb2.FINISH_REASON_STOP))]
    events = [transcript_event_from_pb(pb) for pb in pbs]
    assert events[0] == Language("English") and isinstance(events[1], TextDelta)
    assert events[2] == Transcript("English", "Hi") and isinstance(events[3], Usage) and events[4] == Done("stop")
    reply = TranscriptReply()
    for event in events:
        reply.add(event)
    assert (reply.language, reply.text, reply.token_ids, reply.finish_reason) == ("English", "Hi", [1, 2], "stop")

"""`POST /v1/audio/speech`: text read aloud by the Omni model's talker through the gateway."""
from __future__ import annotations

import base64
import uuid
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from omnimesh import AudioDelta, Event, Message, OmnimeshError, Reply, Sampling, Usage
from http_front.audio_codec import MIME_TYPES, encode_audio
from http_front.disconnect import unless_client_leaves
from http_front.errors import RequestError, grpc_error_body
from http_front.gateway import api_key, client
from http_front.schemas import SpeechRequest
from http_front.sse import collect, prepend, sse

router = APIRouter()

READ_ALOUD = "Read the user's text aloud exactly as written. Say nothing else."


@router.post("/v1/audio/speech")
async def speech(body: SpeechRequest, request: Request) -> Response:
    if body.speed != 1.0:
        raise RequestError(f"speed is {body.speed}; this server speaks at 1.0 only", "speed")
    system = READ_ALOUD + (f" {body.instructions}" if body.instructions else "")
    events = client(request).chat_stream(
        [Message.system(system), Message.user(body.input)], speak=True, voice=body.voice,
        sampling=Sampling(max_tokens=body.max_tokens), request_id=uuid.uuid4().hex, api_key=api_key(request))
    # a request the gateway refuses is an HTTP error, not a failing stream
    first = await unless_client_leaves(request, anext(events, None))
    if body.stream_format == "sse":
        return StreamingResponse(_speech_events(first, events, body.response_format), media_type="text/event-stream")
    if body.response_format == "pcm":  # raw samples stream as they are spoken
        return StreamingResponse(_pcm_chunks(first, events), media_type=MIME_TYPES["pcm"])
    reply = await unless_client_leaves(request, collect(Reply(), prepend(first, events)))
    audio = encode_audio(reply.pcm16, reply.sample_rate, body.response_format)
    return Response(audio, media_type=MIME_TYPES[body.response_format])


async def _pcm_chunks(first: Event | None, events: AsyncIterator[Event]) -> AsyncIterator[bytes]:
    async for event in prepend(first, events):
        if isinstance(event, AudioDelta):
            yield event.pcm16


async def _speech_events(first: Event | None, events: AsyncIterator[Event], fmt: str) -> AsyncIterator[str]:
    """`speech.audio.delta` events (base64; pcm as it is spoken, other formats as one whole file at the end), then
    `speech.audio.done` with the usage."""
    usage, pcm, rate = None, bytearray(), 24_000
    try:
        async for event in prepend(first, events):
            if isinstance(event, AudioDelta) and fmt == "pcm":
                yield sse({"type": "speech.audio.delta", "audio": base64.b64encode(event.pcm16).decode()})
            elif isinstance(event, AudioDelta):
                pcm += event.pcm16
                rate = event.sample_rate
            elif isinstance(event, Usage):
                usage = io_token_usage(event)
    except OmnimeshError as err:
        yield sse(grpc_error_body(err)[1])
        return
    if fmt != "pcm":
        whole = encode_audio(bytes(pcm), rate, fmt)
        yield sse({"type": "speech.audio.delta", "audio": base64.b64encode(whole).decode()})
    yield sse({"type": "speech.audio.done", "usage": usage})


def io_token_usage(u: Usage) -> dict:
    """Token counts as the audio endpoints name them (input/output, not prompt/completion)."""
    return {"input_tokens": u.prompt_tokens, "output_tokens": u.completion_tokens,
            "total_tokens": u.prompt_tokens + u.completion_tokens}

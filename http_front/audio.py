"""`POST /v1/audio/speech` (text read aloud) and `POST /v1/audio/transcriptions` (speech to text), both answered by
the Omni model through the gateway."""
from __future__ import annotations

import base64
import uuid
from collections.abc import AsyncIterator

from fastapi import APIRouter, Form, Request, UploadFile
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from omnimesh import Audio, AudioDelta, Event, Message, OmnimeshError, Reply, Sampling, TextDelta, Usage
from http_front.audio_codec import MIME_TYPES, encode_audio
from http_front.errors import RequestError, grpc_error_body
from http_front.gateway import api_key, client
from http_front.schemas import SpeechRequest
from http_front.sse import prepend, sse

router = APIRouter()

READ_ALOUD = "Read the user's text aloud exactly as written. Say nothing else."
TRANSCRIBE = "Transcribe the audio into text. Answer with the transcript only."
TRANSCRIPT_FORMATS = ("json", "text")


@router.post("/v1/audio/speech")
async def speech(body: SpeechRequest, request: Request) -> Response:
    if body.speed != 1.0:
        raise RequestError(f"speed is {body.speed}; this server speaks at 1.0 only", "speed")
    system = READ_ALOUD + (f" {body.instructions}" if body.instructions else "")
    events = client(request).chat_stream(
        [Message.system(system), Message.user(body.input)], speak=True, voice=body.voice,
        sampling=Sampling(max_tokens=body.max_tokens), request_id=uuid.uuid4().hex, api_key=api_key(request))
    first = await anext(events, None)  # a request the gateway refuses is an HTTP error, not a failing stream
    if body.stream_format == "sse":
        return StreamingResponse(_speech_events(first, events, body.response_format), media_type="text/event-stream")
    if body.response_format == "pcm":  # raw samples stream as they are spoken
        return StreamingResponse(_pcm_chunks(first, events), media_type=MIME_TYPES["pcm"])
    reply = Reply()
    async for event in prepend(first, events):
        reply.add(event)
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
                usage = _usage(event)
    except OmnimeshError as err:
        yield sse(grpc_error_body(err)[1])
        return
    if fmt != "pcm":
        whole = encode_audio(bytes(pcm), rate, fmt)
        yield sse({"type": "speech.audio.delta", "audio": base64.b64encode(whole).decode()})
    yield sse({"type": "speech.audio.done", "usage": usage})


def _usage(u: Usage) -> dict:
    return {"input_tokens": u.prompt_tokens, "output_tokens": u.completion_tokens,
            "total_tokens": u.prompt_tokens + u.completion_tokens}


@router.post("/v1/audio/transcriptions")
async def transcriptions(request: Request, file: UploadFile, model: str = Form(""), language: str = Form(""),
                         prompt: str = Form(""), response_format: str = Form("json"),
                         temperature: float | None = Form(None), stream: bool = Form(False),
                         max_tokens: int | None = Form(None)) -> Response:
    if response_format not in TRANSCRIPT_FORMATS:
        raise RequestError(f"response_format is {response_format!r}; this server writes "
                           f"{' or '.join(TRANSCRIPT_FORMATS)}", "response_format")
    instruction = TRANSCRIBE + (f" The speech is in {language}." if language else "") \
        + (f" Context: {prompt}" if prompt else "")
    messages = [Message.user(Audio(await file.read(), file.content_type or ""), instruction)]
    sampling = Sampling(temperature=temperature, max_tokens=max_tokens)
    kwargs = {"sampling": sampling, "request_id": uuid.uuid4().hex, "api_key": api_key(request)}
    if stream:
        events = client(request).chat_stream(messages, **kwargs)
        first = await anext(events, None)  # a bad request is an HTTP error, not a stream that fails
        return StreamingResponse(_transcript_events(first, events), media_type="text/event-stream")
    reply = await client(request).chat(messages, **kwargs)
    if response_format == "text":
        return PlainTextResponse(reply.text)
    usage = {"type": "tokens", **_usage(reply.usage)} if reply.usage else None
    return JSONResponse({"text": reply.text, "usage": usage})


async def _transcript_events(first: Event | None, events: AsyncIterator[Event]) -> AsyncIterator[str]:
    """`transcript.text.delta` per piece of text, then `transcript.text.done` with the whole text."""
    text, usage = "", None
    try:
        async for event in prepend(first, events):
            if isinstance(event, TextDelta) and event.text:
                text += event.text
                yield sse({"type": "transcript.text.delta", "delta": event.text})
            elif isinstance(event, Usage):
                usage = {"type": "tokens", **_usage(event)}
    except OmnimeshError as err:
        yield sse(grpc_error_body(err)[1])
        return
    yield sse({"type": "transcript.text.done", "text": text, "usage": usage})

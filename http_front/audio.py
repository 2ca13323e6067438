"""`POST /v1/audio/speech` (text read aloud) and `POST /v1/audio/transcriptions` (speech to text), both answered by
the Omni model through the gateway."""
from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator

from fastapi import APIRouter, Form, Request, UploadFile
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from omnimesh import Audio, Message, OmnimeshError, Sampling, TextDelta, Usage
from http_front.audio_codec import MIME_TYPES, encode_audio
from http_front.errors import RequestError, grpc_error_body
from http_front.gateway import api_key, client
from http_front.schemas import SpeechRequest

router = APIRouter()

READ_ALOUD = "Read the user's text aloud exactly as written. Say nothing else."
TRANSCRIBE = "Transcribe the audio into text. Answer with the transcript only."
TRANSCRIPT_FORMATS = ("json", "text")


@router.post("/v1/audio/speech")
async def speech(body: SpeechRequest, request: Request) -> Response:
    if body.speed != 1.0:
        raise RequestError(f"speed is {body.speed}; this server speaks at 1.0 only", "speed")
    system = READ_ALOUD + (f" {body.instructions}" if body.instructions else "")
    reply = await client(request).chat(
        [Message.system(system), Message.user(body.input)], speak=True, voice=body.voice,
        sampling=Sampling(max_tokens=body.max_tokens), request_id=uuid.uuid4().hex, api_key=api_key(request))
    audio = encode_audio(reply.pcm16, reply.sample_rate, body.response_format)
    return Response(audio, media_type=MIME_TYPES[body.response_format])


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
    usage = reply.usage
    return JSONResponse({"text": reply.text, "usage": {
        "type": "tokens", "input_tokens": usage.prompt_tokens if usage else 0,
        "output_tokens": usage.completion_tokens if usage else 0,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens if usage else 0}})


async def _transcript_events(first: object, events: AsyncIterator) -> AsyncIterator[str]:
    """`transcript.text.delta` per piece of text, then `transcript.text.done` with the whole text."""
    text, usage = "", None
    try:
        event = first
        while event is not None:
            if isinstance(event, TextDelta) and event.text:
                text += event.text
                yield _sse({"type": "transcript.text.delta", "delta": event.text})
            elif isinstance(event, Usage):
                usage = {"type": "tokens", "input_tokens": event.prompt_tokens,
                         "output_tokens": event.completion_tokens,
                         "total_tokens": event.prompt_tokens + event.completion_tokens}
            event = await anext(events, None)
    except OmnimeshError as err:
        yield _sse(grpc_error_body(err)[1])
        return
    yield _sse({"type": "transcript.text.done", "text": text, "usage": usage})


def _sse(obj: dict) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"

"""`POST /v1/audio/transcriptions` (speech to text): a Qwen3-ASR deployment answers through the gateway's Transcribe
call; any other model hears the clip in a chat turn that asks for its transcript. Both answer as OpenAI does: JSON
or plain text, or with `stream=true` `transcript.text.delta` events and one `transcript.text.done`."""
from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

from fastapi import APIRouter, Form, Request, UploadFile
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from omnimesh import Audio, Done, Message, OmnimeshError, Sampling, TextDelta, Transcript, Usage
from http_front.audio import io_token_usage
from http_front.disconnect import unless_client_leaves
from http_front.errors import RequestError, grpc_error_body
from http_front.gateway import api_key, client, mesh_info
from http_front.server_timing import server_timing
from http_front.sse import collect, prepend, sse

router = APIRouter()

TRANSCRIBE = "Transcribe the audio into text. Answer with the transcript only."
TRANSCRIPT_FORMATS = ("json", "text")


@router.post("/v1/audio/transcriptions")
async def transcriptions(request: Request, file: UploadFile, model: str = Form(""), language: str = Form(""),
                         prompt: str = Form(""), response_format: str = Form("json"),
                         temperature: float | None = Form(None), stream: bool = Form(False),
                         max_tokens: int | None = Form(None)) -> Response:
    """`language`: an ISO code (Qwen3-ASR also takes the name, e.g. "English"); `prompt`: context for the model
    (hotwords, names); `max_tokens` (not an OpenAI field): the most transcript tokens."""
    if response_format not in TRANSCRIPT_FORMATS:
        raise RequestError(f"response_format is {response_format!r}; this server writes "
                           f"{' or '.join(TRANSCRIPT_FORMATS)}", "response_format")
    audio = Audio(await file.read(), file.content_type or "")
    kwargs = {"sampling": Sampling(temperature=temperature, max_tokens=max_tokens), "request_id": uuid.uuid4().hex,
              "api_key": api_key(request)}
    if (await mesh_info(request)).transcribes:
        events = client(request).transcribe_stream(audio, language=language, context=prompt, **kwargs)
    else:
        events = client(request).chat_stream([Message.user(audio, chat_instruction(language, prompt))], **kwargs)
    # a request the gateway refuses is an HTTP error, not a stream that fails
    first = await unless_client_leaves(request, anext(events, None))
    if stream:
        return StreamingResponse(_transcript_events(first, events), media_type="text/event-stream")
    result = await unless_client_leaves(request, collect(Result(), prepend(first, events)))
    headers = server_timing(result.timing)
    if response_format == "text":
        return PlainTextResponse(result.text, headers=headers)
    return JSONResponse({"text": result.text, "usage": result.usage}, headers=headers)


def chat_instruction(language: str, prompt: str) -> str:
    """What a chat model is asked, beside the clip, for its transcript."""
    return TRANSCRIBE + (f" The speech is in {language}." if language else "") + (f" Context: {prompt}" if prompt
                                                                                   else "")


class Result:
    """A transcription gathered from its events: a Transcript event (Qwen3-ASR) is the whole text; a chat's
    answer is its deltas joined."""

    def __init__(self) -> None:
        self.deltas: list[str] = []
        self.transcript: str | None = None
        self.usage: dict[str, Any] | None = None
        self.timing: Mapping[str, float] = {}

    def add(self, event: object) -> str:
        """The event's new text, if it has any."""
        if isinstance(event, TextDelta) and event.text:
            self.deltas.append(event.text)
            return event.text
        if isinstance(event, Transcript):
            self.transcript = event.text
        elif isinstance(event, Usage):
            self.usage = {"type": "tokens", **io_token_usage(event)}
        elif isinstance(event, Done):
            self.timing = event.timing
        return ""

    @property
    def text(self) -> str:
        return self.transcript if self.transcript is not None else "".join(self.deltas)


async def _transcript_events(first: object, events: AsyncIterator[object]) -> AsyncIterator[str]:
    """`transcript.text.delta` per piece of text as it is decoded, then `transcript.text.done` with the whole text
    and the usage; a failure mid-stream is an error event, the last."""
    result = Result()
    try:
        async for event in prepend(first, events):
            delta = result.add(event)
            if delta:
                yield sse({"type": "transcript.text.delta", "delta": delta})
    except OmnimeshError as err:
        yield sse(grpc_error_body(err)[1])
        return
    yield sse({"type": "transcript.text.done", "text": result.text, "usage": result.usage})

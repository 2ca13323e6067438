"""An omnimesh answer as OpenAI chat completion JSON: one object, or `chat.completion.chunk` server-sent events."""
from __future__ import annotations

import base64
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from omnimesh import (AudioDelta, AudioFailed, Done, Event, OmnimeshError, ReasoningDelta, Reply, TextDelta,
                      TokenLogprob, Usage)
from http_front.audio_codec import encode_audio
from http_front.errors import grpc_error_body
from http_front.sse import prepend, sse

log = logging.getLogger(__name__)

AUDIO_TTL_S = 3600  # `expires_at` of an audio answer: nothing is stored, so a client must not count on it later


@dataclass(frozen=True)
class Completion:
    """What every object of one answer repeats."""

    id: str
    created: int
    model: str
    speak: bool
    audio_format: str
    logprobs: bool
    include_usage: bool

    def audio_id(self) -> str:
        return "audio_" + self.id.removeprefix("chatcmpl-")


def logprobs_json(lps: Sequence[TokenLogprob]) -> dict:
    return {"content": [{"token": lp.token, "logprob": lp.logprob, "bytes": list(lp.bytes),
                         "top_logprobs": [{"token": t.token, "logprob": t.logprob, "bytes": list(t.bytes)}
                                          for t in lp.top]} for lp in lps]}


def usage_json(usage: Usage | None) -> dict | None:
    if usage is None:
        return None
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.prompt_tokens + usage.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cached_prompt_tokens}}


def completion_json(c: Completion, reply: Reply) -> dict:
    """The whole answer; with audio, the text is the audio's transcript and `content` is null, as OpenAI answers."""
    message: dict = {"role": "assistant", "content": None if c.speak else reply.text}
    if reply.reasoning:  # a Thinking model's thoughts, as vLLM and DeepSeek's APIs name them
        message["reasoning_content"] = reply.reasoning
    if c.speak:
        message["audio"] = {"id": c.audio_id(), "expires_at": c.created + AUDIO_TTL_S, "transcript": reply.text,
                            "data": base64.b64encode(encode_audio(reply.pcm16, reply.sample_rate,
                                                                  c.audio_format)).decode()}
    if reply.audio_failed is not None:
        log.warning("request %s: the speech stopped early: %s", c.id, reply.audio_failed.message)
    choice = {"index": 0, "message": message, "finish_reason": reply.finish_reason,
              "logprobs": logprobs_json(reply.logprobs) if c.logprobs else None}
    return {"id": c.id, "object": "chat.completion", "created": c.created, "model": c.model, "choices": [choice],
            "usage": usage_json(reply.usage)}


def _chunk(c: Completion, delta: dict, finish_reason: str | None = None, logprobs: dict | None = None) -> dict:
    return {"id": c.id, "object": "chat.completion.chunk", "created": c.created, "model": c.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}]}


def chunk_for(c: Completion, event: Event) -> dict | None:
    """The chunk one event becomes (None: it shows only in the last chunks)."""
    if isinstance(event, TextDelta):
        if not event.text and not event.logprobs:
            return None
        delta = {"audio": {"id": c.audio_id(), "transcript": event.text}} if c.speak else {"content": event.text}
        return _chunk(c, delta, logprobs=logprobs_json(event.logprobs) if c.logprobs else None)
    if isinstance(event, ReasoningDelta):
        if not event.text and not event.logprobs:
            return None
        return _chunk(c, {"reasoning_content": event.text},
                      logprobs=logprobs_json(event.logprobs) if c.logprobs else None)
    if isinstance(event, AudioDelta):
        return _chunk(c, {"audio": {"id": c.audio_id(), "data": base64.b64encode(event.pcm16).decode()}})
    if isinstance(event, AudioFailed):
        log.warning("request %s: the speech stopped early: %s", c.id, event.message)
    return None


async def sse_stream(c: Completion, first: Event | None, events: AsyncIterator[Event]) -> AsyncIterator[str]:
    """Server-sent events: a role chunk, a chunk per delta, the finish chunk, usage if asked, then `[DONE]`. A
    failure after the first event ends the stream with an `error` event (the OpenAI SDK raises it)."""
    yield sse(_chunk(c, {"role": "assistant", "content": "" if not c.speak else None}))
    usage: Usage | None = None
    try:
        async for event in prepend(first, events):
            if isinstance(event, Usage):
                usage = event
            elif isinstance(event, Done):
                yield sse(_chunk(c, {}, finish_reason=event.finish_reason))
            elif (chunk := chunk_for(c, event)) is not None:
                yield sse(chunk)
    except OmnimeshError as err:
        yield sse(grpc_error_body(err)[1])
        return
    if c.include_usage:
        yield sse({"id": c.id, "object": "chat.completion.chunk", "created": c.created, "model": c.model,
                    "choices": [], "usage": usage_json(usage)})
    yield "data: [DONE]\n\n"

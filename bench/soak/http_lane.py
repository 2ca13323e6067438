"""The soak's HTTP lane: the same mix as the gRPC lane, through the HTTP front with the official `openai` package
(media as data URLs, speech as streamed pcm16, some answers whole; on Qwen3-ASR transcriptions too), where the
client's early exits are a closed connection, which the front must turn into a cancelled gRPC call or the gateway's
open streams pile up."""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import openai

from gateway.cli.remote_bench.workloads import Request

LATE_S = 0.5  # a late request's deadline: the client gives up on it then


async def one(client: openai.AsyncOpenAI, request: Request, *, late: bool, cancel: bool, stream: bool,
              use_audio_in_video: bool, seed: int) -> str:
    """A chat completion; how it ended: `http_OK`, `http_CANCELLED` (the client closed it: after its first chunk, or
    at its deadline), or `http_<status>` for an HTTP error."""
    kwargs: dict[str, Any] = {
        "model": "omni", "messages": request.openai_messages(), "max_tokens": 400 if late else 8, "seed": seed,
        "extra_body": {"ignore_eos": late, "use_audio_in_video": use_audio_in_video}}
    if request.speak:
        kwargs |= {"modalities": ["text", "audio"], "audio": {"voice": "", "format": "pcm16" if stream else "wav"}}
    return await _ended(client.chat.completions.create, kwargs, "http", late=late, cancel=cancel, stream=stream)


async def transcription(client: openai.AsyncOpenAI, wav: bytes, *, late: bool, cancel: bool, stream: bool) -> str:
    """A clip through `/v1/audio/transcriptions` (late: 400 tokens that its deadline cuts short); how it ended, as
    `one` says it but as `http_transcribe_*`."""
    kwargs: dict[str, Any] = {"model": "asr", "file": ("clip.wav", wav, "audio/wav"), "temperature": 0.0,
                              "extra_body": {"max_tokens": 400 if late else 8}}
    return await _ended(client.audio.transcriptions.create, kwargs, "http_transcribe", late=late, cancel=cancel,
                        stream=stream)


async def _ended(create: Callable[..., Awaitable[Any]], kwargs: dict[str, Any], label: str, *, late: bool,
                 cancel: bool, stream: bool) -> str:
    """One call answered whole, or streamed and (cancel) left after its first event; late ones end at LATE_S."""
    async def run() -> str:
        if not stream:
            await create(**kwargs)
            return f"{label}_OK"
        events = await create(stream=True, **kwargs)
        async with events:  # leaving early closes the connection
            async for _ in events:
                if cancel:
                    return f"{label}_CANCELLED"
        return f"{label}_OK"

    try:
        return await asyncio.wait_for(run(), LATE_S) if late else await run()
    except TimeoutError:
        return f"{label}_CANCELLED"
    except openai.APIStatusError as err:
        return f"{label}_{err.status_code}"

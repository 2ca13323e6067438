"""The soak's HTTP lane: the same mix as the gRPC lane, through the HTTP front with the official `openai` package
(media as data URLs, speech as streamed pcm16, some answers whole; on Qwen3-ASR transcriptions too), where the client's early exits are a closed
connection, which the front must turn into a cancelled gRPC call or the gateway's open streams pile up."""
from __future__ import annotations

import asyncio
from typing import Any

import openai

from gateway.cli.remote_bench.workloads import Request


async def one(client: openai.AsyncOpenAI, request: Request, *, late: bool, cancel: bool, stream: bool,
              use_audio_in_video: bool, seed: int) -> str:
    """How the request ended: `http_OK`, `http_CANCELLED` (the client closed it: after its first chunk, or at its
    0.5 s deadline), or `http_<status>` for an HTTP error."""
    kwargs: dict[str, Any] = {
        "model": "omni", "messages": request.openai_messages(), "max_tokens": 400 if late else 8, "seed": seed,
        "extra_body": {"ignore_eos": late, "use_audio_in_video": use_audio_in_video}}
    if request.speak:
        kwargs |= {"modalities": ["text", "audio"], "audio": {"voice": "", "format": "pcm16" if stream else "wav"}}

    async def run() -> str:
        if not stream:
            await client.chat.completions.create(**kwargs)
            return "http_OK"
        answer = await client.chat.completions.create(stream=True, **kwargs)
        async with answer:  # leaving early closes the connection
            async for _ in answer:
                if cancel:
                    return "http_CANCELLED"
        return "http_OK"

    try:
        return await asyncio.wait_for(run(), 0.5) if late else await run()
    except TimeoutError:
        return "http_CANCELLED"
    except openai.APIStatusError as err:
        return f"http_{err.status_code}"


async def transcription(client: openai.AsyncOpenAI, wav: bytes, *, late: bool, cancel: bool, stream: bool) -> str:
    """A clip through `/v1/audio/transcriptions`: whole, or streamed and (cancel) left after its first event; late,
    400 tokens that its 0.5 s end cuts short. How it ended, as `one` says it, as
    `http_transcribe_*`."""
    kwargs: dict[str, Any] = {"model": "asr", "file": ("clip.wav", wav, "audio/wav"), "temperature": 0.0,
                              "extra_body": {"max_tokens": 400 if late else 8}}

    async def run() -> str:
        if not stream:
            await client.audio.transcriptions.create(**kwargs)
            return "http_transcribe_OK"
        events = await client.audio.transcriptions.create(stream=True, **kwargs)
        async with events:  # leaving early closes the connection
            async for _ in events:
                if cancel:
                    return "http_transcribe_CANCELLED"
        return "http_transcribe_OK"

    try:
        return await asyncio.wait_for(run(), 0.5) if late else await run()
    except TimeoutError:
        return "http_transcribe_CANCELLED"
    except openai.APIStatusError as err:
        return f"http_transcribe_{err.status_code}"

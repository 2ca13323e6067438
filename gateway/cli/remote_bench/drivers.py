"""One request of a workload over each API, timing what arrives: over gRPC through omnimesh.AsyncClient, over HTTP
through the openai package's streaming chat completions (text, or text and pcm16 audio)."""
from __future__ import annotations

import base64
import itertools
import time
from typing import Any

from omnimesh import (AsyncClient, AudioDelta, AudioFailed, Done, InvalidArgument, ReasoningDelta, TextDelta,
                      Unimplemented)
from runtime.channels import open_channel
from gateway.cli.remote_bench.load import Record
from gateway.cli.remote_bench.workloads import Request

VOICE = "ethan"
OPENAI_PCM_RATE = 24_000  # OpenAI's pcm16 audio: 24 kHz mono


class Refused(Exception):
    """The deployment does not serve this workload (an input or output it lacks): the workload is skipped."""


class GrpcDriver:
    """Greedy text with EOS ignored, so every request makes exactly `max_tokens`; speech at the talker's default
    sampling. The requests take the clients in turn."""

    def __init__(self, clients: list[AsyncClient], max_tokens: int) -> None:
        self.clients = clients
        self._next = itertools.cycle(clients)
        self.max_tokens = max_tokens

    @classmethod
    def connect(cls, addr: str, api_key: str | None, max_tokens: int, connections: int = 1) -> GrpcDriver:
        """Over `connections` connections, as that many clients would open them (gateway processes that share a port
        each serve the connections the kernel hands them)."""
        return cls([AsyncClient(addr, api_key=api_key, channel=open_channel(addr, own_connection=connections > 1))
                    for _ in range(connections)], max_tokens)

    async def send(self, request: Request, rec: Record) -> None:
        try:
            async for event in next(self._next).chat_stream(request.messages(), speak=request.speak,
                                                       voice=VOICE if request.speak else "", temperature=0.0,
                                                       max_tokens=self.max_tokens, ignore_eos=True):
                now = time.perf_counter()
                if isinstance(event, (TextDelta, ReasoningDelta)):  # a Thinking model's thoughts are output too
                    rec.text(now, len(event.token_ids))
                elif isinstance(event, AudioDelta):
                    rec.audio(now, len(event.pcm16) / 2 / event.sample_rate)
                elif isinstance(event, AudioFailed):
                    raise RuntimeError(f"request {rec.index}: the speech failed: {event.code}: {event.message}")
                elif isinstance(event, Done):
                    rec.timing = dict(event.timing) or None
        except (Unimplemented, InvalidArgument) as err:
            raise Refused(str(err)) from None

    async def close(self) -> None:
        for client in self.clients:
            await client.close()


class OpenAIDriver:
    """The same requests as OpenAI chat completions; `ignore_eos` goes as an extra field (servers that know it,
    ours and vLLM's among them, then make exactly `max_tokens`; check the result's tokens_per_request)."""

    def __init__(self, base_url: str, api_key: str | None, max_tokens: int, model: str) -> None:
        import openai

        self.openai = openai
        self.client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key or "none", max_retries=0, timeout=3600)
        self.max_tokens = max_tokens
        self.model = model

    async def model_name(self) -> str:
        """`--model-name`, else the first model the server lists."""
        if not self.model:
            try:
                self.model = (await self.client.models.list()).data[0].id
            except self.openai.APIError as err:
                raise RuntimeError(f"{self.client.base_url}models: {err}") from None
        return self.model

    async def send(self, request: Request, rec: Record) -> None:
        speech: dict[str, Any] = ({"modalities": ["text", "audio"], "audio": {"voice": VOICE, "format": "pcm16"}}
                                  if request.speak else {})
        try:
            await self._stream(request, speech, rec)
        except self.openai.BadRequestError as err:
            raise Refused(str(err)) from None
        except self.openai.APIError as err:
            raise RuntimeError(f"request {rec.index}: {err}") from None

    async def _stream(self, request: Request, speech: dict[str, Any], rec: Record) -> None:
        stream = await self.client.chat.completions.create(
            model=self.model, messages=request.openai_messages(), max_tokens=self.max_tokens, temperature=0.0,
            stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True}, **speech)
        total = 0
        async for chunk in stream:
            now = time.perf_counter()
            if chunk.usage is not None:
                total = chunk.usage.completion_tokens
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            audio = getattr(delta, "audio", None) or {}
            audio = audio if isinstance(audio, dict) else audio.model_dump()
            if delta.content or getattr(delta, "reasoning_content", None) or audio.get("transcript"):
                rec.text(now, 0.0)
            if audio.get("data"):
                rec.audio(now, len(base64.b64decode(audio["data"])) / 2 / OPENAI_PCM_RATE)
        rec.spread(total)

    async def close(self) -> None:
        await self.client.close()

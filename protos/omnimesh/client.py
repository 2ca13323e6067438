"""Typed Python clients of the public gRPC API (`omnimesh.v1.Omni`): Client (blocking) and AsyncClient (asyncio).

    import omnimesh

    with omnimesh.Client("127.0.0.1:50051") as client:
        reply = client.chat("Say hello", max_tokens=32)
        print(reply.text, reply.usage)

        for event in client.chat_stream([omnimesh.Message.user(omnimesh.Image.file("cat.jpg"), "What is this?")]):
            if isinstance(event, omnimesh.TextDelta):
                print(event.text, end="", flush=True)

        spoken = client.chat("Tell me a story", speak=True, voice="chelsie")
        open("story.wav", "wb").write(spoken.wav())  # or spoken.audio: int16 samples as a numpy array

    async with omnimesh.AsyncClient("127.0.0.1:50051") as client:
        async for event in client.chat_stream("Hello", logprobs=True, top_logprobs=3):
            ...

A failed call raises an OmnimeshError subclass (InvalidArgument with `.field_violations`, Unavailable, ...).
Sampling fields (temperature, max_tokens, stop, logprobs, ...) are keyword arguments, or one `sampling=Sampling(...)`.
"""
from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from contextlib import aclosing
from pathlib import Path
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import grpc

from omnimesh.errors import from_rpc_error
from omnimesh.events import Done, Event, Reply, event_from_pb
from omnimesh.messages import Audio, ChatOptions, MessagesLike, Sampling, chat_request
from omnimesh.timing import trailer_timing
from omnimesh.transcripts import (TranscriptEvent, TranscriptReply, pcm_chunks, pcm_chunks_async, stream_config,
                                  transcribe_request, transcript_event_from_pb)
from omnimesh.v1 import common_pb2, omni_pb2, omni_pb2_grpc
from runtime.channels import channel_options

DEFAULT_ADDR = "127.0.0.1:50051"
T = TypeVar("T")


@dataclass(frozen=True)
class MeshInfo:
    """What a deployment serves."""

    model: str  # checkpoint directory or "demo"
    build: str  # the gateway's omnimesh version and commit
    input_modalities: tuple[str, ...]  # e.g. ("text", "image", "audio", "video")
    output_modalities: tuple[str, ...]  # ("text",) or ("text", "audio")
    voices: tuple[str, ...]  # of the speech, default first
    model_family: str  # "qwen3-omni", "qwen3-asr" (which alone serves transcribe), ...; "" from older gateways
    devices: dict[str, str]  # each stage's device by stage name, e.g. {"thinker": "cuda:0 NVIDIA H200"}

    @property
    def transcribes(self) -> bool:
        """Whether the deployment serves Transcribe (a Qwen3-ASR model); others hear audio through chat."""
        return self.model_family == "qwen3-asr"

    @classmethod
    def from_pb(cls, info: omni_pb2.OmniInfo) -> MeshInfo:
        outputs = tuple(omni_pb2.Modality.Name(m).removeprefix("MODALITY_").lower() for m in info.output_modalities)
        devices = {s.stage: s.device for s in (info.gateway, *info.stages) if s.device}
        return cls(info.gateway.model, info.gateway.build, tuple(info.input_modalities), outputs, tuple(info.voices),
                   info.model_family, devices)


def _read(call: Any, convert: Callable[[Any], T]) -> Iterator[T]:
    """A server stream's messages, converted; a failed call raises its OmnimeshError; leaving early cancels it.
    Done, the last message, is held until the call ends, to carry the timing its trailer brings."""
    try:
        done = None
        for ev in call:
            if isinstance(out := convert(ev), Done):
                done = out
            else:
                yield out
        if done is not None:
            yield replace(done, timing=trailer_timing(call.trailing_metadata()))
    except grpc.RpcError as err:
        raise from_rpc_error(err) from None
    finally:
        call.cancel()  # a no-op once the call has ended


async def _read_async(call: Any, convert: Callable[[Any], T]) -> AsyncIterator[T]:
    """_read for a grpc.aio call."""
    try:
        done = None
        async for ev in call:
            if isinstance(out := convert(ev), Done):
                done = out
            else:
                yield out
        if done is not None:
            yield replace(done, timing=trailer_timing(await call.trailing_metadata()))
    except grpc.aio.AioRpcError as err:
        raise from_rpc_error(err) from None
    finally:
        call.cancel()


class _Base:
    """What both clients share: building the request and the call's metadata."""

    def __init__(self, api_key: str | None, timeout: float | None) -> None:
        self.api_key = api_key
        self.timeout = timeout

    def _call_kwargs(self, timeout: float | None, api_key: str | None) -> dict[str, Any]:
        key = api_key if api_key is not None else self.api_key
        return {"timeout": timeout if timeout is not None else self.timeout,
                "metadata": [("authorization", f"Bearer {key}")] if key else None}

    @staticmethod
    def _request(messages: MessagesLike, sampling: Sampling | None, options: dict[str, Any],
                 sampling_fields: dict[str, Any]) -> omni_pb2.ChatRequest:
        sampling = replace(sampling or Sampling(), **sampling_fields)  # an unknown field is a TypeError naming it
        return chat_request(messages, sampling, ChatOptions(**options))


class Client(_Base):
    """A blocking client over one gRPC channel; thread-safe, so share one per process.

    `api_key` is sent as `authorization: Bearer <key>`; `timeout` (seconds) is every call's default deadline.
    """

    def __init__(self, addr: str = DEFAULT_ADDR, *, api_key: str | None = None, timeout: float | None = None,
                 channel: grpc.Channel | None = None) -> None:
        super().__init__(api_key, timeout)
        self._channel = channel or grpc.insecure_channel(addr, options=channel_options())
        self._stub = omni_pb2_grpc.OmniStub(self._channel)

    def chat_stream(self, messages: MessagesLike, *, sampling: Sampling | None = None, speak: bool = False,
                    voice: str = "", speech_sampling: Sampling | None = None, return_codes: bool = False,
                    use_audio_in_video: bool = False, request_id: str = "", timeout: float | None = None,
                    api_key: str | None = None, **sampling_fields: Any) -> Iterator[Event]:
        """The answer as events (TextDelta, AudioDelta, AudioFailed, Usage, then Done). Leaving the loop early
        cancels the request, which frees its place in the mesh at once."""
        options = {"speak": speak, "voice": voice, "speech_sampling": speech_sampling or Sampling(),
                   "return_codes": return_codes, "use_audio_in_video": use_audio_in_video, "request_id": request_id}
        request = self._request(messages, sampling, options, sampling_fields)
        call = self._stub.Chat(request, **self._call_kwargs(timeout, api_key))
        yield from _read(call, event_from_pb)

    def chat(self, messages: MessagesLike, **kwargs: Any) -> Reply:
        """The whole answer at once; takes chat_stream's arguments."""
        reply = Reply()
        for event in self.chat_stream(messages, **kwargs):
            reply.add(event)
        return reply

    def transcribe_stream(self, audio: Audio | bytes | str | Path, *, language: str = "", context: str = "",
                          sampling: Sampling | None = None, request_id: str = "", timeout: float | None = None,
                          api_key: str | None = None, **sampling_fields: Any) -> Iterator[TranscriptEvent]:
        """A Qwen3-ASR deployment's transcription as events (Language, TextDelta, Transcript, Usage, then Done).
        `language`: an ISO code or name to force; `context`: hotwords and terms for the model."""
        sampling = replace(sampling or Sampling(), **sampling_fields)
        request = transcribe_request(audio, language, context, sampling, request_id)
        call = self._stub.Transcribe(request, **self._call_kwargs(timeout, api_key))
        yield from _read(call, transcript_event_from_pb)

    def transcribe_pcm_stream(self, pcm: Iterable[bytes], sample_rate: int, *, language: str = "",
                              context: str = "", partial_every_s: float = 0.0, sampling: Sampling | None = None,
                              request_id: str = "", timeout: float | None = None, api_key: str | None = None,
                              **sampling_fields: Any) -> Iterator[TranscriptEvent]:
        """Audio as it is recorded (16-bit mono PCM pieces at `sample_rate`): Partial events every
        `partial_every_s` seconds of new audio while `pcm` goes on, then transcribe_stream's events for all of it.
        The pieces are read on grpc's thread as the call sends them."""
        first = stream_config(sample_rate, language, context, replace(sampling or Sampling(), **sampling_fields),
                              partial_every_s, request_id)
        call = self._stub.TranscribeStream(pcm_chunks(first, pcm), **self._call_kwargs(timeout, api_key))
        yield from _read(call, transcript_event_from_pb)

    def transcribe(self, audio: Audio | bytes | str | Path, **kwargs: Any) -> TranscriptReply:
        """The whole transcription at once; takes transcribe_stream's arguments."""
        reply = TranscriptReply()
        for event in self.transcribe_stream(audio, **kwargs):
            reply.add(event)
        return reply

    def info(self, *, timeout: float | None = None, api_key: str | None = None) -> MeshInfo:
        try:
            return MeshInfo.from_pb(self._stub.Info(common_pb2.InfoRequest(), **self._call_kwargs(timeout, api_key)))
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient(_Base):
    """The asyncio client: the same calls as Client, awaited. Create it inside the event loop that uses it."""

    def __init__(self, addr: str = DEFAULT_ADDR, *, api_key: str | None = None, timeout: float | None = None,
                 channel: grpc.aio.Channel | None = None) -> None:
        super().__init__(api_key, timeout)
        self._channel = channel or grpc.aio.insecure_channel(addr, options=channel_options())
        self._stub = omni_pb2_grpc.OmniStub(self._channel)

    async def chat_stream(self, messages: MessagesLike, *, sampling: Sampling | None = None, speak: bool = False,
                          voice: str = "", speech_sampling: Sampling | None = None, return_codes: bool = False,
                          use_audio_in_video: bool = False, request_id: str = "", timeout: float | None = None,
                          api_key: str | None = None, **sampling_fields: Any) -> AsyncIterator[Event]:
        """As Client.chat_stream; leaving the loop early (or cancelling the task) cancels the request."""
        options = {"speak": speak, "voice": voice, "speech_sampling": speech_sampling or Sampling(),
                   "return_codes": return_codes, "use_audio_in_video": use_audio_in_video, "request_id": request_id}
        request = self._request(messages, sampling, options, sampling_fields)
        call = self._stub.Chat(request, **self._call_kwargs(timeout, api_key))
        async with aclosing(_read_async(call, event_from_pb)) as events:  # leaving early cancels at once
            async for ev in events:
                yield ev

    async def chat(self, messages: MessagesLike, **kwargs: Any) -> Reply:
        reply = Reply()
        async for event in self.chat_stream(messages, **kwargs):
            reply.add(event)
        return reply

    async def transcribe_stream(self, audio: Audio | bytes | str | Path, *, language: str = "", context: str = "",
                                sampling: Sampling | None = None, request_id: str = "", timeout: float | None = None,
                                api_key: str | None = None, **sampling_fields: Any) -> AsyncIterator[TranscriptEvent]:
        """As Client.transcribe_stream."""
        sampling = replace(sampling or Sampling(), **sampling_fields)
        request = transcribe_request(audio, language, context, sampling, request_id)
        call = self._stub.Transcribe(request, **self._call_kwargs(timeout, api_key))
        async with aclosing(_read_async(call, transcript_event_from_pb)) as events:  # leaving early cancels at once
            async for ev in events:
                yield ev

    async def transcribe_pcm_stream(self, pcm: Iterable[bytes] | AsyncIterable[bytes], sample_rate: int, *,
                                    language: str = "", context: str = "", partial_every_s: float = 0.0,
                                    sampling: Sampling | None = None, request_id: str = "",
                                    timeout: float | None = None, api_key: str | None = None,
                                    **sampling_fields: Any) -> AsyncIterator[TranscriptEvent]:
        """As Client.transcribe_pcm_stream; `pcm` may be an async iterable (a recording)."""
        first = stream_config(sample_rate, language, context, replace(sampling or Sampling(), **sampling_fields),
                              partial_every_s, request_id)
        call = self._stub.TranscribeStream(pcm_chunks_async(first, pcm), **self._call_kwargs(timeout, api_key))
        async with aclosing(_read_async(call, transcript_event_from_pb)) as events:  # leaving early cancels at once
            async for ev in events:
                yield ev

    async def transcribe(self, audio: Audio | bytes | str | Path, **kwargs: Any) -> TranscriptReply:
        reply = TranscriptReply()
        async for event in self.transcribe_stream(audio, **kwargs):
            reply.add(event)
        return reply

    async def info(self, *, timeout: float | None = None, api_key: str | None = None) -> MeshInfo:
        try:
            info = await self._stub.Info(common_pb2.InfoRequest(), **self._call_kwargs(timeout, api_key))
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from None
        return MeshInfo.from_pb(info)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

"""Speak calls on the talker stage for tests: request messages, prompts with media, whole calls, the reference."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass

import grpc
import numpy as np
import torch

from omnimesh.v1 import common_pb2, talker_pb2, talker_pb2_grpc, thinker_pb2
from runtime.checkpoint import token_ids as T
from runtime.tensor_codec import encode_tensor
from tests.talker_lockstep import SpeechResult, lockstep_generate
from services.talker.model.load import TalkerModel
from services.talker.model.mrope import VisualGrid
from services.talker.model.prompt import SpeechPrompt
from services.talker.model.sampling import GREEDY
from tests.integration.mesh_process import metric_value, scrape
from tests.parity.talker.talker_reference import ASSISTANT_HEADER, SYSTEM_TURN, assert_codes_match, user_turn

HIDDEN = 64  # the demo thinker's hidden size: the conditioning's width
GROUPS = 16
TEXT_PROMPT = SYSTEM_TURN + user_turn([200, 300, 400]) + ASSISTANT_HEADER
TOKENS = list(range(1000, 1016))  # what "the thinker" writes


def start(prompt: Sequence[int] = TEXT_PROMPT, voice: str = "", media: Sequence[thinker_pb2.MediaSpan] = (),
          return_codes: bool = True, greedy: bool = True, **fields: object) -> talker_pb2.SpeakRequest:
    if greedy:
        fields.setdefault("talker_sampling", common_pb2.SamplingParams(temperature=0))
    return talker_pb2.SpeakRequest(start=talker_pb2.SpeakStart(
        request_id="t", voice=voice, prompt_token_ids=list(prompt), media=list(media), return_codes=return_codes,
        **fields))


def conditioning(t: torch.Tensor, name: str = "talker.media_hidden",
                 chunk_bytes: int = 1 << 20) -> list[talker_pb2.SpeakRequest]:
    return [talker_pb2.SpeakRequest(conditioning=c) for c in encode_tensor(name, t, chunk_bytes)]


def text(ids: Iterable[int]) -> talker_pb2.SpeakRequest:
    return talker_pb2.SpeakRequest(text=talker_pb2.TextTokens(token_ids=list(ids)))


def text_end() -> talker_pb2.SpeakRequest:
    return talker_pb2.SpeakRequest(text_end=talker_pb2.TextEnd())


def text_only(tokens: Sequence[int] = TOKENS, **start_fields: object) -> list[talker_pb2.SpeakRequest]:
    """A whole text-only request as the gateway sends it: start, the empty conditioning, tokens, text_end."""
    return [start(**start_fields), *conditioning(torch.empty(0, 0)), text(tokens), text_end()]


@dataclass(frozen=True)
class MediaPrompt:
    """A prompt with media outside and inside the user turn; the talker must keep only the user-turn rows."""

    ids: list[int]
    spans: list[thinker_pb2.MediaSpan]
    hidden: torch.Tensor  # [every media placeholder, HIDDEN]: what the thinker sends
    user_hidden: torch.Tensor  # the rows of user-turn placeholders: what the reference gets
    images: tuple[VisualGrid, ...]

    def speech_prompt(self, voice: str = "ethan") -> SpeechPrompt:
        return SpeechPrompt(self.ids, voice, self.user_hidden, self.images)


def media_prompt(seed: int = 0) -> MediaPrompt:
    system = [T.IM_START, T.SYSTEM, T.NEWLINE, T.AUDIO_START, *[T.AUDIO_PAD] * 3, T.AUDIO_END, T.IM_END, T.NEWLINE]
    body = [T.AUDIO_START, *[T.AUDIO_PAD] * 5, T.AUDIO_END, T.VISION_START, *[T.IMAGE_PAD] * 4, T.VISION_END, 220]
    ids = system + user_turn(body) + ASSISTANT_HEADER
    system_audio = ids.index(T.AUDIO_PAD)
    user_audio = ids.index(T.AUDIO_PAD, system_audio + 3)
    image = ids.index(T.IMAGE_PAD)
    spans = [thinker_pb2.MediaSpan(kind=thinker_pb2.MEDIA_KIND_AUDIO, offset=system_audio, length=3),
             thinker_pb2.MediaSpan(kind=thinker_pb2.MEDIA_KIND_AUDIO, offset=user_audio, length=5),
             thinker_pb2.MediaSpan(kind=thinker_pb2.MEDIA_KIND_IMAGE, offset=image, length=4, grid_thw=[1, 4, 4])]
    hidden = torch.randn(12, HIDDEN, generator=torch.Generator().manual_seed(seed))
    return MediaPrompt(ids, spans, hidden, hidden[3:], (VisualGrid(1, 4, 4),))


@dataclass
class Spoken:
    chunks: list[common_pb2.AudioChunk]
    finished: talker_pb2.SpeakFinished

    @property
    def codes(self) -> torch.Tensor:
        """(G, T) like SpeechResult.codes."""
        flat = [c for chunk in self.chunks for c in chunk.codes]
        return torch.tensor(flat, dtype=torch.long).view(-1, GROUPS).T

    @property
    def samples(self) -> torch.Tensor:
        pcm = b"".join(c.pcm16 for c in self.chunks)
        return torch.from_numpy(np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32767.0)


def collect(responses: Sequence[talker_pb2.SpeakResponse]) -> Spoken:
    assert responses and responses[-1].WhichOneof("msg") == "finished", responses[-1:] or "no responses"
    chunks = [r.audio for r in responses[:-1]]
    assert all(r.WhichOneof("msg") == "audio" for r in responses[:-1])
    return Spoken(chunks, responses[-1].finished)


async def messages(msgs: Iterable[talker_pb2.SpeakRequest]) -> AsyncIterator[talker_pb2.SpeakRequest]:
    for m in msgs:
        yield m


async def speak(addr: str, msgs: list[talker_pb2.SpeakRequest]) -> Spoken:
    async with grpc.aio.insecure_channel(addr) as channel:
        return collect([r async for r in talker_pb2_grpc.TalkerStub(channel).Speak(messages(msgs))])


async def speak_paced(addr: str, msgs: list[talker_pb2.SpeakRequest], pause: float = 0.01) -> Spoken:
    """Like `speak`, but stops writing once the call has ended. grpc.aio turns a write that races the server's
    status into a client-side INTERNAL ("Internal error from Core"); error tests must see the server's status."""
    async with grpc.aio.insecure_channel(addr) as channel:
        call = None

        async def paced() -> AsyncIterator[talker_pb2.SpeakRequest]:
            for i, m in enumerate(msgs):
                if i:
                    await asyncio.sleep(pause)
                if call is not None and call.done():
                    return
                yield m

        call = talker_pb2_grpc.TalkerStub(channel).Speak(paced())
        return collect([r async for r in call])


def reference(model: TalkerModel, prompt: SpeechPrompt, tokens: Sequence[int], max_frames: int) -> SpeechResult:
    """The talker in this process, greedy, fed the same thinker ids."""
    (result,) = lockstep_generate(model, [prompt], [iter(tokens)], [GREEDY], max_frames=max_frames,
                                  record_margins=True, thinker_eos=frozenset({T.IM_END, T.ENDOFTEXT}))
    return result


def assert_same_codes(ref: SpeechResult, spoken: Spoken, min_frames: int) -> None:
    """Equal codes, choice by choice, up to a near-tie (thread counts differ between the two processes)."""
    assert spoken.codes.shape[0] == GROUPS
    assert assert_codes_match(spoken.codes, ref, min_frames) >= min_frames


def metric(metrics_port: int, name: str, **labels: str) -> float:
    return metric_value(scrape(metrics_port), name, **labels)

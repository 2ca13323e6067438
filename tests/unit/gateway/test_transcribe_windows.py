"""Streaming partials' reuse pieces (gateway/transcribe_windows.py): the PCM decodes as the whole-file path decodes
it, audio is cut at the encoder's attention windows, a stream encodes each finished window once, the prompt is the
whole-file one with one span per piece; and the thinker places back-to-back audio spans as one item."""
from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
import torch

from omnimesh.v1 import omni_pb2, thinker_pb2
from runtime.config import SamplingDefaults
from runtime.errors import InvalidArgument, StageFault
from gateway.media.audio import decode_audio
from gateway.media_prep import DecodedMedia
from gateway.prompt import PromptBuilder
from gateway.transcribe import transcribe_input_from_pb
from gateway.transcribe_stream import pcm16_wav
from gateway.transcribe_windows import (SALT, WindowCache, cut, partial_prompt, stream_samples, window_samples)
from services.thinker.model import MediaKind
from services.thinker.request import MediaInput
from services.thinker.wire import _position_grids

WINDOW = 128_000


def pcm(seconds: float, rate: int, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(int(seconds * rate)) * 3000).astype("<i2").tobytes()


@pytest.mark.parametrize("rate", [16_000, 8_000, 44_100])
def test_pcm_decodes_to_the_whole_file_paths_samples(rate: int) -> None:
    raw = pcm(1.3, rate)
    assert np.array_equal(stream_samples(raw, rate), decode_audio(pcm16_wav(raw, rate), "audio").samples)


def test_audio_is_cut_at_windows_and_a_short_tail_waits() -> None:
    samples = np.random.default_rng(1).standard_normal(2 * WINDOW + 9_000).astype(np.float32)
    pieces = cut(samples, WINDOW)
    assert [(p.samples.shape[0], p.finished, p.num_tokens) for p in pieces] == [
        (WINDOW, True, 104), (WINDOW, True, 104), (9_000, False, 7)]  # 56 mel frames: ceil(56 / 8) tokens
    assert all(p.content_hash.startswith(SALT) for p in pieces) and pieces[0].content_hash != pieces[1].content_hash
    assert [p.finished for p in cut(samples[:WINDOW + 7_999], WINDOW)] == [True]  # under 0.5 s: left out
    assert cut(samples[:WINDOW + 7_999], WINDOW)[0].content_hash == pieces[0].content_hash


def test_window_size_comes_from_the_checkpoint() -> None:
    assert window_samples({}) == WINDOW and window_samples({"n_window_infer": 400}) == 64_000
    with pytest.raises(ValueError, match="n_window_infer"):
        window_samples({"n_window_infer": 0})


class CountingAudio:
    """The audio stage's client, answering `rows` rows per clip (None: the right count)."""

    def __init__(self, rows: int | None = None) -> None:
        self.clips: list[int] = []
        self.rows = rows

    async def encode(self, request_id, clips, timeout):  # noqa: ANN001 - AudioClient.encode's shape
        self.clips += [c.numel() for c in clips]
        return [torch.full((self.rows or cut(c.numpy(), WINDOW)[0].num_tokens, 4), float(c.numel())) for c in clips]


def test_a_stream_encodes_each_finished_window_once() -> None:
    samples = np.random.default_rng(2).standard_normal(3 * WINDOW).astype(np.float32)
    audio, cache = CountingAudio(), WindowCache()
    first = asyncio.run(cache.embeddings(audio, "r", cut(samples[:WINDOW + 20_000], WINDOW), None))
    later = asyncio.run(cache.embeddings(audio, "r", cut(samples[:2 * WINDOW + 10_000], WINDOW), None))
    assert audio.clips == [WINDOW, 20_000, WINDOW, 10_000]  # window 0 once; the tail each time
    assert torch.equal(later[0], first[0]) and cache.encoded_samples == sum(audio.clips)
    assert len(cache.kept) == 2  # finished windows only


def test_rows_the_prompt_did_not_reserve_are_a_stage_fault() -> None:
    samples = np.zeros(WINDOW, np.float32)
    with pytest.raises(StageFault, match="returned 5 rows"):
        asyncio.run(WindowCache().embeddings(CountingAudio(rows=5), "r", cut(samples, WINDOW), None))


class PromptOnly:
    """What partial_prompt needs of OmniService: the prompt builder and the thinker's context."""

    def __init__(self, prompts: PromptBuilder, context: int) -> None:
        self.prompts = prompts
        self.context = context

    async def max_model_len(self) -> int:
        return self.context


def job(context: str = ""):  # noqa: ANN201
    req = omni_pb2.TranscribeRequest(audio=omni_pb2.Media(data=pcm16_wav(b"\0\0", 16_000)), language="en",
                                     context=context)
    return transcribe_input_from_pb(req, SamplingDefaults())


def test_the_partial_prompt_is_the_whole_file_prompt_in_one_span_per_piece(asr_ckpt: Path) -> None:
    prompts = PromptBuilder.from_dir(asr_ckpt)
    samples = np.random.default_rng(3).standard_normal(WINDOW + 16_000).astype(np.float32)
    pieces = cut(samples, WINDOW)
    rows = [torch.zeros(p.num_tokens, 4) for p in pieces]
    chat = job("Quilter").chat
    prompt = asyncio.run(partial_prompt(PromptOnly(prompts, 4096), chat, pieces, rows))
    whole = prompts.build(chat, [DecodedMedia("audio", "audio", 104 + 13, "h")])  # 8 s and 1 s
    assert prompt.token_ids == whole.ids
    (span,) = whole.spans
    assert [(m.offset, m.length, m.content_hash) for m in prompt.media] == [
        (span.start, 104, pieces[0].content_hash), (span.start + 104, 13, pieces[1].content_hash)]
    assert prompt.tensors["media.1.embeddings"] is rows[1]
    with pytest.raises(InvalidArgument) as caught:
        asyncio.run(partial_prompt(PromptOnly(prompts, len(whole.ids)), chat, pieces, rows))
    assert caught.value.violations[0].field == "pcm16"


def media(kind: str, offset: int, length: int) -> MediaInput:
    return MediaInput(kind, offset, length, (), 0.0, f"h{offset}", torch.zeros(length, 4))


def test_back_to_back_audio_spans_are_placed_as_one_item() -> None:
    grids = _position_grids([media("audio", 4, 104), media("audio", 108, 26), media("audio", 140, 13)])
    assert [(g.kind, g.num_audio_tokens) for g in grids] == [(MediaKind.AUDIO, 130), (MediaKind.AUDIO, 13)]
    assert thinker_pb2.MEDIA_KIND_AUDIO  # the wire kind the gateway sends for each piece

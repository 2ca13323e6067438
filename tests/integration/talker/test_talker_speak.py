"""The talker process speaks what the in-process talker speaks: greedy codes, chunked PCM, lock-step streaming."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest
import torch

from omnimesh.v1 import common_pb2, talker_pb2, talker_pb2_grpc
from runtime.checkpoint import token_ids as T
from runtime.metrics import Metrics
from services.talker.model.load import TalkerModel
from services.talker.model.prompt import SpeechPrompt
from services.talker.model.sampling import TalkerSampling
from tests.talker_lockstep import lockstep_generate
from gateway.clients.talker import SpeakSetup, SpeechDone, TalkerClient, TalkerFeed
from tests.integration.talker.conftest import CHUNK, FIRST_CHUNK, MAX_FRAMES
from tests.integration.talker.talker_calls import (
    TEXT_PROMPT, TOKENS, Spoken, assert_same_codes, conditioning, media_prompt, reference, speak, start, text,
    text_end, text_only,
)

SAMPLES_PER_FRAME = 1920


def test_info_names_voices_dims_and_limits(talker_addr: str) -> None:
    async def info() -> common_pb2.StageInfo:
        async with grpc.aio.insecure_channel(talker_addr) as channel:
            return await talker_pb2_grpc.TalkerStub(channel).Info(common_pb2.InfoRequest())

    got = asyncio.run(info())
    assert got.stage == "talker" and list(got.voices) == ["ethan", "aiden", "chelsie"]
    assert got.dims["hidden_size"] == 32 and got.dims["thinker_hidden_size"] == 64
    assert got.dims["num_code_groups"] == 16 and got.dims["sample_rate"] == 24000
    assert got.limits["max_frames"] == MAX_FRAMES and got.limits["first_chunk_frames"] == FIRST_CHUNK


def test_text_only_greedy_codes_and_pcm_equal_in_process(talker_addr: str, local_talker: TalkerModel) -> None:
    spoken = asyncio.run(speak(talker_addr, text_only()))
    ref = reference(local_talker, SpeechPrompt(TEXT_PROMPT, "ethan"), TOKENS, MAX_FRAMES)
    assert_same_codes(ref, spoken, min_frames=8)
    frames = spoken.codes.shape[1]
    assert spoken.finished.num_frames == frames == sum(c.num_frames for c in spoken.chunks)
    reason = common_pb2.FINISH_REASON_LENGTH if frames == MAX_FRAMES else common_pb2.FINISH_REASON_STOP
    assert spoken.finished.finish_reason == reason
    # a small first chunk, then full ones, then the tail
    sizes = [c.num_frames for c in spoken.chunks]
    assert sizes[0] == FIRST_CHUNK and all(s == CHUNK for s in sizes[1:-1]) and 0 < sizes[-1] <= CHUNK
    assert [c.index for c in spoken.chunks] == list(range(len(sizes)))
    assert all(c.sample_rate == 24000 and c.num_code_groups == 16 for c in spoken.chunks)
    # the streamed chunks concatenate to one full decode of the codes (left context 11 is exact), as PCM16
    with torch.no_grad():
        full = local_talker.code2wav(spoken.codes[None])[0, 0]
    assert spoken.samples.shape == full.shape == (frames * SAMPLES_PER_FRAME - local_talker.code2wav.held_back,)
    assert (spoken.samples - full).abs().max().item() <= 1 / 32767 + 1e-5
    assert spoken.finished.audio_seconds == pytest.approx(full.numel() / 24000)
    assert spoken.finished.timings.compute_seconds > 0


def test_media_prompt_keeps_only_user_turn_rows(talker_addr: str, local_talker: TalkerModel) -> None:
    """Conditioning rows of every placeholder arrive (in small chunks); the system turn's audio rows are dropped."""
    mp = media_prompt(seed=1)
    msgs = [start(mp.ids, voice="Chelsie", media=mp.spans), *conditioning(mp.hidden, chunk_bytes=1024),
            text(TOKENS[:3]), text(TOKENS[3:10]), text_end()]
    spoken = asyncio.run(speak(talker_addr, msgs))
    ref = reference(local_talker, mp.speech_prompt("chelsie"), TOKENS[:10], MAX_FRAMES)
    assert_same_codes(ref, spoken, min_frames=8)


def test_first_audio_arrives_before_the_text_ends(talker_addr: str, local_talker: TalkerModel) -> None:
    """Lock-step: with 6 thinker tokens sent, the talker speaks its first chunk; only then does more text come."""
    first_audio = asyncio.Event()
    sent_end = False

    async def requests() -> AsyncIterator[talker_pb2.SpeakRequest]:
        nonlocal sent_end
        yield start()
        for m in conditioning(torch.empty(0, 0)):
            yield m
        yield text(TOKENS[:6])  # the first id starts the row; 5 more make 5 frames, one past the first chunk
        await asyncio.wait_for(first_audio.wait(), timeout=30)
        yield text(TOKENS[6:])
        sent_end = True
        yield text_end()

    async def run() -> tuple[Spoken, bool]:
        before_end = None
        responses = []
        async with grpc.aio.insecure_channel(talker_addr) as channel:
            async for r in talker_pb2_grpc.TalkerStub(channel).Speak(requests()):
                if r.WhichOneof("msg") == "audio" and before_end is None:
                    before_end = not sent_end
                    first_audio.set()
                responses.append(r)
        return Spoken([r.audio for r in responses[:-1]], responses[-1].finished), bool(before_end)

    spoken, before_end = asyncio.run(run())
    assert before_end, "the first audio chunk came only after text_end"
    assert spoken.chunks[0].num_frames == FIRST_CHUNK
    # when the text arrives does not change what is said
    assert_same_codes(reference(local_talker, SpeechPrompt(TEXT_PROMPT, "ethan"), TOKENS, MAX_FRAMES), spoken, 8)


def test_thinker_that_wrote_nothing(talker_addr: str, local_talker: TalkerModel) -> None:
    msgs = [start(), *conditioning(torch.empty(0, 0)), text_end()]
    spoken = asyncio.run(speak(talker_addr, msgs))
    ref = reference(local_talker, SpeechPrompt(TEXT_PROMPT, "ethan"), [], MAX_FRAMES)
    assert_same_codes(ref, spoken, min_frames=min(8, ref.codes.shape[1]))


def test_thinker_end_token_ends_the_text(talker_addr: str, local_talker: TalkerModel) -> None:
    """An end-of-turn id in the text is the end of the text (as the thinker forwards it before text_end)."""
    msgs = [start(), text([1000, 1001, T.IM_END]), text_end()]  # no conditioning: fine without media
    spoken = asyncio.run(speak(talker_addr, msgs))
    assert_same_codes(reference(local_talker, SpeechPrompt(TEXT_PROMPT, "ethan"), [1000, 1001], MAX_FRAMES),
                      spoken, 8)


def test_max_tokens_caps_frames_and_codes_are_optional(talker_addr: str) -> None:
    msgs = text_only(return_codes=False, talker_sampling=common_pb2.SamplingParams(temperature=0, max_tokens=5))
    spoken = asyncio.run(speak(talker_addr, msgs))
    assert spoken.finished.num_frames == 5 and spoken.finished.finish_reason == common_pb2.FINISH_REASON_LENGTH
    assert [c.num_frames for c in spoken.chunks] == [4, 1]
    assert all(not c.codes for c in spoken.chunks)


def test_seeded_sampling_uses_the_model_defaults(talker_addr: str, local_talker: TalkerModel) -> None:
    """Unset fields take the config defaults (the model's); a seed makes a sampled answer reproducible."""
    def sampled(seed: int) -> Spoken:
        msgs = text_only(greedy=False, talker_sampling=common_pb2.SamplingParams(seed=seed))
        return asyncio.run(speak(talker_addr, msgs))

    a, b, other = sampled(7), sampled(7), sampled(8)
    assert torch.equal(a.codes, b.codes) and not torch.equal(a.codes, other.codes)
    (local,) = lockstep_generate(local_talker, [SpeechPrompt(TEXT_PROMPT, "ethan")], [iter(TOKENS)],
                                 [TalkerSampling(seed=7)], max_frames=MAX_FRAMES,
                                 thinker_eos=frozenset({T.IM_END, T.ENDOFTEXT}))
    assert torch.equal(a.codes, local.codes)


def test_gateway_talker_client_streams_audio(talker_addr: str) -> None:
    """The gateway's own client drives the stage: conditioning, tokens as they come, end; audio then done."""
    async def run() -> tuple[list[common_pb2.AudioChunk], SpeechDone]:
        feed = TalkerFeed()
        feed.conditioning(torch.empty(0, 0))
        feed.tokens(TOKENS[:8])
        chunks: list[common_pb2.AudioChunk] = []
        done = None
        async with grpc.aio.insecure_channel(talker_addr) as channel:
            client = TalkerClient(channel, Metrics("gateway", "test"))
            setup = SpeakSetup("gw", "aiden", TEXT_PROMPT, [], return_codes=True)
            async for item in client.speak(setup, feed, timeout=60):
                if isinstance(item, SpeechDone):
                    done = item
                else:
                    chunks.append(item)
                    if len(chunks) == 1:
                        feed.tokens(TOKENS[8:])
                        feed.end()
        assert done is not None
        return chunks, done

    chunks, done = asyncio.run(run())
    assert chunks and done.num_frames == sum(c.num_frames for c in chunks) > 0
    assert done.audio_seconds == pytest.approx(sum(len(c.pcm16) for c in chunks) / 2 / 24000)

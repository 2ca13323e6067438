"""Concurrent Speak calls with different voices, prompts and text lengths batch together and each says what it
says alone."""
from __future__ import annotations

import asyncio

import torch

from services.talker.model.load import TalkerModel
from services.talker.model.prompt import SpeechPrompt
from tests.integration.mesh_process import Proc
from tests.integration.talker.conftest import MAX_FRAMES
from tests.integration.talker.talker_calls import (
    TEXT_PROMPT, assert_same_codes, conditioning, media_prompt, metric, reference, speak, start, text, text_end,
)


def test_concurrent_voices_each_equal_their_alone_result(talker_stage: Proc, talker_addr: str,
                                                          local_talker: TalkerModel) -> None:
    port = talker_stage.ports["metrics_port"]
    steps0 = metric(port, "omnimesh_batch_size_count")
    rows0 = metric(port, "omnimesh_batch_size_sum")
    queued0 = metric(port, "omnimesh_queue_time_seconds_count")
    iterations0 = metric(port, "omnimesh_step_time_seconds_count")
    mp = media_prompt(seed=2)
    texts = [list(range(2000, 2012)), list(range(3000, 3004)), list(range(4000, 4020))]
    calls = [
        [start(voice="ethan"), *conditioning(torch.empty(0, 0)), text(texts[0]), text_end()],
        [start(mp.ids, voice="chelsie", media=mp.spans), *conditioning(mp.hidden), text(texts[1]), text_end()],
        [start(TEXT_PROMPT, voice="aiden"), *conditioning(torch.empty(0, 0)), text(texts[2][:5]), text(texts[2][5:]),
         text_end()],
    ]

    async def together() -> list:
        return await asyncio.gather(*(speak(talker_addr, c) for c in calls))

    spoken = asyncio.run(together())
    prompts = [SpeechPrompt(TEXT_PROMPT, "ethan"), mp.speech_prompt("chelsie"), SpeechPrompt(TEXT_PROMPT, "aiden")]
    for prompt, tokens, got in zip(prompts, texts, spoken):
        assert_same_codes(reference(local_talker, prompt, tokens, MAX_FRAMES), got, min_frames=8)
    assert not torch.equal(spoken[0].codes[:, :4], spoken[2].codes[:, :4])  # same prompt, another voice
    steps = metric(port, "omnimesh_batch_size_count") - steps0
    rows = metric(port, "omnimesh_batch_size_sum") - rows0
    frames = sum(s.finished.num_frames for s in spoken)
    assert rows == frames, "every frame is one row of one talker step"
    assert steps < frames, f"{steps} steps for {frames} frames: the requests never shared a step"
    assert metric(port, "omnimesh_queue_time_seconds_count") - queued0 == 3
    assert metric(port, "omnimesh_step_time_seconds_count") - iterations0 >= steps
    assert metric(port, "omnimesh_requests_running") == 0

"""The speech engine on CUDA as the stage builds it (bf16, frame, prefill and Code2Wav graphs): its frames on a
high-priority stream, decodes in flight beside them, give the codes and samples of the default-priority engine."""
from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
import torch

from runtime.config import SpeechConfig
from runtime.engine.engine_loop import EngineLoop
from runtime.metrics import Metrics
from services.talker.build import build_runner
from services.talker.model.load import load_talker_model
from services.talker.model.prompt import SpeechPrompt
from services.talker.model.sampling import TalkerSampling
from services.talker.request import AudioOut, SpeakInput
from services.talker.speech_core import MoreText, SpeechCore, TextEnd
from tests.parity.talker.talker_reference import text_prompt

pytestmark = pytest.mark.gpu

FRAMES = 40
# The plain engine: default-priority frames, one decode at a time (the config's defaults are the fast ones).
SPEECH = SpeechConfig(max_rows=4, max_frames=FRAMES, max_prompt_tokens=32, first_chunk_frames=4, chunk_frames=8,
                      prioritize_frames=False, decodes_in_flight=1)


def _speak(demo_ckpt: Path, speech: SpeechConfig) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(codes, samples) of one seeded request, and the priority of the engine thread's stream."""
    model = load_talker_model(demo_ckpt, "cuda", torch.bfloat16)
    core = SpeechCore(build_runner(model, speech), speech, frozenset({model.cfg.thinker_eos}))
    engine = EngineLoop(core, Metrics("talker", "t"))
    try:
        assert core.frame_stream is not None
        priority = core.frame_stream.priority

        async def run() -> list[AudioOut]:
            inp = SpeakInput("r", SpeechPrompt(text_prompt([200, 300]), "ethan"), TalkerSampling(seed=3), FRAMES,
                             return_codes=True)
            stream = engine.submit(0, inp, "r")
            stream.send(MoreText(0, list(range(10, 30))))
            stream.send(TextEnd(0))
            chunks = []
            while isinstance(out := await asyncio.wait_for(stream.next(), 60), AudioOut):
                chunks.append(out)
            return chunks

        chunks = asyncio.run(run())
    finally:
        engine.close()
    return torch.cat([c.codes for c in chunks]), torch.cat([c.samples for c in chunks]), priority


def test_prioritized_frames_with_decodes_in_flight_give_the_same_speech(demo_ckpt: Path) -> None:
    codes, samples, default_priority = _speak(demo_ckpt, SPEECH)
    fast = dataclasses.replace(SPEECH, prioritize_frames=True, decodes_in_flight=3)
    got_codes, got_samples, priority = _speak(demo_ckpt, fast)
    assert priority < default_priority == 0  # lower is higher: the frames go first
    assert codes.shape[0] > 8 and torch.equal(got_codes, codes)
    assert torch.equal(got_samples, samples)  # the same kernels on the same inputs, only the streams differ

"""The reference lockstep driver of the talker (test-only): several requests spoken together by `TalkerRunner`,
each pulling its thinker tokens only as its talker needs them, as the thinker would stream them."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from services.talker.model.generate import TalkerRunner
from services.talker.model.load import TalkerModel
from services.talker.model.prompt import SpeechPrompt
from services.talker.model.sampling import GREEDY, TalkerSampling


@dataclass(frozen=True)
class SpeechResult:
    codes: torch.Tensor  # (G, T) frames, codebook 0 first
    margins: torch.Tensor | None  # top-2 logit gap of every choice (frame-major, codebook 0 first), when recorded


@torch.no_grad()
def lockstep_generate(
    model: TalkerModel,
    prompts: Sequence[SpeechPrompt],
    text_streams: Sequence[Iterable[int]],
    samplings: Sequence[TalkerSampling] | None = None,
    max_frames: int = 4095,
    record_margins: bool = False,
    thinker_eos: frozenset[int] | None = None,
) -> list[SpeechResult]:
    """Speak several requests together, pulling each row's thinker tokens only as its talker needs them.

    `text_streams[i]` yields request i's generated thinker ids (an end-of-turn id or exhaustion ends it), the
    way the thinker streams them; the talker starts on the first one, so speech lags text by two tokens.
    """
    samplings = samplings or [GREEDY] * len(prompts)
    capacity = max(len(p.prompt_ids) for p in prompts) + 9 + max_frames + 1
    runner = TalkerRunner(model, len(prompts), capacity, record_margins)
    streams = [iter(s) for s in text_streams]
    states = [
        runner.start(p, next(it, None), smp, max_frames, str(i), thinker_eos)
        for i, (p, it, smp) in enumerate(zip(prompts, streams, samplings))
    ]
    frames: list[list[torch.Tensor]] = [[] for _ in states]
    while active := [i for i, s in enumerate(states) if not s.finished]:
        for i in active:
            while not states[i].text_done and not states[i].text:
                token = next(streams[i], None)
                states[i].finish_text() if token is None else states[i].push_text(token)
        out = runner.step([states[i] for i in active])
        for i, row in zip(active, out):
            frames[i].append(row)
    g = model.cfg.num_code_groups
    return [
        SpeechResult(
            torch.stack(f, dim=1) if f else torch.zeros(g, 0, dtype=torch.long),
            torch.tensor(s.margins) if record_margins else None,
        )
        for f, s in zip(frames, states)
    ]

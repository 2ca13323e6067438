"""One speech request's state between talker steps: its cache slot, pending code, sampling, and text still to speak."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import torch

from services.talker.model.sampling import TalkerSampling


@dataclass(eq=False)
class TalkerState:
    """Per-row state the talker loop reads and advances; the engine keeps one per running request.

    Text arrives as thinker token ids (`push_text`, `finish_text`); step t of the talker consumes one
    (the assistant's text token t+2, counting the first as 1), then `tts_eos` once, then `tts_pad` forever.
    A row is ready to step when it has that next text entry or the thinker has finished.
    """

    request_id: str
    sampling: TalkerSampling
    max_frames: int
    thinker_eos: frozenset[int]
    tts_eos: int
    tts_pad: int
    generator: torch.Generator | None = None
    slot: int = -1
    cache_len: int = 0
    next_position: float = 0.0
    code0: int = -1  # codebook-0 code of the next frame, sampled by the last talker forward
    # (hidden,) final-normed talker state that produced `code0`; the reference loop reads it, the fast frames
    # keep it in the runner's slot tables instead (so it is only set by the prefill there)
    last_hidden: torch.Tensor | None = None
    seen: torch.Tensor | None = None  # (talker vocab,) bool: codes generated so far (repetition penalty)
    next_noise: torch.Tensor | None = None  # next frame's uniforms, drawn ahead while the GPU ran this one
    text: deque[int] = field(default_factory=deque)
    text_done: bool = False
    num_frames: int = 0
    finished: bool = False
    margins: list[float] = field(default_factory=list)  # top-2 logit gap of every choice in order, when recorded

    def push_text(self, token_id: int) -> None:
        """One new thinker token; an end-of-turn id becomes `tts_eos` and closes the text."""
        if self.text_done:
            return
        if token_id in self.thinker_eos:
            self.finish_text()
        else:
            self.text.append(token_id)

    def finish_text(self) -> None:
        """The thinker stopped (end of turn, length limit or cancel): speak what is queued, then stop."""
        if not self.text_done:
            self.text.append(self.tts_eos)
            self.text_done = True

    @property
    def is_ready(self) -> bool:
        return not self.finished and (bool(self.text) or self.text_done)

    def next_text(self) -> int:
        if self.text:
            return self.text.popleft()
        if not self.text_done:
            raise RuntimeError(f"request {self.request_id}: stepped before its next thinker token arrived")
        return self.tts_pad

"""One Speak request inside the engine: text received so far, its talker row, its Code2Wav stream and its outputs."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from services.talker.model.code2wav_stream import StreamingCode2Wav
from services.talker.model.state import TalkerState
from services.talker.request import SAMPLE_RATE, AudioOut, FinishedOut, SpeakInput, SpeechFinish


@dataclass(eq=False)
class SpeechJob:
    """Engine-side state of one request; touched only by the engine thread once submitted."""

    job_id: int
    inp: SpeakInput
    stream: StreamingCode2Wav
    text: list[int] = field(default_factory=list)  # thinker ids that arrived before the talker row started
    text_ended: bool = False
    state: TalkerState | None = None  # set when the row starts (prefill)
    # (G,) device codes per frame, when codes are returned: read back with the chunk's audio, not one sync per frame
    frames: list[torch.Tensor] = field(default_factory=list)
    emitted_frames: int = 0  # frames already covered by audio chunks
    emitted_samples: int = 0
    chunks: int = 0
    submitted: float = field(default_factory=time.monotonic)
    first_text_at: float | None = None  # when the thinker's first token arrived
    prefill_seconds: float = 0.0
    queue_seconds: float = 0.0
    compute_seconds: float = 0.0

    @property
    def can_start(self) -> bool:
        """The prefill needs the thinker's first token, or to know that there will be none."""
        return bool(self.text) or self.text_ended

    @property
    def first_token(self) -> int | None:
        return self.text[0] if self.text else None

    def add_text(self, token_ids: list[int]) -> None:
        if self.first_text_at is None and token_ids:
            self.first_text_at = time.monotonic()
        if self.state is None:
            self.text.extend(token_ids)
        else:
            for t in token_ids:
                self.state.push_text(t)

    def end_text(self) -> None:
        if self.first_text_at is None:
            self.first_text_at = time.monotonic()
        self.text_ended = True
        if self.state is not None:
            self.state.finish_text()

    def started(self, state: TalkerState) -> None:
        """The row exists: text that waited for it goes into its queue (the first id is in the prefill)."""
        self.state = state
        self.queue_seconds = time.monotonic() - self.submitted
        for t in self.text[1:]:
            state.push_text(t)
        if self.text_ended:
            state.finish_text()
        self.text = []

    def add_frame(self, frame: torch.Tensor) -> None:
        self.stream.push(frame)
        if self.inp.return_codes:
            self.frames.append(frame)

    @property
    def is_done(self) -> bool:
        """Finished talking and every frame decoded: only the finish message is left."""
        return self.state is not None and self.state.finished and self.stream.decoded_frames == self.stream.num_frames

    def audio(self, samples: torch.Tensor) -> AudioOut:
        """The chunk for the host samples that the frames decoded since the last chunk produced."""
        lo, hi = self.emitted_frames, self.stream.decoded_frames
        codes = None
        if self.inp.return_codes:  # [frames, G]; `frames` holds the frames from `emitted_frames` on
            codes = torch.stack(self.frames[: hi - lo]).cpu()
            del self.frames[: hi - lo]
        out = AudioOut(self.chunks, samples, hi - lo, codes)
        self.chunks += 1
        self.emitted_frames = hi
        self.emitted_samples += samples.numel()
        return out

    def first_audio_timeline(self) -> str:
        """Where the time to this request's first audio went (ms since it reached the engine), for a debug log."""
        now = time.monotonic()
        first_text = (self.first_text_at or now) - self.submitted
        opened = ("" if self.inp.opened_at is None
                  else f"submitted {1e3 * (self.submitted - self.inp.opened_at):.1f} ms after its call opened, ")
        return (f"{opened}first thinker token +{1e3 * first_text:.1f} ms, "
                f"row started +{1e3 * self.queue_seconds:.1f} ms, prefill {1e3 * self.prefill_seconds:.1f} ms, "
                f"first audio +{1e3 * (now - self.submitted):.1f} ms after {self.emitted_frames} frames, "
                f"talker compute {1e3 * self.compute_seconds:.1f} ms")

    def finished(self) -> FinishedOut:
        assert self.state is not None
        reason = SpeechFinish.LENGTH if self.state.num_frames >= self.state.max_frames else SpeechFinish.STOP
        return FinishedOut(reason, self.state.num_frames, self.emitted_samples / SAMPLE_RATE, self.queue_seconds,
                           self.compute_seconds)

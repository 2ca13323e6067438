"""The transformers reference for talker parity: capture `generate`'s talker codes and thinker hidden states."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from runtime.checkpoint import token_ids as T
from tests.talker_lockstep import SpeechResult

NEAR_TIE = 1e-4  # a top-2 logit gap below this may flip under fp32 reordering; parity stops counting there

SYSTEM_TURN = [T.IM_START, T.SYSTEM, T.NEWLINE, 1000, 1001, T.IM_END, T.NEWLINE]
ASSISTANT_HEADER = [T.IM_START, T.ASSISTANT, T.NEWLINE]


def user_turn(body: list[int]) -> list[int]:
    return [T.IM_START, T.USER, T.NEWLINE, *body, T.IM_END, T.NEWLINE]


def text_prompt(words: list[int]) -> list[int]:
    return SYSTEM_TURN + user_turn(words) + ASSISTANT_HEADER


@dataclass(frozen=True)
class ReferenceSpeech:
    sequences: list[int]  # prompt + generated thinker ids
    prompt_len: int
    codes: torch.Tensor  # (G, T) talker codes that generate() handed to code2wav
    wav: torch.Tensor  # what generate() returned
    thinker_hidden: torch.Tensor  # (prompt_len, thinker hidden) at layer accept_hidden_layer

    @property
    def generated(self) -> list[int]:
        return self.sequences[self.prompt_len :]

    def spoken_text(self, eos: int) -> list[int]:
        """The thinker ids the reference speaks: it never embeds the last generated token, so without an EOS
        the last one is dropped (its place is taken by `tts_eos`)."""
        gen = self.generated
        return gen if gen and gen[-1] == eos else gen[:-1]

    def media_hidden(self, prompt: list[int], user_positions: list[int]) -> torch.Tensor:
        pads = {T.AUDIO_PAD, T.IMAGE_PAD, T.VIDEO_PAD}
        rows = [i for i in user_positions if prompt[i] in pads]
        return self.thinker_hidden[rows]


@torch.no_grad()
def reference_speech(hf_omni: Any, prompt: list[int], voice: str, eos: int, max_text: int, max_frames: int,
                     **media: Any) -> ReferenceSpeech:  # fmt: skip
    """Greedy `generate` (thinker and talker), capturing the codes and the thinker's hidden states on the way."""
    captured: dict[str, Any] = {}
    decode, think = hf_omni.code2wav.chunked_decode, hf_omni.thinker.generate

    def capture_codes(codes: torch.Tensor, **kw: Any) -> torch.Tensor:
        captured["codes"] = codes[0].clone()
        return decode(codes, **kw)

    def capture_thinker(*args: Any, **kw: Any) -> Any:
        captured["thinker"] = out = think(*args, **kw)
        return out

    hf_omni.code2wav.chunked_decode, hf_omni.thinker.generate = capture_codes, capture_thinker
    try:
        ids = torch.tensor([prompt])
        seq, wav = hf_omni.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), speaker=voice, thinker_max_new_tokens=max_text,
            thinker_eos_token_id=eos, talker_max_new_tokens=max_frames + 1, talker_do_sample=False,
            thinker_do_sample=False, **media,
        )  # fmt: skip
    finally:
        del hf_omni.code2wav.chunked_decode, hf_omni.thinker.generate  # back to the class methods
    accept = hf_omni.config.talker_config.accept_hidden_layer
    hidden = captured["thinker"].hidden_states[0][accept][0]
    return ReferenceSpeech(seq[0].tolist(), len(prompt), captured["codes"], wav, hidden)


def assert_codes_match(ref: torch.Tensor, ours: SpeechResult, min_frames: int = 1) -> int:
    """Our greedy codes equal the reference's, choice by choice (frame-major), up to the first near-tie.

    Returns how many frames matched whole. A difference is only allowed where our own top-2 logit gap at
    that choice was below NEAR_TIE (then everything after it may differ).
    """
    assert ours.margins is not None, "run with record_margins=True"
    groups = ref.shape[0]
    a, b = ref.T.reshape(-1).tolist(), ours.codes.T.reshape(-1).tolist()  # (G, T) -> frame-major choices
    for i in range(max(len(a), len(b))):
        same = i < len(a) and i < len(b) and a[i] == b[i]
        if not same:
            gap = float(ours.margins[i]) if i < len(ours.margins) else float("inf")
            assert gap < NEAR_TIE, (
                f"codes differ at frame {i // groups} codebook {i % groups} (ref {a[i] if i < len(a) else 'end'}, "
                f"ours {b[i] if i < len(b) else 'end'}) where our top-2 gap was {gap:.3g}, not a near-tie"
            )
            matched = i // groups
            assert matched >= min_frames, f"only {matched} frames matched before a near-tie"
            return matched
    return ref.shape[1]

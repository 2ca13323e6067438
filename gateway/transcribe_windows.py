"""Partial transcripts of a TranscribeStream that reuse the work of the partials before them.

What the front end and the encoder make of audio that grows (found in services/audio):

* The AuT encoder (services/audio/model) cuts a clip's log-mel into 1 s chunks (2 * n_window = 100 frames; positions
  restart in each) and attends within windows of n_window_infer frames (800: 8 s, 104 tokens) that start at the
  clip's first frame and never cross clips. So, for a fixed log-mel, the rows of the first N whole windows do not
  depend on any frame after them: a later frame only changes the window it falls in.
* The log-mel (services/audio/features.py, Whisper's) is not so local. (a) Each clip is floored at its own peak
  minus 80 dB (`peak - DYNAMIC_RANGE`, a clip-wide max), so louder audio arriving later can raise the floor of every
  earlier frame (only bins more than 80 dB below the loudest one change: digital silence, near-silent gaps).
  (b) The STFT is centred with reflect padding: a frame sees 200 samples either side, so the first two and last
  frames of a window cut out as a clip of its own see mirrored samples instead of their neighbours' (and the last
  frame of the audio so far changes when more arrives).
* Qwen3-ASR zero-pads clips shorter than 0.5 s; resampling (gateway/media/audio.py, a polyphase FIR) makes each
  16 kHz sample from about 20 input samples either side, so only the last few samples so far change as more come.

So no reuse is exact for the whole-file result; the final transcript is therefore never made here: it is the
whole-file Transcribe of all the samples (gateway/transcribe_stream.py), as before.

For partials, the audio so far (16 kHz, as the whole-file path decodes it) is cut at the encoder's attention
windows: every whole window is a clip of its own, the rest (the tail) one more. A finished window's embeddings are
kept per stream under the sha256 of its samples and never encoded again; each partial sends only the new windows and
the tail to the audio stage. The prompt is the whole-file one token for token (`<|audio_start|>`, the same number of
`<|audio_pad|>`, `<|audio_end|>`), but its audio item goes to the thinker as back-to-back spans, one per piece, each
salted with its piece's hash: the thinker's prefix cache keys blocks by the content hashes of the spans they
overlap, so every block up to the tail's first is found cached on the next partial, and only the tail is prefilled.

Partials are approximate in two ways, both bounded to the partials: a piece's log-mel is made from that piece alone
(its own peak floor, reflect padding at its two ends instead of the neighbouring samples), and a tail shorter than
0.5 s is left out of that partial (it is heard in the next one, and in the final transcript).
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from omnimesh.v1 import thinker_pb2
from runtime.audio_lengths import HOP_LENGTH, audio_token_count, mel_frame_count
from runtime.errors import InvalidArgument, StageFault
from gateway.chat_input import ChatInput
from gateway.clients.encoders import AudioClient
from gateway.clients.thinker import ThinkerPrompt
from gateway.media.audio import TARGET_RATE, resample
from gateway.media_prep import DecodedMedia
from gateway.service import OmniService

DEFAULT_WINDOW_FRAMES = 800  # Qwen3-ASR's n_window_infer: 8 s attention windows
DEFAULT_WINDOW_SAMPLES = DEFAULT_WINDOW_FRAMES * HOP_LENGTH
MIN_TAIL_SAMPLES = 8_000  # Qwen3-ASR pads shorter clips to 0.5 s; a tail is never padded, it waits instead
SALT = "aut-window:"  # these rows come from a piece encoded alone: never the same KV as a whole clip's rows


def window_samples(audio_config: dict) -> int:
    """16 kHz samples per encoder attention window, from the checkpoint's audio_config."""
    frames = int(audio_config.get("n_window_infer", DEFAULT_WINDOW_FRAMES))
    if frames <= 0:
        raise ValueError(f"audio_config.n_window_infer={frames} is invalid: the encoder needs a positive window")
    return frames * HOP_LENGTH


def stream_samples(pcm16: bytes, sample_rate: int) -> np.ndarray:
    """The PCM as the whole-file path decodes its WAV: float32 in [-1, 1) (x / 32768, as libsndfile reads 16-bit),
    resampled to 16 kHz the same way."""
    samples = np.frombuffer(pcm16, dtype="<i2").astype(np.float32) / np.float32(32768.0)
    return resample(samples, sample_rate, TARGET_RATE).astype(np.float32, copy=False)


@dataclass(frozen=True)
class Piece:
    samples: np.ndarray  # float32, 16 kHz
    content_hash: str
    finished: bool  # a whole attention window: its embeddings never change, so they are kept

    @property
    def num_tokens(self) -> int:
        return audio_token_count(mel_frame_count(self.samples.shape[0]))


def cut(samples: np.ndarray, window: int, min_tail: int = MIN_TAIL_SAMPLES) -> list[Piece]:
    """Whole windows, then the rest if it is at least `min_tail` samples."""
    pieces = []
    for start in range(0, samples.shape[0], window):
        part = samples[start:start + window]
        finished = part.shape[0] == window
        if not finished and part.shape[0] < min_tail:
            break
        digest = hashlib.sha256(part.astype("<f4", copy=False).tobytes()).hexdigest()
        pieces.append(Piece(part, SALT + digest, finished))
    return pieces


class WindowCache:
    """One stream's finished windows' embeddings, by content hash; counts the samples it had encoded."""

    def __init__(self) -> None:
        self.kept: dict[str, torch.Tensor] = {}
        self.encoded_samples = 0  # samples sent to the audio stage, every partial of this stream together

    async def embeddings(self, audio: AudioClient, request_id: str, pieces: Sequence[Piece],
                         timeout: float | None) -> list[torch.Tensor]:
        """Each piece's [tokens, hidden] rows: kept ones as they are, the others from one Encode call."""
        todo = [p for p in pieces if p.content_hash not in self.kept]
        got: dict[str, torch.Tensor] = {}
        if todo:
            clips = [torch.from_numpy(np.ascontiguousarray(p.samples)) for p in todo]
            rows = await audio.encode(request_id, clips, timeout)
            self.encoded_samples += sum(c.numel() for c in clips)
            for p, emb in zip(todo, rows):
                if emb.shape[0] != p.num_tokens:
                    raise StageFault(f"audio stage returned {emb.shape[0]} rows for a {p.samples.shape[0]}-sample "
                                     f"clip; the prompt reserves {p.num_tokens}", "audio")
                got[p.content_hash] = emb
        out = [self.kept.get(p.content_hash, got.get(p.content_hash)) for p in pieces]
        # keep only the windows of this audio: a window whose samples changed (resampling's last samples) is dropped
        self.kept = {p.content_hash: e for p, e in zip(pieces, out) if p.finished}
        return out


def audio_client(service: OmniService) -> AudioClient | None:
    return next((c for c in service.media.encoders if isinstance(c, AudioClient)), None)


async def partial_prompt(service: OmniService, chat: ChatInput, pieces: Sequence[Piece],
                         embeddings: Sequence[torch.Tensor]) -> ThinkerPrompt:
    """The whole-file prompt of the pieces' audio, its audio item sent as one span per piece."""
    (media,) = chat.media
    total = sum(p.num_tokens for p in pieces)
    placeholder = DecodedMedia("audio", media.field, total, SALT)
    prompt = service.prompts.build(chat, [placeholder])
    context_len = await service.max_model_len()
    if len(prompt.ids) >= context_len:
        raise InvalidArgument("pcm16", f"the audio so far makes a {len(prompt.ids)}-token prompt; the model's context "
                                       f"is {context_len} tokens; send less audio per stream")
    (span,) = prompt.spans
    spans, tensors, offset = [], {}, span.start
    for i, (piece, emb) in enumerate(zip(pieces, embeddings)):
        spans.append(thinker_pb2.MediaSpan(kind=thinker_pb2.MEDIA_KIND_AUDIO, offset=offset, length=piece.num_tokens,
                                           content_hash=piece.content_hash))
        tensors[f"media.{i}.embeddings"] = emb
        offset += piece.num_tokens
    return ThinkerPrompt(chat.request_id, prompt.ids, spans, tensors)

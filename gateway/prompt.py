"""Chat turns -> the thinker's prompt: chat template applied, media placeholders expanded (and interleaved, or laid out
one timestamped block per video frame for Qwen3.5)."""
from __future__ import annotations

from pathlib import Path

from runtime.checkpoint.family import read_family
from runtime.chat_template import ChatMessage, MediaPart, MediaSpan, PromptIds, TextPart, build_prompt_ids
from runtime.chat_template import load_chat_template
from runtime.tokenizer import Tokenizer
from gateway.chat_input import ChatInput
from gateway.media_prep import DecodedMedia
from gateway.video_frames import lay_out_frames


class PromptBuilder:
    """Holds the checkpoint's tokenizer, chat template and the M-RoPE time scale that orders audio in video."""

    def __init__(self, tokenizer: Tokenizer, template: str, position_id_per_seconds: int,
                 allow_special_tokens: bool = False) -> None:
        self.tokenizer = tokenizer
        self.template = template
        self.position_id_per_seconds = position_id_per_seconds
        self.allow_special_tokens = allow_special_tokens  # else `<|im_start|>` in a request's text is plain text
        self._ids = {name: tokenizer.token_id(tok) for name, tok in (
            ("audio_start", "<|audio_start|>"), ("audio_end", "<|audio_end|>"), ("audio_pad", "<|audio_pad|>"),
            ("video_pad", "<|video_pad|>"))}

    @classmethod
    def from_dir(cls, model_dir: Path, allow_special_tokens: bool = False) -> PromptBuilder:
        thinker = read_family(model_dir).thinker
        return cls(Tokenizer.from_dir(model_dir), load_chat_template(model_dir),
                   int(thinker.get("position_id_per_seconds", 13)), allow_special_tokens)

    def build(self, chat: ChatInput, decoded: list[DecodedMedia]) -> PromptIds:
        messages = [ChatMessage(t.role, [TextPart(p) if isinstance(p, str) else MediaPart(p.kind) for p in t.parts])
                    for t in chat.turns]
        prompt = build_prompt_ids(self.tokenizer, self.template, messages, [d.num_tokens for d in decoded],
                                  add_generation_prompt=not chat.continue_final,
                                  special_in_text=self.allow_special_tokens or chat.special_tokens,
                                  continue_final_message=chat.continue_final)
        if any(d.timestamps for d in decoded):
            return lay_out_frames(prompt, [d.timestamps for d in decoded], self.tokenizer)
        if not any(d.with_track for d in decoded):
            return prompt
        return self._interleave_tracks(prompt, decoded)

    def _interleave_tracks(self, prompt: PromptIds, decoded: list[DecodedMedia]) -> PromptIds:
        """Each video heard with its sound track becomes `<|audio_start|>` + video and audio placeholders ordered
        by time (video first on ties) + `<|audio_end|>` inside its vision markers, as the reference processor lays
        it out."""
        ids: list[int] = []
        spans: list[MediaSpan] = []
        cursor = 0
        for span in prompt.spans:
            d = decoded[span.index]
            ids.extend(prompt.ids[cursor:span.start])
            cursor = span.start + span.length
            if not d.with_track:
                spans.append(span._replace(start=len(ids)))
                ids.extend(prompt.ids[span.start:cursor])
                continue
            ids.append(self._ids["audio_start"])
            body = self._interleaved(d)
            spans.append(MediaSpan("audio_in_video", len(ids), len(body), span.index))
            ids.extend(body)
            ids.append(self._ids["audio_end"])
        ids.extend(prompt.ids[cursor:])
        return PromptIds(ids, spans)

    def _interleaved(self, d: DecodedMedia) -> list[int]:
        assert d.vision is not None
        t = d.vision.grid_thw[0]
        per_grid = d.num_tokens // t  # merged tokens of one temporal grid
        video_times = [k * d.second_per_grid * self.position_id_per_seconds for k in range(t) for _ in range(per_grid)]
        body, v, a = [], 0, 0
        while v < len(video_times) and a < d.track_tokens:
            if video_times[v] <= a:  # audio token a sits at time a
                body.append(self._ids["video_pad"])
                v += 1
            else:
                body.append(self._ids["audio_pad"])
                a += 1
        body += [self._ids["video_pad"]] * (len(video_times) - v) + [self._ids["audio_pad"]] * (d.track_tokens - a)
        return body

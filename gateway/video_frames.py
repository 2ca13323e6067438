"""Qwen3.5's video layout (the Qwen3-VL processor's): a video's placeholders become, per temporal patch, its timestamp
text, then `<|vision_start|>`, that frame's placeholders and `<|vision_end|>`. Each frame block is a media span of its
own, since the reference's M-RoPE index places every frame as a one-frame grid after its timestamp."""
from __future__ import annotations

from collections.abc import Sequence

from runtime.chat_template import MediaSpan, PromptIds
from runtime.tokenizer import Tokenizer
from gateway.media.qwen3_vl_video import timestamp_text


def lay_out_frames(prompt: PromptIds, timestamps: Sequence[tuple[float, ...]], tokenizer: Tokenizer) -> PromptIds:
    """`timestamps[i]`: media item i's temporal patch times (empty: the item stays one span, as laid out). A
    timestamped item's span is replaced by its frame blocks; the spans keep the item's index, in frame order."""
    vision_start, vision_end = tokenizer.token_id("<|vision_start|>"), tokenizer.token_id("<|vision_end|>")
    ids: list[int] = []
    spans: list[MediaSpan] = []
    cursor = 0
    for span in prompt.spans:
        ids.extend(prompt.ids[cursor:span.start])
        cursor = span.start + span.length
        times = timestamps[span.index]
        if not times:
            spans.append(span._replace(start=len(ids)))
            ids.extend(prompt.ids[span.start:cursor])
            continue
        per_frame, rest = divmod(span.length, len(times))
        assert rest == 0, "a video's tokens split evenly over its temporal patches"
        pad = prompt.ids[span.start]
        for seconds in times:
            ids.extend(tokenizer.encode(timestamp_text(seconds), allow_special=False))
            ids.append(vision_start)
            spans.append(MediaSpan(span.kind, len(ids), per_frame, span.index))
            ids.extend([pad] * per_frame)
            ids.append(vision_end)
    ids.extend(prompt.ids[cursor:])
    return PromptIds(ids, spans)

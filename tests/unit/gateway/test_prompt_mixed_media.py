"""PromptBuilder with a video heard with its sound track beside media that are not: the heard video's placeholders
interleave with its audio as transformers' processor lays them out; an image and a silent video keep their plain
placeholders, each at its place."""
from __future__ import annotations

from pathlib import Path

import torch

from gateway.chat_input import ChatInput, MediaBytes, Turn
from gateway.clients.encoders import VisionItemInput
from gateway.media_prep import DecodedMedia
from gateway.prompt import PromptBuilder
from runtime.sampling import SamplingOptions
from tests.integration.test_media_mesh import reference_interleaved_ids


def _media(kind: str, i: int) -> MediaBytes:
    return MediaBytes(kind, b"", "", f"messages[0].content[{i}].{kind}")


def _vision(kind: str, grid: tuple[int, int, int], **fields: object) -> DecodedMedia:
    t, h, w = grid
    frames = torch.zeros(max(1, 2 * t if kind == "video" else 1), h * 16, w * 16, 3, dtype=torch.uint8)
    return DecodedMedia(kind, "f", t * h * w // 4, "hash", VisionItemInput(frames, grid, kind == "video"), **fields)


def test_a_heard_video_interleaves_while_an_image_and_a_silent_video_stay_plain(demo_ckpt: Path) -> None:
    from transformers import AutoTokenizer

    builder = PromptBuilder.from_dir(demo_ckpt)
    heard_grid = (3, 4, 6)
    decoded = [
        _vision("image", (1, 4, 4)),
        _vision("video", heard_grid, second_per_grid=2.0, samples=torch.zeros(48_000), track_tokens=40),
        _vision("video", (2, 4, 4), second_per_grid=1.0),  # no sound track
    ]
    chat = ChatInput("r", (Turn("user", (_media("image", 0), _media("video", 1), _media("video", 2), "Compare.")),),
                     SamplingOptions(), False, "", False, use_audio_in_video=True)
    ours = builder.build(chat, decoded)

    tokenizer = AutoTokenizer.from_pretrained(demo_ckpt)
    content = [{"type": "image"}, {"type": "video"}, {"type": "video"}, {"type": "text", "text": "Compare."}]
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True,
                                             tokenize=False)
    heard = reference_interleaved_ids(tokenizer, "x", torch.tensor([heard_grid]), 2.0, 40)[0].tolist()
    body = tokenizer.decode(heard[heard.index(tokenizer.convert_tokens_to_ids("<|audio_start|>")):
                                  heard.index(tokenizer.convert_tokens_to_ids("<|audio_end|>")) + 1])
    before, first, second = rendered.split("<|video_pad|>")
    rendered = before.replace("<|image_pad|>", "<|image_pad|>" * 4) + body + first + "<|video_pad|>" * 8 + second
    expected = tokenizer(rendered, add_special_tokens=False)["input_ids"]
    assert ours.ids == expected
    assert [(s.kind, s.index) for s in ours.spans] == [("image", 0), ("audio_in_video", 1), ("video", 2)]
    for span in ours.spans:  # each span covers exactly its placeholders
        covered = {expected[i] for i in range(span.start, span.start + span.length)}
        assert covered == {"image": {151655}, "video": {151656}, "audio_in_video": {151656, 151675}}[span.kind]

"""The runner packs a media span a step at a time: each prompt row's embedding (and deepstack feature, for visual rows
only) lands on its packed row, whichever chunk the span is split over."""
from __future__ import annotations

import torch

from services.thinker.request import MediaInput, ThinkerRequest
from services.thinker.runner import _pack_span, _Packed

HIDDEN = 4
LEVELS = 2


def audio_in_video(offset: int = 3, length: int = 10) -> MediaInput:
    mask = tuple(i % 3 != 2 for i in range(length))  # two video rows, then one audio row
    emb = torch.arange(length * HIDDEN, dtype=torch.float32).view(length, HIDDEN)
    deepstack = [emb * 10 ** (k + 1) for k in range(LEVELS)]
    return MediaInput("audio_in_video", offset, length, (2, 2, 2), 1.0, "h", emb, deepstack, visual_mask=mask)


def packed(media: MediaInput, req: ThinkerRequest, chunks: list[tuple[int, int]]) -> _Packed:
    """Every chunk (start, stop) of the prompt packed one after another, as consecutive steps' rows would be."""
    p = _Packed([], [], [], [], [], [[] for _ in range(LEVELS)], [], [], [])
    base = 0
    for start, stop in chunks:
        lo, hi = max(media.offset, start), min(media.end, stop)
        if lo < hi:
            _pack_span(p, req, media, lo, hi, base - start, LEVELS)
        base += stop - start
    return p


def test_a_span_split_over_chunks_packs_every_row_once_and_deepstack_only_on_video_rows() -> None:
    m = audio_in_video()
    req = ThinkerRequest(torch.zeros(3, 16, dtype=torch.long), 0, [m], capture_talker_states=True)
    p = packed(m, req, [(0, 7), (7, 11), (11, 16)])
    assert p.media_rows == list(range(3, 13))  # chunks are back to back, so packed row == prompt row
    torch.testing.assert_close(torch.cat(p.media_values), m.embeddings)
    video = [i for i in range(m.length) if m.visual_mask[i]]
    assert p.visual_rows == [m.offset + i for i in video]
    for level in range(LEVELS):
        torch.testing.assert_close(torch.cat(p.visual_values[level]), m.deepstack[level][video])
    assert [(i, row) for _, i, row in p.capture] == [(i, i) for i in range(3, 13)]


def test_rows_already_captured_are_not_captured_again() -> None:
    m = audio_in_video()
    req = ThinkerRequest(torch.zeros(3, 16, dtype=torch.long), 0, [m], capture_talker_states=True,
                         talker_states={4: torch.zeros(HIDDEN), 5: torch.zeros(HIDDEN)})
    p = packed(m, req, [(2, 9)])  # one chunk starting at prompt row 2: packed row = prompt row - 2
    assert p.media_rows == list(range(1, 7))
    assert [(i, row) for _, i, row in p.capture] == [(3, 1), (6, 4), (7, 5), (8, 6)]


def test_an_image_span_without_a_mask_gives_deepstack_to_every_row() -> None:
    emb = torch.randn(6, HIDDEN)
    m = MediaInput("image", 1, 6, (1, 2, 3), 0.0, "h", emb, [emb + 1, emb + 2])
    req = ThinkerRequest(torch.zeros(3, 8, dtype=torch.long), 0, [m])
    p = packed(m, req, [(0, 4), (4, 8)])
    assert p.visual_rows == p.media_rows == list(range(1, 7))
    torch.testing.assert_close(torch.cat(p.visual_values[1]), emb + 2)
    assert p.capture == []

"""M-RoPE (t, h, w) positions of the talker prompt: text advances all axes, images/videos spread over h and w."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from runtime.errors import InvalidArgument
from services.talker.model.config import TalkerTokens


@dataclass(frozen=True)
class VisualGrid:
    """One image or video as the vision encoder patched it: (t, h, w) in patches; videos also seconds per t step."""

    t: int
    h: int
    w: int
    seconds_per_grid: float = 1.0


class _Scan:
    """Accumulates position blocks `(3, n)`; `next` is where following text starts (last block's max + 1)."""

    def __init__(self) -> None:
        self.blocks: list[torch.Tensor] = []
        self.last_max = torch.tensor(-1.0)
        self.next = torch.tensor(0.0)

    def add(self, block: torch.Tensor) -> None:
        if block.shape[1]:
            self.blocks.append(block)
            self.last_max = block.max()

    def run(self, n: int) -> None:
        """n positions advancing all three axes together."""
        self.add(torch.arange(n, dtype=torch.float32).expand(3, n) + self.next)
        self.next = self.next + n

    def resync(self) -> None:
        self.next = self.last_max + 1

    def positions(self) -> torch.Tensor:
        return torch.cat(self.blocks, dim=1) if self.blocks else torch.zeros(3, 0)


def _vision_block(grid: VisualGrid, seconds: float, per_second: float, merge: int, start: torch.Tensor) -> torch.Tensor:
    """(3, t*h*w/merge^2): t = frame index * seconds * per_second (fp32, that order), h/w the merged row/column."""
    gh, gw = grid.h // merge, grid.w // merge
    t = torch.arange(grid.t) * torch.tensor(seconds, dtype=torch.float32) * per_second
    t = t[:, None, None].expand(grid.t, gh, gw)
    h = torch.arange(gh).float()[None, :, None].expand(grid.t, gh, gw)
    w = torch.arange(gw).float()[None, None, :].expand(grid.t, gh, gw)
    return torch.stack((t.flatten(), h.flatten(), w.flatten())) + start


def _run_length(ids: Sequence[int], at: int, token: int) -> int:
    n = 0
    while at + n < len(ids) and ids[at + n] == token:
        n += 1
    return n


def talker_positions(
    ids: Sequence[int],
    tokens: TalkerTokens,
    images: Sequence[VisualGrid],
    videos: Sequence[VisualGrid],
    spatial_merge_size: int,
    position_id_per_seconds: float,
) -> torch.Tensor:
    """`(3, len(ids))` float32 positions of the talker prompt `ids` (user-turn ids + the 9 assistant pads).

    Without any image or video grid every axis is 0..L-1 (audio spans coincide with that rule). With grids,
    media spans are `start` + body + `end` and the text after a span resumes at max(position so far) + 1.
    Grids are the request's images and videos in prompt order, consumed in the order the spans appear here,
    as the reference does; audio span lengths are read from the run of audio pads. Like the reference, the
    talker never sets `use_audio_in_video`, so a lone `<vision_start><audio_start>` span gets plain text
    positions (the reference raises IndexError when another image or video follows such a span).
    """
    if not images and not videos:
        return torch.arange(len(ids), dtype=torch.float32).expand(3, len(ids)).clone()
    ids, tok = list(ids), tokens
    after_vs = [ids[i + 1] for i, x in enumerate(ids[:-1]) if x == tok.vision_start]
    left = {"image": after_vs.count(tok.image_pad), "video": after_vs.count(tok.video_pad),
            "audio": sum(1 for x in ids if x == tok.audio_start)}  # fmt: skip
    has_vision = tok.image_pad in ids or tok.video_pad in ids
    has_audio = tok.audio_pad in ids
    scan, st, image_i, video_i = _Scan(), 0, 0, 0
    for _ in range(sum(left.values())):
        scan.resync()
        far = len(ids) + 1
        vs = ids.index(tok.vision_start, st) if has_vision and (left["image"] > 0 or left["video"] > 0) else far
        aus = ids.index(tok.audio_start, st) if has_audio and left["audio"] > 0 else far
        at = min(vs, aus)
        scan.run(at - st)
        scan.run(1)  # the span's start token
        if at == aus:
            n = _run_length(ids, at + 1, tok.audio_pad)
            scan.add(torch.arange(n, dtype=torch.float32).expand(3, n) + scan.next)
            st = at + 1 + n + 1
            left["audio"] -= 1
        elif ids[vs + 1] in (tok.image_pad, tok.video_pad):
            is_image = ids[vs + 1] == tok.image_pad
            grid = images[image_i] if is_image else videos[video_i]
            seconds = 1.0 if is_image else grid.seconds_per_grid
            block = _vision_block(grid, seconds, position_id_per_seconds, spatial_merge_size, scan.next)
            scan.add(block)
            st = at + 1 + block.shape[1] + 1
            image_i, video_i = image_i + is_image, video_i + (not is_image)
            left["image" if is_image else "video"] -= 1
        else:
            raise InvalidArgument(
                "prompt_ids", "speech output does not support an audio-in-video span followed by another image or "
                "video (transformers' talker fails on it too); send the audio and the video separately",
            )
        scan.resync()
        scan.run(1)  # the span's end token
    if st < len(ids):
        scan.resync()
        scan.run(len(ids) - st)
    return scan.positions()


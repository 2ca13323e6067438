"""What the thinker keeps per request beside the engine's Sequence: positions, media embeddings, captured states."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class MediaInput:
    """One media item's placeholder span and the embeddings that replace its rows."""

    kind: str  # "image" | "video" | "audio"
    offset: int  # first placeholder index in the prompt
    length: int  # placeholder count == embedding rows
    grid_thw: tuple[int, ...]  # vision grid in patches; () for audio
    second_per_grid: float
    content_hash: str
    embeddings: torch.Tensor  # [length, H]
    deepstack: list[torch.Tensor] = field(default_factory=list)  # vision only: each [length, H]
    visual_mask: tuple[bool, ...] | None = None  # audio-in-video: which rows are video (deepstack goes there only)

    @property
    def end(self) -> int:
        return self.offset + self.length

    @property
    def num_audio_rows(self) -> int:
        if self.kind == "audio":
            return self.length
        return 0 if self.visual_mask is None else self.visual_mask.count(False)


@dataclass
class ThinkerRequest:
    """The Sequence payload of a thinker request."""

    positions: torch.Tensor  # int64 [3, P] M-RoPE (t, h, w) of the prompt
    rope_delta: int  # decode position of token i (i >= P) is i + rope_delta on all three axes
    media: list[MediaInput]
    capture_talker_states: bool = False
    talker_states: dict[int, torch.Tensor] = field(default_factory=dict)  # prompt index -> [H], media rows only

    @property
    def media_rows(self) -> list[int]:
        return [i for m in self.media for i in range(m.offset, m.end)]

    @property
    def talker_states_complete(self) -> bool:
        return len(self.talker_states) == sum(m.length for m in self.media)

    def talker_conditioning(self) -> torch.Tensor:
        """[media rows, H] in prompt order: what the talker needs of the prompt, sent once."""
        rows = self.media_rows
        if not rows:
            return torch.empty(0, 0)
        return torch.stack([self.talker_states[i] for i in rows])

"""A fast frame's per-row inputs, staged on the host and sent to the device in two copies that do not wait.

The rows' text ids, slots, cache lengths and positions change every frame; their sampling settings only when a row
starts, so those (and the sampling mode each row needs) are kept per KV slot and gathered. Everything is written
into two host buffers (pinned on CUDA) and copied over asynchronously: a `torch.tensor(...).to(device)` per field
would cost a host tensor, a pageable copy and a stream synchronisation each, and the synchronisation also waits for
whatever the last frame queued behind it (the rows' next uniforms).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from services.talker.model.frame_step import MODES, NUM_KNOBS, FrameInputs, Mode, frame_mode, knob_row
from services.talker.model.sampling import TalkerSampling

_TEXT, _SLOT, _CACHE_LEN = range(3)  # columns of the long buffer; the float one holds the position, then the knobs


class FrameStaging:
    """Host and device buffers for up to `max_rows` rows; `inputs` fills them for one frame.

    A frame's host buffers are rewritten by the next frame's `inputs`, so their copy must be done by then: `inputs`
    first waits for an event recorded after the last copies (already passed when the runner read the last frame's
    codes before staging this one; a real wait only when the engine launches a frame ahead).
    """

    def __init__(self, max_rows: int, num_slots: int, device: torch.device) -> None:
        pin = self._pinned = device.type == "cuda"
        self._longs = torch.zeros(max_rows, 3, dtype=torch.long, pin_memory=pin)
        self._floats = torch.zeros(max_rows, 1 + NUM_KNOBS, dtype=torch.float32, pin_memory=pin)
        self._longs_np, self._floats_np = self._longs.numpy(), self._floats.numpy()
        self._copied: torch.cuda.Event | None = None  # recorded after the last frame's copies (CUDA)
        self._longs_dev = torch.zeros_like(self._longs, device=device)
        self._floats_dev = torch.zeros_like(self._floats, device=device)
        self._views: dict[int, _Views] = {}  # per row count: slicing them every frame would cost ~10 torch calls
        # per KV slot (and the scratch slot): the sampling settings of the row holding it, set when the row starts
        self._knobs = np.zeros((num_slots + 1, NUM_KNOBS), dtype=np.float32)
        self._modes = [0] * (num_slots + 1)  # per slot: the row's own frame mode, as an index into MODES

    def set_sampling(self, slot: int, sampling: TalkerSampling) -> None:
        self._knobs[slot] = knob_row(sampling)
        self._modes[slot] = MODES.index(frame_mode([sampling]))

    def mode(self, slots: Sequence[int]) -> Mode:
        """`frame_mode` of the rows: MODES go from the cheapest to the most general, so the rows' largest."""
        return MODES[max(self._modes[s] for s in slots)]

    def inputs(
        self, text_ids: Sequence[int], slots: Sequence[int], cache_lens: Sequence[int], positions: Sequence[float],
        talker_noise: torch.Tensor | None, predictor_noise: torch.Tensor | None,
    ) -> FrameInputs:  # fmt: skip
        """FrameInputs for the rows in order (their device tensors are views of the staging buffers)."""
        rows = len(slots)
        v = self._views.get(rows)
        if v is None:
            v = self._views[rows] = self._slice(rows)
        if self._copied is not None:
            self._copied.synchronize()  # the last frame's copies have left the host buffers
        v.longs_np[:, _TEXT], v.longs_np[:, _SLOT], v.longs_np[:, _CACHE_LEN] = text_ids, slots, cache_lens
        v.floats_np[:, 0] = positions
        v.floats_np[:, 1:] = self._knobs[list(slots)]
        v.longs_dev.copy_(v.longs, non_blocking=True)
        v.floats_dev.copy_(v.floats, non_blocking=True)
        if self._pinned:
            self._copied = torch.cuda.Event()
            self._copied.record()
        return FrameInputs(text_ids=v.text_ids, positions=v.positions, slots=v.slots, cache_len=v.cache_len,
                           knobs=v.knobs, talker_noise=talker_noise,  # type: ignore[arg-type]
                           predictor_noise=predictor_noise)  # type: ignore[arg-type]  # None: a greedy frame

    def _slice(self, rows: int) -> _Views:
        longs_dev, floats_dev = self._longs_dev[:rows], self._floats_dev[:rows]
        text_ids, slots, cache_len = longs_dev.unbind(1)
        return _Views(self._longs[:rows], self._floats[:rows], self._longs_np[:rows], self._floats_np[:rows],
                      longs_dev, floats_dev, text_ids, slots, cache_len, floats_dev[:, 0], floats_dev[:, 1:])


class _Views(NamedTuple):
    """The first `rows` rows of the staging buffers and the FrameInputs fields that view the device ones."""

    longs: torch.Tensor
    floats: torch.Tensor
    longs_np: np.ndarray
    floats_np: np.ndarray
    longs_dev: torch.Tensor
    floats_dev: torch.Tensor
    text_ids: torch.Tensor
    slots: torch.Tensor
    cache_len: torch.Tensor
    positions: torch.Tensor
    knobs: torch.Tensor

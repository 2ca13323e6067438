"""Gated DeltaNet state beside the paged KV: a fixed slot per running sequence holding each linear layer's conv
inputs and fp32 recurrent state, and the per-step map from packed rows to slots."""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from runtime.kernels.causal_conv import ConvPlan, conv_prefill_plan
from runtime.kernels.gated_delta import PrefillRows
from runtime.transfer import to_device
from services.thinker.model.hybrid_config import HybridConfig

RECURRENT_DTYPE = torch.float32  # the delta rule accumulates over the whole context: bf16 would drift


class LinearStateCache:
    """conv: [L, S, conv_dim, kernel-1] in the model dtype; recurrent: [L, S, Hv, Dk, Dv] fp32 (L linear layers,
    S slots). Slot ids are the engine's (runtime.engine.state_slots); a slot is zeroed when a sequence starts in it."""

    def __init__(self, cfg: HybridConfig, num_slots: int, dtype: torch.dtype, device: torch.device | str) -> None:
        layers = len(cfg.linear_layers)
        self.conv = torch.zeros(layers, num_slots, cfg.conv_dim, cfg.conv_kernel - 1, dtype=dtype, device=device)
        self.recurrent = torch.zeros(layers, num_slots, cfg.num_value_heads, cfg.key_head_dim, cfg.value_head_dim,
                                     dtype=RECURRENT_DTYPE, device=device)

    @staticmethod
    def bytes_per_slot(cfg: HybridConfig, dtype: torch.dtype) -> int:
        element = torch.empty((), dtype=dtype).element_size()
        per_layer = cfg.conv_dim * (cfg.conv_kernel - 1) * element + \
            cfg.num_value_heads * cfg.key_head_dim * cfg.value_head_dim * RECURRENT_DTYPE.itemsize
        return len(cfg.linear_layers) * per_layer

    def copy(self, src: list[int], dst: list[int]) -> None:
        """Every layer's state of slots `src` into slots `dst` (snapshots taken and restored), on the device."""
        device = self.conv.device
        src_index, dst_index = (to_device(torch.tensor(v, dtype=torch.long), device) for v in (src, dst))
        self.conv.index_copy_(1, dst_index, self.conv.index_select(1, src_index))
        self.recurrent.index_copy_(1, dst_index, self.recurrent.index_select(1, src_index))

    def reset(self, slots: torch.Tensor) -> None:
        """Zeroes every layer's state in `slots` (int64, on the cache's device): sequences starting from token 0."""
        self.conv.index_fill_(1, slots, 0)
        self.recurrent.index_fill_(1, slots, 0)


def check_state_memory(cfg: HybridConfig, num_slots: int, dtype: torch.dtype, device: torch.device | str,
                       free_bytes: int | None = None) -> None:
    """Refuses, naming the config fields, state slots that cannot fit in the device's free memory (CUDA; elsewhere
    only when `free_bytes` is given) instead of failing the allocation."""
    device = torch.device(device)
    if free_bytes is None and device.type == "cuda":
        free_bytes = torch.cuda.mem_get_info(device)[0]
    need = num_slots * LinearStateCache.bytes_per_slot(cfg, dtype)
    if free_bytes is not None and need > free_bytes:
        raise ValueError(f"thinker.engine.num_state_slots + num_state_snapshots: {num_slots} state slots of this "
                         f"model need {need / 2**30:.2f} GiB, {free_bytes / 2**30:.2f} GiB are free on {device}; "
                         "lower them (or max_num_seqs)")


@dataclass
class StateContext:
    """Which slot each packed row reads and writes this step. Single-token rows (decode) run batched through the
    recurrent step; longer rows (prefill chunks) run one by one through the chunked form."""

    cache: LinearStateCache
    decode_rows: torch.Tensor  # int64 [Bd], packed token index of each single-token row
    decode_slots: torch.Tensor  # int64 [Bd]
    prefill: list[tuple[int, int, int]]  # (first packed token, token count, slot) of each longer row
    prefill_rows: torch.Tensor  # int64 [Tp], the packed tokens of those rows in order
    conv_plan: ConvPlan | None = None  # the prefill rows' conv index maps (every layer's), when there are any

    @functools.cached_property
    def parts(self) -> tuple[slice | torch.Tensor, slice | torch.Tensor]:
        """(decode rows, prefill tokens) of the packed step: slices when each is one run, as the scheduler packs
        decode rows before prefill chunks (a slice is a view; an index tensor costs a gather and a scatter over
        [T, conv_dim] per layer), else decode_rows and prefill_rows."""
        num_decode, at = self.decode_rows.shape[0], self.prefill[0][0] if self.prefill else 0
        for start, count, _ in self.prefill:
            if start != at:
                return self.decode_rows, self.prefill_rows
            at += count
        first = self.prefill[0][0] if self.prefill else num_decode
        if first == num_decode:
            return slice(0, num_decode), slice(num_decode, at)
        if first == 0:
            return slice(at, at + num_decode), slice(0, at)
        return self.decode_rows, self.prefill_rows

    @functools.cached_property
    def prefill_gathered(self) -> PrefillRows:
        """`prefill` with each row's first token counted within prefill_rows (the rows gathered together), built once
        a step for every layer."""
        gathered, at = [], 0
        for _, count, slot in self.prefill:
            gathered.append((at, count, slot))
            at += count
        return PrefillRows(gathered)


def build_state_context(cache: LinearStateCache, q_lens: list[int], slots: list[int], fresh: list[bool],
                        device: torch.device | str) -> StateContext:
    """Rows in packed order with their token counts, slots, and whether each starts its sequence (its slot is
    zeroed here, before any layer reads it)."""
    if not len(q_lens) == len(slots) == len(fresh):
        raise ValueError(f"q_lens ({len(q_lens)}), slots ({len(slots)}) and fresh ({len(fresh)}) must have one "
                         "entry per row")
    decode_rows, decode_slots, prefill, prefill_rows, start = [], [], [], [], 0
    for q_len, slot in zip(q_lens, slots):
        if q_len == 1:
            decode_rows.append(start)
            decode_slots.append(slot)
        else:
            prefill.append((start, q_len, slot))
            prefill_rows.extend(range(start, start + q_len))
        start += q_len
    device = torch.device(device)
    restart = [s for s, f in zip(slots, fresh) if f]
    if restart:
        cache.reset(to_device(torch.tensor(restart, dtype=torch.long), device))
    index = [to_device(torch.tensor(v, dtype=torch.long), device) for v in (decode_rows, decode_slots, prefill_rows)]
    plan = conv_prefill_plan([n for _, n, _ in prefill], [slot for _, _, slot in prefill], cache.conv.shape[-1] + 1,
                             device) if prefill else None
    return StateContext(cache, index[0], index[1], prefill, index[2], plan)

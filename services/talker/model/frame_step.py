"""One talker frame for a batch of rows with fixed shapes and no host sync: the work the CUDA graphs capture.

The same math as `TalkerRunner`'s eager step (the reference it is tested against), on the runtime's kernels:
fused residual-add RMSNorm, q/k RMSNorm + rotary in one launch, one q/k/v GEMM, paged decode attention over the
rows' KV slots, the Triton MoE with the talker's shared expert. On CPU every kernel entry point falls back to
its PyTorch reference, so the CPU tests run this very code.

A frame: the code predictor fills codebooks 1..15 from the row's last talker state and code 0 (15 small dense
steps, every row at the same position), the frame's embeddings plus the row's next text embedding feed one
talker decode step, and its head picks the next frame's code 0 (repetition penalty over the row's seen codes,
control codes suppressed).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from runtime.attention import allocate_kv_cache, write_kv
from runtime.kernels import (
    fused_add_rmsnorm, fused_moe, paged_attention, paged_decode_attention, qk_norm_rope,
)
from runtime.kernels.activation import silu_mul
from services.talker.model.fused import AttentionWeights, predictor_weights, talker_weights
from services.talker.model.kv import KVPool
from services.talker.model.layers import rope_cos_sin
from services.talker.model.load import TalkerModel
from services.talker.model.sampling import TalkerSampling, draw, draw_among_top, penalize, warp

# Columns of FrameInputs.knobs, one row per batch row.
DO_SAMPLE, TEMPERATURE, TOP_K, TOP_P, PRED_TEMPERATURE, PRED_TOP_K, PRED_TOP_P, PENALTY = range(8)
NUM_KNOBS = 8

# How a frame picks codes: every row greedy (no sampling kernels), sampling among the TOP_WIDTH best scores
# (every sampling row has top_k in 1..TOP_WIDTH: the model's default 50), or sampling over the whole vocabulary.
Mode = Literal["greedy", "topk", "full"]
MODES: tuple[Mode, ...] = ("greedy", "topk", "full")
TOP_WIDTH = 64
PREDICTOR_BLOCK = 32  # code-predictor positions a row may use in one frame (talker state + 16 codebooks = 17)


def frame_mode(samplings: Iterable[TalkerSampling]) -> Mode:
    """The cheapest mode that makes every row's choice exactly."""
    drawing = [s for s in samplings if s.do_sample]
    if not drawing:
        return "greedy"
    narrow = all(1 <= k <= TOP_WIDTH for s in drawing for k in (s.top_k, s.predictor_top_k))
    return "topk" if narrow else "full"


def knob_row(s: TalkerSampling) -> list[float]:
    """One row of FrameInputs.knobs for a request's sampling settings."""
    row = [0.0] * NUM_KNOBS
    row[DO_SAMPLE] = float(s.do_sample)
    row[TEMPERATURE], row[TOP_K], row[TOP_P] = s.temperature, s.top_k, s.top_p
    row[PRED_TEMPERATURE], row[PRED_TOP_K], row[PRED_TOP_P] = s.predictor_temperature, s.predictor_top_k, s.predictor_top_p
    row[PENALTY] = s.repetition_penalty
    return row


@dataclass(frozen=True)
class SlotTables:
    """What a row carries from one frame to the next, on the device and indexed by KV slot (the last row is the
    pool's scratch slot): a frame reads its rows' entries and writes the next ones, so the host never has to
    hand the codes back in before the next frame can start."""

    seen: torch.Tensor  # (slots + 1, talker vocab) bool: codes the slot's request generated (repetition penalty)
    code0: torch.Tensor  # (slots + 1,) long: codebook 0 of the slot's next frame
    hidden: torch.Tensor  # (slots + 1, hidden): the talker state that picked it

    @classmethod
    def allocate(cls, slots: int, vocab: int, hidden: int, dtype: torch.dtype, device: torch.device) -> SlotTables:
        return cls(torch.zeros(slots + 1, vocab, dtype=torch.bool, device=device),
                   torch.zeros(slots + 1, dtype=torch.long, device=device),
                   torch.zeros(slots + 1, hidden, dtype=dtype, device=device))


@dataclass(frozen=True)
class FrameInputs:
    """Device tensors, one row per batch row; padding rows point at the KV pool's scratch slot."""

    text_ids: torch.Tensor  # (B,) long: the thinker id this row speaks in the next talker input
    positions: torch.Tensor  # (B,) float: that input's position (the three M-RoPE axes are equal for it)
    slots: torch.Tensor  # (B,) long: KV slot of each row
    cache_len: torch.Tensor  # (B,) long: positions cached in the slot before this step
    knobs: torch.Tensor  # (B, NUM_KNOBS) float: sampling settings (see the column constants)
    talker_noise: torch.Tensor  # (B, talker vocab): uniforms of this row's generator for code 0
    predictor_noise: torch.Tensor  # (B, G-1, codebook size): uniforms for codebooks 1..G-1


@dataclass(frozen=True)
class FrameOutputs:
    frames: torch.Tensor  # (B, G) long: this frame, codebook 0 first
    hidden: torch.Tensor  # (B, hidden): the talker state after this frame's input
    next_code0: torch.Tensor  # (B,) long: codebook 0 of the next frame


class FrameStep:
    """Holds the fused weights and reads/writes the runner's slot tables; `__call__` runs one frame for a batch."""

    def __init__(self, model: TalkerModel, kv: KVPool, tables: SlotTables, suppress: torch.Tensor) -> None:
        self.model = model
        self.kv = kv
        self.tables = tables
        self.suppress = suppress
        self.talker = talker_weights(model.lm)
        self.predictor = predictor_weights(model.predictor)
        pcfg = model.cfg.code_predictor
        if pcfg.num_code_groups + 1 > PREDICTOR_BLOCK:
            raise ValueError(f"{pcfg.num_code_groups} code groups need more than {PREDICTOR_BLOCK} predictor positions")
        self.predictor_kv = allocate_kv_cache(len(self.predictor), kv.num_slots + 1, PREDICTOR_BLOCK,
                                              pcfg.num_kv_heads, pcfg.head_dim, model.dtype, model.device)

    def __call__(self, inp: FrameInputs, mode: Mode) -> FrameOutputs:
        """One frame; `mode` (see `frame_mode`) must suit every row's sampling settings."""
        model, knobs, tables, slots = self.model, inp.knobs, self.tables, inp.slots
        code0 = tables.code0[slots]
        code0_embed = model.lm.codec_embedding(code0)
        codes, embed_sum = self._predict(tables.hidden[slots], code0_embed, knobs, inp.predictor_noise, mode)
        x = embed_sum + model.text_embeds(inp.text_ids)
        hidden = self._talker(x, inp.positions, slots, inp.cache_len)
        logits = model.lm.codec_head(hidden).float()
        logits = penalize(logits, tables.seen[slots], knobs[:, PENALTY])
        logits = logits.masked_fill(self.suppress, float("-inf"))
        next_code0 = _pick(logits, knobs, (TEMPERATURE, TOP_K, TOP_P), inp.talker_noise, mode)
        tables.seen.index_put_((slots, next_code0), torch.ones_like(next_code0, dtype=torch.bool))
        tables.code0.index_copy_(0, slots, next_code0)
        tables.hidden.index_copy_(0, slots, hidden)
        return FrameOutputs(torch.cat((code0[:, None], codes), dim=1), hidden, next_code0)

    # --- code predictor ----------------------------------------------------------------------------------------

    def _predict(
        self, past: torch.Tensor, code0_embed: torch.Tensor, knobs: torch.Tensor, noise: torch.Tensor, mode: Mode
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Codebooks 1..G-1 `(B, G-1)` and the sum of the frame's G embeddings `(B, hidden)` (CodePredictor.predict)."""
        predictor = self.model.predictor
        x = torch.stack((past, code0_embed), dim=1)  # (B, 2, hidden): position 0 the talker state, 1 code 0
        embeds, codes, start = [code0_embed], [], 0
        for g in range(1, predictor.cfg.num_code_groups):
            last = self._predictor_forward(x, start)
            start += x.shape[1]
            logits = predictor.lm_head[g - 1](last).float()
            code = _pick(logits, knobs, (PRED_TEMPERATURE, PRED_TOP_K, PRED_TOP_P), noise[:, g - 1], mode)
            codes.append(code)
            embeds.append(predictor.codec_embedding[g - 1](code))
            x = embeds[-1][:, None]
        return torch.stack(codes, dim=1), torch.stack(embeds, dim=1).sum(dim=1)

    def _predictor_forward(self, x: torch.Tensor, start: int) -> torch.Tensor:
        """x `(B, T, hidden)` at positions start..start+T-1 (every row alike) -> the last position's normed state.

        Row b keeps this frame's keys in block b of `predictor_kv` (fresh every frame: the first step writes
        positions 0 and 1, later steps one each, and attention reads only what this frame wrote).
        """
        batch, steps, dim = x.shape
        predictor, dev = self.model.predictor, x.device
        cos, sin = rope_cos_sin(torch.arange(start, start + steps, device=dev), predictor.inv_freq, x.dtype)
        cos, sin = cos.repeat(batch, 1), sin.repeat(batch, 1)  # (B*T, D): row-major tokens
        rows = torch.arange(batch, dtype=torch.int32, device=dev)
        write_at = (rows[:, None] * PREDICTOR_BLOCK + torch.arange(start, start + steps, device=dev)).flatten()
        kv_lens = torch.full((batch,), start + steps, dtype=torch.int32, device=dev)
        cu_seqlens = torch.arange(0, (batch + 1) * steps, steps, dtype=torch.int32, device=dev)
        h, residual = x.reshape(batch * steps, dim), None
        for w, kv_cache in zip(self.predictor, self.predictor_kv):
            a = w.attn
            normed, residual = fused_add_rmsnorm(h, residual, a.input_norm, a.eps)
            q, k, v = _qkv(normed, a, cos, sin)
            write_kv(kv_cache, k, v, write_at)
            out = paged_attention(q.contiguous(), kv_cache, rows[:, None], kv_lens, cu_seqlens, steps)
            out = F.linear(out.reshape(batch * steps, -1), a.o)
            normed, residual = fused_add_rmsnorm(out, residual, a.post_norm, a.eps)
            h = F.linear(silu_mul(F.linear(normed, w.gate_up)), w.down)
        last = lambda t: t.view(batch, steps, dim)[:, -1]  # noqa: E731 - the norm is per token: only the last one
        return fused_add_rmsnorm(last(h), last(residual), predictor.norm.weight, predictor.norm.eps).normed

    # --- talker decode step ------------------------------------------------------------------------------------

    def _talker(
        self, x: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, cache_len: torch.Tensor
    ) -> torch.Tensor:
        """One decode position per row: x `(B, hidden)` -> final-normed state `(B, hidden)`; writes the rows' K/V."""
        lm, kv = self.model.lm, self.kv
        cos, sin = rope_cos_sin(positions, lm.inv_freq, x.dtype)  # (B, D)
        tables = kv.block_tables(slots)
        kv_lens = (cache_len + 1).to(torch.int32)
        write_at = slots * kv.slot_stride + cache_len
        h, residual = x, None
        for i, w in enumerate(self.talker):
            a = w.attn
            normed, residual = fused_add_rmsnorm(h, residual, a.input_norm, a.eps)
            q, k, v = _qkv(normed, a, cos, sin)
            write_kv(kv.layers[i], k, v, write_at)
            out = paged_decode_attention(q.contiguous(), kv.layers[i], tables, kv_lens)  # (B, Hq, D)
            out = F.linear(out.reshape(x.shape[0], -1), a.o)
            normed, residual = fused_add_rmsnorm(out, residual, a.post_norm, a.eps)
            h = fused_moe(normed, w.router, w.experts_gate_up, w.experts_down, w.top_k, w.norm_topk_prob, w.shared)
        return fused_add_rmsnorm(h, residual, lm.norm.weight, lm.norm.eps).normed


def _qkv(
    x: torch.Tensor, a: AttentionWeights, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x `(T, hidden)` -> normed, rotated q `(T, Hq, D)`, k `(T, Hkv, D)` and v `(T, Hkv, D)` from one GEMM."""
    tokens = x.shape[0]
    q_width, kv_width = a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim
    qkv = F.linear(x, a.qkv)
    q = qkv[:, :q_width].view(tokens, a.num_heads, a.head_dim)
    k = qkv[:, q_width:q_width + kv_width].view(tokens, a.num_kv_heads, a.head_dim)
    v = qkv[:, q_width + kv_width:].view(tokens, a.num_kv_heads, a.head_dim)
    q, k = qk_norm_rope(q, k, a.q_norm, a.k_norm, cos, sin, a.eps)
    return q, k, v


def _pick(
    logits: torch.Tensor, knobs: torch.Tensor, columns: tuple[int, int, int], noise: torch.Tensor, mode: Mode
) -> torch.Tensor:
    """argmax for greedy rows; temperature/top-k/top-p then the seeded exponential-race draw for sampling rows."""
    greedy = logits.argmax(dim=-1)
    if mode == "greedy":
        return greedy
    temperature, top_k, top_p = (knobs[:, c] for c in columns)
    if mode == "topk":
        drawn = draw_among_top(logits, temperature, top_k.long(), top_p, noise, TOP_WIDTH)
    else:
        drawn = draw(warp(logits, temperature, top_k.long(), top_p), noise)
    return torch.where(knobs[:, DO_SAMPLE] > 0, drawn, greedy)

"""One talker frame for a batch of rows with fixed shapes and no host sync: the work the CUDA graphs capture.

The same math as `TalkerRunner`'s eager step (the reference it is tested against), on the runtime's kernels:
fused residual-add RMSNorm (the MoE router's logits inside the norm), one q/k/v GEMM, q/k RMSNorm + rotary with the
k/v store into the paged cache in one launch, paged attention over the rows' KV slots, the Triton MoE, the shared
expert's gate inside its gate/up GEMM. On CPU every kernel entry point falls back to its PyTorch reference, so the
CPU tests run this very code.

The frame is launch-bound (~2,000 small kernels at one row), so whatever depends only on the batch size (the code
predictor's rotary tables, cache slots and sequence lengths for each of its 15 steps; the block tables) is built
once per batch size, off the CUDA-graph capture, and the sampling settings are prepared once per frame.

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

from runtime.attention import allocate_kv_cache
from runtime.kernels import fused_add_rmsnorm, paged_attention
from runtime.kernels.activation import silu_mul
from runtime.kernels.dense_step import DENSE_STEP_MAX_TOKENS, DenseStepBuffers, dense_step
from runtime.kernels.fused_moe import routed_moe
from runtime.kernels.rmsnorm import fused_add_rmsnorm_router, qk_norm_rope_cache
from runtime.kernels.skinny_gemm import skinny_linear
from services.talker.model.fused import AttentionWeights, SharedExpertWeights, predictor_weights, talker_weights
from services.talker.model.kv import KVPool
from services.talker.model.layers import rope_cos_sin
from services.talker.model.load import TalkerModel
from runtime.sampler.knobs import WIDTH, RowKnobs
from runtime.sampler.penalty import penalize
from runtime.sampler.pick import pick
from runtime.sampler.rules import filter_logits, race
from services.talker.model.sampling import TalkerSampling

# Columns of FrameInputs.knobs, one row per batch row.
DO_SAMPLE, TEMPERATURE, TOP_K, TOP_P, PRED_TEMPERATURE, PRED_TOP_K, PRED_TOP_P, PENALTY = range(8)
NUM_KNOBS = 8

# How a frame picks codes: every row greedy (no sampling kernels), sampling among the sampler's WIDTH best scores
# (every sampling row has top_k in 1..WIDTH: the model's default 50), or sampling over the whole vocabulary.
Mode = Literal["greedy", "topk", "full"]
MODES: tuple[Mode, ...] = ("greedy", "topk", "full")
PREDICTOR_BLOCK = 32  # code-predictor positions a row may use in one frame (talker state + 16 codebooks = 17)
# Up to this many rows, the GEMMs that cuBLAS serves worst at few rows take the skinny GEMM (runtime/kernels/
# skinny_gemm.py): o_proj (1024 outputs) 12.8 us in cuBLAS at one row on the H200, 7.2 padded to 8 rows, 5.1 skinny;
# the predictor's down 7.5 / 8.8 / 5.7; the shared expert's down 6.0 / 5.4 / 4.0; at 8 rows o_proj 6.1 / 5.1 and the
# down 7.6 / 5.9 (`bench_skinny_gemm.py --rows 1,8`, results/2026-11-30-skinny-gemm-h200.json). q/k/v, gate/up and
# the heads stay in cuBLAS, which is 5-15% faster there.
SKINNY_ROWS = 8
# The most rows for which the code predictor's 15 steps can each run as one persistent launch
# (runtime/kernels/dense_step.py: every layer, the final norm and the head) instead of ~50 kernels: its first step
# carries two positions a row, a launch at most DENSE_STEP_MAX_TOKENS. Off by default (`FrameStep.set_dense_rows`):
# on an H100 the frame took 5.12 ms that way against 4.44 layer by layer (bench/kernels/NOTES.md, run 12).
DENSE_ROWS = DENSE_STEP_MAX_TOKENS // 2


def frame_mode(samplings: Iterable[TalkerSampling]) -> Mode:
    """The cheapest mode that makes every row's choice exactly."""
    drawing = [s for s in samplings if s.do_sample]
    if not drawing:
        return "greedy"
    narrow = all(1 <= k <= WIDTH for s in drawing for k in (s.top_k, s.predictor_top_k))
    return "topk" if narrow else "full"


def knob_row(s: TalkerSampling) -> list[float]:
    """One row of FrameInputs.knobs for a request's sampling settings."""
    row = [0.0] * NUM_KNOBS
    row[DO_SAMPLE] = float(s.do_sample)
    row[TEMPERATURE], row[TOP_K], row[TOP_P] = s.temperature, s.top_k, s.top_p
    row[PRED_TEMPERATURE], row[PRED_TOP_K], row[PRED_TOP_P] = (
        s.predictor_temperature, s.predictor_top_k, s.predictor_top_p)
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


class DecodeLinear:
    """F.linear, or, when `enabled` (on CUDA), the skinny GEMM for at most SKINNY_ROWS rows (see SKINNY_ROWS)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        if self.enabled and x.shape[0] <= SKINNY_ROWS:
            return skinny_linear(x, weight)
        return F.linear(x, weight)


@dataclass(frozen=True)
class _PredictorStep:
    """One of the code predictor's steps for a batch size: its B * steps tokens are (row, position) in row-major
    order, steps being 2 at the first step (talker state and code 0), then 1."""

    cos: torch.Tensor  # (B * steps, head_dim)
    sin: torch.Tensor
    slots: torch.Tensor  # (B * steps,) long: flat cache slots (row b owns block b)
    kv_lens: torch.Tensor  # (B,) int32: positions cached after the step
    cu_seqlens: torch.Tensor  # (B + 1,) int32


@dataclass(frozen=True)
class _BatchPlan:
    """Device tensors that depend only on the batch size: built on a batch size's first frame (the graph capture's
    warm-up), then read by every frame of that size instead of ~15 small kernels per predictor step."""

    predictor: list[_PredictorStep]  # one per codebook 1..G-1
    predictor_tables: torch.Tensor  # (B, 1) int32: row b's predictor block
    decode_cu_seqlens: torch.Tensor  # (B + 1,) int32: one talker query per row
    seen_marks: torch.Tensor  # (B,) bool, all True: what a frame writes into the seen-codes table
    predictor_logits: torch.Tensor  # (B, codebook size) float32: the persistent predictor step's output
    groups: torch.Tensor  # (1, G-1) long: 0..G-2, the embedding table of each predicted codebook


@dataclass(frozen=True)
class _Picker:
    """How a frame picks one code per row from `(B, V)` logits, the rows' settings prepared once per frame (the 15
    predictor codebooks share them)."""

    sample: torch.Tensor | None  # (B,) bool: rows that draw (None: a greedy frame); the others take the argmax
    knobs: RowKnobs | None  # "topk" mode: the runtime sampler's pick (one kernel launch on CUDA)
    full: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None  # "full" mode: temperature, top_k, top_p
    kernel: bool | None = None  # "topk" mode through the pick kernel: None where it runs; False the torch reference

    @classmethod
    def build(cls, knobs: torch.Tensor, columns: tuple[int, int, int], mode: Mode, kernel: bool | None = None
              ) -> _Picker:  # fmt: skip
        if mode == "greedy":
            return cls(None, None, None)
        temperature, top_k, top_p = (knobs[:, c] for c in columns)
        sample = knobs[:, DO_SAMPLE] > 0
        if mode == "topk":
            return cls(sample, RowKnobs.build(sample, temperature, top_k, top_p), None, kernel)
        return cls(sample, None, (temperature, top_k.long(), top_p))

    def __call__(self, logits: torch.Tensor, uniforms: torch.Tensor | None) -> torch.Tensor:
        """argmax for greedy rows; temperature/top-k/top-p then the seeded exponential race for sampling rows, from
        the rows' uniforms `(B, V)` by vocabulary id."""
        if self.sample is None:
            return logits.argmax(dim=-1)
        assert uniforms is not None
        if self.knobs is not None:
            return pick(logits, uniforms, self.knobs, self.kernel)
        assert self.full is not None
        temperature, top_k, top_p = self.full
        drawn = race(filter_logits(logits / temperature[:, None], top_k, top_p), uniforms)
        return torch.where(self.sample, drawn, logits.argmax(dim=-1))


class FrameStep:
    """Holds the fused weights and reads/writes the runner's slot tables; `__call__` runs one frame for a batch."""

    def __init__(self, model: TalkerModel, kv: KVPool, tables: SlotTables, suppress: torch.Tensor,
                 dense_rows: int = 0) -> None:  # fmt: skip
        """`dense_rows`: see `set_dense_rows`."""
        self.model = model
        self.kv = kv
        self.tables = tables
        self.suppress = suppress
        self.talker = talker_weights(model.lm)
        self.predictor = predictor_weights(model.predictor)
        pcfg = model.cfg.code_predictor
        if pcfg.num_code_groups + 1 > PREDICTOR_BLOCK:
            raise ValueError(f"{pcfg.num_code_groups} code groups need more than {PREDICTOR_BLOCK} predictor positions")
        self.predictor_kv = allocate_kv_cache(len(self.predictor.layers), kv.num_slots + 1, PREDICTOR_BLOCK,
                                              pcfg.num_kv_heads, pcfg.head_dim, model.dtype, model.device)
        # every slot's fixed run of talker KV blocks, so a frame's block tables are one gather
        self.block_tables = kv.block_tables(torch.arange(kv.num_slots + 1, device=model.device))
        # the predictor's rotary table over its block's positions (every row sits at the same ones)
        self.predictor_rope = rope_cos_sin(torch.arange(PREDICTOR_BLOCK, device=model.device),
                                           model.predictor.inv_freq, model.dtype)
        self.linear = DecodeLinear(model.device.type == "cuda")
        self.set_dense_rows(dense_rows)
        self._plans: dict[int, _BatchPlan] = {}

    def set_dense_rows(self, rows: int) -> None:
        """Batches of up to `rows` rows run the predictor's steps as persistent launches (0: never, the default);
        before graphs are captured, which bake in the path each bucket took."""
        if not 0 <= rows <= DENSE_ROWS:
            raise ValueError(f"FrameStep dense_rows={rows}: must be in 0..{DENSE_ROWS}")
        self.dense_rows = rows
        self.dense = DenseStepBuffers.allocate(self.predictor.stack, rows, PREDICTOR_BLOCK) if rows else None

    def __call__(self, inp: FrameInputs, mode: Mode) -> FrameOutputs:
        """One frame; `mode` (see `frame_mode`) must suit every row's sampling settings."""
        model, knobs, tables, slots = self.model, inp.knobs, self.tables, inp.slots
        plan = self._plan(slots.shape[0])
        code0 = tables.code0[slots]
        code0_embed = model.lm.codec_embedding(code0)
        codes, embed_sum = self._predict(plan, tables.hidden[slots], code0_embed, knobs, inp.predictor_noise, mode)
        x = embed_sum + model.text_embeds(inp.text_ids)
        hidden = self._talker(plan, x, inp.positions, slots, inp.cache_len)
        logits = model.lm.codec_head(hidden).float()
        logits = penalize(logits, tables.seen[slots], knobs[:, PENALTY])
        logits = logits.masked_fill(self.suppress, float("-inf"))
        picker = _Picker.build(knobs, (TEMPERATURE, TOP_K, TOP_P), mode)
        next_code0 = picker(logits, None if mode == "greedy" else inp.talker_noise)
        tables.seen.index_put_((slots, next_code0), plan.seen_marks)
        tables.code0.index_copy_(0, slots, next_code0)
        tables.hidden.index_copy_(0, slots, hidden)
        return FrameOutputs(torch.cat((code0[:, None], codes), dim=1), hidden, next_code0)

    def _plan(self, batch: int) -> _BatchPlan:
        plan = self._plans.get(batch)
        if plan is None:
            plan = self._plans[batch] = self._build_plan(batch)
        return plan

    def _build_plan(self, batch: int) -> _BatchPlan:
        dev = self.model.device
        rows = torch.arange(batch, dtype=torch.int32, device=dev)
        cos_table, sin_table = self.predictor_rope
        steps_list, start = [], 0
        for g in range(1, self.model.cfg.num_code_groups):
            steps = 2 if g == 1 else 1
            positions = torch.arange(start, start + steps, device=dev)
            steps_list.append(_PredictorStep(
                cos_table[start:start + steps].repeat(batch, 1), sin_table[start:start + steps].repeat(batch, 1),
                (rows[:, None] * PREDICTOR_BLOCK + positions).flatten(),
                torch.full((batch,), start + steps, dtype=torch.int32, device=dev),
                torch.arange(0, (batch + 1) * steps, steps, dtype=torch.int32, device=dev),
            ))  # fmt: skip
            start += steps
        pcfg = self.model.cfg.code_predictor
        return _BatchPlan(steps_list, rows[:, None], torch.arange(batch + 1, dtype=torch.int32, device=dev),
                          torch.ones(batch, dtype=torch.bool, device=dev),
                          torch.zeros(batch, pcfg.vocab_size, device=dev),
                          torch.arange(pcfg.num_code_groups - 1, device=dev)[None])

    # --- code predictor ----------------------------------------------------------------------------------------

    def _predict(
        self, plan: _BatchPlan, past: torch.Tensor, code0_embed: torch.Tensor, knobs: torch.Tensor,
        noise: torch.Tensor, mode: Mode,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Codebooks 1..G-1 `(B, G-1)` and the sum of the frame's G embeddings `(B, hidden)` (CodePredictor.predict)."""
        picker = _Picker.build(knobs, (PRED_TEMPERATURE, PRED_TOP_K, PRED_TOP_P), mode)
        if self.dense is not None and past.shape[0] <= self.dense_rows:
            return self._predict_dense(plan, past, code0_embed, picker, noise, mode)
        predictor = self.model.predictor
        x = torch.stack((past, code0_embed), dim=1)  # (B, 2, hidden): position 0 the talker state, 1 code 0
        embeds, codes = [code0_embed], []
        for g, step in enumerate(plan.predictor, start=1):
            last = self._predictor_forward(x, step, plan.predictor_tables)
            logits = predictor.lm_head[g - 1](last).float()
            code = picker(logits, None if mode == "greedy" else noise[:, g - 1])
            codes.append(code)
            embeds.append(predictor.codec_embedding[g - 1](code))
            x = embeds[-1][:, None]
        return torch.stack(codes, dim=1), torch.stack(embeds, dim=1).sum(dim=1)

    def _predict_dense(
        self, plan: _BatchPlan, past: torch.Tensor, code0_embed: torch.Tensor, picker: _Picker, noise: torch.Tensor,
        mode: Mode,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`_predict` with each step one persistent launch; its input is written straight into the step's buffer."""
        batch, dim = past.shape
        buffers, weights, heads = self.dense, self.predictor, self.model.predictor.lm_head
        assert buffers is not None
        cos, sin = self.predictor_rope
        torch.stack((past, code0_embed), dim=1, out=buffers.s0[:2 * batch].view(batch, 2, dim))
        codes, start = [], 0
        for g in range(1, self.model.cfg.num_code_groups):
            steps = 2 if g == 1 else 1
            dense_step(weights.stack, heads[g - 1].weight, buffers, batch, steps, start, cos, sin,
                       plan.predictor_logits)
            start += steps
            codes.append(picker(plan.predictor_logits, None if mode == "greedy" else noise[:, g - 1]))
            if g < len(heads):
                torch.index_select(weights.embeddings[g - 1], 0, codes[-1], out=buffers.s0[:batch])
        stacked = torch.stack(codes, dim=1)
        embeds = torch.cat((code0_embed[:, None], weights.embeddings[plan.groups, stacked]), dim=1)
        return stacked, embeds.sum(dim=1)  # one rounding of the G embeddings' sum, as `_predict`

    def _predictor_forward(self, x: torch.Tensor, step: _PredictorStep, block_tables: torch.Tensor) -> torch.Tensor:
        """x `(B, T, hidden)` at the step's positions (every row alike) -> the last position's normed state.

        Row b keeps this frame's keys in block b of `predictor_kv` (fresh every frame: the first step writes
        positions 0 and 1, later steps one each, and attention reads only what this frame wrote).
        """
        batch, steps, dim = x.shape
        predictor = self.model.predictor
        h, residual = x.reshape(batch * steps, dim), None
        for w, kv_cache in zip(self.predictor.layers, self.predictor_kv):
            a = w.attn
            normed, residual = fused_add_rmsnorm(h, residual, a.input_norm, a.eps)
            q = _attention_query(normed, a, step.cos, step.sin, kv_cache, step.slots)
            out = paged_attention(q, kv_cache, block_tables, step.kv_lens, step.cu_seqlens, steps)
            out = self.linear(out.reshape(batch * steps, -1), a.o)
            normed, residual = fused_add_rmsnorm(out, residual, a.post_norm, a.eps)
            h = self.linear(silu_mul(F.linear(normed, w.gate_up)), w.down)
        last = lambda t: t.view(batch, steps, dim)[:, -1]  # noqa: E731 - the norm is per token: only the last one
        return fused_add_rmsnorm(last(h), last(residual), predictor.norm.weight, predictor.norm.eps).normed

    # --- talker decode step ------------------------------------------------------------------------------------

    def _talker(
        self, plan: _BatchPlan, x: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, cache_len: torch.Tensor
    ) -> torch.Tensor:
        """One decode position per row: x `(B, hidden)` -> final-normed state `(B, hidden)`; writes the rows' K/V."""
        lm, kv = self.model.lm, self.kv
        cos, sin = rope_cos_sin(positions, lm.inv_freq, x.dtype)  # (B, D)
        tables = self.block_tables[slots]
        kv_lens = (cache_len + 1).to(torch.int32)
        write_at = slots * kv.slot_stride + cache_len
        h, residual = x, None
        for i, w in enumerate(self.talker):
            a = w.attn
            normed, residual = fused_add_rmsnorm(h, residual, a.input_norm, a.eps)
            q = _attention_query(normed, a, cos, sin, kv.layers[i], write_at)
            out = paged_attention(q, kv.layers[i], tables, kv_lens, plan.decode_cu_seqlens, 1)  # (B, Hq, D)
            out = self.linear(out.reshape(x.shape[0], -1), a.o)
            normed, residual, router_logits = fused_add_rmsnorm_router(out, residual, a.post_norm, w.router, a.eps)
            routed = routed_moe(normed, router_logits, w.experts_gate_up, w.experts_down, w.top_k, w.norm_topk_prob)
            h = self._shared_expert(normed, w.shared, routed)
        return fused_add_rmsnorm(h, residual, lm.norm.weight, lm.norm.eps).normed

    def _shared_expert(self, x: torch.Tensor, s: SharedExpertWeights, routed: torch.Tensor) -> torch.Tensor:
        """routed + sigmoid(x @ gate^T) * down(silu(gate_proj(x)) * up_proj(x)), the gate's logit from the same GEMM
        as gate/up and the sum in one launch."""
        width = 2 * s.intermediate
        gate_up_gate = F.linear(x, s.gate_up_gate)  # (T, 2I + 1 + padding)
        out = self.linear(silu_mul(gate_up_gate[:, :width]), s.down)
        return torch.addcmul(routed, torch.sigmoid(gate_up_gate[:, width:width + 1]), out)


def _attention_query(
    x: torch.Tensor, a: AttentionWeights, cos: torch.Tensor, sin: torch.Tensor, kv_cache: torch.Tensor,
    slots: torch.Tensor,
) -> torch.Tensor:
    """x `(T, hidden)` -> normed, rotated q `(T, Hq, D)` from one q/k/v GEMM; the normed, rotated k and v are stored
    at their flat `slots` of `kv_cache` in the same launch (on CPU: the reference norm, rope and write)."""
    tokens = x.shape[0]
    q_width, kv_width = a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim
    qkv = F.linear(x, a.qkv)
    q = qkv[:, :q_width].view(tokens, a.num_heads, a.head_dim)
    k = qkv[:, q_width:q_width + kv_width].view(tokens, a.num_kv_heads, a.head_dim)
    v = qkv[:, q_width + kv_width:].view(tokens, a.num_kv_heads, a.head_dim)
    return qk_norm_rope_cache(q, k, v, a.q_norm, a.k_norm, cos, sin, kv_cache, slots, a.eps)

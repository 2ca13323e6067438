"""Test harness: drives ThinkerLM step by step over a paged cache with shuffled, non-contiguous block tables."""
from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from runtime.attention import allocate_kv_cache, build_attention_context
from services.thinker.model import DeepstackInput, ThinkerLM


@dataclass
class Feed:
    """New tokens of one sequence in one step."""

    seq: int
    embeds: torch.Tensor  # [n, H]
    positions: torch.Tensor  # [3, n]


@dataclass
class FeedResult:
    logits: torch.Tensor  # [n, V] float32
    captured: torch.Tensor | None  # [n, H]


def text_positions(start: int, count: int) -> torch.Tensor:
    """Text-only layout: the same position on all three axes -> [3, count]."""
    return torch.arange(start, start + count).unsqueeze(0).expand(3, -1)


class PagedRunner:
    def __init__(self, model: ThinkerLM, num_blocks: int = 128, block_size: int = 4, seed: int = 0) -> None:
        cfg = model.cfg
        self.model = model
        self.device = model.lm_head.weight.device
        self.block_size = block_size
        self.kv_caches = allocate_kv_cache(
            cfg.num_layers, num_blocks, block_size, cfg.num_kv_heads, cfg.head_dim, torch.float32, self.device
        )
        self.free = list(range(num_blocks))
        random.Random(seed).shuffle(self.free)  # so no sequence's blocks are contiguous or ordered
        self.tables: dict[int, list[int]] = {}
        self.kv_lens: dict[int, int] = {}

    def kv_len(self, seq: int) -> int:
        return self.kv_lens.get(seq, 0)

    def step(
        self, feeds: list[Feed], deepstack: DeepstackInput | None = None, capture_layer: int | None = None
    ) -> list[FeedResult]:
        """One packed forward over every feed; results split back per feed."""
        q_lens = [f.embeds.shape[0] for f in feeds]
        kv_lens = []
        for feed, q_len in zip(feeds, q_lens):
            new_len = self.kv_len(feed.seq) + q_len
            table = self.tables.setdefault(feed.seq, [])
            while len(table) * self.block_size < new_len:
                table.append(self.free.pop())
            self.kv_lens[feed.seq] = new_len
            kv_lens.append(new_len)
        tables = [self.tables[f.seq] for f in feeds]
        ctx = build_attention_context(q_lens, kv_lens, tables, self.block_size, self.device)
        x = torch.cat([f.embeds for f in feeds])  # [T, H]
        positions = torch.cat([f.positions for f in feeds], dim=1)  # [3, T]
        with torch.inference_mode():
            out = self.model(x, positions, ctx, self.kv_caches, deepstack=deepstack, capture_layer=capture_layer)
            logits = self.model.compute_logits(out.hidden)
        results, row = [], 0
        for q_len in q_lens:
            captured = out.captured[row:row + q_len] if out.captured is not None else None
            results.append(FeedResult(logits[row:row + q_len], captured))
            row += q_len
        return results

    def text_feed(self, seq: int, token_ids: list[int], rope_delta: int = 0) -> Feed:
        """The next tokens of a sequence, placed after its cached ones (decode rule: KV index + rope_delta)."""
        start = self.kv_len(seq)
        with torch.inference_mode():
            embeds = self.model.embed(torch.tensor(token_ids, device=self.device))
        return Feed(seq, embeds, text_positions(start + rope_delta, len(token_ids)).to(self.device))

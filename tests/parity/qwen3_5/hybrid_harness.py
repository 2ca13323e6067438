"""Test harness: drives HybridLM step by step, each sequence in its own state slot and shuffled KV blocks, and the
transformers reference run of the same prompt."""
from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from runtime.attention import allocate_kv_cache, build_attention_context
from services.thinker.model.hybrid_lm import HybridLM
from services.thinker.model.linear_state import build_state_context

# A chat-like prompt, 66 tokens (the chunked delta rule's 64-token chunk boundary falls inside), a 3-token prompt
PROMPTS = ([151644, 872, 198, 9707, 11, 1879, 0, 151645, 198, 151644, 77091, 198],
           [(7 * i + 3) % 5000 + 100 for i in range(66)],
           [151644, 77091, 198])
NEW_TOKENS = 6


@dataclass
class Reference:
    prefill_logits: torch.Tensor  # [P, V]
    tokens: list[int]  # greedy continuation
    step_logits: list[torch.Tensor]  # [V] per generated token


def reference(hf, prompt: list[int], new_tokens: int) -> Reference:
    with torch.inference_mode():
        ids = torch.tensor([prompt])
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, do_sample=False,
                          output_logits=True, return_dict_in_generate=True, eos_token_id=None)
        prefill = hf(input_ids=ids).logits[0].float()
    return Reference(prefill, out.sequences[0, len(prompt):].tolist(), [lg[0].float() for lg in out.logits])


class HybridRunner:
    """Sequence i lives in slot `slots[i]`; a step takes (sequence, new token ids) feeds packed in the given order."""

    def __init__(self, model: HybridLM, num_slots: int = 4, num_blocks: int = 256, block_size: int = 4,
                 seed: int = 0, device: str = "cpu", dtype: torch.dtype = torch.float32) -> None:
        cfg = model.cfg
        self.model = model
        self.device = torch.device(device)
        self.block_size = block_size
        self.kv_caches = allocate_kv_cache(len(cfg.kv_layers), num_blocks, block_size, cfg.num_kv_heads,
                                           cfg.head_dim, dtype, self.device)
        self.states = model.allocate_states(num_slots, self.device)
        self.free = list(range(num_blocks))
        rng = random.Random(seed)
        rng.shuffle(self.free)
        self.slots = list(range(num_slots))
        rng.shuffle(self.slots)
        self.tables: dict[int, list[int]] = {}
        self.lens: dict[int, int] = {}

    def step(self, feeds: list[tuple[int, list[int]]]) -> list[torch.Tensor]:
        """-> logits [n, V] (float32, on the host) per feed."""
        q_lens = [len(ids) for _, ids in feeds]
        starts = [self.lens.get(seq, 0) for seq, _ in feeds]
        for (seq, ids), start in zip(feeds, starts):
            table = self.tables.setdefault(seq, [])
            while len(table) * self.block_size < start + len(ids):
                table.append(self.free.pop())
            self.lens[seq] = start + len(ids)
        ctx = build_attention_context(q_lens, [self.lens[s] for s, _ in feeds], [self.tables[s] for s, _ in feeds],
                                      self.block_size, self.device)
        states = build_state_context(self.states, q_lens, [self.slots[s] for s, _ in feeds],
                                     [start == 0 for start in starts], self.device)
        positions = torch.cat([torch.arange(s, s + n).expand(3, -1) for s, n in zip(starts, q_lens)], dim=1)
        positions = positions.to(self.device)
        ids = torch.tensor([t for _, tokens in feeds for t in tokens], device=self.device)
        with torch.inference_mode():
            hidden = self.model(self.model.embed(ids), positions, ctx, self.kv_caches, states=states).hidden
            logits = self.model.compute_logits(hidden).cpu()
        return list(logits.split(q_lens))

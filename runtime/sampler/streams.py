"""Seeded per-row random streams: one torch.Generator per request, on the logits' device, and a pick's uniforms
drawn from it, one per vocabulary id. A row's draws depend on its seed alone, never on the rest of its batch."""
from __future__ import annotations

import torch


def seeded_generator(seed: int, device: torch.device) -> torch.Generator:
    """A generator on `device` (its Philox state and offset stay there: no host sync to draw) seeded with `seed`."""
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator


class RowGenerators:
    """One generator per sequence, so a request's seed gives the same tokens whatever else is in the batch."""

    def __init__(self, device: torch.device) -> None:
        self._device = device
        self._gens: dict[int, torch.Generator] = {}

    def get(self, seq_id: int, seed: int) -> torch.Generator:
        g = self._gens.get(seq_id)
        if g is None:
            g = self._gens[seq_id] = seeded_generator(seed, self._device)
        return g

    def drop(self, seq_id: int) -> None:
        self._gens.pop(seq_id, None)


def row_uniforms(generators: list[torch.Generator | None], vocab: int, device: torch.device) -> torch.Tensor:
    """One pick's uniforms `(B, vocab)`: row i's from its generator, rows without one from the global stream (in
    one launch)."""
    uniforms = torch.empty(len(generators), vocab, device=device)
    if any(g is None for g in generators):
        uniforms.uniform_()
    for row, generator in enumerate(generators):
        if generator is not None:
            uniforms[row].uniform_(generator=generator)
    return uniforms

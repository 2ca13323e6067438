"""Code2Wav chunking: ours equals transformers' `chunked_decode` given the same codes and chunking."""
from __future__ import annotations

from typing import Any

import pytest
import torch

from services.talker.model.code2wav import Code2Wav
from services.talker.model.load import TalkerModel


def chunked_decode(model: Code2Wav, codes: torch.Tensor, chunk_size: int = 300, left_context: int = 25) -> torch.Tensor:
    """The reference's offline chunking: decode `[start - ctx, end)`, drop the context's samples, concatenate.

    Each chunk's held-back tail is never produced, so the result is `held_back` samples shorter per chunk
    than a full decode; kept as is because `generate` in transformers produces exactly this.
    """
    pieces = []
    start, total = 0, codes.shape[-1]
    while start < total:
        end = min(start + chunk_size, total)
        ctx = min(left_context, start)
        wav = model(codes[..., start - ctx : end])
        pieces.append(wav[..., ctx * model.samples_per_frame :])
        start = end
    return torch.cat(pieces, dim=-1)


@pytest.mark.parametrize(("frames", "chunk", "context"), [(7, 300, 25), (40, 16, 5), (33, 10, 12), (30, 10, 10)])
def test_chunked_decode_matches(hf_omni: Any, talker_model: TalkerModel, frames: int, chunk: int, context: int) -> None:
    codes = torch.randint(0, 2048, (1, 16, frames), generator=torch.Generator().manual_seed(frames))
    with torch.no_grad():
        ours = chunked_decode(talker_model.code2wav, codes, chunk, context)
        ref = hf_omni.code2wav.chunked_decode(codes, chunk_size=chunk, left_context_size=context)
    assert ours.shape == ref.shape
    chunks = -(-frames // chunk)
    assert ours.shape[-1] == frames * 1920 - chunks * talker_model.code2wav.held_back  # 555 lost per chunk
    assert (ours - ref).abs().max().item() <= 1e-5 * ref.abs().max().item()

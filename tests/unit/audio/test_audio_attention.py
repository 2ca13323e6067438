"""Windowed attention: the padded SDPA path equals a per-window loop; backend selection fails loudly."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from services.audio.model.attention import padded_window_attention, select_attention
from services.audio.model.config import AudioEncoderConfig
from services.audio.model.plan import plan_batch


def test_padded_attention_equals_a_loop_over_windows() -> None:
    plan = plan_batch([1234, 30, 900], AudioEncoderConfig())
    torch.manual_seed(0)
    qkv = torch.randn(plan.num_tokens, 3, 2, 8)
    out = padded_window_attention(qkv, plan, 8 ** -0.5)
    bounds = plan.cu_seqlens.tolist()
    for start, end in zip(bounds[:-1], bounds[1:]):
        q, k, v = qkv[start:end].permute(1, 2, 0, 3)  # each [H, L, D]
        ref = F.scaled_dot_product_attention(q, k, v).transpose(0, 1).reshape(end - start, 16)
        torch.testing.assert_close(out[start:end], ref, rtol=1e-6, atol=1e-6)


def test_cpu_auto_is_padded_and_varlen_is_refused() -> None:
    assert select_attention("auto", torch.device("cpu"), torch.float32) is padded_window_attention
    with pytest.raises(ValueError, match="'varlen' needs CUDA"):
        select_attention("varlen", torch.device("cpu"), torch.bfloat16)
    with pytest.raises(ValueError, match="unknown"):
        select_attention("flash3", torch.device("cpu"), torch.float32)

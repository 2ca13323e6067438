"""Host length arithmetic: mel frames and AuT token counts equal transformers' formulas."""
from __future__ import annotations

import pytest
import torch

from runtime.audio_lengths import audio_token_count, mel_frame_count, stem_output_length


def test_token_count_equals_transformers_for_every_length_up_to_5000() -> None:
    modeling = pytest.importorskip("transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe")
    frames = torch.arange(0, 5000)
    ref = modeling._get_feat_extract_output_lengths(frames, 50).tolist()
    assert [audio_token_count(t) for t in range(5000)] == ref


@pytest.mark.parametrize("frames,tokens", [(320, 42), (400, 52), (37, 5), (1234, 161), (100, 13), (1, 1), (0, 0)])
def test_token_count_examples(frames: int, tokens: int) -> None:
    assert audio_token_count(frames) == tokens


def test_stem_output_is_three_stride_two_convs() -> None:
    for n in range(1, 300):
        a = (n - 1) // 2 + 1
        b = (a - 1) // 2 + 1
        assert stem_output_length(n) == (b - 1) // 2 + 1


def test_mel_frames_drop_the_partial_hop() -> None:
    assert mel_frame_count(51200) == 320
    assert mel_frame_count(16159) == 100
    assert mel_frame_count(0) == 0


@pytest.mark.parametrize("fn", [audio_token_count, mel_frame_count])
def test_negative_lengths_raise(fn) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=">= 0"):
        fn(-1)

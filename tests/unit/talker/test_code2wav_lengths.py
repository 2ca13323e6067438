"""Code2Wav geometry at the real rates (1920 samples per frame): lengths, the held-back tail, conv look-back."""
from __future__ import annotations

import torch

from services.talker.model.code2wav import Code2Wav
from tests.unit.talker.talker_tiny import tiny_config


def test_lengths_at_real_rates() -> None:
    c2w = Code2Wav(tiny_config().code2wav)
    assert c2w.samples_per_frame == 1920 and c2w.held_back == 555
    assert [c2w.output_length(n) for n in (1, 2, 10, 50)] == [1920 * n - 555 for n in (1, 2, 10, 50)]
    assert c2w.conv_receptive_frames() == 11
    with torch.no_grad():
        assert c2w(torch.zeros(1, 16, 3, dtype=torch.long)).shape == (1, 1, 3 * 1920 - 555)

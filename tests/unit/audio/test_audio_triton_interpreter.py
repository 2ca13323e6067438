"""The AuT's Triton kernels (stem convs, fused add + LayerNorm) checked on CPU through Triton's interpreter
(skipped where triton is missing)."""
from __future__ import annotations

from pathlib import Path

from tests.triton_scripts import assert_script_passes

HERE = Path(__file__).parent


def test_audio_kernels_match_references_in_the_interpreter() -> None:
    assert_script_passes(HERE / "audio_interpreter_check.py", interpret=True, timeout=240)

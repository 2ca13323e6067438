"""Code2Wav's Triton SnakeBeta kernel checked on CPU through Triton's interpreter (skipped without triton)."""
from __future__ import annotations

from pathlib import Path

from tests.triton_scripts import assert_script_passes

HERE = Path(__file__).parent


def test_snake_kernel_matches_reference_in_the_interpreter() -> None:
    assert_script_passes(HERE / "snake_interpreter_check.py", interpret=True, timeout=120)

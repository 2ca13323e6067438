"""Code2Wav's Triton SnakeBeta kernel checked on CPU through Triton's interpreter (skipped without triton)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
REPO = HERE.parents[2]


def test_snake_kernel_matches_reference_in_the_interpreter() -> None:
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, str(HERE / "snake_interpreter_check.py")], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]

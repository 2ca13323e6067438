"""Runs a Triton check script in a fresh process and asserts it passed: TRITON_INTERPRET is read when triton is first
imported, so the interpreter checks (interpret=True) and the sm_90 compile checks (False: the variable removed) each
need a process of their own."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def assert_script_passes(script: Path, *args: str, interpret: bool, timeout: float = 240) -> None:
    """Skips where triton is not installed; fails with the script's output tails when it exits non-zero."""
    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"PYTHONPATH": str(REPO)}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    proc = subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]

"""The Triton kernels checked on CPU: their arithmetic through Triton's interpreter, and their compilation for sm_90
(H100/H200) through Triton's real compiler and the bundled ptxas; both skipped where triton is not installed."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
REPO = HERE.parents[2]


def run_script(name: str, interpret: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"PYTHONPATH": str(REPO)}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    return subprocess.run([sys.executable, str(HERE / name)], env=env, capture_output=True, text=True, timeout=240)


def test_triton_kernels_match_references_in_the_interpreter() -> None:
    pytest.importorskip("triton")
    proc = run_script("interpreter_check.py", interpret=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]


def test_triton_kernels_compile_for_sm90_without_spills() -> None:
    pytest.importorskip("triton")
    proc = run_script("compile_check.py", interpret=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]

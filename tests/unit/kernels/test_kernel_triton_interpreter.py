"""The Triton kernels checked on CPU: their arithmetic through Triton's interpreter, and their compilation for sm_90
(H100/H200) through Triton's real compiler and the bundled ptxas; both skipped where triton is not installed."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.kernels.kernel_data import run_script

HERE = Path(__file__).parent


def test_triton_kernels_match_references_in_the_interpreter() -> None:
    pytest.importorskip("triton")
    proc = run_script(HERE / "interpreter_check.py", interpret=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]


def test_triton_kernels_compile_for_sm90_without_spills() -> None:
    pytest.importorskip("triton")
    proc = run_script(HERE / "compile_check.py", interpret=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]

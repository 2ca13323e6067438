"""The Triton kernels checked on CPU: their arithmetic through Triton's interpreter, and their compilation for sm_90
(H100/H200) through Triton's real compiler and the bundled ptxas; both skipped where triton is not installed."""
from __future__ import annotations

from pathlib import Path

from tests.triton_scripts import assert_script_passes

HERE = Path(__file__).parent


def test_triton_kernels_match_references_in_the_interpreter() -> None:
    assert_script_passes(HERE / "interpreter_check.py", interpret=True)


def test_triton_kernels_compile_for_sm90_without_spills() -> None:
    assert_script_passes(HERE / "compile_check.py", interpret=False)

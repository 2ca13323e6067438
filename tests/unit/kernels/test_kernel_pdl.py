"""Where programmatic dependent launch applies (runtime/kernels/pdl.py): only when asked for, and only on a CUDA
device of sm_90 or later; never on a CPU tensor, so the interpreter and CPU paths launch as they always did."""
from __future__ import annotations

import pytest
import torch

pdl = pytest.importorskip("runtime.kernels.pdl", reason="needs triton")


def test_a_cpu_tensor_never_launches_with_pdl_even_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pdl, "ENABLED", True)
    assert not pdl.use_pdl(torch.zeros(1))
    assert pdl.pdl_args(torch.zeros(1)) == {"PDL": False}


def test_the_compile_check_forces_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pdl, "FORCE", True)
    assert pdl.pdl_args(torch.zeros(1)) == {"PDL": True, "launch_pdl": True}

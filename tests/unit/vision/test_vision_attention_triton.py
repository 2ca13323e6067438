"""The `triton` attention backend on CPU: where it resolves, and the whole tower through it in Triton's interpreter.

The tower check runs this file as a script in a fresh process, because TRITON_INTERPRET must be set before triton is
imported. It swaps the backend function in directly: `select_attention` itself keeps `triton` to CUDA half dtypes.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from services.vision.model import Grid, VisionTower
from services.vision.model import attention
from services.vision.model.attention import ATTENTION_BACKENDS, select_attention
from tests.triton_scripts import assert_script_passes
from tests.unit.vision.test_vision_tower import CFG, random_state

HERE = Path(__file__).resolve()
CUDA = torch.device("cuda")  # a device object only: nothing here runs on it
GRIDS = [Grid(1, 4, 6), Grid(3, 2, 2), Grid(1, 6, 2)]  # three runs; segments of 24, 4, 4, 4 and 12 patches


def test_triton_is_a_backend_on_cuda_half_only() -> None:
    assert "triton" in ATTENTION_BACKENDS
    assert select_attention("triton", CUDA, torch.bfloat16)[0] == "triton"
    for device, dtype in ((torch.device("cpu"), torch.float32), (CUDA, torch.float32)):
        with pytest.raises(ValueError, match="needs CUDA"):
            select_attention("triton", device, dtype)


def test_triton_backend_needs_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(attention, "triton_importable", lambda: False)
    with pytest.raises(RuntimeError, match="needs the triton package"):
        select_attention("triton", CUDA, torch.bfloat16)


def test_tower_through_the_triton_backend_in_the_interpreter() -> None:
    assert_script_passes(HERE, interpret=True, timeout=120)


if __name__ == "__main__":
    os.environ["TRITON_INTERPRET"] = "1"
    from tests.unit.kernels.interpreter_check import patch_numpy_scalars

    patch_numpy_scalars()
    torch.set_num_threads(1)
    tower = VisionTower.from_state_dict(CFG, random_state(CFG), "cpu", torch.float32)  # head dim 16: no tail
    patches = torch.randn(sum(g.num_patches for g in GRIDS), CFG.patch_dim, generator=torch.Generator().manual_seed(0))
    want = tower(patches, GRIDS)
    tower._attend = attention.make_triton()
    got = tower(patches, GRIDS)
    for a, b in [(got.merged, want.merged), *zip(got.deepstack, want.deepstack)]:
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4 * float(b.abs().max()))
    print("tower through the triton backend matches segments")

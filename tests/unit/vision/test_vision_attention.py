"""Attention backends on CPU: forced SDPA kernels really are forced, `auto` routes by plan, names are checked."""
from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend

from services.vision.model import Grid, VisionTower
from services.vision.model import attention
from services.vision.model.attention import (
    AUTO_DENSE_ORDER, FORCED_SDPA, make_auto, make_segments, segment_sdpa, select_attention,
)
from services.vision.model.plan import VisionPlan, build_plan
from tests.unit.vision.test_vision_tower import CFG, random_state

CUDA = torch.device("cuda")  # a device object only: nothing here runs on it


def packed(grids: list[Grid], heads: int = 2, head_dim: int = 8) -> tuple[torch.Tensor, ...]:
    """q, k contiguous and v a strided view of one qkv buffer, as the tower hands them over, plus the plan."""
    plan = build_plan(grids, merge=2, side=8)
    gen = torch.Generator().manual_seed(0)
    qkv = torch.randn(plan.num_patches, 3, heads, head_dim, generator=gen)
    return qkv[:, 0].contiguous(), qkv[:, 1].contiguous(), qkv[:, 2], plan


def test_restricting_to_math_changes_nothing() -> None:
    *qkv, plan = packed([Grid(1, 4, 6), Grid(3, 2, 2), Grid(1, 6, 2)])  # three runs
    torch.testing.assert_close(make_segments([SDPBackend.MATH])(*qkv, plan), segment_sdpa(*qkv, plan))


def test_a_forced_kernel_does_not_fall_back() -> None:
    *qkv, plan = packed([Grid(2, 2, 2)])
    with pytest.raises(RuntimeError, match="No (available kernel|viable backend)"):
        make_segments([SDPBackend.CUDNN_ATTENTION])(*qkv, plan)  # cuDNN has no CPU kernel


@pytest.mark.parametrize(("grids", "route"), [
    ([Grid(4, 2, 2)], "dense"),  # video frames: one run
    ([Grid(1, 4, 4)] * 3, "dense"),  # same-size images: one run
    ([Grid(1, 4, 6), Grid(1, 2, 2)], "varlen"),  # two runs
])
def test_auto_routes_one_run_plans_to_the_dense_call(grids: list[Grid], route: str) -> None:
    calls: list[str] = []

    def recorder(name: str) -> attention.AttentionFn:
        def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: VisionPlan) -> torch.Tensor:
            calls.append(name)
            return q

        return fn

    *qkv, plan = packed(grids)
    make_auto(recorder("dense"), recorder("varlen"))(*qkv, plan)
    make_auto(recorder("dense"), None)(*qkv, plan)  # without a varlen kernel everything is dense
    assert calls == [route, "dense"]


def test_auto_on_cuda_half_is_its_own_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """On CUDA fp16/bf16 `auto` is the routing function: its dense side runs on CPU tensors through the fallbacks."""
    monkeypatch.setattr(attention, "varlen_available", lambda: False)
    name, fn = select_attention("auto", CUDA, torch.bfloat16)
    assert name == "auto"
    *qkv, plan = packed([Grid(2, 2, 4)])
    torch.testing.assert_close(fn(*qkv, plan), segment_sdpa(*qkv, plan))
    assert AUTO_DENSE_ORDER[0] == SDPBackend.CUDNN_ATTENTION and AUTO_DENSE_ORDER[-1] == SDPBackend.MATH


@pytest.mark.parametrize("name", list(FORCED_SDPA))
def test_forced_kernels_need_cuda_half(name: str) -> None:
    assert select_attention(name, CUDA, torch.float16)[0] == name
    with pytest.raises(ValueError, match="needs CUDA"):
        select_attention(name, torch.device("cpu"), torch.float32)
    with pytest.raises(ValueError, match="needs CUDA"):
        select_attention(name, CUDA, torch.float32)


def test_tower_switches_backend() -> None:
    tower = VisionTower.from_state_dict(CFG, random_state(CFG), "cpu", torch.float32)
    grids = [Grid(1, 4, 6), Grid(2, 2, 2)]
    patches = torch.randn(sum(g.num_patches for g in grids), CFG.patch_dim)
    want = tower(patches, grids)
    with pytest.raises(ValueError, match="not a backend"):
        tower.use_attention("flash3")
    assert tower.attention_backend == "segments"
    tower.use_attention("segments")
    torch.testing.assert_close(tower(patches, grids).merged, want.merged)

"""The chart's tensor-parallel thinker: stages.thinker.config.tensor_parallel N reaches the mesh config and the
thinker pod requests N GPUs (gpus per rank); other stages keep theirs."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy.test_deploy_thinker_routing import rendered_mesh


def _gpus(objs: list[dict], stage: str) -> tuple[str | None, str | None]:
    (dep,) = [o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"].endswith(f"-{stage}")]
    (container,) = [c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == stage]
    res = container["resources"]
    return res["requests"].get("nvidia.com/gpu"), res["limits"].get("nvidia.com/gpu")


@pytest.mark.parametrize(("flags", "ranks", "gpus"), [
    ((), 1, 1),
    (("--set", "stages.thinker.config.tensor_parallel=2"), 2, 2),
    (("--set", "stages.thinker.config.tensor_parallel=4", "--set", "stages.thinker.gpus=2"), 4, 8),
])
def test_a_tensor_parallel_thinker_requests_a_gpu_per_rank(helm: Path, flags: tuple[str, ...], ranks: int,
                                                           gpus: int) -> None:
    mesh, _, objs = rendered_mesh(helm, *flags)
    assert mesh.thinker.tensor_parallel == ranks
    assert _gpus(objs, "thinker") == (gpus, gpus)
    assert _gpus(objs, "talker") == (1, 1)

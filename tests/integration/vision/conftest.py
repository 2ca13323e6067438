"""Vision stage fixtures: one real `python -m services.vision` process on the demo checkpoint, and the same tower
loaded in-process as the reference its answers must equal."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from services.vision.encoder import VisionEncoder
from tests.integration.mesh_process import Proc, start_stage

# A long batch window so concurrent test requests reliably share a forward on a busy 2-core machine;
# small caps so the limit checks are cheap to reach. The stage sums with as many threads as this process's reference
# (a CPU stage's own default is a core fewer), since their answers are compared bit for bit.
MAX_BATCH_PATCHES = 2048
MAX_REQUEST_PATCHES = 4096
VISION_MESH = {"vision": {"enabled": True, "cpu_threads": torch.get_num_threads(), "encoder": {
    "max_batch_size": MAX_BATCH_PATCHES, "max_request_size": MAX_REQUEST_PATCHES, "batch_wait_ms": 250.0}}}


@pytest.fixture(scope="session")
def vision_stage(demo_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Proc:
    proc = start_stage("vision", demo_ckpt, VISION_MESH, tmp_path_factory.mktemp("vision"))
    yield proc
    assert proc.stop() == 0


@pytest.fixture(scope="session")
def vision_addr(vision_stage: Proc) -> str:
    return f"127.0.0.1:{vision_stage.ports['grpc_port']}"


@pytest.fixture(scope="session")
def local_encoder(demo_ckpt: Path) -> VisionEncoder:
    """The reference: the same checkpoint's tower in this process, fp32 on CPU, as the stage runs it."""
    return VisionEncoder.load(demo_ckpt, "cpu", torch.float32)

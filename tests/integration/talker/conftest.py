"""Talker stage fixtures: one real `python -m services.talker` process on the demo checkpoint, and the same talker
loaded in-process as the reference its answers must equal."""
from __future__ import annotations

from pathlib import Path

import pytest

from services.talker.model.load import TalkerModel, load_talker_model
from tests.integration.mesh_process import Proc, start_stage

# Small everything: the demo talker is tiny and the test machine has 2 cores. Chunks of 4 then 8 frames so a
# 24-frame answer streams as several chunks.
MAX_ROWS = 4
MAX_FRAMES = 24
MAX_PROMPT_TOKENS = 64
FIRST_CHUNK, CHUNK, LEFT_CONTEXT = 4, 8, 11
TALKER_MESH = {"talker": {"enabled": True, "speech": {
    "max_rows": MAX_ROWS, "max_frames": MAX_FRAMES, "max_prompt_tokens": MAX_PROMPT_TOKENS,
    "first_chunk_frames": FIRST_CHUNK, "chunk_frames": CHUNK, "left_context_frames": LEFT_CONTEXT}}}


@pytest.fixture(scope="session")
def talker_stage(demo_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Proc:
    proc = start_stage("talker", demo_ckpt, TALKER_MESH, tmp_path_factory.mktemp("talker"))
    yield proc
    assert proc.stop() == 0


@pytest.fixture(scope="session")
def talker_addr(talker_stage: Proc) -> str:
    return f"127.0.0.1:{talker_stage.ports['grpc_port']}"


@pytest.fixture(scope="session")
def local_talker(demo_ckpt: Path) -> TalkerModel:
    """The reference: the checkpoint's talker in this process, fp32 on CPU, as the stage runs it."""
    return load_talker_model(demo_ckpt)

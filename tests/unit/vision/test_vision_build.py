"""The vision stage's assembly: the mesh config's linear_dtype reaches the tower, and the start log names it."""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
import torch

import services.vision.build as build
from runtime.config import MeshConfig, load_mesh_config
from runtime.metrics import Metrics
from runtime.server import StageServer
from services.vision.encoder import VisionEncoder


class LoadCalled(Exception):
    """Stops build_vision once it has asked for the encoder."""


def build_stage(mesh: MeshConfig, model_dir: Path) -> None:
    async def run() -> None:
        server = StageServer("vision", "r0", mesh.vision.server, Metrics("vision", "r0"))
        close = await build.build_vision(mesh, model_dir, server)
        close()

    asyncio.run(run())


def test_stage_linear_dtype_reaches_the_encoder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen = {}

    def load(model_dir: Path, device: torch.device, dtype: torch.dtype, **kwargs: str) -> VisionEncoder:
        seen.update(kwargs, device=device, dtype=dtype)
        raise LoadCalled

    monkeypatch.setattr(build.VisionEncoder, "load", load)
    # no CUDA here: the name is all this test follows
    monkeypatch.setattr(build, "stage_device", lambda name, cpu_threads: torch.device(name))
    mesh = load_mesh_config(None, {"vision.device": "cuda", "vision.dtype": "bfloat16", "vision.linear_dtype": "fp8"})
    with pytest.raises(LoadCalled):
        build_stage(mesh, tmp_path)
    assert seen == {"linear_dtype": "fp8", "device": torch.device("cuda"), "dtype": torch.bfloat16}


def test_encoder_hands_linear_dtype_to_the_tower(tmp_path: Path) -> None:
    # the tower checks it before reading anything: an empty directory is enough to see it arrive
    with pytest.raises(ValueError, match="linear_dtype='fp8' needs a CUDA GPU with FP8 tensor cores"):
        VisionEncoder.load(tmp_path, "cpu", torch.bfloat16, linear_dtype="fp8")


def test_start_log_names_the_block_linears(demo_ckpt: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=build.__name__):
        build_stage(MeshConfig(), demo_ckpt)
    assert "native block linears" in caplog.text

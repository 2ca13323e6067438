"""Audio stage fixtures: one real `python -m services.audio` process on the demo checkpoint, and the same front end
and encoder loaded in-process as the reference its answers must equal."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from services.audio.features import LogMelExtractor, MelConfig
from services.audio.model import AudioEncoder
from tests.integration.mesh_process import Proc, start_stage

# A long batch window so concurrent test requests reliably share a forward on a busy 2-core machine; a small
# request cap (in mel frames, 100 per second) so the limit is cheap to reach.
BATCH_WAIT_MS = 250.0
MAX_REQUEST_SECONDS = 6
AUDIO_MESH = {"audio": {"enabled": True, "encoder": {
    "max_batch_size": 3000, "max_request_size": MAX_REQUEST_SECONDS * 100, "batch_wait_ms": BATCH_WAIT_MS}}}


@pytest.fixture(scope="session")
def audio_stage(demo_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Proc:
    proc = start_stage("audio", demo_ckpt, AUDIO_MESH, tmp_path_factory.mktemp("audio"))
    yield proc
    assert proc.stop() == 0


@pytest.fixture(scope="session")
def audio_addr(audio_stage: Proc) -> str:
    return f"127.0.0.1:{audio_stage.ports['grpc_port']}"


class LocalAudio:
    """The reference: the checkpoint's log-mel and AuT in this process, fp32 on CPU, as the stage runs them."""

    def __init__(self, ckpt: Path) -> None:
        self.extractor = LogMelExtractor(MelConfig.from_checkpoint(ckpt))
        self.encoder = AudioEncoder.load(ckpt, "cpu", torch.float32)

    def encode(self, clip: torch.Tensor) -> torch.Tensor:
        """One clip encoded alone: [tokens, output_dim]."""
        (out,) = self.encoder(self.extractor([clip]))
        return out


@pytest.fixture(scope="session")
def local_audio(demo_ckpt: Path) -> LocalAudio:
    return LocalAudio(demo_ckpt)

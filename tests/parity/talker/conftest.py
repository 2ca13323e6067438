"""Fixtures for talker parity: our talker stage loaded from the demo checkpoint."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
import torch

from services.talker.model.load import TalkerModel, load_talker_model


@pytest.fixture(scope="session")
def talker_model(demo_ckpt: Path) -> TalkerModel:
    return load_talker_model(demo_ckpt)


@pytest.fixture(autouse=True, scope="module")
def single_thread() -> Iterator[None]:
    """The demo model's ops are tiny: one intra-op thread beats contending for a shared CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

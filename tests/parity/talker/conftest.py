"""Fixtures for talker parity: our talker stage loaded from the demo checkpoint."""
from __future__ import annotations

from pathlib import Path

import pytest

from services.talker.model.load import TalkerModel, load_talker_model
from tests.single_thread import single_thread  # noqa: F401 - autouse: the demo model's ops are tiny


@pytest.fixture(scope="session")
def talker_model(demo_ckpt: Path) -> TalkerModel:
    return load_talker_model(demo_ckpt)

"""Talker unit tests run tiny models: one intra-op thread is faster than contending for a shared CPU."""
from __future__ import annotations

from tests.single_thread import single_thread  # noqa: F401 - autouse for this folder

"""An autouse fixture for test folders of tiny models: one intra-op thread beats contending for a shared CPU.

A folder's conftest imports `single_thread` to apply it to every module there.
"""
from __future__ import annotations

from typing import Iterator

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def single_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

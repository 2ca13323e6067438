"""A thread named through runtime.thread_names reads so in /proc, where top -H and the benches' readings look."""
from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

from bench.thinker.proc_cpu import cpu_times
from runtime.thread_names import name_this_thread

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and prctl are Linux's")


def test_a_named_thread_shows_its_name_in_proc_cut_to_the_kernels_15_bytes() -> None:
    seen: dict[str, object] = {}

    def body() -> None:
        seen["ok"] = name_this_thread("omnimesh-test-thread")  # 20 bytes
        seen["comm"] = Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().strip()
        seen["reading"] = cpu_times(os.getpid())
        seen["tid"] = threading.get_native_id()

    thread = threading.Thread(target=body)
    thread.start()
    thread.join(timeout=10)
    assert seen["ok"] is True and seen["comm"] == "omnimesh-test-t"
    assert seen["reading"].threads[seen["tid"]].name == "omnimesh-test-t"  # type: ignore[attr-defined]

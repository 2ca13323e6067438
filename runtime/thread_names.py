"""Give a Python thread its name in the kernel too, so `top -H`, `ps -L` and /proc show which thread of a stage
is busy (Python before 3.14 names only its own Thread object: every OS thread reads as the interpreter)."""
from __future__ import annotations

import ctypes
import ctypes.util
import sys

_PR_SET_NAME = 15
_MAX_BYTES = 15  # the kernel's TASK_COMM_LEN less the terminating NUL


def name_this_thread(name: str) -> bool:
    """Set the calling thread's kernel name (cut to 15 bytes); False where the platform has no prctl."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    return libc.prctl(_PR_SET_NAME, name.encode()[:_MAX_BYTES], 0, 0, 0) == 0

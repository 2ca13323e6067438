"""Decoded media's memory back to the system (glibc; elsewhere these do nothing)."""
from __future__ import annotations

import ctypes
import ctypes.util
import functools

_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)


@functools.cache  # find_library runs `ldconfig -p` in a subprocess each call
def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None  # glibc only


def return_freed_heap() -> None:
    """Hands freed heap back to the system. glibc keeps what decoding freed in its per-thread arenas: after bursts of
    large images the gateway's RSS stayed at 3.5x its start (1.6 GB from 450 MB) with nothing in use."""
    if (libc := _glibc()) is not None:
        libc.malloc_trim(0)


def map_large_blocks() -> None:
    """Blocks of 1 MiB and more (frames, sample buffers) get pages of their own, unmapped when freed: glibc's moving
    threshold otherwise serves them from arenas up to 32 MiB, where the holes they leave stay resident."""
    if (libc := _glibc()) is not None:
        libc.mallopt(_M_MMAP_THRESHOLD, 1 << 20)

"""The gateway's timing of a call (omnimesh/timing.py) as the HTTP `Server-Timing` header of a whole answer; a
streamed one has sent its headers before the timing exists."""
from __future__ import annotations

from collections.abc import Mapping

from omnimesh.timing import format_timing


def server_timing(timing: Mapping[str, float]) -> dict[str, str]:
    return {"server-timing": format_timing(timing.items())} if timing else {}

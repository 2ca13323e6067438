"""CPU seconds a process (and its main thread) has used so far, read from /proc (Linux only, no psutil)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

_TICKS = os.sysconf("SC_CLK_TCK")


class CpuTimes(NamedTuple):
    process_s: float  # every thread: model compute, the engine thread, gRPC's threads, the asyncio thread
    main_thread_s: float  # the thread running the asyncio loop of a stage (the streaming path of a server)

    def __sub__(self, other: CpuTimes) -> CpuTimes:  # type: ignore[override]
        return CpuTimes(self.process_s - other.process_s, self.main_thread_s - other.main_thread_s)


def _stat_seconds(stat: Path) -> float:
    # The command name (field 2) may hold spaces and parentheses: split after its closing one.
    fields = stat.read_text().rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5), counted from 1
    return (utime + stime) / _TICKS


def cpu_times(pid: int) -> CpuTimes:
    """User + system CPU of process `pid` and of its main thread (whose thread id is the pid)."""
    proc = Path(f"/proc/{pid}")
    return CpuTimes(_stat_seconds(proc / "stat"), _stat_seconds(proc / "task" / str(pid) / "stat"))

"""CPU seconds a process, its main thread and each of its threads have used so far, read from /proc (Linux only,
no psutil)."""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

_TICKS = os.sysconf("SC_CLK_TCK")


class ThreadTime(NamedTuple):
    name: str  # the kernel's name of the thread (what `top -H` shows): see runtime/thread_names.py
    seconds: float


class CpuTimes(NamedTuple):
    process_s: float  # every thread: model compute, the engine thread, gRPC's threads, the asyncio thread
    main_thread_s: float  # the thread running the asyncio loop of a stage (the streaming path of a server)
    threads: Mapping[int, ThreadTime] = {}  # thread id -> its name and CPU so far

    def __sub__(self, other: CpuTimes) -> CpuTimes:  # type: ignore[override]
        """The CPU used between `other` and this reading; a thread that started meanwhile counts from zero."""
        threads = {tid: ThreadTime(t.name, t.seconds - (other.threads[tid].seconds if tid in other.threads else 0.0))
                   for tid, t in self.threads.items()}
        return CpuTimes(self.process_s - other.process_s, self.main_thread_s - other.main_thread_s, threads)


def busiest_threads(used: CpuTimes, seconds: float, top: int = 6) -> list[tuple[str, int, float]]:
    """(name, threads, cores) of the thread names that used the most CPU over `seconds`, busiest first: a pool of
    threads that share a name (OpenMP's, gRPC's) reads as one line with its size."""
    by_name: dict[str, list[float]] = {}
    for t in used.threads.values():
        by_name.setdefault(t.name, []).append(t.seconds)
    rows = [(name, len(times), sum(times) / seconds) for name, times in by_name.items()]
    return sorted(rows, key=lambda row: row[2], reverse=True)[:top]


def _stat(stat: Path) -> tuple[str, float]:
    # The command name (field 2) may hold spaces and parentheses: it is what lies between the first "(" and the
    # last ")"; the fields after that are split on spaces.
    text = stat.read_text()
    name, rest = text[text.index("(") + 1:].rsplit(")", 1)
    fields = rest.split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5), counted from 1
    return name, (utime + stime) / _TICKS


def cpu_times(pid: int) -> CpuTimes:
    """User + system CPU of process `pid`, of its main thread (whose thread id is the pid) and of each thread."""
    proc = Path(f"/proc/{pid}")
    threads = {}
    for task in (proc / "task").iterdir():
        try:
            threads[int(task.name)] = ThreadTime(*_stat(task / "stat"))
        except (FileNotFoundError, ProcessLookupError):  # the thread ended between the listing and the read
            continue
    # the main thread lives as long as the process: it is always among the tasks read above
    return CpuTimes(_stat(proc / "stat")[1], threads[pid].seconds, threads)

"""`python -m bench.thinker.thread_cprofile OUT MODULE ARGS...`: runs MODULE as `python -m MODULE ARGS` under cProfile
timed by the main thread's CPU clock, and writes the stats to OUT when it exits.

`python -m cProfile` times with the wall clock, so a server's profile is mostly its waits (epoll, the GIL while
another thread holds it); thread CPU time shows what the main thread itself spends.
"""
from __future__ import annotations

import cProfile
import runpy
import sys
import time


def main() -> None:
    if len(sys.argv) < 3:
        raise SystemExit("usage: python -m bench.thinker.thread_cprofile OUT MODULE [ARGS...]")
    out, module, *args = sys.argv[1:]
    sys.argv = [module, *args]
    profile = cProfile.Profile(time.thread_time)
    try:
        profile.runcall(runpy.run_module, module, run_name="__main__", alter_sys=True)
    finally:  # also when the module exits (SystemExit, a stage stopped by SIGTERM) or fails: its code stands
        profile.dump_stats(out)


if __name__ == "__main__":
    main()

"""What a result file says beside the figures (command, commit, date, the deployment's devices, the client host)
and the PNG plot beside it (matplotlib, from the `bench` extra; a serving-only install skips the plot and says so)."""
from __future__ import annotations

import datetime
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]


def provenance(api: str, addr: str) -> dict[str, Any]:
    return {"command": shlex.join(["omnimesh", *sys.argv[1:]]), "commit": _commit(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "api": api, "addr": addr, "load_shape": "closed loop",
            "client": {"host": platform.node(), "cpus": os.cpu_count()}}


def _commit() -> str:
    """The client's checkout (its commit, "+dirty" with local changes); "" outside a git checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return head + ("+dirty" if head and dirty else "")


def plot(result: dict[str, Any], path: Path) -> Path | None:
    """Output tok/s and TTFT p50 against concurrency, a line per workload; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (tput, ttft) = plt.subplots(1, 2, figsize=(10, 4))
    for name, levels in result["workloads"].items():
        cs = [lv["concurrency"] for lv in levels]
        tput.plot(cs, [lv["output_tok_s"] for lv in levels], marker="o", label=name)
        ttft.plot(cs, [lv["ttft_ms_p50"] for lv in levels], marker="o", label=name)
    for ax, label in ((tput, "output tok/s"), (ttft, "TTFT p50 (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle(f"{result['api']} {result['addr']} ({result.get('model', '')})")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path

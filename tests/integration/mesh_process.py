"""Runs real omnimesh processes for integration tests and reads what they announce on stdout."""
from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

OMNIMESH = str(Path(sys.executable).with_name("omnimesh"))


class LineReader:
    """Reads a process's stdout on a thread so tests can wait for a line with a timeout."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, args=(proc,), daemon=True).start()

    def _pump(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, prefix: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"no line starting {prefix!r} within {timeout} s; saw {self.seen[-5:]}") from None
            if line is None:
                raise RuntimeError(f"process ended before printing {prefix!r}; saw {self.seen[-5:]}")
            self.seen.append(line)
            if line.startswith(prefix):
                return line[len(prefix):]


@dataclass
class Proc:
    """A started process plus what it announced."""

    proc: subprocess.Popen
    reader: LineReader
    ports: dict = field(default_factory=dict)

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def start(cmd: list[str], ready_prefix: str, timeout: float = 120.0) -> Proc:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    reader = LineReader(proc)
    try:
        ports = json.loads(reader.wait_for(ready_prefix, timeout))
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return Proc(proc, reader, ports)


def scrape(metrics_port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
        return r.read().decode()


def metric_value(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels`."""
    total, found = 0.0, False
    for line in text.splitlines():
        if not line.startswith(name) or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        metric, _, label_text = head.partition("{")
        if metric != name:
            continue
        if all(f'{k}="{v}"' in label_text for k, v in labels.items()):
            total += float(value)
            found = True
    if not found:
        raise KeyError(f"{name}{labels} not in the exposition")
    return total


def start_stage(stage: str, model_dir: Path, mesh: dict, workdir: Path, timeout: float = 120.0) -> Proc:
    """`python -m services.<stage>` alone on free ports, with `mesh` (a mesh-config dict) as its YAML."""
    import yaml

    from runtime.server import READY_PREFIX

    config = workdir / "mesh.yaml"
    config.write_text(yaml.safe_dump(mesh))
    return start([sys.executable, "-m", f"services.{stage}", "--model", str(model_dir), "--config", str(config),
                  "--port", "0", "--metrics-port", "0", "--replica", f"{stage}-test"], READY_PREFIX, timeout=timeout)

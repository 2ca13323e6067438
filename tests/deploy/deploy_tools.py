"""Paths and runners for the offline deploy/ checkers that .ci/install-deploy-tools.sh puts in .cache/tools."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CHART = DEPLOY / "helm" / "omnimesh"
RULES = DEPLOY / "prometheus" / "rules.yaml"
RULES_TEST = DEPLOY / "prometheus" / "rules_test.yaml"
DASHBOARD = DEPLOY / "grafana" / "omnimesh.json"
CONTRACT = DEPLOY / "metrics-contract.yaml"
CONTAINERFILE = DEPLOY / "Containerfile"
INSTALLER = ROOT / ".ci" / "install-deploy-tools.sh"
TOOLS = Path(os.environ.get("OMNIMESH_TOOLS_DIR", ROOT / ".cache" / "tools"))
KUBE_VERSION = "1.33.0"
PROMQL_NAMES = Path(__file__).with_name("promql_names.py")
CRD_CHECK = Path(__file__).with_name("crd_check.mjs")

# The chart renders checked everywhere: flags for `helm template`, by scenario name.
MONITORING_APIS = ["--api-versions", "monitoring.coreos.com/v1"]
SCENARIOS: dict[str, list[str]] = {
    "default": [],
    "default-operator": MONITORING_APIS,
    "multi-replica": ["-f", str(CHART / "values-multi-replica.yaml"), *MONITORING_APIS],
    "multi-replica-keda": [
        "-f", str(CHART / "values-multi-replica.yaml"), "--set", "autoscaling.mode=keda",
        "--api-versions", "keda.sh/v1alpha1", *MONITORING_APIS,
    ],
    "tls": ["--set", "tls.enabled=true", "--set", "tls.secretName=omnimesh-tls"],
}

# Grafana's built-in interval variables, replaced before a query is parsed as PromQL.
GRAFANA_INTERVALS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}


class Tool(NamedTuple):
    """One installed checker: where it is, or why it is not there."""

    path: Path | None
    missing_reason: str


@cache
def _install_log() -> str:
    """Runs the installer once per test session (a no-op when the cache is warm); returns its output."""
    if not INSTALLER.exists():
        return f"{INSTALLER} is missing"
    proc = subprocess.run(["bash", str(INSTALLER)], capture_output=True, text=True, timeout=600)
    return (proc.stdout + proc.stderr)[-2000:] if proc.returncode else ""


def tool(name: str) -> Tool:
    """The checker `name` from .cache/tools (installing on first use), e.g. tool("helm")."""
    candidates = {
        "python": TOOLS / "venv" / "bin" / "python",
        "node_modules": TOOLS / "npm" / "node_modules",
    }
    path = candidates.get(name, TOOLS / "bin" / name)
    if not path.exists():
        log = _install_log()
        if not path.exists():
            return Tool(None, f"{name} could not be installed by {INSTALLER.name}: {log or 'no output'}")
    if name == "node_modules" and shutil.which("node") is None:
        return Tool(None, "node is not on PATH (apt-get install nodejs)")
    return Tool(path, "")


def run(args: list[str | Path], stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Runs a checker; on failure the assertion message carries its output."""
    proc = subprocess.run([str(a) for a in args], input=stdin, capture_output=True, text=True, timeout=300)
    if check:
        command = " ".join(map(str, args))
        assert proc.returncode == 0, f"{command} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def helm_template(helm: Path, *flags: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`helm template omni deploy/helm/omnimesh` in namespace omni for Kubernetes KUBE_VERSION."""
    args = [helm, "template", "omni", CHART, "--namespace", "omni", "--kube-version", KUBE_VERSION, *flags]
    return run(args, check=check)


def documents(manifest: str) -> list[dict[str, Any]]:
    """The non-empty YAML documents of a rendered manifest."""
    return [d for d in yaml.safe_load_all(manifest) if d]


@cache
def contract() -> dict[str, Any]:
    """deploy/metrics-contract.yaml, parsed."""
    return yaml.safe_load(CONTRACT.read_text())


@cache
def series_names() -> frozenset[str]:
    """Every series name the contract's metrics expose (histograms as _bucket, _sum and _count)."""
    names: set[str] = set()
    for m in contract()["metrics"]:
        if m["type"] == "histogram":
            names.update(m["name"] + s for s in ("_bucket", "_sum", "_count"))
        else:
            names.add(m["name"])
    return frozenset(names)


@cache
def recorded_names() -> frozenset[str]:
    """The series that rules.yaml records."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return frozenset(r["record"] for g in groups for r in g["rules"] if "record" in r)


def grafana_to_promql(expr: str) -> str:
    """A dashboard query with Grafana's interval variables replaced by durations PromQL accepts."""
    for var, value in GRAFANA_INTERVALS.items():
        expr = expr.replace(var, value)
    return expr


class Parsed(NamedTuple):
    """What promql-parser made of one query: the metric names it selects, or its parse error."""

    names: list[str]
    error: str | None


def parse_promql(python: Path, exprs: list[str]) -> list[Parsed]:
    """Parses each query with promql-parser (in the tools venv) and lists the metric names it selects."""
    proc = run([python, PROMQL_NAMES], stdin=json.dumps(exprs))
    return [Parsed(r["names"], r["error"]) for r in json.loads(proc.stdout)]


def label_values_selector(query: str) -> str:
    """The series selector inside a Grafana `label_values(selector, label)` variable query."""
    m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", query, re.S)
    assert m, f"variable query is not label_values(selector, label): {query}"
    return m.group(1)

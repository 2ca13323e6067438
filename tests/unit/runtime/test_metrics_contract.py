"""runtime/metrics.py registers exactly the series deploy/metrics-contract.yaml promises to rules and dashboards."""
from __future__ import annotations

from pathlib import Path

import yaml

from runtime.metrics import BASE, SPECS, Metrics

CONTRACT = Path(__file__).resolve().parents[3] / "deploy" / "metrics-contract.yaml"


def test_registered_metrics_equal_the_contract() -> None:
    contract = {m["name"]: m for m in yaml.safe_load(CONTRACT.read_text())["metrics"]}
    ours = {s.name: s for s in SPECS}
    assert sorted(ours) == sorted(contract)
    for name, spec in ours.items():
        promised = contract[name]
        assert spec.kind == promised["type"], name
        assert list(BASE + spec.labels) == promised["labels"], name
        assert spec.help == promised["help"], name
        assert list(spec.buckets) == [float(b) for b in promised.get("buckets", [])], name


def test_exposition_names_match_the_contract() -> None:
    m = Metrics("thinker", "r0")
    exposed = {family.name + ("_total" if family.type == "counter" else "") for family in m.registry.collect()}
    assert exposed == {s.name for s in SPECS}

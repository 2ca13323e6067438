"""runtime/metrics.py registers exactly the series deploy/metrics-contract.yaml promises to rules and dashboards."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from prometheus_client import generate_latest

from runtime.metrics import BASE, SPECS, STAGES, Metrics

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
        assert list(spec.stages) == promised["stages"], name


@pytest.mark.parametrize("stage", STAGES)
def test_each_stage_exposes_its_families_and_the_process_ones(stage: str) -> None:
    """Only what the stage sets (no family of another stage at 0), process_* beside them, no _created series."""
    m = Metrics(stage, "r0", "Qwen3-Omni-30B-A3B-Instruct")
    exposed = {family.name + ("_total" if family.type == "counter" else "") for family in m.registry.collect()}
    ours = {s.name for s in SPECS if stage in s.stages}
    assert {n for n in exposed if n.startswith("omnimesh_")} == ours
    assert {"process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds"} <= exposed
    text = generate_latest(m.registry).decode()
    assert "_created" not in text
    assert all('model_name="Qwen3-Omni-30B-A3B-Instruct"' in line for line in text.splitlines()
               if line.startswith("omnimesh_"))


def test_every_family_belongs_to_some_stage_and_a_stage_must_be_known() -> None:
    assert all(s.stages and set(s.stages) <= set(STAGES) for s in SPECS)
    with pytest.raises(ValueError, match="stage 'test': expected one of"):
        Metrics("test", "r0")


def test_a_labelled_child_is_looked_up_once_and_forgetting_it_drops_only_that_series() -> None:
    m = Metrics("gateway", "r0")
    routed = m.get("omnimesh_thinker_routed_total", thinker_replica="a:1", decision="prefix")
    assert m.get("omnimesh_thinker_routed_total", thinker_replica="a:1", decision="prefix") is routed
    routed.inc(3)
    kept = m.get("omnimesh_thinker_routed_total", thinker_replica="b:1", decision="prefix")
    kept.inc()
    m.forget("omnimesh_thinker_routed_total", thinker_replica="a:1", decision="prefix")
    text = generate_latest(m.registry).decode()
    assert 'thinker_replica="a:1"' not in text and 'thinker_replica="b:1"' in text
    again = m.get("omnimesh_thinker_routed_total", thinker_replica="a:1", decision="prefix")  # it came back: from 0
    assert again is not routed and again._value.get() == 0.0
    assert m.get("omnimesh_thinker_routed_total", thinker_replica="b:1", decision="prefix") is kept

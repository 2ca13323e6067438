"""ServiceMonitor, PrometheusRule and ScaledObject check against the @kubernetes-models models of their CRDs."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.deploy_tools import CRD_CHECK, RULES, SCENARIOS, run

CRD_KINDS = {"ServiceMonitor", "PrometheusRule", "ScaledObject"}


def check_crds(node_modules: Path, objs: list[dict[str, Any]], expect_ok: bool = True) -> list[dict[str, Any]]:
    proc = run(["node", CRD_CHECK, node_modules], stdin=json.dumps(objs), check=expect_ok)
    return [json.loads(line) for line in proc.stdout.splitlines()]


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_custom_resources_match_their_models(node_modules: Path, objects: dict[str, list[dict]], scenario: str) -> None:
    crds = [o for o in objects[scenario] if o["kind"] in CRD_KINDS]
    if scenario == "default":
        assert not crds, "no operator API offered, yet custom resources rendered"
        return
    results = check_crds(node_modules, crds)
    assert len(results) == len(crds) and all(r["ok"] for r in results), results


def test_every_custom_kind_is_checked(objects: dict[str, list[dict]]) -> None:
    rendered = {o["kind"] for objs in objects.values() for o in objs if o["kind"] in CRD_KINDS}
    assert rendered == CRD_KINDS


def test_model_check_rejects_bad_objects(node_modules: Path) -> None:
    """The checker is not vacuous: a numeric port, a bad duration and a numeric threshold all fail."""
    bad = [
        {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor", "metadata": {"name": "a"},
         "spec": {"selector": {}, "endpoints": [{"port": 9090}]}},
        {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule", "metadata": {"name": "b"},
         "spec": {"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "1", "for": "5 minutes"}]}]}},
        {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "c"},
         "spec": {"scaleTargetRef": {"name": "d"}, "triggers": [{"type": "prometheus", "metadata": {"threshold": 4}}]}},
    ]
    results = check_crds(node_modules, bad, expect_ok=False)
    assert [r["ok"] for r in results] == [False, False, False], results


def test_prometheus_rule_ships_rules_yaml_unchanged(objects: dict[str, list[dict]]) -> None:
    rule = next(o for o in objects["default-operator"] if o["kind"] == "PrometheusRule")
    assert rule["spec"] == yaml.safe_load(RULES.read_text())

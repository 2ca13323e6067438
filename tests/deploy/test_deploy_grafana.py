"""The Grafana dashboard: well-formed, every query parses and names only contract metrics, every metric is charted."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.deploy_tools import (
    DASHBOARD,
    contract,
    grafana_to_promql,
    label_values_selector,
    parse_promql,
    recorded_names,
    series_names,
)


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, rows' nested panels included."""
    for p in dashboard["panels"]:
        yield p
        yield from p.get("panels", [])


def queries(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in panels(dashboard) for t in p.get("targets", [])]
    variables = [v for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return [grafana_to_promql(e) for e in exprs] + [label_values_selector(v["query"]["query"]) for v in variables]


@pytest.fixture(scope="module")
def parsed(dashboard: dict[str, Any], tools_python: Path) -> list[tuple[str, Any]]:
    qs = queries(dashboard)
    return list(zip(qs, parse_promql(tools_python, qs), strict=True))


def test_every_query_parses(parsed: list[tuple[str, Any]]) -> None:
    assert len(parsed) > 20
    for query, result in parsed:
        assert result.error is None, (query, result.error)


def test_queries_name_only_contract_metrics_and_recorded_series(parsed: list[tuple[str, Any]]) -> None:
    known = series_names() | recorded_names()
    for query, result in parsed:
        assert result.names and set(result.names) <= known, (set(result.names) - known, query)


def test_every_contract_metric_is_charted(parsed: list[tuple[str, Any]]) -> None:
    """No series goes unseen (a peer shipped per-stage series nobody noticed were stuck at zero)."""
    names = {n for _, r in parsed for n in r.names}
    charted = {n.removesuffix("_bucket").removesuffix("_count").removesuffix("_sum") for n in names}
    missing = {m["name"] for m in contract()["metrics"]} - charted
    assert not missing, missing


def test_panels_are_well_formed(dashboard: dict[str, Any]) -> None:
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "namespace", "stage", "replica"} <= variables
    for p in panels(dashboard):
        assert {"h", "w", "x", "y"} <= set(p["gridPos"]) and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24, p["title"]
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}", p["title"]
            assert p["targets"] and all(t["refId"] for t in p["targets"]), p["title"]


def test_stage_panels_break_down_by_stage_and_replica(dashboard: dict[str, Any]) -> None:
    """Stage panels honour the $stage and $replica pickers and keep both labels apart."""
    for p in panels(dashboard):
        for t in p.get("targets", []):
            expr = t["expr"]
            if 'stage=~"$stage"' in expr and "from_stage" not in expr and "grpc_method" not in expr:
                assert 'replica=~"$replica"' in expr and "stage, replica" in expr, (p["title"], expr)

"""rules.yaml passes promtool's check and unit tests, every alert is tested both ways, and it names contract metrics."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.deploy_tools import RULES, RULES_TEST, contract, parse_promql, recorded_names, run, series_names


def rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def test_promtool_check_rules(promtool: Path) -> None:
    run([promtool, "check", "rules", RULES])


def test_promtool_test_rules(promtool: Path) -> None:
    run([promtool, "test", "rules", RULES_TEST])


def test_each_alert_fires_and_stays_silent_in_the_unit_tests() -> None:
    """Every (alert, severity) is expected firing at some eval, and absent at another (pending or quiet)."""
    alerts = {(r["alert"], r["labels"]["severity"]) for r in rules() if "alert" in r}
    fired: set[tuple[str, str]] = set()
    silent: set[tuple[str, str]] = set()
    for group in yaml.safe_load(RULES_TEST.read_text())["tests"]:
        for case in group.get("alert_rule_test", []):
            expected = {(case["alertname"], a["exp_labels"]["severity"]) for a in case["exp_alerts"]}
            fired |= expected
            silent |= {a for a in alerts if a[0] == case["alertname"] and a not in expected}
    assert alerts - fired == set(), "never made to fire"
    assert alerts - silent == set(), "never shown silent"


BUDGETS = {"availability": 0.001, "ttft": 0.01, "ttfa": 0.01}  # 99.9%, 99%, 99% (rules.yaml's header)


def test_burn_rate_alerts_follow_the_sre_workbook() -> None:
    """Pages at 14.4x budget over 1h and 5m or 6x over 6h and 30m; tickets at 1x over 3d and 6h."""
    slo = [r for r in rules() if r.get("labels", {}).get("slo")]
    assert {r["labels"]["slo"] for r in slo} == set(BUDGETS)
    for r in slo:
        budget = BUDGETS[r["labels"]["slo"]]
        expr = " ".join(r["expr"].split())
        found = re.findall(r":ratio_rate(\w+) > \(?([\d.]+)(?: \* ([\d.]+))?", expr)
        # "> (14.4 * 0.001)" reads as factor 14.4 of budget 0.001; "> 0.001" as factor 1
        burns = {(window, float(a) if b else 1.0, float(b or a)) for window, a, b in found}
        assert {b for _, _, b in burns} == {budget}, expr
        factors = {(window, factor) for window, factor, _ in burns}
        if r["labels"]["severity"] == "page":
            assert factors == {("1h", 14.4), ("5m", 14.4), ("6h", 6.0), ("30m", 6.0)}, expr
        else:
            assert factors == {("3d", 1.0), ("6h", 1.0)}, expr


def test_rules_name_only_contract_metrics_and_recorded_series(tools_python: Path) -> None:
    exprs = [r["expr"] for r in rules()]
    known = series_names() | recorded_names()
    for expr, parsed in zip(exprs, parse_promql(tools_python, exprs), strict=True):
        assert parsed.error is None, (expr, parsed.error)
        assert set(parsed.names) <= known, (set(parsed.names) - known, expr)


def test_latency_thresholds_are_bucket_bounds() -> None:
    """`le="2.5"` only counts requests if 2.5 is a bound of that histogram."""
    buckets = {m["name"]: m.get("buckets", []) for m in contract()["metrics"]}
    for r in rules():
        for metric, le in re.findall(r"(\w+)_bucket\{[^}]*le=\"([^\"]+)\"", r["expr"]):
            assert float(le) in buckets[metric], (metric, le)

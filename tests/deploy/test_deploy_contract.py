"""deploy/metrics-contract.yaml is well-formed and follows Prometheus naming."""
from __future__ import annotations

from tests.deploy.deploy_tools import contract

UNIT_SUFFIXES = ("_seconds", "_bytes", "_ratio", "_total", "_factor", "_size", "_tokens", "_depth", "_running",
                 "_in_flight", "_per_batch")


def test_names_are_unique_and_prefixed() -> None:
    names = [m["name"] for m in contract()["metrics"]]
    assert len(names) == len(set(names))
    assert all(n.startswith("omnimesh_") for n in names)


def test_types_and_suffixes_agree() -> None:
    for m in contract()["metrics"]:
        assert m["type"] in ("counter", "gauge", "histogram"), m
        assert m["name"].endswith("_total") == (m["type"] == "counter"), m["name"]
        assert m["name"].endswith(UNIT_SUFFIXES), m["name"]
        assert m["help"].strip(), m["name"]


def test_histograms_have_increasing_buckets_and_others_none() -> None:
    for m in contract()["metrics"]:
        buckets = m.get("buckets")
        if m["type"] == "histogram":
            assert buckets and buckets == sorted(set(buckets)), m["name"]
        else:
            assert buckets is None, m["name"]


def test_every_series_is_labelled_stage_replica_and_model_first() -> None:
    data = contract()
    assert data["common_labels"] == ["stage", "replica", "model_name"]
    for m in data["metrics"]:
        assert m["labels"][:3] == ["stage", "replica", "model_name"], m["name"]
        assert m["stages"] and set(m["stages"]) <= set(data["label_values"]["stage"]), m["name"]
        assert len(m["labels"]) == len(set(m["labels"])), m["name"]
        assert "le" not in m["labels"] and "namespace" not in m["labels"], m["name"]


def test_enumerated_labels_are_used() -> None:
    data = contract()
    used = {label for m in data["metrics"] for label in m["labels"]}
    assert set(data["label_values"]) <= used

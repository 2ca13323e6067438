"""The chart passes `helm lint --strict`, renders valid Kubernetes 1.33 objects, and its schema rejects bad values."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy.deploy_tools import CHART, KUBE_VERSION, SCENARIOS, documents, helm_template, run

CRD_GROUPS = ("monitoring.coreos.com/", "keda.sh/")


@pytest.mark.parametrize("values", [None, "values-multi-replica.yaml"])
def test_helm_lint_strict(helm: Path, values: str | None) -> None:
    flags = ["-f", str(CHART / values)] if values else []
    run([helm, "lint", "--strict", "--kube-version", KUBE_VERSION, CHART, *flags])


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_rendered_objects_validate_strictly(kubernetes_validate: Path, manifests: dict[str, str],
                                            scenario: str) -> None:
    """Built-in kinds against the 1.33 OpenAPI schemas: wrong types and unknown fields fail. The validator has no
    schemas for custom resources and only warns about them; test_deploy_crds.py checks those."""
    proc = run([kubernetes_validate, "-k", KUBE_VERSION, "--strict", "--quiet", "-"], stdin=manifests[scenario])
    output = proc.stdout + proc.stderr
    assert "ERROR" not in output, output
    unchecked = [line for line in output.splitlines() if "Couldn't find schema" in line]
    assert all(any(g in line for g in CRD_GROUPS) for line in unchecked), output


def test_validator_rejects_unknown_field(kubernetes_validate: Path) -> None:
    """The strict check above is not vacuous: an unknown field in a Service fails it."""
    bad = "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec:\n  bogus: 1\n  ports: [{port: 1}]\n"
    proc = run([kubernetes_validate, "-k", KUBE_VERSION, "--strict", "-"], stdin=bad, check=False)
    assert proc.returncode != 0 and "bogus" in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--set", "stages.thinkr.gpus=1"], "thinkr"),
        (["--set", "stages.thinker.gpus=-1"], "gpus"),
        (["--set", "grpc.keepaliveTimeSeconds=1"], "keepaliveTimeSeconds"),
        (["--set", "model.volume.kind=nfs"], "kind"),
        (["--set", "autoscaling.mode=cron"], "mode"),
        (["--set", "stages.thinker.autoscaling.metric=queue_depth"], "metric"),
        (["--set", "tls.enabled=true"], "secretName"),
    ],
)
def test_schema_rejects_bad_values(helm: Path, flags: list[str], message: str) -> None:
    proc = helm_template(helm, *flags, check=False)
    assert proc.returncode != 0, f"helm template accepted {flags}"
    assert message in proc.stderr, proc.stderr


def test_keda_mode_needs_keda_api(helm: Path) -> None:
    flags = ["-f", str(CHART / "values-multi-replica.yaml"), "--set", "autoscaling.mode=keda"]
    proc = helm_template(helm, *flags, check=False)
    assert proc.returncode != 0 and "keda.sh/v1alpha1" in proc.stderr, proc.stderr


def kinds(objs: list[dict]) -> set[str]:
    return {o["kind"] for o in objs}


def test_operator_objects_only_where_the_api_is_served(objects: dict[str, list[dict]], helm: Path) -> None:
    assert not kinds(objects["default"]) & {"ServiceMonitor", "PrometheusRule"}
    assert {"ServiceMonitor", "PrometheusRule"} <= kinds(objects["default-operator"])
    forced = documents(helm_template(helm, "--set", "monitoring.assumeCRDs=true").stdout)
    assert {"ServiceMonitor", "PrometheusRule"} <= kinds(forced)
    disabled = documents(helm_template(
        helm, "--api-versions", "monitoring.coreos.com/v1",
        "--set", "monitoring.serviceMonitor.enabled=false", "--set", "monitoring.prometheusRule.enabled=false").stdout)
    assert not kinds(disabled) & {"ServiceMonitor", "PrometheusRule"}


def test_autoscaler_kind_follows_mode(objects: dict[str, list[dict]]) -> None:
    assert "HorizontalPodAutoscaler" not in kinds(objects["default"])
    assert "HorizontalPodAutoscaler" in kinds(objects["multi-replica"])
    assert "ScaledObject" not in kinds(objects["multi-replica"])
    assert "ScaledObject" in kinds(objects["multi-replica-keda"])
    assert "HorizontalPodAutoscaler" not in kinds(objects["multi-replica-keda"])  # KEDA makes its own

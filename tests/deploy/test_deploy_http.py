"""The chart's HTTP front (http.enabled): its own Deployment dialling the gateways' headless Service, a Service, a
disruption budget and NetworkPolicies; absent by default; valid Kubernetes; the schema guards its values."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.deploy.deploy_tools import CHART, KUBE_VERSION, documents, helm_template, run

Obj = dict[str, Any]
HTTP = ["--set", "http.enabled=true"]
FENCED = [*HTTP, "--set", "networkPolicy.gatewayIngressFrom[0].namespaceSelector.matchLabels.team=apps"]


def named(objs: list[Obj], kind: str, component: str) -> list[Obj]:
    return [o for o in objs if o["kind"] == kind and o["metadata"]["labels"]["app.kubernetes.io/component"] == component]


@pytest.fixture(scope="module")
def rendered(helm: Path) -> str:
    return helm_template(helm, *FENCED).stdout


def test_off_by_default(objects: dict[str, list[Obj]]) -> None:
    for objs in objects.values():
        assert not [o for o in objs if o["metadata"]["labels"].get("app.kubernetes.io/component") == "http"]


def test_deployment_dials_the_gateways_and_probes_health(rendered: str) -> None:
    objs = documents(rendered)
    (dep,) = named(objs, "Deployment", "http")
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert c["command"] == ["python", "-m", "http_front"]
    assert "--gateway-addr=dns:///omni-omnimesh-gateway.omni.svc.cluster.local:50051" in c["args"]
    assert "--port=8000" in c["args"] and "--served-model-name=Qwen3-Omni-30B-A3B-Instruct" in c["args"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/health", "port": "http"}
    assert c["securityContext"]["readOnlyRootFilesystem"] and "nvidia.com/gpu" not in str(c["resources"])
    assert dep["spec"]["replicas"] == 2


def test_with_tls_the_front_dials_the_gateway_with_the_secrets_ca(helm: Path) -> None:
    objs = documents(helm_template(helm, *HTTP, "--set", "tls.enabled=true", "--set", "tls.secretName=s").stdout)
    (dep,) = named(objs, "Deployment", "http")
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert "--gateway-ca=/etc/omnimesh-tls/ca.crt" in c["args"]
    assert {"name": "tls", "mountPath": "/etc/omnimesh-tls", "readOnly": True} in c["volumeMounts"]
    assert {"name": "tls", "secret": {"secretName": "s"}} in dep["spec"]["template"]["spec"]["volumes"]


def test_service_and_budget_select_the_front(rendered: str) -> None:
    objs = documents(rendered)
    (dep,) = named(objs, "Deployment", "http")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    (svc,) = named(objs, "Service", "http")
    (pdb,) = named(objs, "PodDisruptionBudget", "http")
    for selector in (svc["spec"]["selector"], pdb["spec"]["selector"]["matchLabels"]):
        assert all(labels[k] == v for k, v in selector.items())
    assert svc["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP",
                                     "appProtocol": "http"}]


def test_network_policies_let_the_front_into_the_gateway(rendered: str) -> None:
    objs = documents(rendered)
    (own,) = named(objs, "NetworkPolicy", "http")
    assert own["spec"]["ingress"] == [{"ports": [{"port": "http", "protocol": "TCP"}]}]
    (gateway,) = named(objs, "NetworkPolicy", "gateway")
    peers = gateway["spec"]["ingress"][0]["from"]
    assert {"namespaceSelector": {"matchLabels": {"team": "apps"}}} in peers
    assert any(p.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/component") == "http"
               for p in peers)


def test_rendered_objects_validate_strictly(kubernetes_validate: Path, rendered: str) -> None:
    proc = run([kubernetes_validate, "-k", KUBE_VERSION, "--strict", "--quiet", "-"], stdin=rendered)
    assert "ERROR" not in proc.stdout + proc.stderr


def test_lint_strict(helm: Path) -> None:
    run([helm, "lint", "--strict", "--kube-version", KUBE_VERSION, CHART, *FENCED])


@pytest.mark.parametrize(("flags", "message"), [
    (["--set", "http.port=80"], "port"),
    (["--set", "http.bogus=1"], "bogus"),
    (["--set", "http.service.type=Ingress"], "type"),
])
def test_schema_rejects_bad_values(helm: Path, flags: list[str], message: str) -> None:
    proc = helm_template(helm, *HTTP, *flags, check=False)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr

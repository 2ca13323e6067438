"""Our own rules on the rendered chart: GPUs, probes, selectors, ports, security, weights, secrets, mesh.yaml."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from runtime.config import load_mesh_config
from tests.deploy.deploy_tools import CHART, SCENARIOS, documents, helm_template, parse_promql, series_names

VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
MULTI = yaml.safe_load((CHART / "values-multi-replica.yaml").read_text())
STAGES = ("gateway", "vision", "audio", "thinker", "talker")
GPU = "nvidia.com/gpu"

Obj = dict[str, Any]
scenarios = pytest.mark.parametrize("scenario", sorted(SCENARIOS))


def of_kind(objs: list[Obj], kind: str) -> list[Obj]:
    return [o for o in objs if o["kind"] == kind]


def stage_of(obj: Obj) -> str:
    return obj["metadata"]["labels"]["app.kubernetes.io/component"]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def container(dep: Obj) -> Obj:
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    return c


def named_port(c: Obj, name: str) -> int:
    return next(p["containerPort"] for p in c["ports"] if p["name"] == name)


@scenarios
def test_one_deployment_and_headless_service_per_stage(objects: dict[str, list[Obj]], scenario: str) -> None:
    deps = of_kind(objects[scenario], "Deployment")
    assert sorted(stage_of(d) for d in deps) == sorted(STAGES)
    headless = [s for s in of_kind(objects[scenario], "Service") if s["spec"].get("clusterIP") == "None"]
    assert sorted(stage_of(s) for s in headless) == sorted(STAGES)
    for svc in headless:
        assert {p["name"] for p in svc["spec"]["ports"]} == {"grpc", "metrics"}
        assert svc["spec"]["publishNotReadyAddresses"] is False


@scenarios
def test_gpu_stages_request_gpus_and_gateway_none(objects: dict[str, list[Obj]], scenario: str) -> None:
    for dep in of_kind(objects[scenario], "Deployment"):
        stage = stage_of(dep)
        res = container(dep)["resources"]
        want = VALUES["stages"][stage]["gpus"]
        if want:
            assert res["limits"][GPU] == res["requests"][GPU] == want, (stage, res)
            tolerations = dep["spec"]["template"]["spec"]["tolerations"]
            assert any(t["key"] == GPU for t in tolerations), stage
        else:
            assert GPU not in res.get("limits", {}) and GPU not in res.get("requests", {}), (stage, res)


@scenarios
def test_every_container_has_three_native_grpc_probes(objects: dict[str, list[Obj]], scenario: str) -> None:
    for dep in of_kind(objects[scenario], "Deployment"):
        c = container(dep)
        # a TLS gRPC port is probed on the plaintext health-only port (kubelet's gRPC probes cannot speak TLS)
        probed = named_port(c, "health" if scenario == "tls" else "grpc")
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert c[probe]["grpc"]["port"] == probed, (stage_of(dep), probe)
        startup = c["startupProbe"]
        budget = startup["periodSeconds"] * startup["failureThreshold"]
        assert budget >= VALUES["stages"][stage_of(dep)]["startupSeconds"], stage_of(dep)


@scenarios
def test_selectors_match_their_pods(objects: dict[str, list[Obj]], scenario: str) -> None:
    objs = objects[scenario]
    pods = {stage_of(d): d["spec"]["template"]["metadata"]["labels"] for d in of_kind(objs, "Deployment")}
    for dep in of_kind(objs, "Deployment"):
        assert selects(dep["spec"]["selector"]["matchLabels"], pods[stage_of(dep)])
    for kind, path in (("Service", ("spec", "selector")), ("PodDisruptionBudget", ("spec", "selector", "matchLabels")),
                       ("NetworkPolicy", ("spec", "podSelector", "matchLabels"))):
        for obj in of_kind(objs, kind):
            selector = obj
            for key in path:
                selector = selector[key]
            matched = [s for s, labels in pods.items() if selects(selector, labels)]
            assert matched == [stage_of(obj)], (kind, obj["metadata"]["name"], matched)
    names = {d["metadata"]["name"] for d in of_kind(objs, "Deployment")}
    for obj in of_kind(objs, "HorizontalPodAutoscaler") + of_kind(objs, "ScaledObject"):
        assert obj["spec"]["scaleTargetRef"]["name"] in names


@scenarios
def test_service_ports_exist_on_containers(objects: dict[str, list[Obj]], scenario: str) -> None:
    objs = objects[scenario]
    containers = {stage_of(d): container(d) for d in of_kind(objs, "Deployment")}
    for svc in of_kind(objs, "Service"):
        c = containers[stage_of(svc)]
        for port in svc["spec"]["ports"]:
            named_port(c, port["targetPort"])  # raises StopIteration when the name is missing


@pytest.mark.parametrize("scenario", ["default-operator", "multi-replica"])
def test_service_monitor_scrapes_every_stage_once_on_named_port(objects: dict[str, list[Obj]], scenario: str) -> None:
    objs = objects[scenario]
    (monitor,) = of_kind(objs, "ServiceMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    scraped = [s for s in of_kind(objs, "Service") if selects(selector, s["metadata"]["labels"])]
    assert sorted(stage_of(s) for s in scraped) == sorted(STAGES)  # the gateway's API Service is not scraped twice
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["path"] == "/metrics"
        assert not endpoint.get("honorLabels"), "a pod could then claim another namespace's series"
        for svc in scraped:
            assert endpoint["port"] in {p["name"] for p in svc["spec"]["ports"]}


@scenarios
def test_pods_run_locked_down(objects: dict[str, list[Obj]], scenario: str) -> None:
    for dep in of_kind(objects[scenario], "Deployment"):
        pod = dep["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        assert pod["automountServiceAccountToken"] is False
        sc = container(dep)["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"] and not sc["capabilities"].get("add")
        assert sc["seccompProfile"]["type"] == "RuntimeDefault"
        assert not sc.get("privileged")


@scenarios
def test_weights_mount_read_only_at_models_name(objects: dict[str, list[Obj]], scenario: str) -> None:
    for dep in of_kind(objects[scenario], "Deployment"):
        pod = dep["spec"]["template"]["spec"]
        mount = next(m for m in container(dep)["volumeMounts"] if m["name"] == "models")
        assert mount["mountPath"] == f"/models/{VALUES['model']['name']}" and mount["readOnly"] is True
        volume = next(v for v in pod["volumes"] if v["name"] == "models")
        if "persistentVolumeClaim" in volume:
            assert volume["persistentVolumeClaim"]["readOnly"] is True
        else:
            assert volume["hostPath"]["path"] == MULTI["model"]["volume"]["hostPath"]
        writable = {m["mountPath"] for m in container(dep)["volumeMounts"] if not m.get("readOnly")}
        assert writable == {"/tmp", "/dev/shm"}, writable


@scenarios
def test_entrypoints_and_flags(objects: dict[str, list[Obj]], scenario: str) -> None:
    for dep in of_kind(objects[scenario], "Deployment"):
        stage = stage_of(dep)
        c = container(dep)
        module = "gateway" if stage == "gateway" else f"services.{stage}"
        assert c["command"] == ["python", "-m", module]
        args = c["args"]
        grpc, metrics = named_port(c, "grpc"), named_port(c, "metrics")
        for flag in ("--config=/etc/omnimesh/mesh.yaml", "--host=0.0.0.0", f"--port={grpc}",
                     f"--metrics-port={metrics}", "--replica=$(POD_NAME)"):
            assert flag in args, (stage, flag, args)
        pod_name = next(e for e in c["env"] if e["name"] == "POD_NAME")
        assert pod_name["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


@scenarios
def test_gateway_reads_api_keys_from_a_secret(objects: dict[str, list[Obj]], scenario: str) -> None:
    objs = objects[scenario]
    gateway = next(d for d in of_kind(objs, "Deployment") if stage_of(d) == "gateway")
    env = next(e for e in container(gateway)["env"] if e["name"] == "OMNIMESH_API_KEYS")
    ref = env["valueFrom"]["secretKeyRef"]
    secrets = {s["metadata"]["name"]: s for s in of_kind(objs, "Secret")}
    if scenario.startswith("multi-replica"):
        assert ref["name"] == MULTI["gateway"]["apiKeys"]["existingSecret"] and ref["name"] not in secrets
    else:
        assert ref["key"] in secrets[ref["name"]]["data"]
    others = [d for d in of_kind(objs, "Deployment") if stage_of(d) != "gateway"]
    assert all("OMNIMESH_API_KEYS" not in str(container(d).get("env")) for d in others)


@scenarios
def test_every_stage_and_gateway_shares_one_stage_token(objects: dict[str, list[Obj]], scenario: str) -> None:
    """Stages refuse calls without OMNIMESH_STAGE_TOKEN and gateways send it: every omnimesh container reads it from
    the same Secret key, which the chart creates (or one named in values is used)."""
    objs = objects[scenario]
    refs = []
    for d in of_kind(objs, "Deployment"):
        env = {e["name"]: e for e in container(d).get("env", [])}
        if stage_of(d) in STAGES:
            refs.append(env["OMNIMESH_STAGE_TOKEN"]["valueFrom"]["secretKeyRef"])
        else:  # the HTTP front is a client of the gateways, not of the stages
            assert "OMNIMESH_STAGE_TOKEN" not in env
    assert refs and all(r == refs[0] for r in refs)
    secrets = {s["metadata"]["name"]: s for s in of_kind(objs, "Secret")}
    assert refs[0]["key"] in secrets[refs[0]["name"]]["data"]


@scenarios
def test_network_policies_let_only_the_gateway_reach_stages(objects: dict[str, list[Obj]], scenario: str) -> None:
    objs = objects[scenario]
    gateway_pods = next(d for d in of_kind(objs, "Deployment") if stage_of(d) == "gateway")
    gateway_labels = gateway_pods["spec"]["template"]["metadata"]["labels"]
    policies = of_kind(objs, "NetworkPolicy")
    assert sorted(stage_of(p) for p in policies) == sorted(STAGES)
    for policy in policies:
        rules = {tuple(p["port"] for p in r["ports"]): r.get("from") for r in policy["spec"]["ingress"]}
        assert set(rules) == {("grpc",), ("metrics",)}, rules
        (metrics_peer,) = rules[("metrics",)]
        assert set(metrics_peer) == {"namespaceSelector"}
        if stage_of(policy) != "gateway":
            (peer,) = rules[("grpc",)]
            assert set(peer) == {"podSelector"} and selects(peer["podSelector"]["matchLabels"], gateway_labels)


@scenarios
def test_autoscaled_deployments_leave_replicas_to_the_autoscaler(objects: dict[str, list[Obj]], scenario: str) -> None:
    objs = objects[scenario]
    scaled = {o["spec"]["scaleTargetRef"]["name"] for o in of_kind(objs, "HorizontalPodAutoscaler") +
              of_kind(objs, "ScaledObject")}
    for dep in of_kind(objs, "Deployment"):
        assert ("replicas" in dep["spec"]) == (dep["metadata"]["name"] not in scaled)


def test_autoscaling_signals_are_contract_metrics(objects: dict[str, list[Obj]], tools_python: Path) -> None:
    for hpa in of_kind(objects["multi-replica"], "HorizontalPodAutoscaler"):
        (metric,) = hpa["spec"]["metrics"]
        assert metric["pods"]["metric"]["name"] in series_names()
    queries = [t["metadata"]["query"] for so in of_kind(objects["multi-replica-keda"], "ScaledObject")
               for t in so["spec"]["triggers"]]
    assert queries
    for query, parsed in zip(queries, parse_promql(tools_python, queries), strict=True):
        assert parsed.error is None, (query, parsed.error)
        assert parsed.names and set(parsed.names) <= series_names(), query


@scenarios
def test_mesh_yaml_loads_in_the_app_and_dials_headless_services(objects: dict[str, list[Obj]], scenario: str) -> None:
    objs = objects[scenario]
    (config_map,) = of_kind(objs, "ConfigMap")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mesh.yaml"
        path.write_text(config_map["data"]["mesh.yaml"])
        mesh = load_mesh_config(path)
    headless = {s["metadata"]["name"]: s for s in of_kind(objs, "Service") if s["spec"].get("clusterIP") == "None"}
    assert mesh.model == f"/models/{VALUES['model']['name']}"
    for stage in STAGES[1:]:
        section = mesh.stage(stage)
        assert section.enabled and section.device == "cuda"
        host, port = section.address.removeprefix("dns:///").rsplit(":", 1)
        service, namespace = host.split(".")[:2]
        assert service in headless and namespace == "omni" and int(port) == VALUES["ports"]["grpc"], section.address
        assert section.server.max_connection_age_ms == VALUES["grpc"]["maxConnectionAgeSeconds"] * 1000
    assert mesh.gateway.server.keepalive_time_ms >= 20_000


def test_tls_is_mutual_between_stages_and_every_pod_mounts_the_secret(objects: dict[str, list[Obj]]) -> None:
    """With tls.enabled every gRPC port serves TLS from the mounted Secret, stages require the gateway's client
    certificate, and the gateway dials them with the Secret's CA."""
    objs = objects["tls"]
    (config_map,) = of_kind(objs, "ConfigMap")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mesh.yaml"
        path.write_text(config_map["data"]["mesh.yaml"])
        mesh = load_mesh_config(path)
    pem = "/etc/omnimesh-tls"
    for stage in STAGES:
        server = mesh.gateway.server if stage == "gateway" else mesh.stage(stage).server
        assert (server.tls_cert_file, server.tls_key_file) == (f"{pem}/tls.crt", f"{pem}/tls.key"), stage
        assert server.health_port == VALUES["tls"]["healthPort"], stage
        assert server.tls_client_ca_file == ("" if stage == "gateway" else f"{pem}/ca.crt"), stage
    assert (mesh.gateway.stage_tls.ca_file, mesh.gateway.stage_tls.cert_file) == (f"{pem}/ca.crt", f"{pem}/tls.crt")
    for dep in of_kind(objs, "Deployment"):
        spec = dep["spec"]["template"]["spec"]
        secrets = {v["name"]: v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
        assert secrets == {"tls": "omnimesh-tls"}, stage_of(dep)
        (mount,) = [m for m in container(dep)["volumeMounts"] if m["name"] == "tls"]
        assert mount == {"name": "tls", "mountPath": pem, "readOnly": True}


def test_pods_roll_when_mesh_yaml_changes(helm: Path) -> None:
    def checksums(*flags: str) -> set[str]:
        deps = of_kind(documents(helm_template(helm, *flags).stdout), "Deployment")
        return {d["spec"]["template"]["metadata"]["annotations"]["checksum/mesh"] for d in deps}

    assert checksums() != checksums("--set", "grpc.maxConnectionAgeSeconds=120")

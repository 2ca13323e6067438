"""The chart's thinker routing: every gateway gets gateway.thinkerRouting as its thinker_routing settings and dials
the thinker's headless Service, whose pods it resolves one by one; the schema refuses an unknown policy."""
from __future__ import annotations

import tempfile
from pathlib import Path

from gateway.routing.discovery import split_dns
from runtime.config import load_mesh_config
from tests.deploy.deploy_tools import documents, helm_template


def rendered_mesh(helm: Path, *flags: str):
    objs = documents(helm_template(helm, *flags).stdout)
    (config_map,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-mesh")]
    headless = {o["metadata"]["name"] for o in objs if o["kind"] == "Service" and o["spec"].get("clusterIP") == "None"}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mesh.yaml"
        path.write_text(config_map["data"]["mesh.yaml"])
        return load_mesh_config(path), headless, objs


def test_gateways_route_between_the_thinker_pods_of_its_headless_service(helm: Path) -> None:
    mesh, headless, objs = rendered_mesh(helm, "--set", "stages.thinker.replicas=3", "--set",
                                         "gateway.thinkerRouting.policy=least_load", "--set",
                                         "gateway.thinkerRouting.margin=3", "--set",
                                         "gateway.thinkerRouting.resolveSeconds=5")
    gw = mesh.gateway
    assert (gw.thinker_routing, gw.thinker_routing_margin, gw.thinker_resolve_s) == ("least_load", 3, 5.0)
    host, _port = split_dns(mesh.thinker.address)
    assert host.split(".")[0] in headless  # one DNS answer per ready pod: one routed replica each
    (thinker,) = [o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-thinker")]
    assert thinker["spec"]["replicas"] == 3


def test_defaults_are_prefix_aware(helm: Path) -> None:
    gw = rendered_mesh(helm)[0].gateway
    assert (gw.thinker_routing, gw.thinker_routing_margin) == ("prefix_aware", 8)


def test_schema_refuses_an_unknown_policy(helm: Path) -> None:
    proc = helm_template(helm, "--set", "gateway.thinkerRouting.policy=random", check=False)
    assert proc.returncode != 0 and "policy" in proc.stderr, proc.stderr

"""TLS on loopback with a throwaway CA (openssl): a gateway serving TLS to `omnimesh chat --ca`, a thinker requiring
client certificates (mutual TLS) that serves a gateway presenting one and refuses one that does not."""
from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.integration.conftest import TEST_MESH, python_module
from tests.integration.mesh_process import OMNIMESH, Proc, start, start_stage

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def issue(name: str, cwd: Path) -> tuple[Path, Path]:
    """A key and a certificate for 127.0.0.1 / localhost, signed by the CA in `cwd`."""
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj",
            f"/CN={name}", cwd=cwd)
    (cwd / f"{name}.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out",
            f"{name}.pem", "-days", "1", "-extfile", f"{name}.ext", cwd=cwd)
    return cwd / f"{name}.pem", cwd / f"{name}.key"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    cwd = tmp_path_factory.mktemp("pki")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
            "-subj", "/CN=omnimesh test CA", cwd=cwd)
    files = {"ca": cwd / "ca.pem"}
    for name in ("thinker", "gateway"):
        files[f"{name}_cert"], files[f"{name}_key"] = issue(name, cwd)
    return files


@pytest.fixture(scope="module")
def mtls_thinker(demo_ckpt: Path, pki: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    server = {"tls_cert_file": str(pki["thinker_cert"]), "tls_key_file": str(pki["thinker_key"]),
              "tls_client_ca_file": str(pki["ca"]), "health_port": 0}
    mesh = {**TEST_MESH, "thinker": {**TEST_MESH["thinker"], "server": server}}
    thinker = start_stage("thinker", demo_ckpt, mesh, tmp_path_factory.mktemp("mtls_thinker"))
    yield thinker
    assert thinker.stop() == 0


def start_tls_gateway(demo_ckpt: Path, workdir: Path, thinker: Proc, gateway: dict) -> Proc:
    from runtime.server import READY_PREFIX

    config = workdir / "mesh.yaml"
    config.write_text(yaml.safe_dump({**TEST_MESH, "gateway": {**TEST_MESH["gateway"], **gateway}}))
    return start(python_module("gateway", "--model", str(demo_ckpt), "--config", str(config), "--port", "0",
                               "--metrics-port", "-1", "--thinker-addr", f"127.0.0.1:{thinker.ports['grpc_port']}"),
                 READY_PREFIX, timeout=60)


def chat(gw: Proc, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([OMNIMESH, "chat", "--addr", f"127.0.0.1:{gw.ports['grpc_port']}", "--max-tokens", "2",
                           "--timeout", "20", *flags, "hi"], capture_output=True, text=True, timeout=60)


def test_a_tls_gateway_dials_a_mutual_tls_thinker(demo_ckpt: Path, pki: dict[str, Path], tmp_path: Path,
                                                  mtls_thinker: Proc) -> None:
    gw = start_tls_gateway(demo_ckpt, tmp_path, mtls_thinker, {
        "server": {"tls_cert_file": str(pki["gateway_cert"]), "tls_key_file": str(pki["gateway_key"])},
        "stage_tls": {"ca_file": str(pki["ca"]), "cert_file": str(pki["gateway_cert"]),
                      "key_file": str(pki["gateway_key"])}})
    try:
        served = chat(gw, "--ca", str(pki["ca"]))
        assert served.returncode == 0, served.stderr
        plaintext = chat(gw)  # a plaintext client never completes a handshake with a TLS-only port
        assert plaintext.returncode != 0 and "UNAVAILABLE" in plaintext.stderr
        check_http_front_dials_it_with_its_ca(gw, pki["ca"])
    finally:
        assert gw.stop() == 0


def check_http_front_dials_it_with_its_ca(gw: Proc, ca: Path) -> None:
    """The OpenAI front in front of a TLS gateway (--gateway-ca), used by the real openai client."""
    import openai

    from runtime.server import READY_PREFIX

    front = start([OMNIMESH, "http", "--gateway-addr", f"127.0.0.1:{gw.ports['grpc_port']}", "--gateway-ca", str(ca),
                   "--port", "0"], READY_PREFIX, timeout=60)
    try:
        api = openai.OpenAI(api_key="-", base_url=f"http://127.0.0.1:{front.ports['http_port']}/v1", max_retries=0)
        reply = api.chat.completions.create(model="any", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
        assert reply.usage.completion_tokens == 2
    finally:
        assert front.stop() == 0


def test_a_gateway_without_a_client_certificate_is_refused_by_the_thinker(demo_ckpt: Path, pki: dict[str, Path],
                                                                          tmp_path: Path, mtls_thinker: Proc) -> None:
    gw = start_tls_gateway(demo_ckpt, tmp_path, mtls_thinker, {"stage_tls": {"ca_file": str(pki["ca"])}})
    try:
        refused = chat(gw)
        assert refused.returncode != 0 and "UNAVAILABLE" in refused.stderr and "thinker" in refused.stderr
    finally:
        assert gw.stop() == 0


def test_a_certificate_path_that_cannot_be_read_names_its_field(demo_ckpt: Path, tmp_path: Path,
                                                                mtls_thinker: Proc) -> None:
    config = tmp_path / "mesh.yaml"
    server = {"tls_cert_file": str(tmp_path / "missing.pem"), "tls_key_file": str(tmp_path / "missing.key")}
    config.write_text(yaml.safe_dump({**TEST_MESH, "gateway": {**TEST_MESH["gateway"], "server": server}}))
    run = subprocess.run(python_module("gateway", "--model", str(demo_ckpt), "--config", str(config), "--port", "0",
                                       "--thinker-addr", f"127.0.0.1:{mtls_thinker.ports['grpc_port']}"),
                         capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    assert f"config field gateway.server.tls_key_file='{tmp_path / 'missing.key'}': cannot read it" in run.stderr


def test_probes_read_health_in_plaintext_on_the_health_port_only(mtls_thinker: Proc) -> None:
    """kubelet's gRPC probes cannot speak TLS: the health port answers them in plaintext, serves nothing else, and
    follows the main port's status."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from omnimesh.v1 import common_pb2, thinker_pb2_grpc

    assert mtls_thinker.ports["health_port"] > 0
    with grpc.insecure_channel(f"127.0.0.1:{mtls_thinker.ports['health_port']}") as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="omnimesh.v1.Thinker"), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as err:
            thinker_pb2_grpc.ThinkerStub(channel).Info(common_pb2.InfoRequest(), timeout=10)
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    with grpc.insecure_channel(f"127.0.0.1:{mtls_thinker.ports['grpc_port']}") as channel:
        with pytest.raises(grpc.RpcError) as err:  # the main port stays TLS-only
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE

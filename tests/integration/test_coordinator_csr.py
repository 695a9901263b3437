"""The pool coordinator's two certificates (edgewatch.controller.coordinatorcsr, signed by the
controller's csrsigner) on the real apiserver, with the RBAC as shipped (deploy/11-rbac-controller.yaml,
deploy/12-rbac-coordinator.yaml, deploy/10-rbac-agent.yaml): the controller runs in-process (the whole
Reconciler) with a token of edgewatch-controller.

Requests are made with REAL pod-bound tokens (TokenRequest bound to a Pod on node n1: the apiserver
puts the node into the CSR's ``spec.extra``) of edgewatch/edgewatch-coordinator and of
edgewatch/edgewatch-agent, never admin credentials. The certificates issued are then used for what
they are for: a mutual-TLS handshake on 127.0.0.1, the serving one as the server's, the root one as
the client's, each side trusting the pool CA alone (read from its ConfigMap with the coordinator's
own token).
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import json
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from prometheus_client import CollectorRegistry

from edgewatch.controller.metrics import ControllerMetrics
from edgewatch.controller.model import ControllerConfig
from edgewatch.controller.reconciler import Reconciler
from edgewatch.kube.client import api_client
from edgewatch.names import (
    COORDINATOR_CLIENT_SIGNER,
    COORDINATOR_SERVICE_ACCOUNT,
    COORDINATOR_SERVING_SIGNER,
    POOL_LABEL,
    pool_ca_name,
)
from edgewatch_lab.testing.controlplane import ControlPlane

pytestmark = pytest.mark.controlplane

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
POOL = "shop-c"
ADDRESSES = {"n1": "10.77.0.1", "n2": "10.77.0.2"}
LABEL = "edgewatch-test=coordinator-csr"
IP = ipaddress.ip_address


@dataclass(frozen=True)
class Token:
    """kubectl as one real token (a kubeconfig with the CA, the server and only that token)."""

    label: str
    kubeconfig: Path
    kubectl_bin: Path

    def run(self, *args: str, input_text: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.kubectl_bin), f"--kubeconfig={self.kubeconfig}", *args],
                              capture_output=True, text=True, timeout=30, input=input_text)


@dataclass
class World:
    admin: ControlPlane
    coordinator: Token     # edgewatch-coordinator, token bound to Pod coordinator-n1 on node n1
    agent: Token           # edgewatch-agent, token bound to Pod agent-n1 on node n1
    reconciler: Reconciler
    folder: Path


def _token(cp: ControlPlane, folder: Path, label: str, token: str) -> Token:
    assert cp.ca_file is not None and cp.binaries is not None
    path = folder / f"{label}.kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "cp", "cluster": {
            "server": cp.apiserver_url,
            "certificate-authority-data": base64.b64encode(cp.ca_file.read_bytes()).decode()}}],
        "users": [{"name": label, "user": {"token": token}}],
        "contexts": [{"name": "cp", "context": {"cluster": "cp", "user": label}}],
        "current-context": "cp",
    }))
    return Token(label=label, kubeconfig=path, kubectl_bin=cp.binaries.kubectl)


def _pod_token(cp: ControlPlane, folder: Path, *, pod: str, account: str) -> Token:
    cp.kubectl("apply", "-f", "-", input_text=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "namespace": "edgewatch"},
        "spec": {"nodeName": "n1", "serviceAccountName": account, "tolerations": [{"operator": "Exists"}],
                 "containers": [{"name": "main", "image": "ghcr.io/edgewatch/edgewatch:0.1.0"}]}}))
    uid = cp.kubectl("get", "pod", pod, "-n", "edgewatch", "-o", "jsonpath={.metadata.uid}")
    return _token(cp, folder, pod, cp.kubectl(
        "create", "token", account, "-n", "edgewatch", "--bound-object-kind=Pod",
        f"--bound-object-name={pod}", f"--bound-object-uid={uid}").strip())


def _setup(cp: ControlPlane, folder: Path) -> tuple[Token, Token, Path]:
    deadline = time.monotonic() + 120
    for ns in ("edgewatch", "edgewatch-nodes"):  # another module's delete may still be under way
        while cp.kubectl("get", "namespace", ns, "--ignore-not-found", "-o", "jsonpath={.status.phase}") \
                == "Terminating":
            assert time.monotonic() < deadline, f"namespace {ns} still terminating"
            time.sleep(0.5)
    cp.kubectl("apply", "-k", str(DEPLOY))
    for node, address in ADDRESSES.items():
        cp.kubectl("apply", "-f", "-", input_text=json.dumps({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {POOL_LABEL: POOL}},
            "spec": {"taints": [{"key": "edgewatch.io/csr-test", "effect": "NoSchedule"}]}}))
        cp.kubectl("patch", "node", node, "--subresource=status", "--type=merge", "-p", json.dumps(
            {"status": {"addresses": [{"type": "InternalIP", "address": address},
                                      {"type": "Hostname", "address": node}]}}))
    coordinator = _pod_token(cp, folder, pod="coordinator-n1", account=COORDINATOR_SERVICE_ACCOUNT)
    agent = _pod_token(cp, folder, pod="agent-n1", account="edgewatch-agent")
    controller = _token(cp, folder, "controller", cp.kubectl("create", "token", "edgewatch-controller",
                                                             "-n", "edgewatch").strip())
    return coordinator, agent, controller.kubeconfig


def _teardown(cp: ControlPlane) -> None:
    cp.kubectl("delete", "csr", "-l", LABEL, "--ignore-not-found")
    cp.kubectl("delete", "pod", "coordinator-n1", "agent-n1", "-n", "edgewatch", "--force", "--grace-period=0",
               "--ignore-not-found")
    cp.kubectl("delete", "node", *ADDRESSES, "--ignore-not-found")
    cp.kubectl("delete", "-k", str(DEPLOY), "--ignore-not-found", "--wait=true", timeout_s=180)


@pytest.fixture(scope="module")
async def world(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    cp = control_plane
    folder = tmp_path_factory.mktemp("coordcsr")
    coordinator, agent, controller_kubeconfig = await asyncio.to_thread(_setup, cp, folder)
    client = api_client(str(controller_kubeconfig), timeout_s=10, component="controller")
    reconciler = Reconciler(client=client, config=ControllerConfig(),
                            metrics=ControllerMetrics(CollectorRegistry()), namespace="edgewatch")
    task = asyncio.create_task(reconciler.run())
    try:
        yield World(admin=cp, coordinator=coordinator, agent=agent, reconciler=reconciler, folder=folder)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()
        await asyncio.to_thread(_teardown, cp)


def _request(*, cn: str, sans: list[x509.GeneralName] | None = None) -> tuple[ec.EllipticCurvePrivateKey, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    builder = x509.CertificateSigningRequestBuilder().subject_name(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    pem = builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
    return key, base64.b64encode(pem).decode()


SERVING_SANS: list[x509.GeneralName] = [x509.IPAddress(IP(ADDRESSES["n1"])), x509.IPAddress(IP("127.0.0.1")),
                                        x509.DNSName("localhost")]


async def _create(who: Token, name: str, request: str, *, signer: str, usages: list[str]) -> None:
    body = {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": name, "labels": {"edgewatch-test": "coordinator-csr"}},
            "spec": {"signerName": signer, "request": request, "usages": usages, "expirationSeconds": 3600}}
    done = await asyncio.to_thread(who.run, "create", "-f", "-", input_text=json.dumps(body))
    assert done.returncode == 0, done.stderr


async def _wait(who: Token, name: str, done: Callable[[dict[str, Any]], bool], timeout_s: float = 60) -> dict[str, Any]:
    """Read the CSR back with the requester's own token (its `get`), until ``done``."""
    deadline = time.monotonic() + timeout_s
    while True:
        out = await asyncio.to_thread(who.run, "get", "csr", name, "-o", "json")
        assert out.returncode == 0, out.stderr
        csr: dict[str, Any] = json.loads(out.stdout)
        if done(csr):
            return csr
        assert time.monotonic() < deadline, f"CSR {name} not done after {timeout_s} s: {csr.get('status')}"
        await asyncio.sleep(0.3)


def _conditions(csr: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (csr.get("status") or {}).get("conditions") or []}


def _issued(csr: dict[str, Any]) -> bool:
    return bool((csr.get("status") or {}).get("certificate"))


def _denied(csr: dict[str, Any]) -> bool:
    return "Denied" in _conditions(csr)


def _pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


async def test_the_coordinator_gets_both_certificates_and_they_do_mutual_tls(world: World) -> None:
    serving_key, serving_request = _request(cn="edgewatch-coordinator", sans=SERVING_SANS)
    root_key, root_request = _request(cn="root")
    await _create(world.coordinator, "coord-n1-serving", serving_request, signer=COORDINATOR_SERVING_SIGNER,
                  usages=["server auth", "digital signature"])
    await _create(world.coordinator, "coord-n1-root", root_request, signer=COORDINATOR_CLIENT_SIGNER,
                  usages=["client auth"])
    serving = await _wait(world.coordinator, "coord-n1-serving", _issued)
    root = await _wait(world.coordinator, "coord-n1-root", _issued)
    assert serving["spec"]["extra"]["authentication.kubernetes.io/node-name"] == ["n1"]
    assert _conditions(serving)["Approved"]["reason"] == "EdgewatchCoordinatorServingCertificate"
    assert _conditions(root)["Approved"]["reason"] == "EdgewatchCoordinatorRootCertificate"
    assert _conditions(root)["Approved"]["message"] == \
        f"pool coordinator root client certificate on node n1 of pool {POOL}"

    # the pool CA certificate, read with the coordinator's own token (its Role on ConfigMaps)
    done = await asyncio.to_thread(world.coordinator.run, "get", "configmap", pool_ca_name(POOL), "-n", "edgewatch",
                                   "-o", "json")
    assert done.returncode == 0, done.stderr
    ca_pem = json.loads(done.stdout)["data"]["ca.crt"].encode()
    ca = x509.load_pem_x509_certificate(ca_pem)

    serving_pem = base64.b64decode(serving["status"]["certificate"])
    cert = x509.load_pem_x509_certificate(serving_pem)
    cert.verify_directly_issued_by(ca)
    assert cert.subject.rfc4514_string() == "CN=edgewatch-coordinator"
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [IP(ADDRESSES["n1"]), IP("127.0.0.1")]
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    assert cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value == \
        x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH])
    root_pem = base64.b64decode(root["status"]["certificate"])
    root_cert = x509.load_pem_x509_certificate(root_pem)
    root_cert.verify_directly_issued_by(ca)
    assert root_cert.subject.rfc4514_string() == "CN=root"
    assert root_cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value == \
        x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])

    # used as etcd would: server with the serving certificate, client with root, each trusting the pool CA only
    files = {name: world.folder / name for name in ("ca.crt", "s.crt", "s.key", "r.crt", "r.key")}
    for name, data in (("ca.crt", ca_pem), ("s.crt", serving_pem), ("s.key", _pem(serving_key)),
                       ("r.crt", root_pem), ("r.key", _pem(root_key))):
        files[name].write_bytes(data)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(files["ca.crt"]))
    server_ctx.load_cert_chain(str(files["s.crt"]), str(files["s.key"]))
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    client_ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(files["ca.crt"]))
    client_ctx.load_cert_chain(str(files["r.crt"]), str(files["r.key"]))
    peers: list[str] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        cert_info = writer.get_extra_info("peercert")
        peers.append(dict(x[0] for x in cert_info["subject"])["commonName"])
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    try:
        async with asyncio.timeout(10):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx,
                                                           server_hostname="127.0.0.1")
            assert await reader.read(2) == b"ok"
            writer.close()
            # a name the certificate does not carry fails the client's check
            with pytest.raises(ssl.SSLCertVerificationError):
                await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx, server_hostname="10.77.0.2")
    finally:
        server.close()
    assert peers == ["root"]
    metrics = world.reconciler.metrics.registry
    assert (metrics.get_sample_value("edgewatch_controller_csr_decisions_total",
                                     {"result": "signed", "reason": "ok"}) or 0) >= 2


@pytest.mark.parametrize(("who", "name", "cn", "sans", "signer", "usages", "reason"), [
    # the agent asks for etcd's root: its CN must be its own node's
    ("agent", "agent-n1-root", "root", None, COORDINATOR_CLIENT_SIGNER, ["client auth"], "EdgewatchPolicySubject"),
    # the agent asks for a coordinator serving certificate
    ("agent", "agent-n1-serving", "edgewatch-coordinator", SERVING_SANS, COORDINATOR_SERVING_SIGNER,
     ["server auth"], "EdgewatchPolicyNotCoordinator"),
    # the coordinator on n1 names another pool node's address
    ("coordinator", "coord-n1-as-n2", "edgewatch-coordinator", [x509.IPAddress(IP(ADDRESSES["n2"]))],
     COORDINATOR_SERVING_SIGNER, ["server auth"], "EdgewatchPolicySan"),
    # the coordinator asks for a node's client certificate
    ("coordinator", "coord-n1-node", "n1", None, COORDINATOR_CLIENT_SIGNER, ["client auth"],
     "EdgewatchPolicySubject"),
])
async def test_what_is_not_theirs_is_denied(world: World, who: str, name: str, cn: str,
                                            sans: list[x509.GeneralName] | None, signer: str, usages: list[str],
                                            reason: str) -> None:
    token = world.agent if who == "agent" else world.coordinator
    _key, request = _request(cn=cn, sans=sans)
    await _create(token, name, request, signer=signer, usages=usages)
    csr = await _wait(token, name, _denied)
    assert _conditions(csr)["Denied"]["reason"] == reason, _conditions(csr)["Denied"]
    assert "Approved" not in _conditions(csr) and not _issued(csr)

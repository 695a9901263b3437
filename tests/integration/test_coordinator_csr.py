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
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from edgewatch.controller.reconciler import Reconciler
from edgewatch.names import (
    COORDINATOR_CLIENT_SIGNER,
    COORDINATOR_SERVICE_ACCOUNT,
    COORDINATOR_SERVING_SIGNER,
    POOL_LABEL,
    pool_ca_name,
)
from edgewatch_lab.testing.controlplane import ControlPlane

from _pki import csr_conditions as _conditions
from _pki import csr_request, wait_csr
from _tokens import Token, kubectl_as, pod_bound_token, running_reconciler, wait_namespaces_settled

pytestmark = pytest.mark.controlplane

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
POOL = "shop-c"
ADDRESSES = {"n1": "10.77.0.1", "n2": "10.77.0.2"}
LABEL = "edgewatch-test=coordinator-csr"
IP = ipaddress.ip_address


@dataclass
class World:
    admin: ControlPlane
    coordinator: Token     # edgewatch-coordinator, token bound to Pod coordinator-n1 on node n1
    agent: Token           # edgewatch-agent, token bound to Pod agent-n1 on node n1
    reconciler: Reconciler
    folder: Path


def _setup(cp: ControlPlane, folder: Path) -> tuple[Token, Token, Path]:
    wait_namespaces_settled(cp)
    cp.kubectl("apply", "-k", str(DEPLOY))
    for node, address in ADDRESSES.items():
        cp.kubectl("apply", "-f", "-", input_text=json.dumps({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {POOL_LABEL: POOL}},
            "spec": {"taints": [{"key": "edgewatch.io/csr-test", "effect": "NoSchedule"}]}}))
        cp.kubectl("patch", "node", node, "--subresource=status", "--type=merge", "-p", json.dumps(
            {"status": {"addresses": [{"type": "InternalIP", "address": address},
                                      {"type": "Hostname", "address": node}]}}))
    coordinator = kubectl_as(cp, folder, "coordinator-n1",
                             pod_bound_token(cp, pod="coordinator-n1", account=COORDINATOR_SERVICE_ACCOUNT))
    agent = kubectl_as(cp, folder, "agent-n1", pod_bound_token(cp, pod="agent-n1", account="edgewatch-agent"))
    controller = kubectl_as(cp, folder, "controller", cp.kubectl("create", "token", "edgewatch-controller",
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
    try:
        async with running_reconciler(controller_kubeconfig) as reconciler:
            yield World(admin=cp, coordinator=coordinator, agent=agent, reconciler=reconciler, folder=folder)
    finally:
        await asyncio.to_thread(_teardown, cp)


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
    async def read() -> dict[str, Any]:
        out = await asyncio.to_thread(who.run, "get", "csr", name, "-o", "json")
        assert out.returncode == 0, out.stderr
        csr: dict[str, Any] = json.loads(out.stdout)
        return csr

    return await wait_csr(read, name, done, timeout_s)


def _issued(csr: dict[str, Any]) -> bool:
    return bool((csr.get("status") or {}).get("certificate"))


def _denied(csr: dict[str, Any]) -> bool:
    return "Denied" in _conditions(csr)


def _pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


async def test_the_coordinator_gets_both_certificates_and_they_do_mutual_tls(world: World) -> None:
    serving_key, serving_request = csr_request(cn="edgewatch-coordinator", sans=SERVING_SANS)
    root_key, root_request = csr_request(cn="root")
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
    _key, request = csr_request(cn=cn, sans=sans)
    await _create(token, name, request, signer=signer, usages=usages)
    csr = await _wait(token, name, _denied)
    assert _conditions(csr)["Denied"]["reason"] == reason, _conditions(csr)["Denied"]
    assert "Approved" not in _conditions(csr) and not _issued(csr)

"""The controller's coordinator-client signer (edgewatch.controller.csrsigner) on the real apiserver,
with the controller's RBAC as shipped (deploy/11-rbac-controller.yaml): the controller runs
in-process (the whole Reconciler, which runs the signer) with a token of edgewatch-controller.

Requests are made with REAL pod-bound tokens of edgewatch/edgewatch-agent (TokenRequest bound to a
Pod on node n1, as the kubelet gets for a DaemonSet pod: the apiserver puts the node into the
token's user extra ``authentication.kubernetes.io/node-name``, and from there into the CSR's
``spec.extra``), never admin credentials; the agent's rights are those shipped
(deploy/10-rbac-agent.yaml: create and get CSRs).
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from edgewatch.controller.poolca import CLOCK_SKEW_S
from edgewatch.controller.reconciler import Reconciler
from edgewatch.names import COORDINATOR_CLIENT_SIGNER, POOL_CA_SECRET_NAME, POOL_LABEL, pool_ca_name
from edgewatch_lab.testing.controlplane import ControlPlane

from _pki import csr_conditions as _conditions
from _pki import csr_request, wait_csr
from _tokens import Token, kubectl_as, pod_bound_token, running_reconciler, wait_namespaces_settled

pytestmark = pytest.mark.controlplane

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
POOL = "shop-a"


@dataclass
class World:
    admin: ControlPlane
    n1: Token                  # agent, token bound to Pod agent-n1 on node n1
    unbound: Token             # agent, plain token (no Pod, no node)
    reconciler: Reconciler     # the controller, running with its own token


def _setup(cp: ControlPlane, folder: Path) -> tuple[Token, Token, Path]:
    wait_namespaces_settled(cp)
    cp.kubectl("apply", "-k", str(DEPLOY))
    for node in ("n1", "n2"):
        cp.kubectl("apply", "-f", "-", input_text=json.dumps({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {POOL_LABEL: POOL}},
            "spec": {"taints": [{"key": "edgewatch.io/csr-test", "effect": "NoSchedule"}]}}))
    n1 = kubectl_as(cp, folder, "agent-n1", pod_bound_token(cp, pod="agent-n1", account="edgewatch-agent",
                                                            container="agent"))
    unbound = kubectl_as(cp, folder, "agent-unbound", cp.kubectl("create", "token", "edgewatch-agent",
                                                                 "-n", "edgewatch").strip())
    controller = kubectl_as(cp, folder, "controller", cp.kubectl("create", "token", "edgewatch-controller",
                                                                 "-n", "edgewatch").strip())
    return n1, unbound, controller.kubeconfig


def _teardown(cp: ControlPlane) -> None:
    cp.kubectl("delete", "csr", "-l", "edgewatch-test=csr", "--ignore-not-found")
    cp.kubectl("delete", "pod", "agent-n1", "-n", "edgewatch", "--force", "--grace-period=0", "--ignore-not-found")
    cp.kubectl("delete", "node", "n1", "n2", "--ignore-not-found")
    cp.kubectl("delete", "-k", str(DEPLOY), "--ignore-not-found", "--wait=true", timeout_s=180)


@pytest.fixture(scope="module")
async def world(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    cp = control_plane
    n1, unbound, controller_kubeconfig = await asyncio.to_thread(_setup, cp, tmp_path_factory.mktemp("csr"))
    try:
        async with running_reconciler(controller_kubeconfig) as reconciler:
            yield World(admin=cp, n1=n1, unbound=unbound, reconciler=reconciler)
    finally:
        await asyncio.to_thread(_teardown, cp)


async def _create(who: Token, name: str, request: str, *, signer: str = COORDINATOR_CLIENT_SIGNER,
                  expiration_s: int = 3600) -> None:
    body = {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": name, "labels": {"edgewatch-test": "csr"}},
            "spec": {"signerName": signer, "request": request, "usages": ["client auth"],
                     "expirationSeconds": expiration_s}}
    done = await asyncio.to_thread(who.run, "create", "-f", "-", input_text=json.dumps(body))
    assert done.returncode == 0, done.stderr


async def _get(cp: ControlPlane, name: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(await asyncio.to_thread(cp.kubectl, "get", "csr", name, "-o", "json"))
    return out


async def _wait(cp: ControlPlane, name: str, done: Callable[[dict[str, Any]], bool],
                timeout_s: float = 60) -> dict[str, Any]:
    return await wait_csr(lambda: _get(cp, name), name, done, timeout_s)


def _decisions(w: World, result: str, reason: str) -> float:
    value = w.reconciler.metrics.registry.get_sample_value(
        "edgewatch_controller_csr_decisions_total", {"result": result, "reason": reason})
    return value or 0.0


async def test_own_node_certificate_is_signed_by_the_pool_ca(world: World) -> None:
    key, request = csr_request(cn="n1")
    await _create(world.n1, "csr-n1-own", request, expiration_s=3600)
    csr = await _wait(world.admin, "csr-n1-own", lambda c: bool((c.get("status") or {}).get("certificate")))
    approved = _conditions(csr)["Approved"]
    assert approved["status"] == "True" and approved["reason"] == "EdgewatchNodeClientCertificate"
    assert approved["message"] == f"client certificate for node n1 of pool {POOL}"
    assert csr["spec"]["extra"]["authentication.kubernetes.io/node-name"] == ["n1"]
    cert = x509.load_pem_x509_certificate(base64.b64decode(csr["status"]["certificate"]))
    # the agent's own token reads the pool CA certificate (the ConfigMap), never the CA key
    done = await asyncio.to_thread(world.n1.run, "get", "configmap", pool_ca_name(POOL), "-n", "edgewatch",
                                   "-o", "json")
    assert done.returncode == 0, done.stderr
    ca = x509.load_pem_x509_certificate(json.loads(done.stdout)["data"]["ca.crt"].encode())
    assert ca.subject.rfc4514_string() == f"CN=edgewatch pool {POOL} CA"
    cert.verify_directly_issued_by(ca)
    assert cert.subject.rfc4514_string() == "CN=n1"
    assert cert.public_key() == key.public_key()
    assert cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value == \
        x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    with pytest.raises(x509.ExtensionNotFound):
        cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert cert.not_valid_after_utc - cert.not_valid_before_utc == dt.timedelta(seconds=3600 + CLOCK_SKEW_S)
    assert abs((cert.not_valid_after_utc - dt.datetime.now(dt.UTC)).total_seconds() - 3600) < 60
    assert _decisions(world, "signed", "ok") >= 1


async def test_a_certificate_for_another_node_is_denied(world: World) -> None:
    _key, request = csr_request(cn="n2")
    await _create(world.n1, "csr-n1-as-n2", request)
    csr = await _wait(world.admin, "csr-n1-as-n2", lambda c: "Denied" in _conditions(c))
    denied = _conditions(csr)["Denied"]
    assert denied["reason"] == "EdgewatchPolicySubject"
    assert denied["message"] == "subject must be exactly CN=n1, got 'CN=n2'"
    assert "Approved" not in _conditions(csr) and not csr["status"].get("certificate")
    assert _decisions(world, "denied", "subject") == 1
    events = json.loads(await asyncio.to_thread(
        world.admin.kubectl, "get", "events", "-n", "default",
        "--field-selector", "involvedObject.name=csr-n1-as-n2", "-o", "json"))["items"]
    assert [(e["reason"], e["type"]) for e in events] == [("CertificateDenied", "Warning")]
    assert events[0]["message"] == "subject: subject must be exactly CN=n1, got 'CN=n2'"


async def test_a_subject_alt_name_is_denied(world: World) -> None:
    _key, request = csr_request(cn="n1", sans=[x509.DNSName("n1")])
    await _create(world.n1, "csr-n1-san", request)
    csr = await _wait(world.admin, "csr-n1-san", lambda c: "Denied" in _conditions(c))
    assert _conditions(csr)["Denied"]["reason"] == "EdgewatchPolicySan"
    assert _conditions(csr)["Denied"]["message"] == \
        "a subjectAltName is not allowed: the certificate names the node by CN only"
    assert not csr["status"].get("certificate")


async def test_a_token_without_a_node_is_denied(world: World) -> None:
    _key, request = csr_request(cn="n1")
    await _create(world.unbound, "csr-unbound", request)
    csr = await _wait(world.admin, "csr-unbound", lambda c: "Denied" in _conditions(c))
    assert _conditions(csr)["Denied"]["reason"] == "EdgewatchPolicyNodeClaim"
    assert "extra" not in csr["spec"] or "authentication.kubernetes.io/node-name" not in csr["spec"]["extra"]


async def test_another_signer_is_left_alone(world: World) -> None:
    _key, request = csr_request(cn="n1")
    await _create(world.n1, "csr-other-signer", request, signer="example.com/other")
    # a request of ours made after it is decided: the signer has been through both by then
    _key2, request2 = csr_request(cn="n2")
    await _create(world.n1, "csr-after-other", request2)
    await _wait(world.admin, "csr-after-other", lambda c: "Denied" in _conditions(c))
    await asyncio.sleep(2)
    other = await _get(world.admin, "csr-other-signer")
    assert other["spec"]["signerName"] == "example.com/other"
    assert not (other.get("status") or {}).get("conditions")
    assert not (other.get("status") or {}).get("certificate")


async def test_the_ca_secret_is_not_readable_by_an_agent(world: World) -> None:
    await _wait(world.admin, "csr-n1-own", lambda c: bool((c.get("status") or {}).get("certificate")))
    secret = json.loads(await asyncio.to_thread(world.admin.kubectl, "get", "secret", POOL_CA_SECRET_NAME,
                                                "-n", "edgewatch", "-o", "json"))
    assert sorted(secret["data"]) == [f"{pool_ca_name(POOL)}.crt", f"{pool_ca_name(POOL)}.key"]
    for who in (world.n1, world.unbound):
        done = await asyncio.to_thread(who.run, "get", "secret", POOL_CA_SECRET_NAME, "-n", "edgewatch")
        assert done.returncode != 0
        assert 'secrets "edgewatch-pool-cas" is forbidden: User "system:serviceaccount:edgewatch:edgewatch-agent"' \
            in done.stderr, done.stderr

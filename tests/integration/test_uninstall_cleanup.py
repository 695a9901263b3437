"""``edgewatch uninstall`` on the real control plane (kube-apiserver, kube-controller-manager, which
writes to the same Nodes meanwhile): nodes and node Leases carrying every mark edgewatch writes, next
to an operator's own taint (also an out-of-service one), annotations, labels and condition; the data
objects edgewatch leaves in its namespaces and its CSRs, next to the install's ConfigMap and an
operator's objects. ``--dry-run`` changes nothing; while the install's ServiceAccount exists the run
is refused (exit 3) and changes nothing; the run removes every edgewatch mark and object
and leaves the operator's untouched; a second run finds nothing to do (docs/uninstall.md)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from lightkube import ApiError
from lightkube.resources.certificates_v1 import CertificateSigningRequest
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ConfigMap, Namespace, Node, Secret, ServiceAccount

from edgewatch.controller.model import STATE_ANNOTATION, UNREACHABLE_SINCE_ANNOTATION
from edgewatch.core.roster import ROSTER_LABEL
from edgewatch.kube.leases import MARK_ANNOTATIONS
from edgewatch.names import (
    AUTONOMY_DURATION_ANNOTATION,
    CLOUD_UNREACHABLE_TAINT_KEY,
    COORDINATOR_CLIENT_SIGNER,
    DELEGATE_HEARTBEAT_ANNOTATION,
    DELEGATED_BY_ANNOTATION,
    DELEGATED_RENEW_TIME_ANNOTATION,
    DELEGATED_VIA_ANNOTATION,
    EDGE_CONDITION_TYPE,
    EVIDENCE_ANNOTATION,
    FAILED_TAINT_KEY,
    IDENTITY_NAMESPACE,
    NODE_LEASE_NAMESPACE,
    OUT_OF_SERVICE_ANNOTATION,
    OUT_OF_SERVICE_TAINT_KEY,
    POOL_LABEL,
    ROLE_CONDITION_TYPE,
    pool_ca_name,
)
from edgewatch.uninstall import NODE_ANNOTATIONS, NODE_CONDITIONS, is_edgewatch_taint
from edgewatch_lab.testing.controlplane import ControlPlane

from _tokens import wait_namespaces_settled

pytestmark = pytest.mark.controlplane

RENEW = "2026-11-26T05:00:00.123456Z"
OPERATOR_TAINT = {"key": "example.com/dedicated", "value": "edge", "effect": "NoSchedule"}
OPERATOR_OOS = {"key": OUT_OF_SERVICE_TAINT_KEY, "value": "nodeshutdown", "effect": "NoExecute"}
OPERATOR_ANNOTATIONS = {"example.com/owner": "ops", OUT_OF_SERVICE_ANNOTATION: "enabled",
                        AUTONOMY_DURATION_ANNOTATION: "10m"}


def _csr_request() -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    pem = x509.CertificateSigningRequestBuilder().subject_name(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "n")])).sign(key, hashes.SHA256()).public_bytes(
        serialization.Encoding.PEM)
    return base64.b64encode(pem).decode()


def _edgewatch(cp: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "edgewatch"
    return subprocess.run([str(exe), "uninstall", "--kubeconfig", str(cp.kubeconfig), *args],
                          capture_output=True, text=True, timeout=180, check=False)


async def _absent(kube, res, name: str, namespace: str | None = None) -> bool:  # type: ignore[no-untyped-def]
    try:
        await kube.get(res, name, namespace=namespace)
    except ApiError as exc:
        if exc.status.code == 404:
            return True
        raise
    return False


async def _snapshot(kube, nodes: list[str]) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    out: dict[str, Any] = {}
    for name in nodes:
        node = (await kube.get(Node, name)).to_dict()
        lease = (await kube.get(Lease, name, namespace=NODE_LEASE_NAMESPACE)).to_dict()
        out[name] = {"taints": node["spec"].get("taints") or [],
                     "annotations": node["metadata"].get("annotations") or {},
                     "labels": node["metadata"].get("labels") or {},
                     "conditions": {c["type"]: c for c in node.get("status", {}).get("conditions") or []},
                     "lease_annotations": lease["metadata"].get("annotations") or {},
                     "lease_spec": lease["spec"]}
    return out


async def test_uninstall_removes_every_edgewatch_mark_and_leaves_the_operators(  # type: ignore[no-untyped-def]
        kube, control_plane: ControlPlane) -> None:
    await asyncio.to_thread(wait_namespaces_settled, control_plane, (IDENTITY_NAMESPACE,))  # another module's delete
    suffix = secrets.token_hex(3)
    ns = f"ew-uninstall-{suffix}"
    marked, plain = f"un{suffix}-marked", f"un{suffix}-plain"
    csr_ours, csr_theirs = f"un{suffix}-ours", f"un{suffix}-theirs"
    await kube.create(Namespace.from_dict({"metadata": {"name": ns}}))
    with contextlib.suppress(ApiError):
        await kube.create(Namespace.from_dict({"metadata": {"name": IDENTITY_NAMESPACE}}))
    try:
        # -- nodes: every mark on one, the operator's own out-of-service taint on the other
        ours_taints = [{"key": CLOUD_UNREACHABLE_TAINT_KEY, "effect": "NoSchedule"},
                       {"key": FAILED_TAINT_KEY, "effect": "NoExecute"},
                       {"key": OUT_OF_SERVICE_TAINT_KEY, "value": "edgewatch", "effect": "NoExecute"}]
        await kube.create(Node.from_dict({"metadata": {
            "name": marked, "labels": {POOL_LABEL: "p1", "team": "edge"},
            "annotations": {**OPERATOR_ANNOTATIONS, STATE_ANNOTATION: "failed", UNREACHABLE_SINCE_ANNOTATION: RENEW}},
            "spec": {"taints": [OPERATOR_TAINT, *ours_taints]}}))
        await kube.create(Node.from_dict({"metadata": {"name": plain, "labels": {POOL_LABEL: "p1"},
                                                       "annotations": {"example.com/owner": "ops"}},
                                          "spec": {"taints": [OPERATOR_OOS]}}))
        conditions = [{"type": EDGE_CONDITION_TYPE, "status": "False", "reason": "PeersSeeItDead"},
                      {"type": ROLE_CONDITION_TYPE, "status": "True", "reason": "Leader"},
                      {"type": "OperatorCheck", "status": "True", "reason": "Fine"}]
        await kube.patch(Node.Status, marked, {"status": {"conditions": conditions}})
        await kube.patch(Node.Status, plain, {"status": {"conditions": [conditions[2]]}})
        mark = {DELEGATE_HEARTBEAT_ANNOTATION: "true", DELEGATED_BY_ANNOTATION: plain,
                DELEGATED_RENEW_TIME_ANNOTATION: RENEW, DELEGATED_VIA_ANNOTATION: "peer"}
        for name, lease_notes in ((marked, {**mark, "example.com/lease": "x"}), (plain, {"example.com/lease": "x"})):
            await kube.create(Lease.from_dict({
                "metadata": {"name": name, "namespace": NODE_LEASE_NAMESPACE, "annotations": lease_notes},
                "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": RENEW}}))
        # -- data objects, next to the install's ConfigMap and the operator's objects
        data_cms = ["edgewatch-roster", f"edgewatch-roster-g-{suffix}", pool_ca_name("p1")]
        for name in data_cms:
            await kube.create(ConfigMap.from_dict({"metadata": {"name": name, "namespace": ns,
                                                                "labels": {ROSTER_LABEL: "true"}
                                                                if "roster" in name else {}},
                                                   "data": {"x": "y"}}))
        for name in ("edgewatch-config", "operator-settings"):
            await kube.create(ConfigMap.from_dict({"metadata": {"name": name, "namespace": ns}, "data": {"x": "y"}}))
        for name in ("edgewatch-pool-cas", "edgewatch-beacon-key", "operator-secret"):
            await kube.create(Secret.from_dict({"metadata": {"name": name, "namespace": ns},
                                                "stringData": {"k": "v"}}))
        for name in ("edgewatch-beacon", "edgewatch-controller", "operator-lease"):
            await kube.create(Lease.from_dict({"metadata": {"name": name, "namespace": ns},
                                               "spec": {"holderIdentity": "x"}}))
        await kube.create(ConfigMap.from_dict({"metadata": {"name": marked, "namespace": IDENTITY_NAMESPACE},
                                               "data": {"keys": "k1 AAAA"}}))
        await kube.create(Lease.from_dict({"metadata": {"name": marked, "namespace": IDENTITY_NAMESPACE,
                                                        "annotations": {EVIDENCE_ANNOTATION: "[]"}},
                                           "spec": {"holderIdentity": marked}}))
        for name, signer in ((csr_ours, COORDINATOR_CLIENT_SIGNER), (csr_theirs, "example.com/other-signer")):
            await kube.create(CertificateSigningRequest.from_dict({
                "metadata": {"name": name}, "spec": {"signerName": signer, "request": _csr_request(),
                                                     "usages": ["client auth"]}}))

        before = await _snapshot(kube, [marked, plain])
        assert [t for t in before[marked]["taints"] if is_edgewatch_taint(t)] == ours_taints
        assert set(NODE_CONDITIONS) <= set(before[marked]["conditions"])

        # -- dry run: the plan names every mark and object, nothing is written
        dry = await asyncio.to_thread(_edgewatch, control_plane, "--namespace", ns, "--dry-run")
        assert dry.returncode == 0, dry.stderr
        for expected in (f"Node {marked}: remove taint {CLOUD_UNREACHABLE_TAINT_KEY}:NoSchedule",
                         f"taint {OUT_OF_SERVICE_TAINT_KEY}=edgewatch:NoExecute", f"annotation {STATE_ANNOTATION}",
                         f"Node {marked} (status): remove condition {EDGE_CONDITION_TYPE}",
                         f"Lease {NODE_LEASE_NAMESPACE}/{marked}: remove annotation {DELEGATE_HEARTBEAT_ANNOTATION}",
                         f"ConfigMap {ns}/edgewatch-roster: delete", f"Secret {ns}/edgewatch-pool-cas: delete",
                         f"Lease {IDENTITY_NAMESPACE}/{marked}: delete", f"CertificateSigningRequest {csr_ours}: delete"):
            assert expected in dry.stdout, dry.stdout
        for never in (plain, "operator-", "edgewatch-config", csr_theirs, "nodeshutdown"):
            assert never not in dry.stdout, dry.stdout
        assert not await _absent(kube, ConfigMap, "edgewatch-roster", ns)
        assert [t for t in (await _snapshot(kube, [marked]))[marked]["taints"] if is_edgewatch_taint(t)] == ours_taints

        # -- the install still there (its controller's ServiceAccount): refused, nothing written
        await kube.create(ServiceAccount.from_dict({"metadata": {"name": "edgewatch-controller", "namespace": ns}}))
        refused = await asyncio.to_thread(_edgewatch, control_plane, "--namespace", ns)
        assert refused.returncode == 3, refused.stdout + refused.stderr
        assert f"ServiceAccounts {ns}/edgewatch-controller" in refused.stderr, refused.stderr
        assert "FAILED" not in refused.stdout and "done" not in refused.stdout, refused.stdout
        assert not await _absent(kube, ConfigMap, "edgewatch-roster", ns)
        await kube.delete(ServiceAccount, "edgewatch-controller", namespace=ns)

        # -- the run
        run = await asyncio.to_thread(_edgewatch, control_plane, "--namespace", ns)
        assert run.returncode == 0, run.stdout + run.stderr
        assert "FAILED" not in run.stdout, run.stdout
        print(run.stdout)
        after = await _snapshot(kube, [marked, plain])
        # edgewatch's marks are gone ...
        assert not [t for t in after[marked]["taints"] if is_edgewatch_taint(t)]
        assert not set(NODE_ANNOTATIONS) & set(after[marked]["annotations"])
        assert not set(NODE_CONDITIONS) & set(after[marked]["conditions"])
        assert not set(MARK_ANNOTATIONS) & set(after[marked]["lease_annotations"])
        # ... and the operator's are untouched (kube-controller-manager's own taints may come and go)
        for name in (marked, plain):
            theirs = [t for t in before[name]["taints"] if not is_edgewatch_taint(t)
                      and not t["key"].startswith("node.kubernetes.io/not-ready")
                      and not t["key"].startswith("node.kubernetes.io/unreachable")]
            for taint in theirs:
                assert taint in after[name]["taints"], (name, taint, after[name]["taints"])
            assert after[name]["labels"] == before[name]["labels"]
            assert after[name]["conditions"]["OperatorCheck"] == before[name]["conditions"]["OperatorCheck"]
            assert after[name]["lease_spec"] == before[name]["lease_spec"]
            assert after[name]["lease_annotations"] == {"example.com/lease": "x"}
        assert OPERATOR_TAINT in after[marked]["taints"]
        assert OPERATOR_OOS in after[plain]["taints"]
        # (kube-controller-manager's TTL controller adds node.alpha.kubernetes.io/ttl meanwhile)
        assert {k: after[marked]["annotations"].get(k) for k in OPERATOR_ANNOTATIONS} == OPERATOR_ANNOTATIONS
        assert after[plain]["annotations"].get("example.com/owner") == "ops"
        for name in data_cms:
            assert await _absent(kube, ConfigMap, name, ns), name
        for res, name, where in ((Secret, "edgewatch-pool-cas", ns), (Secret, "edgewatch-beacon-key", ns),
                                 (Lease, "edgewatch-beacon", ns), (Lease, "edgewatch-controller", ns),
                                 (ConfigMap, marked, IDENTITY_NAMESPACE), (Lease, marked, IDENTITY_NAMESPACE),
                                 (CertificateSigningRequest, csr_ours, None)):
            assert await _absent(kube, res, name, where), (res, name)
        for res, name, where in ((ConfigMap, "edgewatch-config", ns), (ConfigMap, "operator-settings", ns),
                                 (Secret, "operator-secret", ns), (Lease, "operator-lease", ns),
                                 (CertificateSigningRequest, csr_theirs, None)):
            assert not await _absent(kube, res, name, where), (res, name)

        # -- idempotent: a second run finds nothing of ours on these objects
        again = await asyncio.to_thread(_edgewatch, control_plane, "--namespace", ns)
        assert again.returncode == 0, again.stdout + again.stderr
        assert marked not in again.stdout and ns not in again.stdout, again.stdout
    finally:
        for name in (marked, plain):
            with contextlib.suppress(ApiError):
                await kube.delete(Node, name)
            with contextlib.suppress(ApiError):
                await kube.delete(Lease, name, namespace=NODE_LEASE_NAMESPACE)
        for name in (csr_ours, csr_theirs):
            with contextlib.suppress(ApiError):
                await kube.delete(CertificateSigningRequest, name)
        with contextlib.suppress(ApiError):
            await kube.delete(Namespace, ns)

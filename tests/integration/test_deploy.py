"""The manifests users apply: they apply cleanly to the real apiserver, and the RBAC they grant is
least privilege (checked with `kubectl auth can-i` impersonating the ServiceAccounts)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from edgewatch_lab.testing.controlplane import ControlPlane

pytestmark = pytest.mark.controlplane

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
AGENT = "system:serviceaccount:edgewatch:edgewatch-agent"
CONTROLLER = "system:serviceaccount:edgewatch:edgewatch-controller"
COORDINATOR = "system:serviceaccount:edgewatch:edgewatch-coordinator"


def can_i(cp: ControlPlane, who: str, verb: str, resource: str, *, namespace: str | None = None) -> bool:
    subresource = None
    if resource in ("nodes/status", "pods/eviction", "serviceaccounts/token"):  # a subresource, not a name
        resource, subresource = resource.split("/")
    args = ["auth", "can-i", verb, resource, f"--as={who}"]
    if subresource:
        args.append(f"--subresource={subresource}")
    if namespace:
        args.append(f"--namespace={namespace}")
    try:
        return cp.kubectl(*args).strip() == "yes"
    except subprocess.CalledProcessError as exc:
        if exc.stdout.strip() == "no":
            return False
        raise


def can_sign(cp: ControlPlane, who: str, verb: str, signer: str) -> bool:
    """A SubjectAccessReview of ``verb`` on the signer ``signer`` (kubectl auth can-i cannot name a
    resource whose name has a slash, as signer names do)."""
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": who, "groups": ["system:serviceaccounts", "system:authenticated"],
                       "resourceAttributes": {"group": "certificates.k8s.io", "resource": "signers",
                                              "name": signer, "verb": verb}}}
    out = json.loads(cp.kubectl("create", "-f", "-", "-o", "json", input_text=json.dumps(review)))
    return bool(out["status"].get("allowed"))


@pytest.fixture(scope="module")
def applied(control_plane: ControlPlane):  # type: ignore[no-untyped-def]
    out = control_plane.kubectl("apply", "-k", str(DEPLOY))  # the kustomize base, as the README says
    yield out
    control_plane.kubectl("delete", "-k", str(DEPLOY), "--ignore-not-found", "--wait=false", timeout_s=60)


def test_manifests_apply_and_create_every_object(applied: str, control_plane: ControlPlane) -> None:
    resources = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"]
    assert sorted(resources) == sorted(f.name for f in DEPLOY.glob("*.yaml") if f.name != "kustomization.yaml")
    docs = [d for f in resources for d in yaml.safe_load_all((DEPLOY / f).read_text()) if d]
    assert len(docs) >= 15
    for doc in docs:
        kind, name = doc["kind"], doc["metadata"]["name"]
        ns = doc["metadata"].get("namespace")
        args = ["get", kind.lower(), name, "-o", "name"] + ([f"--namespace={ns}"] if ns else [])
        assert control_plane.kubectl(*args).strip(), f"{kind}/{name} missing after apply"
    ds = yaml.safe_load(control_plane.kubectl("get", "daemonset", "edgewatch-agent", "-n", "edgewatch", "-o", "yaml"))
    spec = ds["spec"]["template"]["spec"]
    assert spec["hostNetwork"] is True
    assert spec["containers"][0]["ports"][0]["containerPort"] == 51005


@pytest.mark.parametrize(("verb", "resource", "namespace", "allowed"), [
    ("list", "nodes", None, True),
    ("watch", "nodes", None, True),
    ("patch", "nodes/status", None, True),
    ("patch", "nodes", None, False),            # cannot taint or label nodes
    ("delete", "nodes", None, False),
    ("update", "leases", "kube-node-lease", True),
    ("get", "leases", "kube-node-lease", True),
    ("list", "leases", "kube-node-lease", False),    # reads one Lease at a time, by name
    ("watch", "leases", "kube-node-lease", False),
    ("get", "nodes/some-other-node", None, True),    # every Node (RBAC cannot say "own"; the header says so)
    ("list", "services", None, True),                # the pool cache: list/watch of exactly its resources
    ("watch", "endpointslices.discovery.k8s.io", None, True),
    ("get", "services", "default", False),
    ("list", "endpoints", None, False),
    ("create", "endpointslices.discovery.k8s.io", "default", False),
    ("update", "services", "default", False),
    # the pool cache endpoint asks the cloud who a client is and what it may read ...
    ("create", "tokenreviews.authentication.k8s.io", None, True),
    ("create", "subjectaccessreviews.authorization.k8s.io", None, True),
    # ... and nothing more of the kind
    ("create", "localsubjectaccessreviews.authorization.k8s.io", "default", False),
    ("get", "subjectaccessreviews.authorization.k8s.io", None, False),
    ("list", "tokenreviews.authentication.k8s.io", None, False),
    # its own coordinator client certificate (the controller signs only its own node's, docs/security.md) ...
    ("create", "certificatesigningrequests.certificates.k8s.io", None, True),
    ("get", "certificatesigningrequests.certificates.k8s.io", None, True),
    # ... and nothing else of certificates
    ("list", "certificatesigningrequests.certificates.k8s.io", None, False),
    ("update", "certificatesigningrequests.certificates.k8s.io", None, False),
    ("delete", "certificatesigningrequests.certificates.k8s.io", None, False),
    ("update", "certificatesigningrequests.certificates.k8s.io/approval", None, False),
    ("update", "certificatesigningrequests.certificates.k8s.io/status", None, False),
    ("sign", "signers.certificates.k8s.io/edgewatch.io/coordinator-client", None, False),
    ("create", "serviceaccounts/token", "kube-system", False),
    ("create", "leases", "kube-node-lease", False),  # never invents a node's Lease
    ("delete", "leases", "kube-node-lease", False),
    ("update", "leases", "default", False),
    ("get", "configmaps/edgewatch-config", "edgewatch", True),
    ("watch", "configmaps/edgewatch-roster", "edgewatch", True),   # its group's roster
    ("list", "configmaps", "edgewatch", True),                     # every ConfigMap there (names vary)
    ("get", "configmaps", "kube-system", False),
    ("update", "configmaps/edgewatch-roster", "edgewatch", False),  # written by the controller only
    ("create", "configmaps", "edgewatch", False),
    ("list", "secrets", "edgewatch", False),
    ("delete", "pods", "default", False),
    ("create", "pods/eviction", "default", False),
    # edgewatch-nodes: its own keys and evidence (which objects: deploy/15-policy-agent.yaml, test_policy.py)
    ("create", "configmaps", "edgewatch-nodes", True),
    ("update", "configmaps", "edgewatch-nodes", True),
    ("watch", "configmaps", "edgewatch-nodes", True),     # every node's public keys
    ("delete", "configmaps", "edgewatch-nodes", False),
    ("create", "leases", "edgewatch-nodes", True),
    ("patch", "leases", "edgewatch-nodes", True),
    ("list", "leases", "edgewatch-nodes", False),         # nobody else's evidence
    ("delete", "leases", "edgewatch-nodes", False),
    ("create", "secrets", "edgewatch-nodes", False),
    # the controller's beacon, by name only (list/watch with the field selector metadata.name)
    ("get", "leases/edgewatch-beacon", "edgewatch", True),
    ("list", "leases/edgewatch-beacon", "edgewatch", True),
    ("watch", "leases/edgewatch-beacon", "edgewatch", True),
    ("update", "leases/edgewatch-beacon", "edgewatch", False),
    ("list", "leases", "edgewatch", False),
    ("get", "leases/edgewatch-controller", "edgewatch", False),
    ("create", "configmaps", "edgewatch", False),
])
def test_agent_rbac_is_least_privilege(applied: str, control_plane: ControlPlane, verb: str, resource: str,
                                       namespace: str | None, allowed: bool) -> None:
    assert can_i(control_plane, AGENT, verb, resource, namespace=namespace) is allowed


@pytest.mark.parametrize(("verb", "resource", "namespace", "allowed"), [
    ("patch", "nodes", None, True),
    ("delete", "nodes", None, False),
    ("list", "pods", "default", True),
    ("create", "pods/eviction", "default", True),
    ("delete", "pods", "default", False),        # evicts through the Eviction API (PDBs apply), never deletes
    ("watch", "leases", "kube-node-lease", True),
    ("update", "leases", "kube-node-lease", True),   # the autonomy hold
    ("create", "leases", "kube-node-lease", False),  # never invents a node's Lease
    ("delete", "leases", "kube-node-lease", False),
    ("update", "leases/edgewatch-controller", "edgewatch", True),
    ("update", "leases/other", "edgewatch", False),
    ("create", "events", "default", True),
    ("list", "secrets", "edgewatch", False),
    ("get", "configmaps/edgewatch-config", "edgewatch", True),   # coverLabel
    ("watch", "configmaps/edgewatch-config", "edgewatch", True),
    ("create", "configmaps", "edgewatch", True),             # the group rosters
    ("update", "configmaps/edgewatch-roster", "edgewatch", True),
    ("delete", "configmaps/edgewatch-roster", "edgewatch", True),
    ("patch", "configmaps/edgewatch-roster", "edgewatch", False),
    ("patch", "nodes/status", None, True),       # EdgeHealthy: the verdict it counted itself
    ("get", "secrets/edgewatch-beacon-key", "edgewatch", True),  # its beacon signing key
    ("get", "secrets/other", "edgewatch", False),
    ("create", "secrets", "edgewatch", True),    # the key, made once (create has no resourceNames)
    ("get", "leases/edgewatch-beacon", "edgewatch", True),      # its signed beacon
    ("update", "leases/edgewatch-beacon", "edgewatch", True),
    ("delete", "leases/edgewatch-beacon", "edgewatch", False),
    ("list", "configmaps", "edgewatch-nodes", True),            # the agents' keys and evidence: read only
    ("watch", "leases", "edgewatch-nodes", True),
    ("get", "leases", "edgewatch-nodes", True),
    ("create", "configmaps", "edgewatch-nodes", False),
    ("update", "leases", "edgewatch-nodes", False),
    ("delete", "configmaps", "edgewatch-nodes", False),
    # the pool coordinators' certificates (edgewatch.controller.coordinatorcsr) and Deployments
    ("create", "deployments.apps", "edgewatch", True),
    ("delete", "deployments.apps", "edgewatch", True),
    ("patch", "deployments.apps", "edgewatch", True),
    ("create", "deployments.apps", "default", False),
    ("watch", "pods", "edgewatch", True),
    ("watch", "pods", "default", False),
    ("patch", "configmaps/edgewatch-pool-coordinators", "edgewatch", True),
    ("update", "configmaps/edgewatch-pool-coordinators", "edgewatch", True),
    # who may read its /metrics (edgewatch.metricsauth) ...
    ("create", "tokenreviews.authentication.k8s.io", None, True),
    ("create", "subjectaccessreviews.authorization.k8s.io", None, True),
    ("list", "tokenreviews.authentication.k8s.io", None, False),
])
def test_controller_rbac_is_least_privilege(applied: str, control_plane: ControlPlane, verb: str, resource: str,
                                            namespace: str | None, allowed: bool) -> None:
    assert can_i(control_plane, CONTROLLER, verb, resource, namespace=namespace) is allowed


@pytest.mark.parametrize(("verb", "resource", "namespace", "allowed"), [
    # its serving and root client certificates (what is signed: controller.coordinatorcsr)
    ("create", "certificatesigningrequests.certificates.k8s.io", None, True),
    ("get", "certificatesigningrequests.certificates.k8s.io", None, True),
    ("list", "certificatesigningrequests.certificates.k8s.io", None, False),
    ("update", "certificatesigningrequests.certificates.k8s.io/approval", None, False),
    # its pool's members
    ("list", "nodes", None, True),
    ("watch", "nodes", None, True),
    ("patch", "nodes", None, False),
    ("patch", "nodes/status", None, False),
    # the pool CA certificates, read only; never the CA keys
    ("get", "configmaps/edgewatch-pool-ca-x", "edgewatch", True),
    ("watch", "configmaps", "edgewatch", True),
    ("update", "configmaps/edgewatch-pool-coordinators", "edgewatch", False),
    ("create", "configmaps", "edgewatch", False),
    ("get", "secrets/edgewatch-pool-cas", "edgewatch", False),
    ("list", "secrets", "edgewatch", False),
    ("list", "pods", "edgewatch", False),
    ("update", "leases", "kube-node-lease", False),
    ("create", "deployments.apps", "edgewatch", False),
    # who may read its /metrics (edgewatch.metricsauth)
    ("create", "tokenreviews.authentication.k8s.io", None, True),
    ("create", "subjectaccessreviews.authorization.k8s.io", None, True),
])
def test_coordinator_rbac_is_least_privilege(applied: str, control_plane: ControlPlane, verb: str, resource: str,
                                             namespace: str | None, allowed: bool) -> None:
    assert can_i(control_plane, COORDINATOR, verb, resource, namespace=namespace) is allowed


@pytest.mark.parametrize(("who", "allowed"), [
    ("system:serviceaccount:edgewatch:edgewatch-metrics-scraper", True),
    (AGENT, False), (CONTROLLER, False), (COORDINATOR, False),   # one node's credential reads no metrics
    ("system:serviceaccount:default:default", False),
])
def test_only_the_metrics_reader_may_get_metrics(applied: str, control_plane: ControlPlane, who: str,
                                                 allowed: bool) -> None:
    assert can_i(control_plane, who, "get", "/edgewatch/metrics") is allowed
    scraper = "system:serviceaccount:edgewatch:edgewatch-metrics-scraper"
    assert not can_i(control_plane, scraper, "get", "pods", namespace="edgewatch")
    assert not can_i(control_plane, scraper, "get", "/metrics")  # no other component's metrics


@pytest.mark.parametrize(("verb", "resource"), [("get", "configmaps/edgewatch-pool-coordinators"),
                                                ("watch", "configmaps/edgewatch-pool-coordinators")])
def test_agent_reads_where_the_pool_coordinators_run(applied: str, control_plane: ControlPlane, verb: str,
                                                     resource: str) -> None:
    assert can_i(control_plane, AGENT, verb, resource, namespace="edgewatch")


@pytest.mark.parametrize(("who", "verb", "signer", "allowed"), [
    (CONTROLLER, "sign", "edgewatch.io/coordinator-client", True),
    (CONTROLLER, "approve", "edgewatch.io/coordinator-client", True),
    (CONTROLLER, "sign", "edgewatch.io/coordinator-serving", True),
    (CONTROLLER, "approve", "edgewatch.io/coordinator-serving", True),
    (CONTROLLER, "sign", "edgewatch.io/other", False),
    (CONTROLLER, "sign", "kubernetes.io/kube-apiserver-client", False),
    (COORDINATOR, "sign", "edgewatch.io/coordinator-serving", False),
    (COORDINATOR, "approve", "edgewatch.io/coordinator-client", False),
    (AGENT, "sign", "edgewatch.io/coordinator-client", False),
    (AGENT, "approve", "edgewatch.io/coordinator-serving", False),
])
def test_only_the_controller_signs_for_edgewatch_signers(applied: str, control_plane: ControlPlane, who: str,
                                                         verb: str, signer: str, allowed: bool) -> None:
    assert can_sign(control_plane, who, verb, signer) is allowed

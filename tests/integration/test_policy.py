"""deploy/15-policy-agent.yaml on the real apiserver: an agent writes only what its own node needs.

Every agent request here is made with a REAL ServiceAccount token of edgewatch/edgewatch-agent:
pod-bound tokens (TokenRequest bound to a Pod on node n1 or n2, as the kubelet gets for a DaemonSet
pod: the apiserver puts the Pod's node into the token's user extra
``authentication.kubernetes.io/node-name``) and a plain, unbound one. No impersonation: the
policies match the authenticated user, and the node claim cannot be impersonated into a real token.

The Nodes carry a test-only NoSchedule taint (nothing else lands on them) and the Pods tolerate
everything (no kubelet here: the node lifecycle controller taints the nodes unreachable, and an
evicted Pod would invalidate its tokens).
"""

from __future__ import annotations

import datetime as dt
import json
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from lightkube.resources.core_v1 import Node

from edgewatch.kube.leases import RenewOutcome, clear_stale_mark, renew_on_behalf
from edgewatch.leasemark import mark_is_current
from edgewatch.names import DELEGATE_HEARTBEAT_ANNOTATION, EDGE_CONDITION_TYPE, ROLE_CONDITION_TYPE
from edgewatch.kube.client import api_client
from edgewatch_lab.testing.controlplane import ControlPlane

from _tokens import Token, pod_bound_token, wait_namespaces_settled, write_kubeconfig

pytestmark = pytest.mark.controlplane

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
NODES_NS = "edgewatch-nodes"
OWN = "edgewatch-agent-own-objects"
LEASES = "edgewatch-agent-node-leases"
STATUS = "edgewatch-agent-node-status"
CARRY = "edgewatch-agent-carry"
CARRY_MARK = "edgewatch-agent-carry-mark"
CARRY_CLOCK = "edgewatch-agent-carry-clock"
MARK_REMOVAL = "edgewatch-agent-mark-removal"
NODE_CLAIM = "authentication.kubernetes.io/node-name"


@dataclass(frozen=True)
class Identity(Token):
    """kubectl as one real token (a kubeconfig with the CA, the server and only that token)."""

    server: str
    ca_file: Path
    token: str

    def ok(self, *args: str, input_text: str | None = None) -> str:
        done = self.run(*args, input_text=input_text)
        assert done.returncode == 0, f"{self.label}: kubectl {' '.join(args)} failed: {done.stderr}"
        return done.stdout

    def denied(self, *args: str, policy: str, input_text: str | None = None) -> str:
        """Run a write that must be denied by ``policy`` (403, the policy named); return the message."""
        done = self.run(*args, input_text=input_text)
        assert done.returncode != 0, f"{self.label}: kubectl {' '.join(args)} was allowed: {done.stdout}"
        # "is forbidden: ..." is how a 403 Forbidden Status reads (reason: Forbidden in the policy)
        assert f"is forbidden: ValidatingAdmissionPolicy '{policy}' with binding '{policy}' denied request" \
            in done.stderr, done.stderr
        return done.stderr

    def patch_status(self, node: str, body: dict[str, Any], *, dry_run: bool = False) -> tuple[int, str]:
        """PATCH nodes/<node>/status (strategic merge) as the agent does: kubectl would GET the
        subresource first, which the agent may not. Returns (HTTP status, Status message or "")."""
        url = f"{self.server}/api/v1/nodes/{node}/status" + ("?dryRun=All" if dry_run else "")
        request = urllib.request.Request(url, data=json.dumps(body).encode(), method="PATCH", headers={
            "Authorization": f"Bearer {self.token}", "Content-Type": "application/strategic-merge-patch+json"})
        context = ssl.create_default_context(cafile=str(self.ca_file))
        try:
            with urllib.request.urlopen(request, timeout=30, context=context) as response:
                return response.status, ""
        except urllib.error.HTTPError as exc:
            return exc.code, str(json.loads(exc.read()).get("message", ""))

    def patch_lease(self, node: str, body: dict[str, Any], *, dry_run: bool = True) -> tuple[int, dict[str, Any]]:
        """PATCH kube-node-lease/<node> (JSON merge patch) over HTTP with this token, a server-side
        dry run by default. Returns (HTTP status, the response: the object as it would be stored, or
        the Status)."""
        url = f"{self.server}/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}" + (
            "?dryRun=All" if dry_run else "")
        request = urllib.request.Request(url, data=json.dumps(body).encode(), method="PATCH", headers={
            "Authorization": f"Bearer {self.token}", "Content-Type": "application/merge-patch+json"})
        context = ssl.create_default_context(cafile=str(self.ca_file))
        try:
            with urllib.request.urlopen(request, timeout=30, context=context) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def whoami(self) -> dict[str, Any]:
        return json.loads(self.ok("auth", "whoami", "-o", "json"))["status"]["userInfo"]  # type: ignore[no-any-return]


@dataclass(frozen=True)
class World:
    admin: ControlPlane
    n1: Identity            # agent, token bound to Pod agent-n1 on node n1
    n2: Identity            # agent, token bound to Pod agent-n2 on node n2
    unbound: Identity       # agent, plain token (no Pod, no node)
    controller: Identity    # controller, plain token


def _token_identity(cp: ControlPlane, folder: Path, label: str, token: str) -> Identity:
    assert cp.ca_file is not None and cp.binaries is not None
    path = write_kubeconfig(cp, folder, label, token)
    return Identity(label=label, kubeconfig=path, kubectl_bin=cp.binaries.kubectl, server=cp.apiserver_url,
                    ca_file=cp.ca_file, token=token)


def _apply(cp: ControlPlane, obj: dict[str, Any]) -> None:
    cp.kubectl("apply", "-f", "-", input_text=json.dumps(obj))


def _micro(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _dry(*args: str) -> tuple[str, ...]:
    return (*args, "--dry-run=server")


def _wait_enforced(w: World, timeout_s: float = 60) -> None:
    """Policies, bindings and RBAC reach the admission plugin and authorizer through informers:
    wait until each policy denies a probe (server-side dry runs: nothing is written)."""
    probes = [
        (w.unbound, OWN, ("create", "configmap", "probe", "-n", NODES_NS)),
        (w.n1, LEASES, ("patch", "lease", "n2", "-n", "kube-node-lease", "--type=merge",
                        "-p", '{"spec":{"holderIdentity":"n1"}}')),
    ]
    deadline = time.monotonic() + timeout_s
    for who, policy, args in probes:
        while True:
            done = who.run(*_dry(*args))
            if f"ValidatingAdmissionPolicy '{policy}'" in done.stderr:
                break
            assert time.monotonic() < deadline, f"{policy} not enforced after {timeout_s} s: {done.stdout}{done.stderr}"
            time.sleep(0.5)
    while True:
        code, message = w.n1.patch_status("n2", {"metadata": {"labels": {"probe": "x"}}}, dry_run=True)
        if f"ValidatingAdmissionPolicy '{STATUS}'" in message:
            break
        assert time.monotonic() < deadline, f"{STATUS} not enforced after {timeout_s} s: {code} {message}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def policy_control_plane(binaries) -> Iterator[ControlPlane]:  # type: ignore[no-untyped-def]
    """A control plane of this module's own. The carry policies take their parameters from a
    ConfigMap and a Lease, and kube-apiserver (1.36) stops following a built-in paramKind for good
    once no binding names it (kubernetes#130887): the session control plane has seen the install
    deleted by test_deploy.py, so it would refuse every carry for the rest of its life."""
    with ControlPlane(binaries=binaries) as cp:
        yield cp


@pytest.fixture(scope="module")
def world(policy_control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    cp = policy_control_plane
    folder = tmp_path_factory.mktemp("tokens")
    wait_namespaces_settled(cp, ("edgewatch", NODES_NS))  # test_deploy.py deletes the install without waiting
    cp.kubectl("apply", "-k", str(DEPLOY))
    tokens: dict[str, str] = {}
    for node in ("n1", "n2"):
        _apply(cp, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node},
                    "spec": {"taints": [{"key": "edgewatch.io/policy-test", "effect": "NoSchedule"}]}})
        tokens[node] = pod_bound_token(cp, pod=f"agent-{node}", account="edgewatch-agent", node=node,
                                       container="agent")
    # n2 as its kubelet would have left it: status, and its Lease in kube-node-lease
    n2_status = {"status": {
        "addresses": [{"type": "InternalIP", "address": "10.9.0.2"}, {"type": "Hostname", "address": "n2"}],
        "capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"},
        "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is ready",
                        "lastHeartbeatTime": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}
    cp.kubectl("patch", "node", "n2", "--subresource=status", "--type=merge", "-p", json.dumps(n2_status))
    w = World(admin=cp,
              n1=_token_identity(cp, folder, "agent-n1", tokens["n1"]),
              n2=_token_identity(cp, folder, "agent-n2", tokens["n2"]),
              unbound=_token_identity(cp, folder, "agent-unbound", cp.kubectl(
                  "create", "token", "edgewatch-agent", "-n", "edgewatch").strip()),
              controller=_token_identity(cp, folder, "controller", cp.kubectl(
                  "create", "token", "edgewatch-controller", "-n", "edgewatch").strip()))
    _reset_node_lease(cp)
    # the carry policies' parameters: the group index the controller publishes (without it no node
    # is carried) and kube-controller-manager's leader Lease (the clock)
    _group_index(cp, {"n1": "edgewatch-roster", "n2": "edgewatch-roster"})
    _control_plane_clock(cp)
    _wait_enforced(w)
    yield w
    cp.kubectl("delete", "pod", "agent-n1", "agent-n2", "-n", "edgewatch", "--force", "--grace-period=0",
               "--ignore-not-found")
    cp.kubectl("delete", "lease", "n2", "-n", "kube-node-lease", "--ignore-not-found")
    cp.kubectl("delete", "node", "n1", "n2", "--ignore-not-found")
    cp.kubectl("delete", "-k", str(DEPLOY), "--ignore-not-found", "--wait=true", timeout_s=180)


def _reset_node_lease(cp: ControlPlane) -> dict[str, Any]:
    """n2's node Lease as its kubelet keeps it, plus a label and an annotation other tools own."""
    cp.kubectl("delete", "lease", "n2", "-n", "kube-node-lease", "--ignore-not-found")
    node_uid = cp.kubectl("get", "node", "n2", "-o", "jsonpath={.metadata.uid}")
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": "n2", "namespace": "kube-node-lease",
                          "labels": {"example.com/rack": "r1"},
                          "annotations": {"example.com/owner": "ops"},
                          "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n2", "uid": node_uid}]},
             "spec": {"holderIdentity": "n2", "leaseDurationSeconds": 40,
                      "renewTime": _micro(dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=30))}}
    cp.kubectl("create", "-f", "-", input_text=json.dumps(lease))
    written: dict[str, Any] = json.loads(cp.kubectl("get", "lease", "n2", "-n", "kube-node-lease", "-o", "json"))
    return written


def _group_index(cp: ControlPlane, data: dict[str, str]) -> None:
    """The controller's group index (edgewatch-groups: node -> roster), the carry policy's parameter."""
    cp.kubectl("apply", "-f", "-", input_text=json.dumps({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "edgewatch-groups", "namespace": "edgewatch"},
        "data": data}))


def _control_plane_clock(cp: ControlPlane, timeout_s: float = 30) -> dt.datetime:
    """The renewTime of kube-controller-manager's leader Lease (the carry-clock policy's reference),
    read as the apiserver serves it; waits for the leader's first renewal."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            lease = json.loads(cp.kubectl("get", "lease", "kube-controller-manager", "-n", "kube-system", "-o", "json"))
            text = lease["spec"].get("renewTime")
        except subprocess.CalledProcessError:
            text = None
        if text:  # parsed by hand, not with the code under test
            return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc)
        assert time.monotonic() < deadline, "kube-controller-manager never renewed its leader Lease"
        time.sleep(0.5)


@pytest.fixture
def node_lease(world: World) -> dict[str, Any]:
    """A fresh n2 Lease in kube-node-lease for each test, n1 and n2 in one group, the control
    plane's clock running."""
    _group_index(world.admin, {"n1": "edgewatch-roster", "n2": "edgewatch-roster"})
    _control_plane_clock(world.admin)
    return _reset_node_lease(world.admin)


def _mark(by: str, renew: str, via: str = "peer") -> dict[str, str]:
    return {DELEGATE_HEARTBEAT_ANNOTATION: "true", "edgewatch.io/delegated-by": by,
            "edgewatch.io/delegated-renew-time": renew, "edgewatch.io/delegated-via": via}


# -- the token itself ------------------------------------------------------------------------------


def test_policies_type_check_cleanly(world: World) -> None:
    for name in (OWN, LEASES, CARRY_MARK, CARRY, CARRY_CLOCK, STATUS):
        policy = json.loads(world.admin.kubectl("get", "validatingadmissionpolicy", name, "-o", "json"))
        assert policy["status"]["observedGeneration"] == policy["metadata"]["generation"]
        assert not policy["status"].get("typeChecking", {}).get("expressionWarnings"), policy["status"]


def test_pod_bound_token_names_its_node_and_plain_token_none(world: World) -> None:
    n1 = world.n1.whoami()
    assert n1["username"] == "system:serviceaccount:edgewatch:edgewatch-agent"
    assert n1["extra"][NODE_CLAIM] == ["n1"]
    assert n1["extra"]["authentication.kubernetes.io/pod-name"] == ["agent-n1"]
    assert world.n2.whoami()["extra"][NODE_CLAIM] == ["n2"]
    unbound = world.unbound.whoami()
    assert unbound["username"] == "system:serviceaccount:edgewatch:edgewatch-agent"
    assert NODE_CLAIM not in unbound.get("extra", {})


# -- 1. edgewatch-nodes: only the objects named after the token's node -------------------------------


def _configmap(name: str, keys: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NODES_NS},
                       "data": {"keys": keys}})


def _evidence_lease(name: str, evidence: str) -> str:
    return json.dumps({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                       "metadata": {"name": name, "namespace": NODES_NS,
                                    "annotations": {"edgewatch.io/evidence": evidence}},
                       "spec": {"holderIdentity": name}})


def test_agent_writes_its_own_node_objects(world: World) -> None:
    world.admin.kubectl("delete", "configmap,lease", "n1", "-n", NODES_NS, "--ignore-not-found")
    a = world.n1
    a.ok("create", "-f", "-", input_text=_configmap("n1", "00ff k1"))
    a.ok("replace", "-f", "-", input_text=_configmap("n1", "00ff k1\n11ee k0"))             # UPDATE
    a.ok("patch", "configmap", "n1", "-n", NODES_NS, "--type=merge", "-p", '{"data":{"keys":"22dd k2"}}')
    a.ok("create", "-f", "-", input_text=_evidence_lease("n1", "report-1"))
    a.ok("patch", "lease", "n1", "-n", NODES_NS, "--type=merge",
         "-p", '{"metadata":{"annotations":{"edgewatch.io/evidence":"report-2"}}}')
    assert world.admin.kubectl("get", "configmap", "n1", "-n", NODES_NS, "-o", "jsonpath={.data.keys}") == "22dd k2"
    assert world.admin.kubectl("get", "lease", "n1", "-n", NODES_NS,
                               "-o", "jsonpath={.metadata.annotations.edgewatch\\.io/evidence}") == "report-2"
    # every agent reads every node's keys (RBAC), and the controller reads keys and evidence
    assert "n1" in world.n2.ok("get", "configmap", "-n", NODES_NS, "-o", "name")
    assert world.controller.ok("get", "lease", "n1", "-n", NODES_NS, "-o", "name").strip() == \
        "lease.coordination.k8s.io/n1"


def test_agent_cannot_write_another_nodes_objects(world: World) -> None:
    a = world.n1
    msg = a.denied("create", "-f", "-", input_text=_configmap("n2", "00ff forged"), policy=OWN)
    assert "agent of node n1 may write in edgewatch-nodes only the objects named n1, not n2" in msg
    a.denied("create", "-f", "-", input_text=_evidence_lease("n2", "forged"), policy=OWN)
    # the real n2 agent publishes its own; n1 can neither replace nor patch them
    world.n2.ok("apply", "-f", "-", input_text=_configmap("n2", "33cc k-n2"))
    world.n2.ok("apply", "-f", "-", input_text=_evidence_lease("n2", "n2-report"))
    a.denied("replace", "-f", "-", input_text=_configmap("n2", "00ff forged"), policy=OWN)
    a.denied("patch", "configmap", "n2", "-n", NODES_NS, "--type=merge", "-p", '{"data":{"keys":"00ff forged"}}',
             policy=OWN)
    a.denied("patch", "lease", "n2", "-n", NODES_NS, "--type=merge",
             "-p", '{"metadata":{"annotations":{"edgewatch.io/evidence":"forged"}}}', policy=OWN)
    assert world.admin.kubectl("get", "configmap", "n2", "-n", NODES_NS, "-o", "jsonpath={.data.keys}") == "33cc k-n2"
    # an object named after no node at all is not the agent's either
    a.denied("create", "configmap", "shared", "-n", NODES_NS, policy=OWN)


def test_token_without_node_claim_writes_nothing_in_edgewatch_nodes(world: World) -> None:
    world.n1.ok("apply", "-f", "-", input_text=_configmap("n1", "00ff k1"))
    u = world.unbound
    for name in ("n1", "n2", "unbound"):
        msg = u.denied("create", "-f", "-", input_text=_evidence_lease(name, "r"), policy=OWN)
        assert "this token names no node" in msg
    u.denied("replace", "-f", "-", input_text=_configmap("n1", "00ff forged"), policy=OWN)
    u.denied("patch", "configmap", "n1", "-n", NODES_NS, "--type=merge", "-p", '{"data":{"keys":"x"}}', policy=OWN)
    # reading is RBAC's business and allowed: the denial above is the policy's, not a missing grant
    assert u.ok("get", "configmap", "n1", "-n", NODES_NS, "-o", "jsonpath={.data.keys}") == "00ff k1"


# -- 2. kube-node-lease: renewTime and edgewatch.io/ annotations only ---------------------------------


def _lease_patch(who: Identity, body: dict[str, Any], **kw: Any) -> Any:
    args = ("patch", "lease", "n2", "-n", "kube-node-lease", "--type=merge", "-p", json.dumps(body))
    return who.denied(*args, **kw) if kw else who.ok(*args)


def test_agent_carries_a_peers_heartbeat(world: World, node_lease: dict[str, Any]) -> None:
    renew = _micro(dt.datetime.now(dt.timezone.utc))
    _lease_patch(world.n1, {"spec": {"renewTime": renew}, "metadata": {"annotations": _mark("n1", renew)}})
    # GET then UPDATE of the whole object, as the carrier does
    lease = json.loads(world.n1.ok("get", "lease", "n2", "-n", "kube-node-lease", "-o", "json"))
    lease["spec"]["renewTime"] = renew = _micro(dt.datetime.now(dt.timezone.utc))
    lease["metadata"]["annotations"].update(_mark("n1", renew, via="coordinator"))
    world.n1.ok("replace", "-f", "-", input_text=json.dumps(lease))
    # a current mark is never removed or changed without a renewal (the carried renewal would look
    # like the node's own), by anyone's agent
    for who in (world.n2, world.n1):
        msg = _lease_patch(who, {"metadata": {"annotations": {k: None for k in _mark("n1", renew)}}},
                           policy=MARK_REMOVAL)
        assert "the mark names the current renewal" in msg
    # once the kubelet renewed by itself the mark is stale: the node's own agent removes it, whole
    kubelet_renew = _micro(dt.datetime.now(dt.timezone.utc))
    world.admin.kubectl("patch", "lease", "n2", "-n", "kube-node-lease", "--type=merge",
                        "-p", json.dumps({"spec": {"renewTime": kubelet_renew}}))
    msg = _lease_patch(world.n2, {"metadata": {"annotations": {DELEGATE_HEARTBEAT_ANNOTATION: None}}},
                       policy=MARK_REMOVAL)
    assert "only the whole mark may be removed" in msg
    _lease_patch(world.n2, {"metadata": {"annotations": {k: None for k in _mark("n1", renew)}}})
    after = json.loads(world.admin.kubectl("get", "lease", "n2", "-n", "kube-node-lease", "-o", "json"))
    assert after["spec"]["renewTime"] == kubelet_renew
    assert after["spec"]["holderIdentity"] == "n2"
    assert after["metadata"]["annotations"]["example.com/owner"] == "ops"
    assert not any(k.startswith("edgewatch.io/delegat") for k in after["metadata"]["annotations"])


@pytest.mark.parametrize(("body", "field"), [
    ({"spec": {"holderIdentity": "n1"}}, "spec.holderIdentity"),
    ({"spec": {"leaseDurationSeconds": 86400}}, "spec.leaseDurationSeconds"),
    ({"spec": {"acquireTime": "2026-01-01T00:00:00.000000Z"}}, "spec.acquireTime"),     # absent before
    ({"spec": {"leaseTransitions": 7}}, "spec.leaseTransitions"),
    ({"spec": {"holderIdentity": None}}, "spec.holderIdentity"),                         # removed
    ({"metadata": {"annotations": {"example.com/owner": "mallory"}}}, "metadata.annotations[example.com/owner]"),
    ({"metadata": {"annotations": {"example.com/owner": None}}}, "metadata.annotations[example.com/owner]"),
    ({"metadata": {"annotations": {"example.com/new": "x"}}}, "metadata.annotations[example.com/new]"),
    ({"metadata": {"labels": {"example.com/rack": "r9"}}}, "metadata.labels"),
    ({"metadata": {"finalizers": ["example.com/keep"]}}, "metadata.finalizers"),
    ({"metadata": {"ownerReferences": None}}, "metadata.ownerReferences"),
    # an allowed change does not carry a forbidden one along
    ({"spec": {"holderIdentity": "n1"}, "metadata": {"annotations": {"edgewatch.io/note": "x"}}},
     "spec.holderIdentity"),
])
def test_agent_cannot_change_anything_else_of_a_node_lease(world: World, node_lease: dict[str, Any],
                                                          body: dict[str, Any], field: str) -> None:
    msg = _lease_patch(world.n1, body, policy=LEASES)
    assert f"this request changes {field}" in msg
    after = json.loads(world.admin.kubectl("get", "lease", "n2", "-n", "kube-node-lease", "-o", "json"))
    assert after["metadata"]["resourceVersion"] == node_lease["metadata"]["resourceVersion"]  # nothing written


def test_agent_cannot_change_its_own_node_lease_either(world: World, node_lease: dict[str, Any]) -> None:
    msg = _lease_patch(world.n2, {"spec": {"leaseDurationSeconds": 86400}}, policy=LEASES)
    assert "spec.leaseDurationSeconds" in msg


# -- 2b/2c. a renewal is a carry, marked by its carrier, of its own group, not in the future ----------


def _renewal(who: Identity, renew: dt.datetime, annotations: dict[str, str | None] | None, *,
             node: str = "n2", policy: str | None = None) -> str:
    body: dict[str, Any] = {"spec": {"renewTime": _micro(renew)}}
    if annotations is not None:
        body["metadata"] = {"annotations": annotations}
    args = ("patch", "lease", node, "-n", "kube-node-lease", "--type=merge", "-p", json.dumps(body))
    return who.denied(*args, policy=policy) if policy else who.ok(*args)


def test_a_bare_renewal_is_refused(world: World, node_lease: dict[str, Any]) -> None:
    """The Lease-renewal attack (docs/security.md): a-1's token renews a dead a-5's Lease every 10 s with no mark, and
    kube-controller-manager keeps a-5 Ready forever. Refused; nothing is written."""
    msg = _renewal(world.n1, dt.datetime.now(dt.timezone.utc), None, policy=CARRY_MARK)
    assert "a renewal needs the delegate mark naming the carrier" in msg
    after = json.loads(world.admin.kubectl("get", "lease", "n2", "-n", "kube-node-lease", "-o", "json"))
    assert after["metadata"]["resourceVersion"] == node_lease["metadata"]["resourceVersion"]


@pytest.mark.parametrize(("label", "mark", "says"), [
    ("a mark naming another carrier", {"by": "n3"}, "delegated-by n1"),
    ("a mark naming no renewal", {"renew": "later"}, "delegated-renew-time must equal the new spec.renewTime"),
    ("a mark naming another renewal", {"renew": "2026-01-01T00:00:00.000000Z"}, "must equal the new spec.renewTime"),
    ("the controller's own kind of hold", {"via": "autonomy"}, "delegated-via peer or coordinator"),
])
def test_a_renewal_whose_mark_does_not_name_it_and_its_carrier_is_refused(
        world: World, node_lease: dict[str, Any], label: str, mark: dict[str, str], says: str) -> None:
    renew = dt.datetime.now(dt.timezone.utc)
    text = _micro(renew)
    annotations = _mark(mark.get("by", "n1"), text if mark.get("renew") is None else mark["renew"], mark.get("via", "peer"))
    assert says in _renewal(world.n1, renew, annotations, policy=CARRY_MARK), label


def _spellings(at: dt.datetime) -> list[str]:
    """Spellings of the whole-second instant ``at`` that RFC 3339 parsers accept, written by hand
    (never with edgewatch's formatter): fraction lengths 0-9, T/t, Z/z/+00:00/-00:00, +02:00."""
    day, clock = at.strftime("%Y-%m-%d"), at.strftime("%H:%M:%S")
    shifted = (at + dt.timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%S")
    out = []
    for frac in ["", *("." + "0" * n for n in range(1, 10))]:
        for sep in ("T", "t"):
            out += [f"{day}{sep}{clock}{frac}{zone}" for zone in ("Z", "z", "+00:00", "-00:00")]
        out.append(f"{shifted}{frac}+02:00")
    return out


def test_one_meaning_of_the_mark_for_the_apiserver_and_the_controller(world: World,
                                                                      node_lease: dict[str, Any]) -> None:
    """Property over every spelling of one instant, through the real policies (server-side dry runs
    with n1's real token) and the controller's own reading of what the apiserver would store: a
    renewal the apiserver admits as a carry is a carry to the controller, and the only mark spelling
    admitted is the MicroTime one. Before: the mark ``…:05Z`` on renewTime ``…:05.000000Z`` was
    admitted (the same instant to CEL) and read as the node's own renewal (texts differ)."""
    at = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=2)).replace(microsecond=0)
    canonical = at.strftime("%Y-%m-%dT%H:%M:%S") + ".000000Z"
    admitted, refused = [], []
    for renew in _spellings(at)[::45] + [canonical]:
        for text in _spellings(at):
            code, answer = world.n1.patch_lease("n2", {"spec": {"renewTime": renew},
                                                       "metadata": {"annotations": _mark("n1", text)}})
            if code == 200:
                stored = answer["spec"]["renewTime"]
                carried = mark_is_current(annotations=answer["metadata"]["annotations"], renew_time=stored)
                assert carried, f"admitted but not a carry to the controller: renewTime {renew!r}, mark {text!r}"
                admitted.append((renew, text))
            else:
                assert code in (400, 403, 422), (code, answer)
                if code == 403:
                    assert CARRY_MARK in answer["message"], answer["message"]
                refused.append((renew, text))
    assert admitted and {text for _, text in admitted} == {canonical}, admitted
    assert any(text == at.strftime("%Y-%m-%dT%H:%M:%SZ") for _, text in refused)  # the measured attack


def test_a_renewal_never_goes_backwards(world: World, node_lease: dict[str, Any]) -> None:
    """A stream of carries alternating between two past renewTimes counted as no renewal for
    kube-controller-manager (it counts growth only) and starved the kubelet's own updates with
    conflicts: a live node went NotReady. Every carry must now be later than the current renewTime."""
    current = dt.datetime.strptime(node_lease["spec"]["renewTime"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=dt.timezone.utc)
    for back in (dt.timedelta(seconds=60), dt.timedelta(microseconds=1)):
        renew = current - back
        code, answer = world.n1.patch_lease("n2", {"spec": {"renewTime": _micro(renew)},
                                                   "metadata": {"annotations": _mark("n1", _micro(renew))}})
        assert code == 403 and CARRY_MARK in answer["message"], (back, code, answer)
        assert "later than the current one" in answer["message"], answer
    later = current + dt.timedelta(microseconds=1)
    code, answer = world.n1.patch_lease("n2", {"spec": {"renewTime": _micro(later)},
                                               "metadata": {"annotations": _mark("n1", _micro(later))}})
    assert code == 200, answer


def test_no_agent_renews_its_own_nodes_lease(world: World, node_lease: dict[str, Any]) -> None:
    renew = dt.datetime.now(dt.timezone.utc)
    msg = _renewal(world.n2, renew, _mark("n2", _micro(renew)), policy=CARRY_MARK)
    assert "a node's own Lease is renewed by its kubelet" in msg


def test_only_a_covered_node_of_the_carriers_own_group_is_carried(world: World, node_lease: dict[str, Any]) -> None:
    renew = dt.datetime.now(dt.timezone.utc)
    _group_index(world.admin, {"n1": "edgewatch-roster-a-1", "n2": "edgewatch-roster-b-2"})
    assert "node n1 is not in the group of n2" in _renewal(world.n1, renew, _mark("n1", _micro(renew)), policy=CARRY)
    _group_index(world.admin, {"n1": "edgewatch-roster"})   # n2 uncovered (or in a group of one)
    assert "node n2 is not in a group edgewatch covers" in _renewal(world.n1, renew, _mark("n1", _micro(renew)),
                                                                    policy=CARRY)
    _group_index(world.admin, {})  # as shipped: no controller has published yet
    assert "node n2 is not in a group edgewatch covers" in _renewal(world.n1, renew, _mark("n1", _micro(renew)),
                                                                    policy=CARRY)


def _eventually_allowed(who: Identity, *args: str, timeout_s: float = 30) -> None:
    """Retry a server-side dry run of ``args`` until it is allowed (admission sees parameter changes
    through an informer)."""
    deadline = time.monotonic() + timeout_s
    while True:
        done = who.run(*_dry(*args))
        if done.returncode == 0:
            return
        assert time.monotonic() < deadline, f"{who.label}: still refused after {timeout_s} s: {done.stderr}"
        time.sleep(0.5)


def test_a_missing_parameter_never_blocks_a_kubelet(world: World, node_lease: dict[str, Any]) -> None:
    """kube-apiserver resolves a binding's parameter before it evaluates matchConditions: with
    ``parameterNotFoundAction: Deny`` a missing group index refused every Lease update in
    kube-node-lease, every kubelet's own renewal included ("failed to configure binding: no params
    found"; seen in the lab before the controller's first publication, nodes went NotReady). Now the
    group bound is off while its parameter is missing; the kubelet renews, and an agent still needs
    its mark. (The clock's parameter, kube-controller-manager's leader Lease, is recreated by its
    leader within 2 s of a deletion, so it cannot be held missing here; its binding allows the same.)"""
    cp = world.admin
    renew = dt.datetime.now(dt.timezone.utc)
    marked = ("patch", "lease", "n2", "-n", "kube-node-lease", "--type=merge", "-p", json.dumps(
        {"spec": {"renewTime": _micro(renew)}, "metadata": {"annotations": _mark("n1", _micro(renew))}}))
    cp.kubectl("delete", "configmap", "edgewatch-groups", "-n", "edgewatch")
    try:
        _eventually_allowed(world.n1, *marked)  # admission has seen the parameter gone
        kubelet = cp.kubectl("--as=system:node:n2", "--as-group=system:nodes", "--as-group=system:authenticated",
                             "patch", "lease", "n2", "-n", "kube-node-lease", "--type=merge", "-p",
                             json.dumps({"spec": {"renewTime": _micro(dt.datetime.now(dt.timezone.utc))}}))
        assert "patched" in kubelet, kubelet
        msg = _renewal(world.n1, dt.datetime.now(dt.timezone.utc), None, policy=CARRY_MARK)
        assert "a renewal needs the delegate mark naming the carrier" in msg
    finally:
        _group_index(cp, {"n1": "edgewatch-roster", "n2": "edgewatch-roster"})


def _allowed(who: Identity, renew: dt.datetime) -> bool:
    code, answer = who.patch_lease("n2", {"spec": {"renewTime": _micro(renew)},
                                          "metadata": {"annotations": _mark("n1", _micro(renew))}})
    assert code in (200, 403), (code, answer)
    return code == 200


def test_a_renewal_in_the_future_is_refused(world: World, node_lease: dict[str, Any]) -> None:
    """The far-future renewTime: kube-controller-manager counts a renewal only when renewTime grows,
    so one in 2030 would hide every real renewal until then. At most 5 s past the control plane's
    clock (kube-controller-manager's leader Lease), whatever the carrier's own clock says. The
    apiserver's reading may be one renewal (2 s) newer than the test's: the refused carries are
    further past it than that."""
    control_plane = _control_plane_clock(world.admin)
    for ahead_s in (12, 60, 86400 * 365 * 4):
        renew = control_plane + dt.timedelta(seconds=ahead_s)
        msg = _renewal(world.n1, renew, _mark("n1", _micro(renew)), policy=CARRY_CLOCK)
        assert "more than 5s past the control plane's clock (kube-system/kube-controller-manager)" in msg, msg
    renew = control_plane + dt.timedelta(seconds=3)  # a carrier's estimate a little ahead: allowed
    _renewal(world.n1, renew, _mark("n1", _micro(renew)))


def test_carries_end_when_no_controller_has_moved_the_deadline(world: World, node_lease: dict[str, Any]) -> None:
    """The group index's edgewatch.io/carry-until (moved 5 minutes ahead every 30 s by the leading
    controller) bounds every carried renewTime: once no controller has moved it for its window, a
    liar can no longer keep a dead peer Ready. Absent (a controller older than the policy): no
    deadline. Malformed: refused (only the controller writes it)."""
    cp = world.admin
    index = {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "edgewatch-groups", "namespace": "edgewatch", "annotations": {}},
             "data": {"n1": "edgewatch-roster", "n2": "edgewatch-roster"}}
    try:
        clock = _control_plane_clock(cp)
        index["metadata"]["annotations"] = {"edgewatch.io/carry-until": _micro(clock - dt.timedelta(seconds=30))}
        _apply(cp, index)
        time.sleep(1)  # the apiserver's informers have it
        renew = _control_plane_clock(cp) + dt.timedelta(seconds=1)
        msg = _renewal(world.n1, renew, _mark("n1", _micro(renew)), policy=CARRY)
        assert "past edgewatch.io/carry-until" in msg, msg
        for bad in ("soon", "2026-11-28T10:05:00Z"):  # not a MicroTime: refused, never no deadline
            index["metadata"]["annotations"] = {"edgewatch.io/carry-until": bad}
            _apply(cp, index)
            time.sleep(1)
            renew = _control_plane_clock(cp) + dt.timedelta(seconds=1)
            _renewal(world.n1, renew, _mark("n1", _micro(renew)), policy=CARRY)
        index["metadata"]["annotations"] = {"edgewatch.io/carry-until": _micro(clock + dt.timedelta(minutes=5))}
        _apply(cp, index)
        time.sleep(1)
        renew = _control_plane_clock(cp) + dt.timedelta(seconds=1)
        assert _allowed(world.n1, renew)
    finally:
        index["metadata"]["annotations"] = {}
        _apply(cp, index)
        time.sleep(1)


def test_no_edgewatch_controller_is_needed_and_no_beacon_widens_the_bound(world: World,
                                                                         node_lease: dict[str, Any]) -> None:
    """The bound is the control plane's own clock, not the edgewatch controller's: with the beacon
    Lease gone (no controller replica has written one) an honest carry is admitted, and a beacon
    showing a clock an hour ahead with a 30 s bound (a controller bug, or an attacker who could
    write it) widens nothing."""
    cp = world.admin
    try:
        cp.kubectl("delete", "lease", "edgewatch-beacon", "-n", "edgewatch")
        renew = _control_plane_clock(cp) + dt.timedelta(seconds=2)
        assert _allowed(world.n1, renew)
        later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
        _apply(cp, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": "edgewatch-beacon", "namespace": "edgewatch",
                                 "annotations": {"edgewatch.io/carry-ahead": "30s"}},
                    "spec": {"holderIdentity": "ctl", "renewTime": _micro(later)}})
        time.sleep(1)  # the apiserver's informers have it
        renew = _control_plane_clock(cp) + dt.timedelta(seconds=20)
        msg = _renewal(world.n1, renew, _mark("n1", _micro(renew)), policy=CARRY_CLOCK)
        assert "more than 5s past the control plane's clock" in msg, msg
    finally:
        _apply(cp, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": "edgewatch-beacon", "namespace": "edgewatch", "annotations": {}},
                    "spec": {}})


# -- 3. nodes/status: its own pool role only (verdicts are the controller's) ---------------------------


def _condition(kind: str, status: str) -> dict[str, Any]:
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"type": kind, "status": status, "reason": "Test", "message": "policy test",
            "lastHeartbeatTime": now, "lastTransitionTime": now}


def _status_patch(who: Identity, node: str, body: dict[str, Any], *, policy: str | None = None) -> str:
    code, message = who.patch_status(node, body)
    if policy is None:
        assert code == 200, f"{who.label}: status patch of {node} {body} refused: {code} {message}"
    else:
        assert code == 403, f"{who.label}: status patch of {node} {body} gave {code} {message}"
        assert f"ValidatingAdmissionPolicy '{policy}' with binding '{policy}' denied request" in message, message
    return message


def _conditions(world: World, node: str) -> dict[str, str]:
    node_obj = json.loads(world.admin.kubectl("get", "node", node, "-o", "json"))
    return {c["type"]: c["status"] for c in node_obj["status"].get("conditions", [])}


def test_agent_writes_its_own_pool_role_and_no_verdict(world: World) -> None:
    """A compromised agent cannot write a verdict on any node, its own included: EdgeHealthy is the
    controller's (counted from signed statements)."""
    _status_patch(world.n1, "n1", {"status": {"conditions": [_condition(ROLE_CONDITION_TYPE, "True")]}})
    assert _conditions(world, "n1")[ROLE_CONDITION_TYPE] == "True"
    for node in ("n1", "n2"):
        before = _conditions(world, node).get(EDGE_CONDITION_TYPE)
        msg = _status_patch(world.n1, node, {"status": {"conditions": [_condition(EDGE_CONDITION_TYPE, "False")]}},
                            policy=STATUS)
        assert "this request changes status.conditions" in msg
        assert _conditions(world, node).get(EDGE_CONDITION_TYPE) == before


@pytest.mark.parametrize(("body", "field"), [
    ({"status": {"conditions": [_condition("Ready", "False")]}}, "status.conditions"),
    ({"status": {"conditions": [_condition("MemoryPressure", "True")]}}, "status.conditions"),
    ({"status": {"conditions": [_condition(ROLE_CONDITION_TYPE, "True")]}}, "status.conditions"),
    ({"status": {"conditions": [_condition(EDGE_CONDITION_TYPE, "True"), _condition("Ready", "Unknown")]}},
     "status.conditions"),
    ({"status": {"addresses": [{"type": "InternalIP", "address": "10.9.9.9"}]}}, "status.addresses"),
    ({"status": {"capacity": {"cpu": "64"}}}, "status.capacity"),
    ({"status": {"allocatable": {"pods": "0"}}}, "status.allocatable"),
    ({"status": {"daemonEndpoints": {"kubeletEndpoint": {"Port": 1}}}}, "status.daemonEndpoints"),
    ({"status": {"nodeInfo": {"kubeletVersion": "v0.0.0"}}}, "status.nodeInfo"),
    # nodes/status writes the Node's labels and annotations too (its spec it cannot)
    ({"metadata": {"labels": {"edgewatch.io/pool": "stolen"}}}, "metadata.labels"),
    ({"metadata": {"annotations": {"edgewatch.io/state": "forged"}}}, "metadata.annotations"),
])
def test_agent_cannot_change_anything_else_of_a_node_status(world: World, body: dict[str, Any], field: str) -> None:
    before = json.loads(world.admin.kubectl("get", "node", "n2", "-o", "json"))
    msg = _status_patch(world.n1, "n2", body, policy=STATUS)
    assert f"this request changes {field}" in msg
    after = json.loads(world.admin.kubectl("get", "node", "n2", "-o", "json"))
    assert after["status"].get("addresses") == before["status"].get("addresses")
    assert after["metadata"].get("labels") == before["metadata"].get("labels")
    assert _conditions(world, "n2").get("Ready") != "False"


# -- the agent's own code paths, with its real token ---------------------------------------------------


async def test_agent_code_paths_pass_the_policies(world: World, node_lease: dict[str, Any]) -> None:
    """renew_on_behalf (carrier), clear_stale_mark (own agent) and the role condition on its own node."""
    n1 = api_client(str(world.n1.kubeconfig), timeout_s=10)
    n2 = api_client(str(world.n2.kubeconfig), timeout_s=10)
    try:
        done = await renew_on_behalf(client=n1, node="n2", delegate="n1", via="peer",
                                     alive_at=dt.datetime.now(dt.timezone.utc))
        assert done.outcome is RenewOutcome.RENEWED, done
        # n2's kubelet renews by itself (admin here), then n2's agent clears the stale mark
        world.admin.kubectl("patch", "lease", "n2", "-n", "kube-node-lease", "--type=merge",
                            "-p", json.dumps({"spec": {"renewTime": _micro(dt.datetime.now(dt.timezone.utc))}}))
        assert await clear_stale_mark(client=n2, node="n2") is True
        await n1.patch(Node.Status, "n1", {"status": {"conditions": [_condition(ROLE_CONDITION_TYPE, "True")]}})
    finally:
        await n1.close()
        await n2.close()
    after = json.loads(world.admin.kubectl("get", "lease", "n2", "-n", "kube-node-lease", "-o", "json"))
    assert not any(k.startswith("edgewatch.io/") for k in after["metadata"]["annotations"])
    assert after["spec"]["holderIdentity"] == "n2"


# -- RBAC by name, and who the policies do not restrict ----------------------------------------------


def test_agent_reads_the_beacon_by_name_only(world: World) -> None:
    _apply(world.admin, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                         "metadata": {"name": "edgewatch-beacon", "namespace": "edgewatch", "annotations": {}},
                         "spec": {"holderIdentity": "ctl", "renewTime": _micro(dt.datetime.now(dt.timezone.utc))}})
    a = world.n1
    assert a.ok("get", "lease", "edgewatch-beacon", "-n", "edgewatch", "-o", "name").strip() == \
        "lease.coordination.k8s.io/edgewatch-beacon"
    # list (and so watch) with the field selector metadata.name is authorized by resourceNames
    listed = json.loads(a.ok("get", "lease", "-n", "edgewatch", "--field-selector=metadata.name=edgewatch-beacon",
                             "-o", "json"))
    assert [i["metadata"]["name"] for i in listed["items"]] == ["edgewatch-beacon"]
    for args in (("get", "lease", "-n", "edgewatch"),
                 ("get", "lease", "-n", "edgewatch", "--field-selector=metadata.name=edgewatch-controller"),
                 ("get", "lease", "edgewatch-controller", "-n", "edgewatch")):
        done = a.run(*args)
        assert done.returncode != 0 and "Forbidden" in done.stderr, done


def test_agent_reads_the_control_planes_clock_and_nothing_else_in_kube_system(world: World) -> None:
    """The agent may get kube-controller-manager's leader Lease (its renewTime is the carry-clock
    policy's reference), by name only: no list or watch, no other Lease, nothing else there."""
    a = world.n1
    assert a.ok("get", "lease", "kube-controller-manager", "-n", "kube-system", "-o", "name").strip() == \
        "lease.coordination.k8s.io/kube-controller-manager"
    for args in (("get", "lease", "-n", "kube-system"),
                 ("get", "lease", "kube-scheduler", "-n", "kube-system"),
                 ("get", "lease", "-n", "kube-system", "--field-selector=metadata.name=kube-controller-manager"),
                 ("get", "configmap", "-n", "kube-system")):
        done = a.run(*args)
        assert done.returncode != 0 and "Forbidden" in done.stderr, (args, done)
    updated = a.run("annotate", "lease", "kube-controller-manager", "-n", "kube-system", "example.com/x=1")
    assert updated.returncode != 0 and "Forbidden" in updated.stderr, updated


def test_controller_is_not_restricted_by_the_agent_policies(world: World, node_lease: dict[str, Any]) -> None:
    # the same change of a non-edgewatch annotation: denied to an agent, allowed to the controller
    lease = json.loads(world.controller.ok("get", "lease", "n2", "-n", "kube-node-lease", "-o", "json"))
    lease["metadata"]["annotations"]["example.com/owner"] = "controller"
    world.n1.denied("replace", "-f", "-", input_text=json.dumps(lease), policy=LEASES)
    world.controller.ok("replace", "-f", "-", input_text=json.dumps(lease))
    assert world.admin.kubectl("get", "lease", "n2", "-n", "kube-node-lease",
                               "-o", "jsonpath={.metadata.annotations.example\\.com/owner}") == "controller"

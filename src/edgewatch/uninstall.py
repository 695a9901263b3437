"""``edgewatch uninstall``: remove every mark edgewatch left on a cluster (docs/uninstall.md).

Run it *after* the install is gone (``kubectl delete -k deploy/`` or ``helm uninstall``): a running
controller or agent would put its marks back, so it refuses (:class:`InstallPresent`) while the
ServiceAccounts its components authenticate as still exist (once they are deleted, no token of
theirs is accepted, even from a pod still running on a cut-off node), unless forced. It removes:

- on Nodes: the taints ``edgewatch.io/cloud-unreachable`` and ``edgewatch.io/failed`` (any
  effect) and ``node.kubernetes.io/out-of-service`` **with the value** ``edgewatch`` only (the same
  key with another value is an operator's, KEP-2268's manual procedure); the annotations the
  controller writes (``edgewatch.io/state``, ``edgewatch.io/unreachable-since``); the conditions
  ``EdgeHealthy`` (the controller's) and ``EdgePoolCoordinator`` (the agents'), through the status
  subresource. edgewatch writes no Node label; the operator's labels (``edgewatch.io/pool``,
  ``edgewatch.io/topology-zone``) and annotations (``edgewatch.io/out-of-service``,
  ``edgewatch.io/autonomy-duration``) are settings, not marks, and stay;
- on the node Leases in ``kube-node-lease``: the delegate mark (``edgewatch.io/delegate-heartbeat``,
  ``delegated-by``, ``delegated-renew-time``, ``delegated-via``); the Lease itself is the kubelet's;
- data objects (not the install): in the edgewatch namespace the group rosters, the pool CAs'
  ConfigMaps and Secret, the beacon Lease and its key Secret, the leader-election Lease; in
  ``edgewatch-nodes`` the agents' key-record ConfigMaps and evidence Leases; cluster-wide, the
  CertificateSigningRequests of signer ``edgewatch.io/coordinator-client``.

Two halves: the **plan** (:func:`plan_node`, :func:`plan_node_lease`, :func:`plan_deletions`) is pure,
from objects as dicts; :func:`uninstall` reads, plans and applies. Every write is guarded: a merge
patch carrying the ``resourceVersion`` it was planned on (409 if anyone wrote in between: re-read,
re-plan, retry), a delete with ``preconditions`` (uid and resourceVersion). Running it again finds
nothing to do (idempotent); an object already gone counts as removed.

Limits: a Lease's ``renewTime`` written by a delegate stays (it is the node's heartbeat field; the
kubelet moves it on at its next renewal). Events edgewatch recorded expire on their own (1 h).
Every API call has the client's request timeout, and each object's attempts are bounded as a whole.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from edgewatch.controller.evidence import BEACON_SECRET_NAME
from edgewatch.controller.model import STATE_ANNOTATION, UNREACHABLE_SINCE_ANNOTATION
from edgewatch.core.roster import ROSTER_LABEL, ROSTER_PREFIX
from edgewatch.kube.api import (
    ApiError,
    CertificateSigningRequest,
    ConfigError,
    ConfigMap,
    Deployment,
    HttpError,
    Lease,
    Node,
    PatchType,
    Secret,
    ServiceAccount,
)
from edgewatch.kube.client import CloudApi, api_client
from edgewatch.kube.errors import API_ERRORS, is_conflict, is_not_found
from edgewatch.kube.leases import MARK_ANNOTATIONS
from edgewatch.names import (
    BEACON_LEASE_NAME,
    CLOUD_UNREACHABLE_TAINT_KEY,
    COORDINATOR_CLIENT_SIGNER,
    COORDINATOR_SERVING_SIGNER,
    EDGE_CONDITION_TYPE,
    EVIDENCE_ANNOTATION,
    FAILED_TAINT_KEY,
    IDENTITY_NAMESPACE,
    KEY_RECORD_KEY,
    NODE_LEASE_NAMESPACE,
    OUT_OF_SERVICE_TAINT_KEY,
    POOL_CA_PREFIX,
    POOL_COORDINATORS_CONFIGMAP,
    POOL_CA_SECRET_NAME,
    ROLE_CONDITION_TYPE,
)

__all__ = [
    "LEADER_LEASE_NAME",
    "NODE_ANNOTATIONS",
    "NODE_CONDITIONS",
    "OUT_OF_SERVICE_VALUE",
    "TAINT_KEYS",
    "Deletion",
    "INSTALL_SERVICE_ACCOUNTS",
    "InstallPresent",
    "Patch",
    "Report",
    "is_edgewatch_taint",
    "plan_deletions",
    "plan_node",
    "plan_node_lease",
    "run_uninstall",
    "uninstall",
]

#: Taint keys that are edgewatch's whatever their value or effect.
TAINT_KEYS: tuple[str, ...] = (CLOUD_UNREACHABLE_TAINT_KEY, FAILED_TAINT_KEY)
#: The value that makes a ``node.kubernetes.io/out-of-service`` taint edgewatch's.
OUT_OF_SERVICE_VALUE = "edgewatch"
#: Node annotations edgewatch writes (the controller's); operator-set ``edgewatch.io/*`` settings stay.
NODE_ANNOTATIONS: tuple[str, ...] = (STATE_ANNOTATION, UNREACHABLE_SINCE_ANNOTATION)
#: Node conditions edgewatch writes: the controller's verdict and the agents' coordinator role.
NODE_CONDITIONS: tuple[str, ...] = (EDGE_CONDITION_TYPE, ROLE_CONDITION_TYPE)
#: The controller's leader-election Lease (edgewatch.controller.main) in the edgewatch namespace.
LEADER_LEASE_NAME = "edgewatch-controller"
#: Created in every namespace by kube-controller-manager, never ours.
_ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
#: The ServiceAccounts of the install's components that write marks (deploy/10-rbac-agent.yaml,
#: deploy/11-rbac-controller.yaml; the chart's are named the same).
INSTALL_SERVICE_ACCOUNTS: tuple[str, ...] = ("edgewatch-agent", "edgewatch-controller")
_MAX_ATTEMPTS = 4


# ---------------------------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class Patch:
    """One guarded merge patch: ``body`` carries ``metadata.resourceVersion`` (the apiserver answers
    409 if the object changed since it was read). ``subresource`` is ``"status"`` or ``""``;
    ``removes`` names each mark it takes away (for the progress lines)."""

    kind: str
    name: str
    namespace: str | None
    subresource: str
    body: Mapping[str, Any]
    removes: tuple[str, ...]

    def describe(self) -> str:
        """``Node/n1: taint edgewatch.io/failed:NoExecute, annotation edgewatch.io/state``."""
        where = f"{self.namespace}/" if self.namespace else ""
        sub = f" ({self.subresource})" if self.subresource else ""
        return f"{self.kind} {where}{self.name}{sub}: remove {', '.join(self.removes)}"


@dataclass(frozen=True)
class Deletion:
    """One delete with preconditions: the object is deleted only if its uid and resourceVersion
    are still those it was planned on (409 otherwise)."""

    kind: str
    name: str
    namespace: str | None
    uid: str | None
    resource_version: str | None
    why: str

    def describe(self) -> str:
        """``ConfigMap edgewatch/edgewatch-roster: delete (group roster)``."""
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}: delete ({self.why})"


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def is_edgewatch_taint(taint: Mapping[str, Any]) -> bool:
    """True iff ``taint`` (a Node taint as a dict) is one edgewatch sets: key in :data:`TAINT_KEYS`,
    or the out-of-service key with the value :data:`OUT_OF_SERVICE_VALUE` (only that value). Pure."""
    key = taint.get("key")
    if key in TAINT_KEYS:
        return True
    return key == OUT_OF_SERVICE_TAINT_KEY and taint.get("value") == OUT_OF_SERVICE_VALUE


def _taint_text(taint: Mapping[str, Any]) -> str:
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"taint {taint.get('key')}{value}:{taint.get('effect')}"


def plan_node(node: Mapping[str, Any]) -> list[Patch]:
    """The patches that take edgewatch's marks off one Node (a dict as the API returns it): at most
    one on the object (taints, annotations) and one on its status subresource (conditions), each
    guarded by the Node's resourceVersion; ``[]`` when it carries none. Every other taint,
    annotation, label and condition is left out of the body (annotations are removed key by key
    with ``null``) or, for the lists a merge patch replaces whole (taints, conditions), written back
    as read, which the resourceVersion makes safe. Pure.

    Raises:
        ValueError: the Node has no name or no resourceVersion (not an object read from the API).
    """
    meta = _meta(node)
    name, version = meta.get("name"), meta.get("resourceVersion")
    if not name or not version:
        raise ValueError("a Node read from the API has a name and a resourceVersion")
    patches: list[Patch] = []
    annotations = meta.get("annotations") or {}
    gone_annotations = [k for k in NODE_ANNOTATIONS if k in annotations]
    taints = list((node.get("spec") or {}).get("taints") or [])
    kept_taints = [t for t in taints if not is_edgewatch_taint(t)]
    removes = tuple([_taint_text(t) for t in taints if is_edgewatch_taint(t)]
                    + [f"annotation {k}" for k in gone_annotations])
    if removes:
        body: dict[str, Any] = {"metadata": {"resourceVersion": version}}
        if gone_annotations:
            body["metadata"]["annotations"] = {k: None for k in gone_annotations}
        if len(kept_taints) != len(taints):
            body["spec"] = {"taints": kept_taints or None}
        patches.append(Patch("Node", name, None, "", body, removes))
    conditions = list((node.get("status") or {}).get("conditions") or [])
    kept_conditions = [c for c in conditions if c.get("type") not in NODE_CONDITIONS]
    if len(kept_conditions) != len(conditions):
        gone = tuple(f"condition {c.get('type')}" for c in conditions if c.get("type") in NODE_CONDITIONS)
        body = {"metadata": {"resourceVersion": version}, "status": {"conditions": kept_conditions}}
        patches.append(Patch("Node", name, None, "status", body, gone))
    return patches


def plan_node_lease(lease: Mapping[str, Any]) -> Patch | None:
    """The patch that takes the delegate mark off one node Lease (kube-node-lease), guarded by its
    resourceVersion: each mark annotation present set to ``null``; None when it carries none. The
    Lease's spec (holder, renewTime) is the kubelet's and is not touched. Pure.

    Raises:
        ValueError: the Lease has no name or no resourceVersion.
    """
    meta = _meta(lease)
    name, version = meta.get("name"), meta.get("resourceVersion")
    if not name or not version:
        raise ValueError("a Lease read from the API has a name and a resourceVersion")
    annotations = meta.get("annotations") or {}
    gone = [k for k in MARK_ANNOTATIONS if k in annotations]
    if not gone:
        return None
    body = {"metadata": {"resourceVersion": version, "annotations": {k: None for k in gone}}}
    return Patch("Lease", name, meta.get("namespace") or NODE_LEASE_NAMESPACE, "", body,
                 tuple(f"annotation {k}" for k in gone))


def _deletion(kind: str, obj: Mapping[str, Any], namespace: str | None, why: str) -> Deletion:
    meta = _meta(obj)
    return Deletion(kind, meta["name"], namespace, meta.get("uid"), meta.get("resourceVersion"), why)


def _data_configmap(cm: Mapping[str, Any]) -> str | None:
    meta = _meta(cm)
    name = meta.get("name") or ""
    if (meta.get("labels") or {}).get(ROSTER_LABEL) == "true" or name == ROSTER_PREFIX \
            or name.startswith(f"{ROSTER_PREFIX}-"):
        return "group roster"
    if name.startswith(f"{POOL_CA_PREFIX}-"):
        return "pool CA certificate"
    if name == POOL_COORDINATORS_CONFIGMAP:
        return "where the pool coordinators run"
    return None


_MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
_CONTROLLER_MANAGER = "edgewatch-controller"  # edgewatch.controller.coordinatorspec: what the controller made

_DATA_SECRETS = {POOL_CA_SECRET_NAME: "pool CAs", BEACON_SECRET_NAME: "beacon key"}
_DATA_LEASES = {BEACON_LEASE_NAME: "beacon", LEADER_LEASE_NAME: "controller leader election"}


def plan_deletions(*, namespace: str, configmaps: Iterable[Mapping[str, Any]] = (),
                   secrets: Iterable[Mapping[str, Any]] = (), leases: Iterable[Mapping[str, Any]] = (),
                   node_configmaps: Iterable[Mapping[str, Any]] = (),
                   node_leases: Iterable[Mapping[str, Any]] = (),
                   csrs: Iterable[Mapping[str, Any]] = (),
                   deployments: Iterable[Mapping[str, Any]] = ()) -> list[Deletion]:
    """The data objects to delete, from what was listed: in ``namespace`` (edgewatch's) the rosters
    (label ``edgewatch.io/roster: "true"`` or a name ``edgewatch-roster[-...]``), the pool CAs'
    ConfigMaps (``edgewatch-pool-ca-...``), ``edgewatch-pool-coordinators``, the pool coordinator
    Deployments the controller made (label ``app.kubernetes.io/managed-by: edgewatch-controller``;
    their etcd data stays on the nodes, ``/var/lib/edgewatch/coordinator/<pool>``), the Secrets ``edgewatch-pool-cas`` and
    ``edgewatch-beacon-key``, the Leases ``edgewatch-beacon`` and ``edgewatch-controller``; in
    ``edgewatch-nodes`` every ConfigMap holding a key record (key ``keys``) and every Lease (the
    agents' evidence reports); the CSRs whose ``spec.signerName`` is edgewatch's. The install
    (``edgewatch-config``, ServiceAccounts, RBAC, workloads, namespaces) is not data: left to
    ``kubectl delete -k`` / ``helm uninstall``. Pure.
    """
    out: list[Deletion] = []
    for cm in configmaps:
        why = _data_configmap(cm)
        if why:
            out.append(_deletion("ConfigMap", cm, namespace, why))
    for secret in secrets:
        why = _DATA_SECRETS.get(_meta(secret).get("name", ""))
        if why:
            out.append(_deletion("Secret", secret, namespace, why))
    for lease in leases:
        why = _DATA_LEASES.get(_meta(lease).get("name", ""))
        if why:
            out.append(_deletion("Lease", lease, namespace, why))
    for cm in node_configmaps:
        if _meta(cm).get("name") != _ROOT_CA_CONFIGMAP and KEY_RECORD_KEY in (cm.get("data") or {}):
            out.append(_deletion("ConfigMap", cm, IDENTITY_NAMESPACE, "agent key record"))
    for lease in node_leases:
        has_evidence = EVIDENCE_ANNOTATION in (_meta(lease).get("annotations") or {})
        out.append(_deletion("Lease", lease, IDENTITY_NAMESPACE,
                             "agent evidence report" if has_evidence else "agent evidence Lease"))
    for csr in csrs:
        signer = (csr.get("spec") or {}).get("signerName")
        if signer == COORDINATOR_CLIENT_SIGNER:
            out.append(_deletion("CertificateSigningRequest", csr, None, "coordinator client certificate"))
        elif signer == COORDINATOR_SERVING_SIGNER:
            out.append(_deletion("CertificateSigningRequest", csr, None, "coordinator serving certificate"))
    for dep in deployments:
        if (_meta(dep).get("labels") or {}).get(_MANAGED_BY_LABEL) == _CONTROLLER_MANAGER:
            out.append(_deletion("Deployment", dep, namespace, "pool coordinator run by the controller"))
    return out


# ------------------------------------------------------------------------------------------- apply


@dataclass
class Report:
    """What a run did: ``planned`` every step's description; ``done`` and ``failed`` (with the
    reason) per object. A dry run plans only."""

    planned: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True iff nothing failed."""
        return not self.failed


_RESOURCES: dict[str, Any] = {"Node": Node, "Lease": Lease, "ConfigMap": ConfigMap, "Secret": Secret,
                              "CertificateSigningRequest": CertificateSigningRequest, "Deployment": Deployment,
                              "ServiceAccount": ServiceAccount}
_PATHS = {"ConfigMap": "/api/v1/namespaces/{ns}/configmaps/{name}",
          "Secret": "/api/v1/namespaces/{ns}/secrets/{name}",
          "Lease": "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}",
          "CertificateSigningRequest": "/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}",
          "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments/{name}"}


def _dicts(objs: Sequence[Any]) -> list[dict[str, Any]]:
    return [o.to_dict() for o in objs]


async def _list(client: CloudApi, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
    res = _RESOURCES[kind]
    objs = [o async for o in client.list(res, namespace=namespace)] if namespace else \
        [o async for o in client.list(res)]
    return _dicts(objs)


async def _get(client: CloudApi, kind: str, name: str, namespace: str | None) -> dict[str, Any] | None:
    try:
        obj = await client.get(_RESOURCES[kind], name, namespace=namespace)
    except ApiError as exc:
        if is_not_found(exc):
            return None
        raise
    return obj.to_dict()


def _replan(kind: str, subresource: str, obj: Mapping[str, Any]) -> Patch | None:
    if kind == "Lease":
        return plan_node_lease(obj)
    return next((p for p in plan_node(obj) if p.subresource == subresource), None)


async def _apply_patch(client: CloudApi, step: Patch, *, timeout_s: float) -> str:
    """Apply one patch; on 409 re-read and re-plan (up to :data:`_MAX_ATTEMPTS`). Returns
    ``removed``, ``already clean`` or ``gone``; raises the API error that stopped it."""
    current: Patch | None = step
    async with asyncio.timeout(timeout_s):
        for attempt in range(_MAX_ATTEMPTS):
            if current is None:
                return "already clean"
            res = _RESOURCES[step.kind]
            if step.subresource == "status":
                res = res.Status
            try:
                await client.patch(res, step.name, dict(current.body), namespace=step.namespace,
                                   patch_type=PatchType.MERGE)
                return "removed"
            except ApiError as exc:
                if is_not_found(exc):
                    return "gone"
                if not is_conflict(exc) or attempt == _MAX_ATTEMPTS - 1:
                    raise
            obj = await _get(client, step.kind, step.name, step.namespace)
            if obj is None:
                return "gone"
            current = _replan(step.kind, step.subresource, obj)
    raise RuntimeError("not reached")  # pragma: no cover


async def _apply_deletion(client: CloudApi, step: Deletion, *, timeout_s: float) -> str:
    """Delete one object with uid and resourceVersion preconditions; on 409 re-read (the same
    object changed: delete the newer version; another object now has the name: leave it). Returns
    ``deleted``, ``gone`` or ``replaced by another object, left``; raises what stopped it."""
    path = _PATHS[step.kind].format(ns=step.namespace, name=step.name)
    uid, version = step.uid, step.resource_version
    async with asyncio.timeout(timeout_s):
        for attempt in range(_MAX_ATTEMPTS):
            preconditions = {k: v for k, v in (("uid", uid), ("resourceVersion", version)) if v}
            body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": preconditions}
            response = await client.http.request("DELETE", path, json=body, timeout=timeout_s)
            if response.status_code in (200, 202):
                return "deleted"
            if response.status_code == 404:
                return "gone"
            if response.status_code != 409 or attempt == _MAX_ATTEMPTS - 1:
                raise RuntimeError(f"HTTP {response.status_code}: {response.text[:300]}")
            obj = await _get(client, step.kind, step.name, step.namespace)
            if obj is None:
                return "gone"
            if uid and _meta(obj).get("uid") != uid:
                return "replaced by another object, left"
            version = _meta(obj).get("resourceVersion")
    raise RuntimeError("not reached")  # pragma: no cover


async def plan_cluster(*, client: CloudApi, namespace: str) -> list[Patch | Deletion]:
    """Read the cluster and plan every step (nothing written).

    Raises:
        ApiError, HttpError, OSError, TimeoutError: a list failed (nothing can be planned without it).
    """
    steps: list[Patch | Deletion] = []
    for node in await _list(client, "Node"):
        steps.extend(plan_node(node))
    for lease in await _list(client, "Lease", NODE_LEASE_NAMESPACE):
        patch = plan_node_lease(lease)
        if patch is not None:
            steps.append(patch)
    steps.extend(plan_deletions(
        namespace=namespace,
        configmaps=await _list(client, "ConfigMap", namespace),
        secrets=await _list(client, "Secret", namespace),
        leases=await _list(client, "Lease", namespace),
        node_configmaps=await _list(client, "ConfigMap", IDENTITY_NAMESPACE),
        node_leases=await _list(client, "Lease", IDENTITY_NAMESPACE),
        csrs=await _list(client, "CertificateSigningRequest"),
        deployments=await _list(client, "Deployment", namespace)))
    return steps


class InstallPresent(RuntimeError):
    """The install is still there: cleaning now would be undone by its controller and agents."""


async def install_accounts(*, client: CloudApi, namespace: str) -> list[str]:
    """The install's ServiceAccounts (:data:`INSTALL_SERVICE_ACCOUNTS`) that still exist in
    ``namespace`` and are not being deleted, as ``<namespace>/<name>``.

    Raises:
        ApiError, HttpError, OSError, TimeoutError: the lookup failed (other than 404).
    """
    present = []
    for name in INSTALL_SERVICE_ACCOUNTS:
        account = await _get(client, "ServiceAccount", name, namespace)
        if account is not None and not _meta(account).get("deletionTimestamp"):
            present.append(f"{namespace}/{name}")
    return present


async def uninstall(*, client: CloudApi, namespace: str = "edgewatch", dry_run: bool = False,
                    out: TextIO | None = None, timeout_s: float = 30.0, force: bool = False) -> Report:
    """Plan (:func:`plan_cluster`) and, unless ``dry_run``, apply every step, printing one line per
    object to ``out``. A step that fails is reported and the others still run.

    Args:
        client: the API client (its request timeout bounds each call).
        namespace: edgewatch's namespace (the install's; ``edgewatch-nodes`` is fixed).
        dry_run: print the plan, write nothing.
        out: where progress goes (default: sys.stdout at the time of the call).
        timeout_s: the bound on all the attempts for one object.
        force: clean even while the install is still there (its components would undo it).

    Raises:
        InstallPresent: not ``dry_run`` nor ``force``, and the install's ServiceAccounts exist.
        ApiError, HttpError, OSError, TimeoutError: the cluster could not be read to plan.
    """
    out = sys.stdout if out is None else out
    report = Report()
    if not dry_run and not force:
        present = await install_accounts(client=client, namespace=namespace)
        if present:
            raise InstallPresent(
                f"the install is still there (ServiceAccounts {', '.join(present)}): its controller and "
                "agents would put every mark back. Delete it first (kubectl delete -k deploy/ --wait=false, "
                "or helm uninstall), then run this again; --force cleans anyway")
    steps = await plan_cluster(client=client, namespace=namespace)
    if not steps:
        print("nothing of edgewatch left on this cluster", file=out)
    for step in steps:
        report.planned.append(step.describe())
        if dry_run:
            print(f"would {step.describe()}", file=out)
            continue
        try:
            if isinstance(step, Patch):
                result = await _apply_patch(client, step, timeout_s=timeout_s)
            else:
                result = await _apply_deletion(client, step, timeout_s=timeout_s)
        except (*API_ERRORS, HttpError, RuntimeError) as exc:
            reason = f"{type(exc).__name__}: {exc}"
            report.failed.append(f"{step.describe()}: {reason}")
            print(f"FAILED {step.describe()}: {reason}", file=out)
            continue
        report.done.append(f"{step.describe()}: {result}")
        print(f"{result}: {step.describe()}", file=out)
    if not dry_run and steps:
        print(f"{len(report.done)} done, {len(report.failed)} failed", file=out)
    return report


def run_uninstall(*, kubeconfig: str | None, namespace: str = "edgewatch", dry_run: bool = False,
                  api_timeout_s: float = 10.0, force: bool = False) -> int:
    """The ``edgewatch uninstall`` command: exit code 0 when everything planned was removed (or the
    dry run planned), 1 when something could not be removed, 2 when the cluster could not be read
    (no usable kubeconfig, the apiserver unreachable, a list refused), 3 when the install is still
    there (:class:`InstallPresent`; nothing written). Never raises for those."""

    async def main() -> Report:
        client = api_client(kubeconfig, timeout_s=api_timeout_s, component="uninstall")
        try:
            return await uninstall(client=client, namespace=namespace, dry_run=dry_run,
                                   timeout_s=api_timeout_s * _MAX_ATTEMPTS * 2, force=force)
        finally:
            await client.close()

    try:
        report = asyncio.run(main())
    except InstallPresent as exc:
        print(f"edgewatch uninstall: {exc}", file=sys.stderr)
        return 3
    except (*API_ERRORS, HttpError, ConfigError, ValueError) as exc:
        print(f"edgewatch uninstall: cannot read the cluster: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    return 0 if report.ok else 1

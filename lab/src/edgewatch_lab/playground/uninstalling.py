"""The playground's ``uninstall`` step: what of edgewatch is left on the cluster afterwards.

The step itself is the cluster's (``PlaygroundCluster.uninstall``: docs/uninstall.md's two steps,
as an operator runs them); this module reads, at the end of the run, every object edgewatch could
have left — in its namespaces (``edgewatch``, ``edgewatch-nodes``), cluster-wide (RBAC, admission
policies, CSRs of its signers) — and the pods and namespaces still terminating, judged by the lab's
own rules (``edgewatch_lab.playground.marks``), never by the product's uninstall plan. The marks on
nodes and their Leases are the observer's (``NodeRecord.marks``).

Limits: one look at the end (not a watch); every list has the client's timeout, and a list that
fails is reported as such in ``errors`` (the check then fails: nothing is known to be clean).
"""

from __future__ import annotations

from typing import Any

from lightkube import AsyncClient
from lightkube.resources.admissionregistration_v1 import (
    ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
    ValidatingWebhookConfiguration,
)
from lightkube.resources.apps_v1 import DaemonSet, Deployment
from lightkube.resources.certificates_v1 import CertificateSigningRequest
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ConfigMap, Namespace, Pod, Secret, Service, ServiceAccount
from lightkube.resources.rbac_authorization_v1 import ClusterRole, ClusterRoleBinding, Role, RoleBinding

from edgewatch.kube.errors import API_ERRORS, status_code
from edgewatch_lab.playground.marks import NAMESPACES, edgewatch_csrs, left_cluster_wide, left_in_namespace

#: What is looked for in edgewatch's namespaces (every kind an install or edgewatch itself creates).
NAMESPACED = (ConfigMap, Secret, Lease, ServiceAccount, Service, Deployment, DaemonSet, Role, RoleBinding)
#: Cluster-scoped kinds, looked for by name (``edgewatch*``).
CLUSTER_WIDE = (ClusterRole, ClusterRoleBinding, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
                ValidatingWebhookConfiguration)


async def leftovers(client: AsyncClient) -> dict[str, Any]:
    """What of edgewatch is left on the cluster (the report's ``uninstall.left``).

    Returns ``{"objects": ["<Kind>/<name>" or "<namespace>/<Kind>/<name>", ...], "terminating_pods":
    ["<namespace>/<pod> on <node>", ...], "namespaces": {name: phase or "gone"}, "errors": [...]}``:
    ``objects`` must be empty after a clean uninstall; pods of a node that is cut off or dead stay
    Terminating (their kubelet must confirm), and with them their namespace — Kubernetes', not
    edgewatch's, and listed apart. Never raises for API errors (they go to ``errors``).
    """
    objects: list[str] = []
    errors: list[str] = []
    terminating: list[str] = []
    namespaces: dict[str, str] = {}
    for ns in NAMESPACES:
        try:
            obj = await client.get(Namespace, ns)
            namespaces[ns] = (obj.status.phase if obj.status else None) or "?"
        except API_ERRORS as exc:
            if status_code(exc) == 404:
                namespaces[ns] = "gone"
                continue
            errors.append(f"Namespace/{ns}: {type(exc).__name__}: {exc}")
            continue
        for kind in NAMESPACED:
            try:
                names = [o.metadata.name async for o in client.list(kind, namespace=ns)]
            except API_ERRORS as exc:
                errors.append(f"{ns}/{kind.__name__}: {type(exc).__name__}: {exc}")
                continue
            objects += [f"{ns}/{ref}" for ref in left_in_namespace(kind.__name__, names)]
        try:
            for pod in [p async for p in client.list(Pod, namespace=ns)]:
                node = (pod.spec.nodeName if pod.spec else None) or "?"
                if pod.metadata.deletionTimestamp is not None:
                    terminating.append(f"{ns}/{pod.metadata.name} on {node}")
                else:
                    objects.append(f"{ns}/Pod/{pod.metadata.name} (on {node}, not being deleted)")
        except API_ERRORS as exc:
            errors.append(f"{ns}/Pod: {type(exc).__name__}: {exc}")
    for kind in CLUSTER_WIDE:
        try:
            objects += left_cluster_wide(kind.__name__, [o.metadata.name async for o in client.list(kind)])
        except API_ERRORS as exc:
            errors.append(f"{kind.__name__}: {type(exc).__name__}: {exc}")
    try:
        objects += edgewatch_csrs({c.metadata.name: c.spec.signerName async for c in client.list(CertificateSigningRequest)})
    except API_ERRORS as exc:
        errors.append(f"CertificateSigningRequest: {type(exc).__name__}: {exc}")
    return {"objects": sorted(objects), "terminating_pods": sorted(terminating), "namespaces": namespaces,
            "errors": errors}

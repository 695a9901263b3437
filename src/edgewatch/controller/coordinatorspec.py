"""What the controller wants of an ``auto`` pool's coordinator (docs/install.md), and where it runs now.

* :func:`coordinator_deployment`: the Deployment that runs ``edgewatch pool-coordinator`` (one etcd
  with TLS and per-node auth) on one node of the pool.
* :func:`drift`: the fields we render that a Deployment read from the API does not carry (the
  apiserver adds defaults; only our own fields are compared).
* :func:`discovered_urls`: from the coordinator pods, ``pool -> https://<node IP>:<port>`` for the
  ConfigMap ``edgewatch-pool-coordinators`` the agents read.

Limits
    Pure: no I/O. Objects are JSON mappings as the API returns them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any, Final

from edgewatch.core.poolconfig import is_pool_name
from edgewatch.names import (
    COORDINATOR_COMPONENT,
    COORDINATOR_SERVICE_ACCOUNT,
    DEFAULT_COORDINATOR_OPS_PORT,
    DEFAULT_COORDINATOR_PORT,
    POOL_LABEL,
    coordinator_name,
)

__all__ = [
    "DATA_DIR",
    "DEFAULT_DATA_ROOT",
    "MANAGED_BY",
    "coordinator_deployment",
    "coordinator_labels",
    "discovered_urls",
    "drift",
    "pool_of",
]

DATA_DIR: Final = "/var/lib/edgewatch/coordinator"
"""Where the coordinator container sees its etcd data (``--data-dir``)."""

DEFAULT_DATA_ROOT: Final = "/var/lib/edgewatch/coordinator"
"""Host folder under which each pool's etcd data lives (``<root>/<pool>``)."""

MANAGED_BY: Final = "edgewatch-controller"
"""``app.kubernetes.io/managed-by`` of the Deployments the controller owns (and may delete)."""

_NAME_LABEL: Final = "app.kubernetes.io/name"
_COMPONENT_LABEL: Final = "app.kubernetes.io/component"
_MANAGED_LABEL: Final = "app.kubernetes.io/managed-by"


def coordinator_labels(pool: str) -> dict[str, str]:
    """The labels of ``pool``'s coordinator pods (and the Deployment's selector): name, component,
    pool. Raises ValueError if ``pool`` is not a pool name (a DNS-1123 label)."""
    if not is_pool_name(pool):
        raise ValueError(f"not a pool name: {pool!r:.80}")
    return {_NAME_LABEL: "edgewatch", _COMPONENT_LABEL: COORDINATOR_COMPONENT, POOL_LABEL: pool}


RUN_AS_USER = 65532
"""The image's user (the Dockerfile's ``USER 65532:65532``), which the coordinator runs as."""


def coordinator_deployment(*, pool: str, namespace: str, image: str, port: int = DEFAULT_COORDINATOR_PORT,
                           ops_port: int = DEFAULT_COORDINATOR_OPS_PORT,
                           data_root: str = DEFAULT_DATA_ROOT) -> dict[str, Any]:
    """The apps/v1 Deployment of ``pool``'s coordinator, named ``coordinator_name(pool)``, in
    ``namespace``, running ``image`` (the edgewatch image, which carries etcd).

    Why each field:
        * one replica, ``Recreate``: etcd's data set is on the node; two etcds must never run on
          it (a rolling update would start the new pod before the old one stops);
        * ``hostNetwork`` (``ClusterFirstWithHostNet`` to still resolve cluster names): agents
          reach it at its node's IP on ``port``, with no Service (no kube-proxy needed in the pool);
        * required node affinity ``edgewatch.io/pool In [pool]``: only the pool's nodes; no
          tolerations of our own, so a dead or drained node's pod is evicted after the default
          300 s and the scheduler places it on another node of the pool;
        * ``NODE_NAME`` and ``HOST_IP``: the serving certificate's SANs and etcd's advertised URL;
        * the hostPath ``<data_root>/<pool>`` (``DirectoryOrCreate``): etcd's data survives a
          restart on the same node;
        * no projected token volume: the agent DaemonSet uses none either; the default
          ServiceAccount token is pod-bound and carries the node claim its CSRs need;
        * probes on ``ops_port`` (``/readyz``: etcd serves; ``/healthz``: the process lives), on
          the pod IP (= the node's; ``host: 127.0.0.1`` cannot be set on host network);
        * requests 50m / 64Mi, limit 512Mi: one etcd for one pool (OpenYurt's coordinator used
          370-450 MB), bounded so it cannot starve the node's workloads;
        * read-only root, no privilege escalation, no capabilities, the image's user 65532; the
          kubelet makes the hostPath data folder root's 0755, so an init container (root, CHOWN
          only) hands it to that user once, as the agent DaemonSet does;
        * 30 s grace: etcd's clean shutdown; ``system-node-critical`` as the agent.

    Raises:
        ValueError: ``pool`` is not a pool name, ``image`` is empty, or a port is out of 1-65535.
    """
    labels = coordinator_labels(pool)
    if not image:
        raise ValueError("the coordinator image is empty (controller option --coordinator-image)")
    for what, value in (("port", port), ("ops_port", ops_port)):
        if not 0 < value < 65536:
            raise ValueError(f"{what} must be 1-65535, got {value}")
    probe = {"httpGet": {"path": "/readyz", "port": ops_port}, "periodSeconds": 5, "timeoutSeconds": 3}
    container = {
        "name": "coordinator",
        "image": image,
        "command": ["edgewatch", "pool-coordinator", "--pool", pool, "--namespace", namespace,
                    "--port", str(port), "--ops-port", str(ops_port), "--data-dir", DATA_DIR],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}],
        "readinessProbe": probe,
        # etcd's start on a slow box or a large data set: 60 s of failures before a restart
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": ops_port}, "initialDelaySeconds": 10,
                          "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 6},
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}},
        "securityContext": {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
                            "runAsUser": RUN_AS_USER, "runAsGroup": RUN_AS_USER, "runAsNonRoot": True,
                            "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "data", "mountPath": DATA_DIR}],
    }
    owner = {  # the kubelet creates the hostPath folder as root 0755: hand it to the user once
        "name": "data-owner",
        "image": image,
        "command": ["chown", f"{RUN_AS_USER}:{RUN_AS_USER}", DATA_DIR],
        "securityContext": {"runAsUser": 0, "runAsNonRoot": False, "allowPrivilegeEscalation": False,
                            "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]}},
        "volumeMounts": [{"name": "data", "mountPath": DATA_DIR}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": coordinator_name(pool), "namespace": namespace,
                     "labels": {**labels, _MANAGED_LABEL: MANAGED_BY}},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": dict(labels)},
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "serviceAccountName": COORDINATOR_SERVICE_ACCOUNT,
                    "hostNetwork": True,
                    "dnsPolicy": "ClusterFirstWithHostNet",
                    "priorityClassName": "system-node-critical",
                    "terminationGracePeriodSeconds": 30,
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [
                            {"key": POOL_LABEL, "operator": "In", "values": [pool]}]}]}}},
                    "initContainers": [owner],
                    "containers": [container],
                    "volumes": [{"name": "data", "hostPath": {"path": f"{data_root.rstrip('/')}/{pool}",
                                                              "type": "DirectoryOrCreate"}}],
                },
            },
        },
    }


def drift(*, want: object, have: object, path: str = "") -> list[str]:
    """The paths (``.spec.replicas``, ``.containers[0]``...) where ``have`` does not carry
    ``want``'s value: every key of a mapping in ``want`` must be in ``have`` with a value that
    carries it (extra keys in ``have``, e.g. API defaults, are ignored); lists must have the same
    length and carry element by element; anything else must be equal. Empty: no update needed."""
    if isinstance(want, Mapping):
        if not isinstance(have, Mapping):
            return [path or "."]
        out: list[str] = []
        for key, value in want.items():
            out += drift(want=value, have=have[key], path=f"{path}.{key}") if key in have else [f"{path}.{key}"]
        return out
    if isinstance(want, list):
        if not isinstance(have, list) or len(have) != len(want):
            return [path or "."]
        return [p for i, (w, h) in enumerate(zip(want, have)) for p in drift(want=w, have=h, path=f"{path}[{i}]")]
    return [] if want == have and type(want) is type(have) else [path or "."]


def pool_of(obj: Mapping[str, Any]) -> str | None:
    """The ``edgewatch.io/pool`` label of an object (JSON mapping), if it is a pool name; else None."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    pool = labels.get(POOL_LABEL) if isinstance(labels, Mapping) else None
    return pool if is_pool_name(pool) else None


def _is_ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    return any(isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
               for c in (conditions if isinstance(conditions, list) else []))


def _host_ip(pod: Mapping[str, Any]) -> str | None:
    status = pod.get("status") or {}
    raw = status.get("hostIP") if isinstance(status, Mapping) else None
    try:
        address = ipaddress.ip_address(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    if address is None:
        return None
    return f"[{address}]" if address.version == 6 else str(address)


def discovered_urls(pods: list[dict[str, Any]], *, port: int) -> dict[str, str]:
    """``pool -> https://<hostIP>:<port>`` from coordinator pods (JSON mappings as the API returns
    them): only pods with a pool label (:func:`pool_of`), the condition ``Ready`` ``True``, no
    ``metadata.deletionTimestamp`` and a valid ``status.hostIP`` (IPv6 in brackets). Several for
    one pool: the oldest ``creationTimestamp`` (RFC 3339 UTC, compared as text), then the smallest
    name. A pool with none has no key."""
    best: dict[str, tuple[str, str, str]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        pool, host = pool_of(pod), _host_ip(pod)
        if pool is None or host is None or meta.get("deletionTimestamp") or not _is_ready(pod):
            continue
        rank = (str(meta.get("creationTimestamp") or ""), str(meta.get("name") or ""), host)
        if pool not in best or rank < best[pool]:
            best[pool] = rank
    return {pool: f"https://{rank[2]}:{port}" for pool, rank in sorted(best.items())}

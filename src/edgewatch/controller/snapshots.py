"""From API objects to the decision core's snapshots (``edgewatch.controller.decision``).

Untrusted input: every field is optional in the API; a missing or malformed field becomes "absent"
in the snapshot (the decision core treats absence conservatively), never an exception.
"""

from __future__ import annotations

import datetime as dt

from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node, Pod

from edgewatch.controller.decision import (
    ConditionSnapshot,
    LeaseSnapshot,
    NodeSnapshot,
    Taint,
    Toleration,
)
from edgewatch.names import EDGE_CONDITION_TYPE


def _ts(value: dt.datetime | None) -> float | None:
    return value.timestamp() if isinstance(value, dt.datetime) else None


def node_snapshot(node: Node) -> NodeSnapshot:
    """The decision core's view of a Node."""
    meta = node.metadata
    taints = tuple(
        Taint(key=t.key, effect=t.effect, value=t.value or "", time_added=_ts(t.timeAdded))
        for t in ((node.spec.taints or []) if node.spec else [])
    )
    edge = None
    for cond in (node.status.conditions or []) if node.status else []:
        if cond.type == EDGE_CONDITION_TYPE:
            edge = ConditionSnapshot(status=cond.status, last_heartbeat_time=_ts(cond.lastHeartbeatTime),
                                     last_transition_time=_ts(cond.lastTransitionTime), reason=cond.reason or "",
                                     message=cond.message or "")
    return NodeSnapshot(name=meta.name, labels=dict(meta.labels or {}), annotations=dict(meta.annotations or {}),
                        taints=taints, edge_condition=edge)


def lease_snapshot(lease: Lease | None) -> LeaseSnapshot | None:
    """The decision core's view of a node's Lease (None if there is none)."""
    if lease is None:
        return None
    spec = lease.spec
    return LeaseSnapshot(
        holder=spec.holderIdentity if spec else None,
        renew_time=_ts(spec.renewTime) if spec else None,
        duration_s=float(spec.leaseDurationSeconds) if spec and spec.leaseDurationSeconds else None,
        annotations=dict(lease.metadata.annotations or {}),
    )


def pod_tolerations(pod: Pod) -> tuple[Toleration, ...]:
    """A pod's tolerations as the decision core's ``Toleration`` values."""
    out = []
    for t in (pod.spec.tolerations or []) if pod.spec else []:
        out.append(Toleration(key=t.key or "", operator=t.operator or "Equal", value=t.value or "",
                              effect=t.effect or "",
                              toleration_seconds=float(t.tolerationSeconds) if t.tolerationSeconds is not None else None))
    return tuple(out)


def taint_to_api(taint: Taint) -> dict[str, str]:
    """A taint as the API's JSON (timeAdded in RFC 3339 when set)."""
    body = {"key": taint.key, "effect": str(taint.effect)}
    if taint.value:
        body["value"] = taint.value
    if taint.time_added is not None:
        body["timeAdded"] = dt.datetime.fromtimestamp(taint.time_added, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return body

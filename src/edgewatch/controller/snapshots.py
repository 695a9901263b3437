"""From API objects and the controller's observations to the decision core's snapshots
(``edgewatch.controller.model``), and back (a taint as API JSON).

Each builder also *records* what it sees (``edgewatch.controller.observations``): the Lease's
renewTime and the EdgeHealthy verdict are identities whose changes the controller times with its own
clock; the snapshot carries those times, never the remote timestamps as instants
(docs/clock-skew.md).

Untrusted input: every field is optional in the API; a missing or malformed field becomes "absent"
in the snapshot (the decision core treats absence conservatively), never an exception.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node, Pod

from edgewatch.controller.model import ConditionSnapshot, LeaseSnapshot, NodeSnapshot, Taint, Toleration
from edgewatch.controller.observations import Observations
from edgewatch.leases import lease_renew_text
from edgewatch.names import EDGE_CONDITION_TYPE
from edgewatch.timefmt import format_micro_time, format_rfc3339

__all__ = ["lease_facts", "lease_snapshot", "node_snapshot", "pod_tolerations", "taint_to_api"]

#: Observation kinds (keys of ``Observations``).
LEASE, EDGE, EDGE_STATUS = "lease", "edge", "edge-status"


def _ts(value: dt.datetime | None) -> float | None:
    return value.timestamp() if isinstance(value, dt.datetime) else None


def _edge_condition(node: Node, *, observations: Observations, now: float) -> ConditionSnapshot | None:
    name = node.metadata.name
    for cond in (node.status.conditions or []) if node.status else []:
        if cond.type != EDGE_CONDITION_TYPE:
            continue
        stamp = cond.lastHeartbeatTime or cond.lastTransitionTime
        refreshed = None
        if isinstance(stamp, dt.datetime):
            refreshed = observations.see(kind=EDGE, name=name, value=(cond.status, format_micro_time(stamp)),
                                         now=now).at
        since = observations.see(kind=EDGE_STATUS, name=name, value=cond.status, now=now).at
        return ConditionSnapshot(status=cond.status, observed_at=refreshed, status_since=since,
                                 reason=cond.reason or "", message=cond.message or "")
    observations.see(kind=EDGE_STATUS, name=name, value=None, now=now)
    return None


def node_snapshot(node: Node, *, observations: Observations, now: float) -> NodeSnapshot:
    """The decision core's view of a Node; records the EdgeHealthy verdict in ``observations`` at
    ``now`` (controller clock)."""
    meta = node.metadata
    taints = tuple(
        Taint(key=t.key, effect=t.effect, value=t.value or "", time_added=_ts(t.timeAdded))
        for t in ((node.spec.taints or []) if node.spec else [])
    )
    return NodeSnapshot(name=meta.name, labels=dict(meta.labels or {}), annotations=dict(meta.annotations or {}),
                        taints=taints, edge_condition=_edge_condition(node, observations=observations, now=now))


def lease_snapshot(lease: Lease | None, *, name: str, observations: Observations, now: float) -> LeaseSnapshot | None:
    """The decision core's view of node ``name``'s Lease (None if there is none); records its
    renewTime in ``observations`` at ``now`` (controller clock)."""
    text = None if lease is None else lease_renew_text(lease)
    sighting = observations.see(kind=LEASE, name=name, value=text, now=now)
    if lease is None:
        return None
    return dataclasses.replace(lease_facts(lease), observed_at=None if text is None else sighting.at,
                               first_sight=sighting.first)


def lease_facts(lease: Lease) -> LeaseSnapshot:
    """What a Lease says, without recording an observation (``observed_at`` is a placeholder 0.0:
    for comparing two versions of a Lease, never for judging freshness)."""
    text = lease_renew_text(lease)
    spec = lease.spec
    duration = spec.leaseDurationSeconds if spec is not None else None
    return LeaseSnapshot(renew_time=text, observed_at=None if text is None else 0.0,
                         duration_s=float(duration) if duration else None,
                         annotations=dict(lease.metadata.annotations or {}),
                         holder=spec.holderIdentity if spec is not None else None)


def pod_tolerations(pod: Pod) -> tuple[Toleration, ...]:
    """A pod's tolerations as the decision core's ``Toleration`` values."""
    out = []
    for t in (pod.spec.tolerations or []) if pod.spec else []:
        seconds = float(t.tolerationSeconds) if t.tolerationSeconds is not None else None
        out.append(Toleration(key=t.key or "", operator=t.operator or "Equal", value=t.value or "",
                              effect=t.effect or "", toleration_seconds=seconds))
    return tuple(out)


def taint_to_api(taint: Taint) -> dict[str, str]:
    """A taint as the API's JSON (``timeAdded`` in RFC 3339 when set)."""
    body = {"key": taint.key, "effect": str(taint.effect)}
    if taint.value:
        body["value"] = taint.value
    if taint.time_added is not None:
        body["timeAdded"] = format_rfc3339(taint.time_added)
    return body

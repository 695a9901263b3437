"""From API objects and the controller's observations to the decision core's snapshots
(``edgewatch.controller.model``), and back (a taint, an Event on a Node, as API JSON).

The Lease builder also *records* what it sees (``edgewatch.controller.observations``): the Lease's
renewTime is an identity whose changes the controller times with its own clock; the snapshot
carries that time, never the remote timestamp as an instant (docs/clock-skew.md). The Node builder
takes nothing of the Node's ``status``: the ``EdgeHealthy`` condition there is the controller's own
output (``edgewatch.controller.edgecondition``), and the edge verdict comes from
``edgewatch.controller.verified`` directly.

Untrusted input: every field is optional in the API; a missing or malformed field becomes "absent"
in the snapshot (the decision core treats absence conservatively), never an exception.
"""

from __future__ import annotations

import datetime as dt

from edgewatch.controller.model import LeaseSnapshot, NodeSnapshot, Taint, Toleration
from edgewatch.controller.observations import Observations
from edgewatch.kube.api import Lease, Node, Pod
from edgewatch.kube.leases import lease_renew_text
from edgewatch.leasemark import mark_is_current
from edgewatch.timefmt import format_rfc3339

__all__ = ["event_to_api", "lease_snapshot", "node_snapshot", "pod_tolerations", "taint_to_api"]

#: Observation kind (key of ``Observations``): a node's Lease renewal.
LEASE = "lease"
#: Observation kind: a node's latest *own* Lease renewal (no current delegate mark), kept while
#: carried renewals follow it.
OWN_LEASE = "own-lease"
#: Observation kind: how the current renewal was first seen, ``(renewTime text, carried)``; never
#: reclassified while the renewTime stays.
RENEWAL_KIND = "renewal-kind"


def _ts(value: dt.datetime | None) -> float | None:
    return value.timestamp() if isinstance(value, dt.datetime) else None


def node_snapshot(node: Node) -> NodeSnapshot:
    """The decision core's view of a Node: name, labels, annotations and taints (nothing of its
    ``status``)."""
    meta = node.metadata
    taints = tuple(
        Taint(key=t.key, effect=t.effect, value=t.value or "", time_added=_ts(t.timeAdded))
        for t in ((node.spec.taints or []) if node.spec else [])
    )
    return NodeSnapshot(name=meta.name, labels=dict(meta.labels or {}), annotations=dict(meta.annotations or {}),
                        taints=taints)


def lease_snapshot(lease: Lease | None, *, name: str, observations: Observations, now: float) -> LeaseSnapshot | None:
    """The decision core's view of node ``name``'s Lease (None if there is none); records its
    renewTime in ``observations`` at ``now`` (controller clock)."""
    text = None if lease is None else lease_renew_text(lease)
    sighting = observations.see(kind=LEASE, name=name, value=text, now=now)
    if lease is None:
        return None
    spec = lease.spec
    duration = spec.leaseDurationSeconds if spec is not None else None
    annotations = dict(lease.metadata.annotations or {})
    carried = _first_kind(observations, name=name, text=text, now=now,
                          marked=mark_is_current(annotations=annotations, renew_time=text))
    # The node's own renewal, kept while carried renewals follow it; only one seen happening counts
    # (a first sight after a restart says nothing of when it was made).
    if text is not None and not carried:
        if sighting.first:
            observations.forget(name=name, kind=OWN_LEASE)
        else:
            observations.see(kind=OWN_LEASE, name=name, value=text, now=sighting.at)
    own = observations.get(kind=OWN_LEASE, name=name)
    return LeaseSnapshot(renew_time=text, observed_at=None if text is None else sighting.at, first_sight=sighting.first,
                         duration_s=float(duration) if duration else None, annotations=annotations,
                         holder=spec.holderIdentity if spec is not None else None,
                         own_observed_at=None if own is None else own.at, carried=carried)


def _first_kind(observations: Observations, *, name: str, text: str | None, now: float, marked: bool) -> bool:
    """Whether the renewal ``text`` is carried, as first seen: the mark's verdict at the first look
    at this renewTime, kept for as long as it stays (an annotation written after the renewal, a
    mark removed or spoiled, changes nothing of what the renewal was)."""
    old = observations.get(kind=RENEWAL_KIND, name=name)
    if old is not None and isinstance(old.value, tuple) and old.value[0] == text:
        return bool(old.value[1])
    observations.see(kind=RENEWAL_KIND, name=name, value=(text, marked), now=now)
    return marked


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


def event_to_api(*, node: str, uid: str | None, reason: str, message: str, type_: str, component: str,
                 now: float, suffix: str) -> dict[str, object]:
    """An Event on Node ``node`` as the API's JSON (``core/v1``, in ``default`` as kubectl shows
    Node Events), named ``<node>.<suffix>``; ``now`` in seconds since the epoch."""
    at = format_rfc3339(now)
    return {
        "metadata": {"name": f"{node}.{suffix}", "namespace": "default"},
        "involvedObject": {"kind": "Node", "name": node, "uid": uid, "apiVersion": "v1"},
        "reason": reason, "message": message, "type": type_,
        "source": {"component": component}, "reportingComponent": component,
        "firstTimestamp": at, "lastTimestamp": at, "count": 1,
    }

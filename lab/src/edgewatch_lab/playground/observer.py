"""What the real apiserver shows, recorded over time: node states, Ready, taints, pod evictions and
endpoint removals, for the report (``edgewatch_lab.playground.report``) and the live table.

The observer polls (every ``interval_s``, default 0.25 s) the Nodes, the workload's Pods and its
Service's EndpointSlices and appends every change it sees, with times in seconds from the
scenario's start. Polling keeps it simple and restart-proof; the resolution of every figure in a
report is therefore ``interval_s`` (plus one API round trip).

Definitions (the report's vocabulary):
- state: with edgewatch, the controller's ``edgewatch.io/state`` node annotation (normal when
  absent) of a covered node; in the baseline, and for nodes edgewatch does not cover, ``normal``
  while the Node's Ready condition is True, else ``not_ready``;
- touched: edgewatch left a mark on a node — its state annotation, one of its taints, or a
  delegated-heartbeat mark on the node's Lease — recorded once per kind of mark;
- marks: the whole set of edgewatch's marks on a node and its Lease, each time it changes, by the
  lab's own definition (``edgewatch_lab.playground.marks``; what ``clean_at_end`` reads);
- eviction: a workload pod bound to the node gets a deletionTimestamp with the DisruptionTarget
  condition (taint manager, Eviction API); a ReplicaSet scaling down is not an eviction;
- endpoint removal: a workload pod bound to the node stops being a ready endpoint while it has no
  deletionTimestamp (its node went NotReady and kube-controller-manager marked it not ready);
- Lease state: ``own``, ``carried`` (a current delegated-heartbeat mark) or ``mark-copied`` (the
  mark's annotations on a Lease renewed since, e.g. by a kubelet that copied the Lease it read);
- live ready endpoints: ready endpoints of the Service whose pod's node is not down (killed and
  not revived), the measure of ``replaced_within_s``;
- StatefulSet pods: for each StatefulSet in ``recording.statefulsets``, its pods (those it owns)
  with their uid, node, Ready condition and deletionTimestamp, each change recorded
  (``edgewatch_lab.playground.statefulsets.record_pods``). A pod is told apart by its uid: a
  StatefulSet's replacement pod has the same name.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from lightkube import AsyncClient
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.discovery_v1 import EndpointSlice

from edgewatch.names import (
    DELEGATE_HEARTBEAT_ANNOTATION,
    DELEGATED_VIA_ANNOTATION,
    DOMAIN,
    EDGE_CONDITION_TYPE,
    NODE_LEASE_NAMESPACE,
)
from edgewatch.kube.leases import MARK_ANNOTATIONS, lease_renew_text, mark_is_current
from edgewatch_lab.playground.marks import lease_marks, node_marks
from edgewatch_lab.playground.superedge import node_state as superedge_state
from edgewatch_lab.playground.report import Recording
from edgewatch_lab.playground.statefulsets import record_pods
from edgewatch_lab.testing.kubeletsim import pod_ready
from edgewatch.kube.errors import API_ERRORS

STATE_ANNOTATION = "edgewatch.io/state"


@dataclass
class NodeView:
    """The newest look at one node, for the live table."""

    state: str = "normal"
    ready: str = "?"
    edge: str = "-"
    #: Pods bound to the node (not being deleted) at the last successful poll; None: no poll
    #: has succeeded yet (not "no pods").
    pods: int | None = None
    taints: frozenset[str] = frozenset()
    delegate: str = "-"


@dataclass
class Observer:
    """Polls the API and fills a ``Recording``.

    Args:
        client: admin API client.
        recording: where to append (its ``nodes`` must hold a NodeRecord per node).
        namespace: the workload's namespace; service: its Service name.
        edgewatch: False in baseline runs (state comes from Ready then).
        t0: monotonic time of the scenario's start.
        superedge: a SuperEdge run: a covered node's state is SuperEdge's verdict
            (``edgewatch_lab.playground.superedge.node_state``).
    """

    client: AsyncClient
    recording: Recording
    namespace: str
    service: str
    edgewatch: bool
    t0: float
    superedge: bool = False
    views: dict[str, NodeView] = field(default_factory=dict)
    _ready_eps: set[str] = field(default_factory=set)
    _deleting: set[str] = field(default_factory=set)
    _pod_node: dict[str, str] = field(default_factory=dict)
    _renew_text: dict[str, str | None] = field(default_factory=dict)
    errors: int = 0

    def now(self) -> float:
        """Seconds since the scenario's start."""
        return round(time.monotonic() - self.t0, 3)

    async def poll(self) -> None:
        """Look once and record what changed. API errors are counted, never raised."""
        try:
            nodes = [n async for n in self.client.list(Node)]
            # Slices before pods: a pod whose endpoint went because it is being deleted is then
            # already seen as deleting (no false "endpoint removal" from the gap between the lists).
            slices = [s async for s in self.client.list(
                EndpointSlice, namespace=self.namespace, labels={"kubernetes.io/service-name": self.service})]
            pods = [p async for p in self.client.list(Pod, namespace=self.namespace)]
            leases = [x async for x in self.client.list(Lease, namespace=NODE_LEASE_NAMESPACE)]
        except API_ERRORS as exc:
            self.errors += 1
            self.recording.observer_errors.append((self.now(), f"{type(exc).__name__}: {exc}"[:200]))
            return
        t = self.now()
        marks: dict[str, list[str]] = {}
        for node in nodes:
            self._node(node, t)
            marks[node.metadata.name] = node_marks(
                taints=[(tt.key, tt.value or "") for tt in ((node.spec.taints or []) if node.spec else [])],
                annotations=node.metadata.annotations or {},
                conditions=[c.type for c in ((node.status.conditions or []) if node.status else [])])
        for lease in leases:
            ann = lease.metadata.annotations or {}
            if lease.metadata.name in marks:
                marks[lease.metadata.name] += lease_marks(ann)
            if DELEGATE_HEARTBEAT_ANNOTATION in ann or DELEGATED_VIA_ANNOTATION in ann:
                self._touch(lease.metadata.name, t, f"lease mark {ann.get(DELEGATED_VIA_ANNOTATION, '?')}")
            self._lease(lease, t)
        for name, now in marks.items():
            self._record_marks(name, t, sorted(now))
        counts: dict[str, int] = {}
        for pod in pods:
            name, node_name = pod.metadata.name, (pod.spec.nodeName if pod.spec else None) or ""
            if node_name:
                self._pod_node[name] = node_name
                if pod.metadata.deletionTimestamp is None:
                    counts[node_name] = counts.get(node_name, 0) + 1
            # By uid: a StatefulSet's replacement pod has its predecessor's name.
            uid = pod.metadata.uid or name
            if pod.metadata.deletionTimestamp is not None and uid not in self._deleting:
                self._deleting.add(uid)
                record = self.recording.nodes.get(node_name)
                if record is not None and _disrupted(pod):
                    record.evictions.append({"t": t, "pod": name})
        ready = set()
        addresses: set[str] = set()
        for sl in slices:
            ports = [p.port for p in sl.ports or [] if p.port is not None]
            for ep in sl.endpoints or []:
                if ep.targetRef is not None and ep.conditions is not None and ep.conditions.ready:
                    ready.add(ep.targetRef.name)
                    addresses.update(f"{a}:{port}" for a in ep.addresses for port in ports)
        served = sorted(addresses)
        if not self.recording.service_endpoints or self.recording.service_endpoints[-1][1] != served:
            self.recording.service_endpoints.append((t, served))
        existing = {p.metadata.name for p in pods if p.metadata.deletionTimestamp is None}
        for name in self._ready_eps - ready:
            if name in existing:
                record = self.recording.nodes.get(self._pod_node.get(name, ""))
                if record is not None:
                    record.endpoint_removals.append({"t": t, "pod": name})
        self._ready_eps = ready
        live = sum(1 for name in ready if not self._down(self._pod_node.get(name, "")))
        if not self.recording.live_ready or self.recording.live_ready[-1][1] != live:
            self.recording.live_ready.append((t, live))
        if self.recording.statefulsets:
            self._statefulsets(pods, t)
        for name, view in self.views.items():
            view.pods = counts.get(name, 0)
            record = self.recording.nodes.get(name)
            if record is not None and view.pods:
                record.had_pods = True

    def _statefulsets(self, pods: list[Pod], t: float) -> None:
        """Record the pods of each declared StatefulSet (its controller's ownerReference)."""
        owned: dict[str, list[dict[str, object]]] = {name: [] for name in self.recording.statefulsets}
        for pod in pods:
            owner = next((o.name for o in pod.metadata.ownerReferences or []
                          if o.kind == "StatefulSet" and o.controller), None)
            if owner not in owned:
                continue
            owned[owner].append({
                "pod": pod.metadata.name, "uid": pod.metadata.uid or pod.metadata.name,
                "node": (pod.spec.nodeName if pod.spec else None) or "",
                "ready": pod_ready(pod),
                "deleting": pod.metadata.deletionTimestamp is not None})
        for name, series in self.recording.statefulsets.items():
            record_pods(series, t, owned[name])

    def _node(self, node: Node, t: float) -> None:
        name = node.metadata.name
        record = self.recording.nodes.get(name)
        if record is None:
            return
        view = self.views.setdefault(name, NodeView())
        ready = "Unknown"
        edge = "-"
        for cond in (node.status.conditions or []) if node.status else []:
            if cond.type == "Ready":
                ready = cond.status
            elif cond.type == EDGE_CONDITION_TYPE:
                edge = {"True": "healthy", "False": "unhealthy"}.get(cond.status, "unknown")
        if ready != "True" and (not record.not_ready or record.not_ready[-1][1] is not None):
            record.not_ready.append([t, None])
        elif ready == "True" and record.not_ready and record.not_ready[-1][1] is None:
            record.not_ready[-1][1] = t
        annotations = node.metadata.annotations or {}
        if self.edgewatch and record.covered:
            state = annotations.get(STATE_ANNOTATION, "normal")
        elif self.superedge and record.covered:
            state = superedge_state(annotations, ready)
        else:
            state = "normal" if ready == "True" else "not_ready"
        if STATE_ANNOTATION in annotations:
            self._touch(name, t, f"state {annotations[STATE_ANNOTATION]}")
        if not record.states or record.states[-1][1] != state:
            record.states.append((t, state))
        taints = frozenset(f"{tt.key}:{tt.effect}" for tt in ((node.spec.taints or []) if node.spec else []))
        for taint in sorted(taints - view.taints):
            record.taints.append((t, taint, "added"))
            if taint.startswith(DOMAIN + "/"):
                self._touch(name, t, f"taint {taint}")
        for taint in sorted(view.taints - taints):
            record.taints.append((t, taint, "removed"))
        view.state, view.ready, view.edge, view.taints = state, ready, edge, taints

    def _lease(self, lease: Lease, t: float) -> None:
        record = self.recording.nodes.get(lease.metadata.name)
        if record is None:
            return
        ann = lease.metadata.annotations or {}
        renew = lease_renew_text(lease)
        carried = mark_is_current(annotations=ann, renew_time=renew)
        holder = lease.spec.holderIdentity if lease.spec is not None else None
        if renew is not None and self._renew_text.get(record.name) != renew and not carried and holder == record.name:
            record.renewals.append(t)
        self._renew_text[record.name] = renew
        if carried:
            state = "carried"
        elif any(k in ann for k in MARK_ANNOTATIONS):
            state = "mark-copied"
        else:
            state = "own"
        if holder != record.name:
            state += f" holder={holder}"
        if not record.lease or record.lease[-1][1] != state:
            record.lease.append((t, state))

    def _record_marks(self, name: str, t: float, marks: list[str]) -> None:
        record = self.recording.nodes.get(name)
        if record is not None and (not record.marks or record.marks[-1][1] != marks):
            record.marks.append((t, marks))

    def _down(self, node: str) -> bool:
        record = self.recording.nodes.get(node)
        return record is not None and bool(record.killed_at) and (
            not record.revived_at or max(record.revived_at) < max(record.killed_at))

    def _touch(self, name: str, t: float, what: str) -> None:
        """Record edgewatch's mark ``what`` on node ``name`` the first time it is seen."""
        record = self.recording.nodes.get(name)
        if record is not None and what not in {w for _t, w in record.touched}:
            record.touched.append((t, what))


def _disrupted(pod: Pod) -> bool:
    """Whether a deleted pod was evicted (taint manager, Eviction API, preemption: each sets the
    ``DisruptionTarget`` condition before deleting, Kubernetes >= 1.26) rather than removed by its
    owner (a ReplicaSet scaling down sets none)."""
    conditions = pod.status.conditions if pod.status is not None else None
    return any(c.type == "DisruptionTarget" and c.status == "True" for c in conditions or [])

"""The controller's reconciler: makes each Node's taints, annotations and pods match the plan of
``edgewatch.controller.decision`` — level-triggered, so a restart recomputes the same answer.

Triggers: watches on Nodes and on Leases in ``kube-node-lease`` put the node on a deduplicating
work queue; the plan's ``requeue_after_s`` schedules the next look (when a confirmation or autonomy
time runs out); a full resync every ``resync_s`` catches anything missed.

What it writes (and nothing else):
- ``spec.taints``: only ``edgewatch.io/cloud-unreachable:NoSchedule`` and ``edgewatch.io/failed:NoExecute``;
  every other taint is kept as is (optimistic concurrency: the write carries the resourceVersion
  it read, a 409 re-reads);
- ``metadata.annotations``: ``edgewatch.io/state`` and ``edgewatch.io/unreachable-since`` — the
  state of an outage lives in the API, not in memory (OpenYurt kept taint counters in memory and a
  restart left taints stuck);
- Events on the Node for each state transition;
- the Lease of a node kept under the unknown policy's autonomy time while nobody can carry its
  heartbeat (``_hold``), marked ``delegated-via: autonomy``;
- evictions (policy/v1 Eviction, so PodDisruptionBudgets are honoured) of the pods of a FAILED
  node that do not tolerate the failed taint long enough; DaemonSet and mirror pods are left alone
  as ``kubectl drain`` does.

Limits: works next to the stock node lifecycle controller, never instead of it; it does not
force-delete pods (a pod evicted from a dead node stays Terminating until the node comes back or
is deleted, as in stock Kubernetes, but it leaves the endpoints and is replaced at once).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any

import httpx2 as httpx
from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Event, Node, Pod
from lightkube.types import PatchType

from edgewatch.agent.delegation import RenewOutcome, renew_on_behalf
from edgewatch.controller.decision import (
    CloudView,
    ControllerConfig,
    NodeState,
    NodePlan,
    annotation_patch,
    merge_taints,
    plan,
    pod_eviction_due,
)
from edgewatch.controller.metrics import ControllerMetrics
from edgewatch.controller.snapshots import lease_snapshot, node_snapshot, pod_tolerations, taint_to_api
from edgewatch.names import NODE_LEASE_NAMESPACE

log = logging.getLogger(__name__)

_API_ERRORS = (ApiError, httpx.HTTPError, OSError)


def _rfc3339(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _skip_eviction(pod: Pod) -> bool:
    """DaemonSet pods come straight back; mirror pods cannot be evicted (kubectl drain's rules)."""
    meta = pod.metadata
    if meta.deletionTimestamp is not None:
        return True
    if (meta.annotations or {}).get("kubernetes.io/config.mirror"):
        return True
    return any(ref.kind == "DaemonSet" for ref in meta.ownerReferences or [])


class Reconciler:
    """Reconciles every Node against the decision table.

    Args:
        client: API client with the controller's RBAC.
        config: the decision's settings.
        metrics: where to count.
        resync_s: full resync period, seconds (default 30 s).
        hold_interval_s: how often an autonomy-held Lease is renewed, seconds (default 5 s: half the
            kubelet's 10 s, so kube-controller-manager never sees it stale).
        clock: wall clock, seconds since the epoch (injectable for tests).
    """

    def __init__(self, *, client: AsyncClient, config: ControllerConfig, metrics: ControllerMetrics,
                 resync_s: float = 30.0, hold_interval_s: float = 5.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.config = config
        self.metrics = metrics
        self.resync_s = resync_s
        self.hold_interval_s = hold_interval_s
        self.clock = clock
        self.plans: dict[str, NodePlan] = {}
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()
        self._timers: dict[str, asyncio.TimerHandle] = {}

    # -- queue -------------------------------------------------------------------------------------

    def enqueue(self, name: str) -> None:
        """Put ``name`` on the work queue (once, however often it is asked)."""
        if name not in self._queued:
            self._queued.add(name)
            self._queue.put_nowait(name)

    def _enqueue_after(self, name: str, delay_s: float) -> None:
        old = self._timers.pop(name, None)
        if old is not None:
            old.cancel()
        loop = asyncio.get_running_loop()
        self._timers[name] = loop.call_later(max(0.05, delay_s), self.enqueue, name)

    # -- loops -------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Watch, resync and work until cancelled."""
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._watch(Node, namespace=None, on_event=self._on_node))
                tg.create_task(self._watch(Lease, namespace=NODE_LEASE_NAMESPACE, on_event=self._on_lease))
                tg.create_task(self._resync())
                tg.create_task(self._worker())
        finally:
            for timer in self._timers.values():
                timer.cancel()

    async def _watch(self, resource: Any, *, namespace: str | None, on_event: Callable[[str, Any], None]) -> None:
        """Watch ``resource`` forever, re-establishing the watch after any API error."""
        kind = resource.__name__.lower()
        while True:
            try:
                async for op, obj in self.client.watch(resource, namespace=namespace, server_timeout=120):
                    on_event(op, obj)
            except _API_ERRORS as exc:
                log.info("%s watch interrupted: %s", kind, exc or type(exc).__name__)
            await asyncio.sleep(1)

    def _on_node(self, op: str, node: Node) -> None:
        if op == "DELETED":
            self.plans.pop(node.metadata.name, None)
        else:
            self.enqueue(node.metadata.name)

    def _on_lease(self, op: str, lease: Lease) -> None:
        if op != "DELETED":
            self.enqueue(lease.metadata.name)

    async def _resync(self) -> None:
        while True:
            try:
                async for node in self.client.list(Node):
                    self.enqueue(node.metadata.name)
            except _API_ERRORS as exc:
                log.info("resync failed: %s", exc or type(exc).__name__)
            await asyncio.sleep(self.resync_s)

    async def _worker(self) -> None:
        while True:
            name = await self._queue.get()
            self._queued.discard(name)
            started = time.monotonic()
            try:
                requeue = await self.reconcile(name)
                self.metrics.reconciles.labels(result="ok").inc()
            except _API_ERRORS as exc:
                log.info("reconcile %s failed: %s; retrying", name, exc or type(exc).__name__)
                self.metrics.reconciles.labels(result="error").inc()
                requeue = 1.0
            except Exception:  # a bug must cost one node a retry, never the whole controller
                log.exception("reconcile %s crashed; retrying in 5 s", name)
                self.metrics.reconciles.labels(result="crash").inc()
                requeue = 5.0
            self.metrics.reconcile_seconds.observe(time.monotonic() - started)
            if requeue is not None:
                self._enqueue_after(name, requeue)
            self._export_states()

    def _export_states(self) -> None:
        counts: dict[str, int] = {}
        for p in self.plans.values():
            counts[p.effective_state.value] = counts.get(p.effective_state.value, 0) + 1
        for state in ("normal", "disconnected", "failed", "unknown"):
            self.metrics.nodes.labels(state=state).set(counts.get(state, 0))

    # -- one node ----------------------------------------------------------------------------------

    async def reconcile(self, name: str) -> float | None:
        """Make node ``name`` match its plan. Returns seconds until it should be looked at again
        (None = only on change). Raises API errors for the worker's retry."""
        try:
            node = await self.client.get(Node, name)
        except ApiError as exc:
            if exc.status.code == 404:
                self.plans.pop(name, None)
                return None
            raise
        try:
            lease = await self.client.get(Lease, name, namespace=NODE_LEASE_NAMESPACE)
        except ApiError as exc:
            if exc.status.code != 404:
                raise
            lease = None
        snap = node_snapshot(node)
        now = self.clock()
        p = plan(node=snap, lease=lease_snapshot(lease), now=now, config=self.config)
        for warning in p.warnings:
            log.warning("node %s: %s", name, warning)
        previous = self.plans.get(name)
        self.plans[name] = p
        if previous is None or previous.effective_state != p.effective_state:
            log.info("node %s: %s", name, p.explanation,
                     extra={"kind": "state", "node": name, "state": p.effective_state.value,
                            "cloud": p.cloud.value, "edge": p.edge.value})

        merged = merge_taints(current=snap.taints, managed=p.taints)
        if merged != snap.taints:
            body = {"metadata": {"resourceVersion": node.metadata.resourceVersion},
                    "spec": {"taints": [taint_to_api(t) for t in merged]}}
            try:
                await self.client.patch(Node, name, body, patch_type=PatchType.MERGE)
            except ApiError as exc:
                if exc.status.code == 409:
                    return 0.05  # someone else wrote the node: re-read and re-plan at once
                raise
            log.info("node %s: taints now %s", name, [f"{t.key}:{t.effect}" for t in merged if t.ident in
                                                     {m.ident for m in p.taints}] or "none of ours")
        annotations = annotation_patch(current=snap.annotations, desired=p.annotations)
        if annotations:
            await self.client.patch(Node, name, {"metadata": {"annotations": annotations}},
                                    patch_type=PatchType.MERGE)
        if p.event is not None:
            await self._record_event(node, reason=p.event.reason, message=p.event.message, type_=p.event.type)
            self.metrics.transitions.labels(to=p.effective_state.value).inc()

        requeue = p.requeue_after_s
        if lease is not None and p.cloud is CloudView.LOST and p.state in (NodeState.DISCONNECTED, NodeState.UNKNOWN):
            await self._hold(name)
            requeue = self.hold_interval_s if requeue is None else min(requeue, self.hold_interval_s)
        if p.evict_pods:
            pod_requeue = await self._evict(name, p, now)
            if pod_requeue is not None:
                requeue = pod_requeue if requeue is None else min(requeue, pod_requeue)
        return requeue

    async def _hold(self, name: str) -> None:
        """Autonomy hold: renew the Lease of a node we keep pods on although nobody can carry its
        heartbeat (e.g. a whole pool cut off), so kube-controller-manager does not mark it NotReady,
        pull its pods from the endpoints and evict them before our own policy says so. Marked
        ``delegated-via: autonomy``, which the cloud view reads as no heartbeat (LOST)."""
        now = dt.datetime.fromtimestamp(self.clock(), dt.timezone.utc)
        result = await renew_on_behalf(client=self.client, node=name, delegate="edgewatch-controller",
                                       via="autonomy", alive_at=now, min_age_s=self.hold_interval_s)
        self.metrics.holds.labels(outcome=result.outcome.value).inc()
        if result.outcome not in (RenewOutcome.RENEWED, RenewOutcome.NOT_DUE):
            log.info("autonomy hold of %s: %s %s", name, result.outcome.value, result.detail)

    async def _evict(self, name: str, p: NodePlan, now: float) -> float | None:
        """Evict the due pods of a FAILED node; returns seconds until the next pod is due."""
        added = p.failed_taint_added_at if p.failed_taint_added_at is not None else now
        next_due: float | None = None
        async for pod in self.client.list(Pod, namespace="*", fields={"spec.nodeName": name}):
            if _skip_eviction(pod):
                continue
            due = pod_eviction_due(tolerations=pod_tolerations(pod), taint_added_at=added, now=now)
            if due is None:
                continue
            if due > now:
                next_due = due - now if next_due is None else min(next_due, due - now)
                continue
            meta = pod.metadata
            try:
                await self.client.create(Pod.Eviction(metadata=ObjectMeta(name=meta.name, namespace=meta.namespace)),
                                         name=meta.name, namespace=meta.namespace)
            except ApiError as exc:
                if exc.status.code == 429:  # a PodDisruptionBudget says not now
                    self.metrics.evictions.labels(result="blocked").inc()
                    next_due = 5.0 if next_due is None else min(next_due, 5.0)
                    continue
                if exc.status.code == 404:
                    continue
                raise
            self.metrics.evictions.labels(result="evicted").inc()
            log.info("evicted %s/%s from failed node %s", meta.namespace, meta.name, name,
                     extra={"kind": "evicted", "node": name, "pod": f"{meta.namespace}/{meta.name}"})
        return next_due

    async def _record_event(self, node: Node, *, reason: str, message: str, type_: str) -> None:
        now = _rfc3339(self.clock())
        event = Event.from_dict({
            "metadata": {"name": f"{node.metadata.name}.{secrets.token_hex(6)}", "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": node.metadata.name, "uid": node.metadata.uid,
                               "apiVersion": "v1"},
            "reason": reason, "message": message, "type": type_,
            "source": {"component": "edgewatch-controller"}, "reportingComponent": "edgewatch-controller",
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        })
        try:
            await self.client.create(event)
        except ApiError as exc:
            log.info("could not record event %s on %s: %s", reason, node.metadata.name, exc)

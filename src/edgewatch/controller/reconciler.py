"""The controller's reconciler: makes each covered Node's taints, annotations and pods match the plan
of ``edgewatch.controller.decision`` — level-triggered, so a restart recomputes the same answer.

Triggers: the cloud door's informers (``edgewatch.kube.informer``, each with a store: exact
``ADDED``/``MODIFIED``/``DELETED`` after every re-list, a Node deleted during a cut included) on
Nodes (the controller's one Node informer, shared with the roster publisher:
``edgewatch.controller.nodeinformer``), on Leases in ``kube-node-lease`` and on the
``edgewatch-config`` ConfigMap put nodes on a de-duplicating work queue
(``edgewatch.controller.workqueue``) served by a bounded pool of workers, one node per worker at a
time, so one slow node (a hanging eviction) never holds up another; the plan's ``requeue_after_s``
schedules the next look (a confirmation or autonomy time running out); a resync every ``resync_s``
looks at every node again (the names in the shared Node informer's store, as client-go's informers
resync from their cache: no LIST); a change of the ConfigMap's ``coverLabel`` re-plans every node; a
change of a node's verified verdict (``edgewatch.controller.evidence``) looks at it again.

Data flows one way: watches and the verified verdict -> the pure core (``plan``) -> the writes. A
look that finds a node's inputs unchanged before its plan's next deadline keeps that plan
(``edgewatch.controller.quiet``, ``edgewatch.controller.planbook``); a normal node's own Lease renewal
only moves its next look.

Clocks (docs/clock-skew.md): every watch event and every read records, on the controller's own
monotonic clock, when the Lease's renewTime changed (``edgewatch.controller.observations``); the
verified verdict carries when the controller counted it; the plan judges freshness from those times
only.

What it writes (and nothing else):

- ``spec.taints``: only ``edgewatch.io/cloud-unreachable:NoSchedule``, ``edgewatch.io/failed:NoExecute``
  and, opt-in, ``node.kubernetes.io/out-of-service=edgewatch:NoExecute`` (docs/out-of-service.md);
  every other taint is kept as is (the write carries the resourceVersion it read; a 409 re-reads);
- ``metadata.annotations``: ``edgewatch.io/state`` and ``edgewatch.io/unreachable-since`` — the
  state of an outage lives in the API, not in memory (OpenYurt kept taint counters in memory and a
  restart left taints stuck);
- Events on the Node for each state transition;
- the ``EdgeHealthy`` condition (status subresource): the verified verdict, for ``kubectl`` — output
  only, never read back (``edgewatch.controller.edgecondition``);
- the Lease of a node kept under the unknown policy's autonomy time while nobody can carry its
  heartbeat (``edgewatch.kube.leases.hold_renewal``), marked ``delegated-via: autonomy``;
- the group rosters, ConfigMaps ``edgewatch-roster*`` in the edgewatch namespace, on membership
  change only (``edgewatch.controller.roster``);
- the approval, denial and certificate of agents' coordinator-client CertificateSigningRequests,
  and each pool's CA Secret and CA ConfigMap (``edgewatch.controller.csrsigner``);
- evictions (policy/v1 Eviction, so PodDisruptionBudgets are honoured) of the pods of a FAILED
  node that do not tolerate the failed taint long enough, several at once (bounded); DaemonSet and
  mirror pods are left alone as ``kubectl drain`` does.

Nodes that are not covered (``edgewatch.controller.coverage``) get none of this; what edgewatch left
on one while it was covered (its taints and annotations) is removed once.

Limits: works next to the stock node lifecycle controller, never instead of it; it does not
force-delete pods (a pod evicted from a dead node stays Terminating until the node comes back or
is deleted, as in stock Kubernetes, but it leaves the endpoints and is replaced at once; with the
opt-in out-of-service taint, kube-controller-manager force-deletes it, docs/out-of-service.md). Every API
call has a timeout (``api_timeout_s``); a watch silent for ``watch_timeout_s`` is taken as dead and
re-opened; a failed list or watch is retried with jittered backoff up to
``edgewatch.controller.evidence.CONTROLLER_BACKOFF_MAX_S``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from edgewatch.controller.coverage import CONFIGMAP_NAME, Coverage, pool_out_of_service
from edgewatch.controller.csrsigner import CsrSigner, node_addresses
from edgewatch.controller.cutoff import CutOffTracker, SinceTracker, agent_silent
from edgewatch.controller.decision import plan
from edgewatch.controller.metrics import ControllerMetrics
from edgewatch.controller.model import (
    MANAGED_ANNOTATIONS,
    MIN_REQUEUE_S,
    MANAGED_TAINT_IDS,
    CloudView,
    ControllerConfig,
    LeaseSnapshot,
    NodePlan,
    NodeState,
    OUT_OF_SERVICE_TAINT,
    is_managed_taint,
)
from edgewatch.controller.edgecondition import VERDICT_MESSAGE_REFRESH_S, ShownConditions  # re-exported
from edgewatch.controller.evictions import PodEvictor
from edgewatch.controller.challenges import Challenges
from edgewatch.controller.evidence import (CONTROLLER_BACKOFF_MAX_S, BeaconIssuer, EvidenceInformer,
                                          controller_informer_config)
from edgewatch.controller.nodeinformer import SharedNodeInformer
from edgewatch.controller.moves import LabelMoves
from edgewatch.controller.observations import Observations
from edgewatch.controller.planbook import PlanBook
from edgewatch.controller.roster import RosterPublisher
from edgewatch.controller.seen import SeenObjects
from edgewatch.controller.snapshots import (
    LEASE,
    event_to_api,
    lease_snapshot,
    node_snapshot,
    taint_to_api,
)
from edgewatch.controller.taints import annotation_patch, merge_taints
from edgewatch.controller.verified import VerifiedEdge
from edgewatch.controller.workqueue import WorkQueue, sooner
from edgewatch.kube.leases import RenewOutcome, hold_renewal
from edgewatch.controller.quiet import only_renewed, plan_inputs
from edgewatch.controller.views import challenged_verdict, lease_grace_s, own_renewal_overdue_at, unproven_carry
from edgewatch.kube.api import ApiError, AsyncClient, ConfigMap, Event, Lease, Node, PatchType
from edgewatch.names import DELEGATED_BY_ANNOTATION, IDENTITY_NAMESPACE, NODE_LEASE_NAMESPACE, POOL_LABEL
from edgewatch.timefmt import MonotonicClock, format_micro_time
from edgewatch.kube.errors import API_ERRORS, is_conflict, is_not_found
from edgewatch.kube.informer import Informer
from edgewatch.kube.listwatch import lister_watcher
from edgewatch.kube.resources import CONFIGMAPS, LEASES, ApiResource
from edgewatch.kube.store import Store

__all__ = ["VERDICT_MESSAGE_REFRESH_S", "Reconciler"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Who the autonomy hold and the Events name.
COMPONENT = "edgewatch-controller"


class Reconciler:
    """Reconciles every covered Node against the decision table. It runs the controller's one Node
    informer (``node_informer``) and is one of its two subscribers
    (``edgewatch.controller.nodeinformer.NodeSubscriber``), the roster publisher the other.

    Args:
        client: API client with the controller's RBAC.
        config: the decision's settings.
        metrics: where to count.
        namespace: where the ``edgewatch-config`` ConfigMap lives.
        resync_s: seconds between two looks at every node (default 30 s; it drives no LIST: the
            names come from the shared Node informer's store).
        hold_interval_s: how often an autonomy-held Lease is renewed, seconds (default 5 s: half the
            kubelet's 10 s, so kube-controller-manager never sees it stale).
        workers: nodes reconciled at once (default 8).
        evictions_in_flight: evictions of one failed node's pods at once (default 8).
        api_timeout_s: limit of every API call (a list page, opening a watch), seconds (default 10 s).
        watch_timeout_s: a watch silent this long is taken as dead and re-opened, seconds (the
            informers' ``idle_timeout_s``; default 150 s, above the apiserver's bookmark period
            of about 60 s).
        clock: the controller's clock, seconds since the epoch (default a ``MonotonicClock``: ages
            are monotonic differences); injectable for tests.
        evidence_ttl_s: a statement counts while its beacon is this old at most, seconds (default 30 s).
        beacon_period_s: seconds between beacons (default 5 s; ``edgewatch.controller.evidence``).
        identity_namespace: where the agents' keys and evidence Leases live.
        observations, verified: the state to start from (a warm standby's, kept with the same
            ``clock``: ``edgewatch.controller.standby``; default: empty, a cold start).
    """

    def __init__(self, *, client: AsyncClient, config: ControllerConfig, metrics: ControllerMetrics,
                 namespace: str = "edgewatch", resync_s: float = 30.0, hold_interval_s: float = 5.0,
                 workers: int = 8, evictions_in_flight: int = 8, api_timeout_s: float = 10.0,
                 watch_timeout_s: float = 150.0, clock: Callable[[], float] | None = None,
                 evidence_ttl_s: float = 30.0, beacon_period_s: float = 5.0,
                 identity_namespace: str = IDENTITY_NAMESPACE, observations: Observations | None = None,
                 verified: VerifiedEdge | None = None) -> None:
        if workers < 1 or evictions_in_flight < 1:
            raise ValueError("workers and evictions_in_flight must be >= 1")
        if api_timeout_s <= 0 or watch_timeout_s <= 0:
            raise ValueError("api_timeout_s and watch_timeout_s must be > 0")
        self.client = client
        self.config = config
        self.metrics = metrics
        self.namespace = namespace
        self.resync_s = resync_s
        self.hold_interval_s = hold_interval_s
        self.workers = workers
        self.evictions_in_flight = evictions_in_flight
        self.evictor = PodEvictor(client=client, metrics=metrics, api_timeout_s=api_timeout_s,
                                  in_flight=evictions_in_flight)
        self.api_timeout_s = api_timeout_s
        self.watch_timeout_s = watch_timeout_s
        self.clock = clock or MonotonicClock().now
        self.plans = PlanBook()  # node -> its last plan (read-only mapping), skip memo, state counts
        self._state_gauges = {state: metrics.nodes.labels(state=state.value) for state in NodeState}
        self._reconciles_ok = metrics.reconciles.labels(result="ok")
        self._exported: dict[NodeState, int] = {}  # the state counts last set on the gauge
        self.cut_off = CutOffTracker(metrics.node_cut_off, self.clock)  # per-node cut-off seconds
        self.agents_silent = SinceTracker(metrics.agent_silent, self.clock)  # per-node silent-agent seconds
        self.coverage = Coverage()
        self.observations = observations if observations is not None else Observations()
        self.queue = WorkQueue()
        self._labels: dict[str, dict[str, str]] = {}  # every Node's labels, from the watch
        self.moves = LabelMoves()  # pool and group label changes, told as Warning Events
        self.shown = ShownConditions()  # what we last wrote to each EdgeHealthy (output only)
        self._node_cache: SeenObjects[Node] = SeenObjects()
        self._lease_cache: SeenObjects[Lease] = SeenObjects()
        self._leases: dict[str, LeaseSnapshot] = {}  # node -> its last watched Lease, as a snapshot
        self._held: set[str] = set()  # nodes under the autonomy hold: their Lease is read, not cached
        # nodes whose current carried renewal is not believed: (carrier, first seen, Event recorded)
        self._unproven: dict[str, tuple[str, float, bool]] = {}
        self.verified = verified if verified is not None else VerifiedEdge(
            ttl_s=evidence_ttl_s, on_result=lambda r: metrics.evidence.labels(result=r).inc())
        self.challenges = Challenges(timeout_s=config.challenge_timeout_s, on_due=self.queue.add,
                                     on_result=lambda r: metrics.challenges.labels(result=r).inc(),
                                     incarnation_of=self.verified.incarnation_of, group_of=self.verified.group_of)
        self.beacons = BeaconIssuer(client=client, verified=self.verified, clock=self.clock, namespace=namespace,
                                    period_s=beacon_period_s, api_timeout_s=api_timeout_s,
                                    carry_ahead_s=config.carry_ahead_s, challenges=self.challenges)
        self.evidence = EvidenceInformer(client=client, verified=self.verified, clock=self.clock,
                                         on_change=self.queue.add, namespace=identity_namespace,
                                         watch_timeout_s=watch_timeout_s, api_timeout_s=api_timeout_s,
                                         challenges=self.challenges)
        self.rosters = RosterPublisher(client=client, namespace=namespace, grouping=lambda: self.coverage.config,
                                       api_timeout_s=api_timeout_s,
                                       on_write=lambda r: metrics.roster_writes.labels(result=r).inc())
        self.informer_config = controller_informer_config(api_timeout_s=api_timeout_s, watch_timeout_s=watch_timeout_s)
        self.node_informer = SharedNodeInformer(client=client, subscribers={"reconciler": self, "roster": self.rosters},
                                                config=self.informer_config)
        # node client certificates for the pool coordinator (edgewatch.controller.csrsigner)
        self.csrs = CsrSigner(client=client, metrics=metrics, pool_of=self.pool_of, namespace=namespace,
                              ready=lambda: self.node_informer.synced, api_timeout_s=api_timeout_s,
                              node_addresses=lambda n: node_addresses(self.node_informer.store.objects.get(n)),
                              watch_timeout_s=watch_timeout_s, backoff_max_s=CONTROLLER_BACKOFF_MAX_S)

    # -- loops -------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Follow the ConfigMap and, once its first list is in (no node is planned under the wrong
        coverage), the Nodes and Leases; resync and work until cancelled."""
        config: Store[ConfigMap] = Store(on_event=self._on_config)
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._follow(CONFIGMAPS, model=ConfigMap, store=config, namespace=self.namespace,
                                        field_selector=f"metadata.name={CONFIGMAP_NAME}"))
            await config.synced.wait()  # none listed: the defaults, every node covered
            self.verified.set_grouping(self.coverage.config)
            tg.create_task(self.node_informer.run())
            # Our Lease writes (the autonomy hold) are read back from the API, never awaited in the
            # copy (edgewatch.controller.seen): a re-list needs no restart of it.
            tg.create_task(self._follow(LEASES, model=Lease, store=Store(on_event=self._on_lease),
                                        namespace=NODE_LEASE_NAMESPACE))
            tg.create_task(self._resync())
            tg.create_task(self.beacons.run())
            tg.create_task(self.evidence.run())
            tg.create_task(self.rosters.run())
            tg.create_task(self.csrs.run())
            tg.create_task(self.queue.serve(workers=self.workers, handle=self._handle))

    async def _call(self, call: Awaitable[_T]) -> _T:
        async with asyncio.timeout(self.api_timeout_s):
            return await call

    async def _follow(self, resource: ApiResource, *, model: Any, store: Store[Any], namespace: str,
                      field_selector: str | None = None) -> None:
        """The cloud door's informer over ``resource`` in ``namespace`` into ``store`` (its handler
        gets exact changes, after a re-list too), with the controller's timings, until cancelled."""
        informer: Informer[Any] = Informer(
            source=lister_watcher(self.client, resource, namespace=namespace, field_selector=field_selector),
            sink=store, decode=model.from_dict, name="reconciler", config=self.informer_config)
        await informer.run()

    # -- the shared Node informer's events (edgewatch.controller.nodeinformer.NodeSubscriber) ------

    def nodes_relisting(self) -> None:
        """A list comes: it shows every Node as it is now, so no wait for our own writes holds."""
        self._node_cache.restart()

    def nodes_listed(self) -> None:
        """Every Node is known: nothing to do (the list's changes queued their nodes)."""

    def on_node(self, op: str, node: Node) -> None:
        """A Node changed (``DELETED``: forget it; else queue it)."""
        name = node.metadata.name
        self._node_cache.seen(name, None if op == "DELETED" else node)
        if op == "DELETED":
            self._forget_node(name)
            self.queue.forget(name)
            self._labels.pop(name, None)
            self.moves.forget(name)
            self._held.discard(name)
            self.verified.set_node(name, None)
            return
        self._labels[name] = dict(node.metadata.labels or {})
        if self.moves.note(name, self._labels[name], group_label=self.coverage.group_label) is not None:
            self.metrics.node_moves.inc()
        self._cover_in_evidence(name)
        self.queue.add(name)

    def _forget_node(self, name: str) -> None:
        """Drop what is kept of a deleted Node: its plan, trackers, shown condition, observations."""
        self.plans.pop(name)
        self.cut_off.forget(name)
        self.agents_silent.forget(name)
        self.shown.forget(name)
        self.observations.forget(name=name)
        self._unproven.pop(name, None)
        self.challenges.forget(name)

    def pool_of(self, name: str) -> str | None:
        """The pool (label ``edgewatch.io/pool``) of a covered node, or None: whose CA signs its certificate."""
        labels = self._labels.get(name)
        return (labels.get(POOL_LABEL) or None) if labels is not None and self.coverage.covers(labels) else None

    def _cover_in_evidence(self, name: str) -> None:
        """Tell the verified view whether ``name`` is a covered node, and its labels (its group)."""
        labels = self._labels.get(name)
        self.verified.set_node(name, labels if labels is not None and self.coverage.covers(labels) else None)

    def _on_lease(self, op: str, lease: Lease) -> None:
        name = lease.metadata.name
        self._lease_cache.seen(name, None if op == "DELETED" else lease)
        after = lease_snapshot(None if op == "DELETED" else lease, name=name, observations=self.observations,
                               now=self.clock())
        before = self._leases.pop(name, None) if after is None else self._leases.get(name)
        if after is not None:
            self._leases[name] = after
        # A normal node's own renewal only moves its heartbeat deadline: move its next look there
        # instead of reconciling it (edgewatch.controller.quiet).
        if (name not in self._held and before is not None and after is not None
                and only_renewed(before=before, after=after, plan=self.plans.get(name))):
            assert after.observed_at is not None  # a renewTime: only_renewed checked
            grace = lease_grace_s(lease=after, config=self.config)
            if self.queue.reschedule(name, grace):
                self.plans.renewed(name, before=before, after=after, due_at=after.observed_at + grace)
                self.metrics.reconciles_skipped.inc()
                return
        self.queue.add(name)

    def _on_config(self, op: str, cm: ConfigMap) -> None:
        changed = self._apply_config(None if op == "DELETED" else (cm.data or {}))
        self.verified.set_grouping(self.coverage.config)
        self.rosters.touch()  # the grouping switches or the group label may have changed
        if changed:
            for name in list(self._labels):
                self._cover_in_evidence(name)
            for name in sorted(set(self.node_informer.names()) | set(self.plans)):
                self.queue.add(name)

    def _apply_config(self, data: dict[str, str] | None) -> bool:
        """Adopt the ConfigMap's data; True iff the cover label changed."""
        try:
            changed = self.coverage.apply(data)
        except ValueError as exc:
            log.error("refusing %s: %s; keeping coverLabel %r", CONFIGMAP_NAME, exc, self.coverage.cover_label,
                      extra={"kind": "config_rejected"})
            self.metrics.config_rejected.inc()
            return False
        if changed:
            log.info("coverLabel now %r, outOfServicePools %s: re-planning every node", self.coverage.cover_label,
                     sorted(self.coverage.out_of_service_pools) or "none",
                     extra={"kind": "coverage", "cover_label": self.coverage.cover_label})
        return changed

    async def _resync(self) -> None:
        """Look at every node every ``resync_s``: the names in the shared Node informer's store (as
        client-go's informers resync from their cache; no LIST: the store is exact after every
        re-list). A look that finds nothing new costs no plan (``edgewatch.controller.planbook``)."""
        while True:
            await asyncio.sleep(self.resync_s)
            for name in self.node_informer.names():
                self.queue.add(name)

    async def _handle(self, name: str) -> None:
        """One node, from the queue: reconcile, count, schedule the next look."""
        started = time.monotonic()
        try:
            requeue = await self.reconcile(name)
            self._reconciles_ok.inc()
        except API_ERRORS as exc:
            log.info("reconcile %s failed: %s; retrying", name, exc or type(exc).__name__)
            self.metrics.reconciles.labels(result="error").inc()
            requeue = 1.0
        except Exception:  # a bug must cost one node a retry, never the whole controller
            log.exception("reconcile %s crashed; retrying in 5 s", name)
            self.metrics.reconciles.labels(result="crash").inc()
            requeue = 5.0
        self.metrics.reconcile_seconds.observe(time.monotonic() - started)
        if requeue is not None:
            self.queue.add_after(name, max(0.05, requeue))
        self._export_states()

    def _export_states(self) -> None:
        """The state gauge from the plan book's counts (kept as plans come and go: O(1) per look)."""
        counts = self.plans.counts
        if counts != self._exported:
            for state, count in counts.items():
                self._state_gauges[state].set(count)
            self._exported = dict(counts)
        self.metrics.queue_depth.set(len(self.queue))

    # -- one node ----------------------------------------------------------------------------------

    async def reconcile(self, name: str) -> float | None:
        """Make node ``name`` match its plan. Returns seconds until it should be looked at again
        (None = only on change). Raises API errors (and TimeoutError) for the worker's retry."""
        node = self._node_cache.get(name)
        if node is None:  # not seen by the watch yet, or we wrote it since
            self.metrics.api_reads.labels(kind="node").inc()
            try:
                node = await self._call(self.client.get(Node, name))
            except ApiError as exc:
                if is_not_found(exc):
                    self._forget_node(name)
                    return None
                raise
        lease = self._lease_cache.get(name) if name not in self._held else None
        if lease is None:
            self.metrics.api_reads.labels(kind="lease").inc()
            try:
                lease = await self._call(self.client.get(Lease, name, namespace=NODE_LEASE_NAMESPACE))
            except ApiError as exc:
                if not is_not_found(exc):
                    raise
                lease = None
        if (moved := self.moves.take(name)) is not None:
            log.warning(moved, extra={"kind": "node_moved", "node": name})
            await self._record_event(node, reason="NodeMovedPool", message=moved, type_="Warning")
        now = self.clock()
        snap = node_snapshot(node)
        lease_snap = lease_snapshot(lease, name=name, observations=self.observations, now=now)
        if not self.coverage.covers(snap.labels):
            return await self._release(node)
        # The edge view is the verdict the controller verified itself, never the EdgeHealthy condition
        # on the Node (that is our output); a delegate mark needs the node's own word.
        challenge = self.challenges.snapshot(name, own=self.verified.newest(name), now=now)
        requeue_proof: float | None = None
        own = None
        if lease_snap is not None:
            own = self.verified.own_life(name, now=now)
            why = unproven_carry(node=name, lease=lease_snap, own_carrier=None if own is None else own.heartbeat.carrier)
            if lease_snap.delegation_proven != (why is None):
                lease_snap = dataclasses.replace(lease_snap, delegation_proven=why is None)
            requeue_proof = await self._note_unproven_carry(node, lease_snap, why, now)
        await self._show_verdict(node)
        grace = lease_grace_s(lease=lease_snap, config=self.config)
        verdict = challenged_verdict(verdict=self.verified.verdict(name), challenge=challenge, lease=lease_snap,
                                     seen_alive=self.verified.seen_alive(name), now=now, grace_s=grace)
        oos_pool = pool_out_of_service(labels=snap.labels, pools=self.coverage.out_of_service_pools)
        accused = self.verified.accused(name)  # since when: the challenge's episode, else the verdict's
        inputs = plan_inputs(node=snap, lease=lease_snap, verdict=verdict, config=self.config, now=now,
                             out_of_service_pool=oos_pool, challenge=challenge, accused=accused)
        if self.plans.holds(name, inputs, now):  # nothing new, nothing due: the last plan stands
            self.metrics.plans_reused.inc()
            held = self.plans.get(name)
            if held is not None:
                self.agents_silent.set(name, pool=snap.labels.get(POOL_LABEL), now=now,
                                       active=agent_silent(cloud=held.cloud, own_statement=own is not None))
            return sooner(self.plans.due_in(name, now), requeue_proof)
        p = plan(node=snap, lease=lease_snap, verdict=verdict, now=now, config=self.config,
                 out_of_service_pool=oos_pool, challenge=challenge)
        self.challenges.consider(name, p, episode=accused if accused is not None else verdict and verdict.since,
                                 accused=accused is not None, now=now,
                                 overdue_at=own_renewal_overdue_at(lease=lease_snap, grace_s=grace))
        for warning in p.warnings:
            log.warning("node %s: %s", name, warning)
        previous = self.plans.get(name)
        self.plans.put(name, p)
        self.cut_off.judged(name, pool=snap.labels.get(POOL_LABEL), state=p.effective_state, now=now)
        self.agents_silent.set(name, pool=snap.labels.get(POOL_LABEL), now=now,
                               active=agent_silent(cloud=p.cloud, own_statement=own is not None))
        if previous is None or previous.effective_state != p.effective_state:
            log.info("node %s: %s", name, p.explanation,
                     extra={"kind": "state", "node": name, "state": p.effective_state.value,
                            "cloud": p.cloud.value, "edge": p.edge.value})

        merged = merge_taints(current=snap.taints, managed=p.taints)
        annotations = annotation_patch(current=snap.annotations, desired=p.annotations)
        settled = merged == snap.taints and not annotations and p.event is None and not p.evict_pods
        if merged != snap.taints:
            body = {"metadata": {"resourceVersion": node.metadata.resourceVersion},
                    "spec": {"taints": [taint_to_api(t) for t in merged]}}
            try:
                self._node_cache.wrote(name, await self._call(
                    self.client.patch(Node, name, body, patch_type=PatchType.MERGE)))
            except ApiError as exc:
                if is_conflict(exc):
                    self._node_cache.forget(name)
                    return 0.05  # someone else wrote the node: re-read and re-plan at once
                raise
            ours = [f"{t.key}:{t.effect}" for t in merged if is_managed_taint(t)]
            log.info("node %s: taints now %s", name, ours or "none of ours")
        if annotations:
            self._node_cache.wrote(name, await self._call(self.client.patch(
                Node, name, {"metadata": {"annotations": annotations}}, patch_type=PatchType.MERGE)))
        if p.event is not None:
            await self._record_event(node, reason=p.event.reason, message=p.event.message, type_=p.event.type)
            self.metrics.transitions.labels(to=p.effective_state.value).inc()

        requeue = p.requeue_after_s
        if lease_snap is not None and p.cloud is CloudView.LOST and p.state in (NodeState.DISCONNECTED,
                                                                                NodeState.UNKNOWN):
            self._held.add(name)  # its Lease is read from the API while we write it
            requeue = sooner(requeue, await self._hold(name, lease_snap, now))
            settled = False
        else:
            self._held.discard(name)
        if p.evict_pods:
            requeue = sooner(requeue, await self._evict(name, p, now))
        if settled:
            self.plans.settle(name, inputs=inputs,
                              due_at=None if p.requeue_after_s is None else now + p.requeue_after_s)
        return sooner(requeue, requeue_proof)

    async def _note_unproven_carry(self, node: Node, lease: LeaseSnapshot, why: str | None, now: float) -> float | None:
        """Say once, in a Warning Event on the Node, which carrier's renewals are not believed, once
        they have been seen unproven for ``config.confirm_s`` (a carry's first renewal may reach the
        controller before the statement naming its carrier: that is no lie). Returns seconds until
        the Event is due, or None."""
        name = node.metadata.name
        if why is None:
            self._unproven.pop(name, None)
            return None
        carrier = lease.annotations.get(DELEGATED_BY_ANNOTATION, "")
        held = self._unproven.get(name)
        if held is None or held[0] != carrier:
            held = self._unproven[name] = (carrier, now, False)
        _carrier, since, told = held
        if told:
            return None
        due = since + self.config.confirm_s - now
        if due > 0:
            return max(due, MIN_REQUEUE_S)
        self._unproven[name] = (carrier, since, True)
        self.metrics.unproven_carries.inc()
        log.warning("node %s: not counting its Lease renewals by %s: %s", name, carrier or "?", why,
                    extra={"kind": "unproven_carry", "node": name, "carrier": carrier})
        await self._record_event(node, reason="CarryNotBelieved", type_="Warning",
                                 message=f"Lease renewals by {carrier or 'an unnamed carrier'} are not counted as "
                                         f"heartbeats: {why}")
        return None

    async def _show_verdict(self, node: Node) -> None:
        """Show the node's verified verdict in its ``EdgeHealthy`` condition (for ``kubectl describe
        node``): output only, written when ``ShownConditions.due`` says so from what we last wrote
        (``edgewatch.controller.edgecondition``), never read back."""
        name = node.metadata.name
        counted = self.verified.counted(name)
        if counted is None:
            return
        now = self.clock()
        uid = node.metadata.uid or ""
        condition = self.shown.due(name=name, uid=uid, counted=counted, now=now)
        if condition is None:
            return
        self._node_cache.wrote(name, await self._call(
            self.client.patch(Node.Status, name, {"status": {"conditions": [condition]}})))
        self.shown.wrote(name=name, uid=uid, condition=condition, now=now, counted=counted)

    async def _release(self, node: Node) -> float | None:
        """An uncovered node: stock behaviour. Remove what edgewatch left on it while it was covered
        (our taints and annotations, in one write that carries the resourceVersion), once."""
        name = node.metadata.name
        self.plans.pop(name)
        self.cut_off.forget(name)
        self.agents_silent.forget(name)
        taints = [t for t in (node.spec.taints or [] if node.spec else [])]
        kept = [t for t in taints if (t.key, t.effect) not in MANAGED_TAINT_IDS
                or (t.key, t.effect) == OUT_OF_SERVICE_TAINT.ident and t.value != OUT_OF_SERVICE_TAINT.value]
        stale = {k: None for k in MANAGED_ANNOTATIONS if k in (node.metadata.annotations or {})}
        if len(kept) == len(taints) and not stale:
            return None
        body: dict[str, Any] = {"metadata": {"resourceVersion": node.metadata.resourceVersion}}
        if stale:
            body["metadata"]["annotations"] = stale
        if len(kept) != len(taints):
            body["spec"] = {"taints": [t.to_dict() for t in kept]}
        try:
            self._node_cache.wrote(name, await self._call(
                self.client.patch(Node, name, body, patch_type=PatchType.MERGE)))
        except ApiError as exc:
            if is_conflict(exc):
                self._node_cache.forget(name)
                return 0.05
            raise
        message = (f"node {name} is not covered (coverLabel {self.coverage.cover_label!r}): edgewatch's taints "
                   f"and annotations removed; stock Kubernetes behaviour from now on")
        log.info(message, extra={"kind": "uncovered", "node": name})
        await self._record_event(node, reason="EdgewatchUncovered", message=message, type_="Normal")
        return None

    async def _hold(self, name: str, lease: LeaseSnapshot, now: float) -> float:
        """Autonomy hold: renew the Lease of a node we keep pods on although nobody can carry its
        heartbeat (e.g. a whole pool cut off), so kube-controller-manager does not mark it NotReady,
        pull its pods from the endpoints and evict them before our own policy says so. Marked
        ``delegated-via: autonomy``, which the cloud view reads as no heartbeat (LOST).

        Due when the controller saw the current renewal ``hold_interval_s`` ago or more (its own
        clock; never by the renewTime's age). Returns seconds until the next hold is due."""
        age = float("inf") if lease.observed_at is None else now - lease.observed_at
        if age < self.hold_interval_s:
            return self.hold_interval_s - age
        result = await self._call(hold_renewal(client=self.client, node=name, holder=COMPONENT,
                                               expected_renew_time=lease.renew_time,
                                               now=dt.datetime.fromtimestamp(now, dt.timezone.utc)))
        self.metrics.holds.labels(outcome=result.outcome.value).inc()
        if result.outcome is RenewOutcome.RENEWED and result.renew_time is not None:
            self.observations.see(kind=LEASE, name=name, value=format_micro_time(result.renew_time), now=now)
        else:
            log.info("autonomy hold of %s: %s %s", name, result.outcome.value, result.detail)
        return self.hold_interval_s

    async def _evict(self, name: str, p: NodePlan, now: float) -> float | None:
        """Evict the due pods of a FAILED node (``edgewatch.controller.evictions``); returns seconds
        until the next pod is due (or a retry of a blocked one)."""
        added = p.failed_taint_added_at if p.failed_taint_added_at is not None else now
        return await self.evictor.evict_due(name, taint_added_at=added, now=now)

    async def _record_event(self, node: Node, *, reason: str, message: str, type_: str) -> None:
        event = Event.from_dict(event_to_api(node=node.metadata.name, uid=node.metadata.uid, reason=reason,
                                             message=message, type_=type_, component=COMPONENT, now=self.clock(),
                                             suffix=secrets.token_hex(6)))
        try:
            await self._call(self.client.create(event))
        except API_ERRORS as exc:
            log.info("could not record event %s on %s: %s", reason, node.metadata.name, exc or type(exc).__name__)

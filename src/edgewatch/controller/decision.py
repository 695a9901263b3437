"""The decision table of the edgewatch cloud controller: what happens to an edge node's pods.

Purpose
-------
Stock Kubernetes judges a node only by its heartbeat to the cloud, so a node that is cut off from the
cloud and a node that is dead look the same, and both lose their pods about six minutes after the last
heartbeat. edgewatch combines two views of each node (``edgewatch.controller.views``):

* the **cloud view**, from the node's Lease in ``kube-node-lease``: ``OK`` (a renewal by the node
  itself, observed within the grace, even if carried renewals came after it), ``DELEGATED`` (a renewal by a peer carrying the current
  ``edgewatch.io/delegate-heartbeat`` mark: the node is alive but cannot reach the cloud), ``LOST``
  (no fresh renewal, or only the controller's own autonomy hold, or — while its peers' verified
  verdict is UNHEALTHY — a challenge through the beacon left unanswered past its deadline: a dead node
  cannot sign a statement naming a beacon issued after its death, ``edgewatch.controller.challenges``);
* the **edge view**, from the verdict the controller verified itself
  (:class:`~edgewatch.controller.model.VerifiedVerdict`: the strict majority of the node's group's
  signed statements, counted by the controller, ``edgewatch.controller.verified``): ``HEALTHY``,
  ``UNHEALTHY``, ``UNKNOWN`` (no majority, no verdict yet, or not counted for ``edge_view_ttl_s``);

and decides one :class:`NodeState` per node (TKE Edge's decision table, extended with the three heartbeat cases of
OpenYurt's Yurt-Coordinator)::

    cloud \\ edge         | healthy      | unhealthy | unknown
    ---------------------+--------------+-----------+-------------------
    OK                   | NORMAL       | NORMAL    | NORMAL
    DELEGATED or LOST    | DISCONNECTED | FAILED    | UNKNOWN -> policy

What each state means on the API (we manage our two taints, plus, opt-in, Kubernetes' out-of-service
taint with our value, and never touch anyone else's):

* ``NORMAL``: no edgewatch taint.
* ``DISCONNECTED``: pods stay (and stay in endpoints); ``edgewatch.io/cloud-unreachable:NoSchedule`` so no
  new pods land on the node.
* ``UNKNOWN`` (no edge evidence: a whole pool cut off, a one-node group, agents down): like
  DISCONNECTED for a bounded *autonomy time* (``edgewatch.controller.autonomy``), then FAILED.
* ``FAILED``: the NoSchedule taint plus ``edgewatch.io/failed:NoExecute`` (the stock taint manager evicts
  pods that do not tolerate it), and ``evict_pods`` so the reconciler evicts the pods itself through the
  Eviction API, honouring each pod's own toleration of the failed taint
  (``edgewatch.controller.taints.pod_eviction_due``).
* ``FAILED`` on verified evidence, opt-in (docs/out-of-service.md): when the switch is on for the node
  (``outOfServicePools`` in the ConfigMap, or the node's ``edgewatch.io/out-of-service`` annotation,
  which wins) *and* the edge view is UNHEALTHY *and* the cloud view is LOST, also
  ``node.kubernetes.io/out-of-service=edgewatch:NoExecute`` (KEP-2268), so kube-controller-manager
  force-deletes the node's terminating pods (a StatefulSet's included) and detaches their volumes.
  Never for a DISCONNECTED node (alive, cut off), an UNKNOWN one, a FAILED one whose verdict went
  unknown (sticky) or whose autonomy ran out, or with the switch off; planned absent in every other
  case, so it goes as soon as the node is no longer in that state (its heartbeat back included)::

      switch | cloud \\ edge | healthy | unhealthy            | unknown
      -------+--------------+---------+----------------------+--------
      on     | OK           | -       | -                    | -
      on     | DELEGATED    | -       | -                    | -
      on     | LOST         | -       | out-of-service taint | -
      off    | any          | -       | -                    | -

Two rules on top of the table:

* Confirmation: nothing is enforced (no taint, no eviction, no event) until the outage has lasted
  ``confirm_s``; until then ``effective_state`` is NORMAL while ``state`` already says what is coming.
* A node once FAILED stays FAILED while the edge view is merely unknown (losing the verdict is no
  evidence of life); a HEALTHY verdict (DISCONNECTED) or the node's own heartbeat (NORMAL) ends it.

Clocks (docs/clock-skew.md)
---------------------------
``plan`` never compares a time written by another machine with the controller's clock. Its inputs
carry, for the Lease renewal, when the *controller observed* it change (``observed_at``), and for the
edge verdict, when the controller counted it (``since``, ``counted_at``), all on the controller's
clock; freshness is ``now`` minus those. After a controller start the first look at each counts as
"just now", which gives every node a fresh grace, as
kube-controller-manager does after a restart, with one exception: a node whose recorded state is an
outage is not judged back (NORMAL) on a first look at an own renewal; it needs a renewal the
controller saw happen (within one kubelet renew interval for a live node).

Level-triggered and restart-safe
--------------------------------
:func:`plan` is a pure function of ``(node snapshot, lease snapshot, verified verdict, now, config)``.
Data flows one way: those inputs in, a plan out. The ``EdgeHealthy`` Node condition is output only:
the reconciler writes the verified verdict there for ``kubectl describe node``, and nothing here
reads it. What ``plan`` must remember across controller restarts lives in API objects, written and
read by the controller only (so with the controller's clock; a fail-over compares one replica's clock
with another's, which shifts these deadlines by the replicas' skew, never by an edge node's):

* when the outage began: the node annotation ``edgewatch.io/unreachable-since`` (RFC 3339), written
  from the plan; a node seen renewing its own Lease went stale at ``observed renewal + grace``, and an
  annotation saying otherwise is left from an earlier outage;
* the state last acted on: the node annotation ``edgewatch.io/state`` (absent = normal), from which
  transitions, and so Events, are derived;
* when the failed taint was added: its ``timeAdded``.

The reconciler just makes the API match the plan; planning again on the result gives the same plan and no
new event (idempotence), and a restarted controller computes the same answer from the same observations.

Limits (known, deliberate)
--------------------------
* If the controller is down for the *whole* of a recovery and a following outage whose Lease is delegated
  (or absent), the old ``unreachable-since`` cannot be told apart from a new one, so the autonomy clock
  may start early. A Lease seen renewed by the node itself always exposes a stale annotation.
* After a restart, a verdict that went unknown before the restart restarts its autonomy clock at the
  first look (never sooner than before, possibly later): the controller saw no transition.
* This module plans only edgewatch's own taints, annotations, events and evictions. Stock Kubernetes
  still marks a node without a fresh Lease NotReady after node-monitor-grace-period and taints it
  ``node.kubernetes.io/unreachable``; keeping such a node's pods is the job of heartbeat delegation.

Sources
-------
* TKE Edge "distributed node status determination": the cloud x edge table.
* OpenYurt Yurt-Coordinator: heartbeat without mark = healthy and connected; with the
  ``delegate-heartbeat: "true"`` mark = alive but cut off; no heartbeat = failed.
* Kubernetes docs, "Nodes" (Lease, ``leaseDurationSeconds`` 40 s, renewed every 10 s) and
  "API-initiated Eviction"; kube-controller-manager's node lifecycle controller (``probeTimestamp``:
  the time it observed a renewal).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

from edgewatch.controller.autonomy import autonomy_duration
from edgewatch.controller.model import (
    CLOUD_UNREACHABLE_TAINT,
    FAILED_TAINT,
    MIN_REQUEUE_S,
    OUT_OF_SERVICE_TAINT,
    STATE_ANNOTATION,
    UNREACHABLE_SINCE_ANNOTATION,
    ChallengeSnapshot,
    CloudView,
    ControllerConfig,
    EdgeView,
    Event,
    LeaseSnapshot,
    NodePlan,
    NodeSnapshot,
    NodeState,
    Taint,
    VerifiedVerdict,
)
from edgewatch.controller.views import (
    challenge_deadline,
    cloud_view,
    decide_state,
    edge_unknown_since,
    edge_view,
    is_delegated,
    lease_grace_s,
)
from edgewatch.names import OUT_OF_SERVICE_ANNOTATION
from edgewatch.timefmt import format_rfc3339, parse_rfc3339

__all__ = ["out_of_service_enabled", "plan"]

_EVENT_REASONS: Mapping[NodeState, str] = MappingProxyType(
    {
        NodeState.NORMAL: "EdgewatchNormal",
        NodeState.DISCONNECTED: "EdgewatchDisconnected",
        NodeState.UNKNOWN: "EdgewatchUnknown",
        NodeState.FAILED: "EdgewatchFailed",
    }
)


def _recorded_state(annotations: Mapping[str, str]) -> tuple[NodeState, str | None]:
    raw = annotations.get(STATE_ANNOTATION)
    if raw is None:
        return NodeState.NORMAL, None
    try:
        return NodeState(raw), None
    except ValueError:
        return NodeState.NORMAL, f"annotation {STATE_ANNOTATION}={raw!r} is not a known state; treating it as normal"


def _outage_since(
    *, annotations: Mapping[str, str], lease: LeaseSnapshot | None, now: float, grace_s: float,
    challenged_at: float | None = None,
) -> tuple[float, str, bool, str | None]:
    """Start of the current outage: ``(since, annotation text, recorded history trusted, warning)``.

    Whole seconds, rounded up, so the value survives the RFC 3339 round trip through the annotation and
    never makes an outage look longer than it is. ``challenged_at``: the deadline of the unanswered
    challenge that made the cloud view LOST (the outage began then; rounded down, so a FAILED node is
    acted on at once rather than up to a second later).
    """
    raw = annotations.get(UNREACHABLE_SINCE_ANNOTATION)
    parsed: float | None = None
    warning: str | None = None
    if raw is not None:
        try:
            parsed = parse_rfc3339(raw)
        except ValueError:
            warning = f"annotation {UNREACHABLE_SINCE_ANNOTATION}={raw!r} is not RFC 3339; re-derived"
        else:
            if parsed > math.ceil(now):
                warning = f"annotation {UNREACHABLE_SINCE_ANNOTATION}={raw!r} is in the future; re-derived"
                parsed = None
    if challenged_at is not None:
        since = float(math.floor(challenged_at))
        if parsed is not None and parsed == since:
            return since, raw, True, warning  # type: ignore[return-value]
        return since, format_rfc3339(since), False, warning
    if lease is not None and lease.observed_at is not None and not lease.first_sight and not is_delegated(lease):
        # The controller saw the node renew its own Lease at observed_at, so it was connected then and
        # the outage began when that renewal went overdue. An annotation saying otherwise is left from
        # an earlier outage.
        since = float(math.ceil(lease.observed_at + grace_s))
        if parsed is not None and lease.observed_at < parsed <= since:
            # Recorded after the renewal was seen: this outage, begun early by an unanswered
            # challenge (or this very value); it stays the outage's start once the renewal is overdue.
            return parsed, raw, True, warning  # type: ignore[return-value]
        return since, format_rfc3339(since), False, warning
    if parsed is not None:
        return parsed, raw, True, warning  # type: ignore[return-value]
    estimate = now
    if lease is not None and lease.observed_at is not None:
        estimate = min(lease.observed_at + grace_s, now)
    since = float(math.ceil(estimate))
    return since, format_rfc3339(since), True, warning


def out_of_service_enabled(*, annotations: Mapping[str, str], pool_enabled: bool) -> tuple[bool, str | None]:
    """Whether the out-of-service switch is on for a node: its annotation
    ``edgewatch.io/out-of-service`` (``enabled`` / ``disabled``, case-insensitive) wins; without it,
    ``pool_enabled`` (its pool is in the ConfigMap's ``outOfServicePools``). Any other annotation value
    means off (the risky action needs a clear yes) and a warning. Returns ``(on, warning)``."""
    raw = annotations.get(OUT_OF_SERVICE_ANNOTATION)
    if raw is None:
        return pool_enabled, None
    value = raw.strip().lower()
    if value == "enabled":
        return True, None
    if value == "disabled":
        return False, None
    return False, (f"annotation {OUT_OF_SERVICE_ANNOTATION}={raw!r:.100} is neither 'enabled' nor 'disabled'; "
                   f"out-of-service taint off for this node")


def _desired_taints(effective: NodeState, current: Sequence[Taint], now: float, *,
                    out_of_service: bool = False) -> tuple[Taint, ...]:
    if effective is NodeState.NORMAL:
        return ()

    def existing(template: Taint, *, need_time: bool) -> Taint | None:
        for taint in current:
            if taint.ident == template.ident and taint.value == template.value:
                if not need_time or taint.time_added is not None:
                    return taint
        return None

    result = [existing(CLOUD_UNREACHABLE_TAINT, need_time=False) or CLOUD_UNREACHABLE_TAINT]
    if effective is NodeState.FAILED:
        failed = existing(FAILED_TAINT, need_time=True)
        # Whole seconds, rounded up: the API's timeAdded has second precision, and rounding up never
        # shortens a pod's tolerationSeconds.
        result.append(failed or replace(FAILED_TAINT, time_added=float(math.ceil(now))))
        if out_of_service:
            result.append(existing(OUT_OF_SERVICE_TAINT, need_time=False) or OUT_OF_SERVICE_TAINT)
    return tuple(result)


def _fmt_time(ts: float | None) -> str:
    if ts is None:
        return "never"
    try:
        return format_rfc3339(ts)
    except (ValueError, OverflowError):
        return f"{ts!r} s"


def _fmt_duration(seconds: float | None) -> str:
    return "unlimited" if seconds is None else f"{seconds:g} s"


def _lease_text(lease: LeaseSnapshot | None, now: float) -> str:
    if lease is None or lease.observed_at is None:
        return "no renewal"
    seen = "first seen" if lease.first_sight else "renewal seen"
    return f"{seen} {now - lease.observed_at:g} s ago"


def plan(
    *,
    node: NodeSnapshot,
    lease: LeaseSnapshot | None,
    verdict: VerifiedVerdict | None,
    now: float,
    config: ControllerConfig,
    out_of_service_pool: bool = False,
    challenge: ChallengeSnapshot | None = None,
) -> NodePlan:
    """Decide the desired end state of ``node`` at ``now`` (seconds since the epoch, controller clock;
    the snapshots' observation times and the verdict's times are on the same clock). ``verdict``: the
    node's verified verdict, None before the controller counted one (the edge view is then unknown).

    Steps: cloud view and edge view -> table -> unknown policy (autonomy clock from the later of the
    outage start and the moment edge evidence vanished; the node's annotation overrides the default
    time; a node once FAILED stays FAILED while the edge view is unknown) -> confirmation (nothing is
    enforced until the outage is ``confirm_s`` old) -> taints, eviction, annotations, event, requeue.

    ``out_of_service_pool``: the node's pool is listed in the ConfigMap's ``outOfServicePools`` (the
    node's ``edgewatch.io/out-of-service`` annotation overrides it: :func:`out_of_service_enabled`).
    With the switch on, a node FAILED on verified evidence alone — edge view UNHEALTHY and cloud view
    LOST — also gets Kubernetes' out-of-service taint; in any other case it is planned absent.

    ``challenge``: the node's challenge through the beacon (``edgewatch.controller.challenges``), if
    any. While the edge view is UNHEALTHY and the cloud view OK, an unanswered challenge past its
    deadline (:func:`~edgewatch.controller.views.challenge_deadline`) makes the cloud view LOST: the
    node is FAILED without waiting for its last renewal to go overdue. Never the out-of-service taint
    on that ground alone (that waits for the Lease itself: force-detaching the volumes of a node
    whose kubelet may still run is the one act not undone by its coming back).

    Pure: no clock, no I/O, never raises on bad annotations (they produce ``warnings``).
    """
    warnings: list[str] = []
    recorded, warning = _recorded_state(node.annotations)
    if warning:
        warnings.append(warning)
    grace = lease_grace_s(lease=lease, config=config)
    cloud = cloud_view(lease=lease, now=now, grace_s=grace, trust_first_sight=recorded is NodeState.NORMAL)
    edge = edge_view(verdict=verdict, now=now, ttl_s=config.edge_view_ttl_s)
    # (time, open): the plan changes at `time` (closed: from `time` on; open: right after `time`).
    pending: list[tuple[float, bool]] = []
    challenged_at: float | None = None
    if cloud is CloudView.OK and edge is EdgeView.UNHEALTHY:
        deadline = challenge_deadline(challenge=challenge, lease=lease)
        if deadline is not None and now >= deadline:
            cloud, challenged_at = CloudView.LOST, deadline
        elif deadline is not None:
            pending.append((deadline, False))
    else:  # a challenge's verdict may count from its deadline on (views.challenged_verdict)
        deadline = challenge_deadline(challenge=challenge, lease=lease)
        if deadline is not None and now < deadline:
            pending.append((deadline, False))
    table_state = decide_state(cloud, edge)
    autonomy, warning = autonomy_duration(annotations=node.annotations, config=config)
    if warning:
        warnings.append(warning)

    if cloud is not CloudView.LOST:
        assert lease is not None and lease.observed_at is not None
        pending.append((lease.observed_at + grace, True))
        if is_delegated(lease) and lease.own_observed_at is not None and lease.own_observed_at + grace > now:
            pending.append((lease.own_observed_at + grace, True))  # a carried renewal's OK ends there

    challenge_text = "" if challenged_at is None else f", challenge unanswered since {_fmt_time(challenged_at)}"
    views = (f"cloud view {cloud.value} ({_lease_text(lease, now)}, grace {grace:g} s{challenge_text}), "
             f"edge view {edge.value}")

    since: float | None = None
    since_text: str | None = None
    confirm_at: float | None = None
    fail_at: float | None = None
    if table_state is NodeState.NORMAL:
        state = NodeState.NORMAL
        confirmed = True
        detail = "the node renews its own lease"
    else:
        since, since_text, trusted, warning = _outage_since(
            annotations=node.annotations, lease=lease, now=now, grace_s=grace, challenged_at=challenged_at
        )
        if warning:
            warnings.append(warning)
        previous = recorded if trusted else NodeState.NORMAL
        wait_s = config.failed_confirm_s if table_state is NodeState.FAILED else config.confirm_s
        confirm_at = since + wait_s
        # Confirmation is of the outage, not of one state: once this outage has been acted on (a trusted
        # recorded state other than normal), it stays confirmed. Otherwise a FAILED node acted on after
        # failed_confirm_s whose verdict turns unknown or healthy before confirm_s would drop back to
        # NORMAL (taints removed, its sticky FAILED forgotten).
        confirmed = now >= confirm_at or previous is not NodeState.NORMAL
        state = table_state
        if table_state is NodeState.UNKNOWN:
            edge_since = edge_unknown_since(verdict, ttl_s=config.edge_view_ttl_s)
            clock_start = since if edge_since is None else max(since, edge_since)
            detail = f"no edge evidence since {_fmt_time(clock_start)}"
            if autonomy is None:
                detail += "; autonomy unlimited"
            else:
                fail_at = clock_start + autonomy
                detail += f"; autonomy {_fmt_duration(autonomy)} ends {_fmt_time(fail_at)}"
            # The last evidence said failed; an unknown edge view is no evidence of life.
            sticky = confirmed and previous is NodeState.FAILED
            if sticky:
                detail += "; judged failed before, so it stays failed"
            if sticky or (fail_at is not None and now >= fail_at):
                state = NodeState.FAILED
            elif fail_at is not None:
                pending.append((fail_at, False))
        elif table_state is NodeState.FAILED:
            detail = "its peers see it unhealthy"
        else:
            detail = "its peers see it healthy; pods kept, no new pods"
        if edge is not EdgeView.UNKNOWN:
            assert verdict is not None and verdict.counted_at is not None
            pending.append((verdict.counted_at + config.edge_view_ttl_s, True))
        if not confirmed:
            pending.append((confirm_at, False))
            detail += f"; not acted on before {_fmt_time(confirm_at)} (confirmation)"
        detail = f"unreachable since {_fmt_time(since)}; {detail}"

    effective = state if confirmed else NodeState.NORMAL
    switch, warning = out_of_service_enabled(annotations=node.annotations, pool_enabled=out_of_service_pool)
    if warning:
        warnings.append(warning)
    # Verified evidence both ways: a majority of the peers saw it dead AND its own heartbeat is gone
    # (not carried: a cut-off node is alive; not unknown: no evidence is no proof of death).
    out_of_service = (switch and effective is NodeState.FAILED and edge is EdgeView.UNHEALTHY
                      and cloud is CloudView.LOST and challenged_at is None)
    if out_of_service:
        detail += "; out of service (volumes force-detached)"
    taints = _desired_taints(effective, node.taints, now, out_of_service=out_of_service)
    annotations = MappingProxyType(
        {
            UNREACHABLE_SINCE_ANNOTATION: since_text,
            STATE_ANNOTATION: None if effective is NodeState.NORMAL else effective.value,
        }
    )
    explanation = f"node {node.name} is {state.value}: {views}; {detail}"
    event = None
    if effective is not recorded:
        event = Event(
            reason=_EVENT_REASONS[effective],
            message=f"{recorded.value} -> {effective.value}: {explanation}",
            type="Normal" if effective is NodeState.NORMAL else "Warning",
        )
    requeue = min((max(t - now, MIN_REQUEUE_S) for t, _ in pending), default=None)
    return NodePlan(
        node=node.name,
        cloud=cloud,
        edge=edge,
        table_state=table_state,
        state=state,
        confirmed=confirmed,
        effective_state=effective,
        taints=taints,
        evict_pods=effective is NodeState.FAILED,
        annotations=annotations,
        event=event,
        unreachable_since=since,
        confirm_at=confirm_at,
        fail_at=fail_at,
        autonomy_s=autonomy,
        requeue_after_s=requeue,
        explanation=explanation,
        warnings=tuple(warnings),
    )

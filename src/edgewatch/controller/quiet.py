"""When the controller need not reconcile a node, or need not plan it again.

**A Lease renewal that changes nothing** (:func:`only_renewed`). At 1,000 nodes every kubelet renews
its Lease every 10 s: 100 watch events a second. For a node that is normal and renews its own Lease,
such an event changes one thing only, the moment its heartbeat goes overdue
(``edgewatch.controller.views.lease_grace_s`` after the renewal was seen): the plan would come out
the same, with nothing to write. So instead of a reconcile the reconciler moves that node's next
look to the new deadline (``WorkQueue.reschedule``): the node is reconciled when it misses a
heartbeat, or when anything else about it changes (Node, verdict, config, resync).

**A look that finds nothing new** (:func:`plan_inputs`, :func:`still_holds`). The 30 s resync (and
every Node event, e.g. a kubelet's status report) looks at a node again. When the decision core's
inputs are what its last plan was made from — the Node's annotations and taints (``plan`` reads no
label; coverage is checked before), the Lease as observed, the verified verdict as far as the plan
can tell, the config, the out-of-service switch of the node's pool — and that plan's next deadline (``NodePlan.requeue_after_s`` after it was
made) has not come, planning again gives the same decision: ``plan`` is a pure function of its
inputs and ``now``, and its requeue delay is exactly the time until its decision would next change
with time alone (``edgewatch.controller.decision``; property-tested in tests/unit/test_decision.py
and tests/unit/test_quiet.py). So the last plan stands. Anything time-driven still fires on time: a
due deadline is never skipped.

The verdict enters as a key, not as itself: its ``counted_at`` moves at every recount (every second),
but the plan depends on it only through whether the verdict is fresh at ``now`` and, once stale, when
it went stale; while it is fresh a newer count only moves the staleness deadline later, so a deadline
from an older count is early, never late.

Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass

from edgewatch.controller.model import (
    ChallengeSnapshot,
    CloudView,
    ControllerConfig,
    LeaseSnapshot,
    NodePlan,
    NodeSnapshot,
    NodeState,
    Taint,
    VerifiedVerdict,
)
from edgewatch.controller.views import is_delegated, is_fresh
from edgewatch.core.types import Verdict

__all__ = ["PlanInputs", "only_renewed", "plan_inputs", "renewed", "still_holds", "verdict_key"]


def only_renewed(*, before: LeaseSnapshot | None, after: LeaseSnapshot | None, plan: NodePlan | None) -> bool:
    """True iff going from Lease ``before`` to ``after`` is an own renewal of a node whose last plan
    has nothing due but the heartbeat deadline, so reconciling it now would change nothing.

    That is: the last plan is normal, enforced, with the cloud view OK (own renewal, fresh), no
    Event and a requeue (the deadline); both Leases have a renewTime, neither is a current delegate
    mark (a carry, or the controller's hold, is judged by a reconcile), only the renewTime differs
    (annotations, holder and duration are the same).
    """
    if plan is None or before is None or after is None:
        return False
    if (plan.effective_state is not NodeState.NORMAL or plan.state is not NodeState.NORMAL
            or plan.cloud is not CloudView.OK or plan.event is not None or plan.requeue_after_s is None):
        return False
    if before.renew_time is None or after.renew_time is None or before.renew_time == after.renew_time:
        return False
    if is_delegated(before) or is_delegated(after):
        return False
    return (before.annotations == after.annotations and before.holder == after.holder
            and before.duration_s == after.duration_s)


def verdict_key(verdict: VerifiedVerdict | None, *, now: float, ttl_s: float) -> Hashable:
    """What ``plan`` can tell of ``verdict`` at ``now`` (``ttl_s``: ``edge_view_ttl_s``, seconds):
    an UNKNOWN verdict by its ``since`` (the autonomy clock starts there); a fresh HEALTHY /
    UNHEALTHY one by its verdict alone; a stale one by when it was last counted (it went stale
    ``ttl_s`` later)."""
    if verdict is None:
        return None
    if verdict.verdict is Verdict.UNKNOWN:
        return (verdict.verdict, verdict.since)
    if is_fresh(observed_at=verdict.counted_at, now=now, grace_s=ttl_s):
        return (verdict.verdict, "fresh")
    return (verdict.verdict, "stale", verdict.counted_at)


@dataclass(frozen=True)
class PlanInputs:
    """What a plan is made from, less the time (compared for equality; see the module docstring):
    what ``plan`` reads of the Node (its name, annotations and taints: no label), the Lease, the
    verdict as :func:`verdict_key`'s key, the config."""

    name: str
    annotations: Mapping[str, str]
    taints: tuple[Taint, ...]
    lease: LeaseSnapshot | None
    verdict: Hashable
    config: ControllerConfig
    out_of_service_pool: bool = False  # the node's pool is in outOfServicePools (plan's switch)
    challenge: ChallengeSnapshot | None = None  # the node's challenge through the beacon (plan's)
    accused: float | None = None  # since when its peers accuse it (VerifiedEdge.accused: the challenge book's)


def plan_inputs(*, node: NodeSnapshot, lease: LeaseSnapshot | None, verdict: VerifiedVerdict | None,
                config: ControllerConfig, now: float, out_of_service_pool: bool = False,
                challenge: ChallengeSnapshot | None = None, accused: float | None = None) -> PlanInputs:
    """The inputs of ``plan(node=node, lease=lease, verdict=verdict, now=now, config=config,
    out_of_service_pool=out_of_service_pool, challenge=challenge)``, and ``accused``, which the
    challenge book reads beside the plan (a new accusation is looked at at once)."""
    return PlanInputs(name=node.name, annotations=node.annotations, taints=node.taints, lease=lease,
                      verdict=verdict_key(verdict, now=now, ttl_s=config.edge_view_ttl_s), config=config,
                      out_of_service_pool=out_of_service_pool, challenge=challenge, accused=accused)


def still_holds(*, made: PlanInputs, due_at: float | None, inputs: PlanInputs, now: float) -> bool:
    """True iff a plan made from ``made``, whose next deadline is ``due_at`` (controller clock;
    None: nothing time-driven pending), is still the plan for ``inputs`` at ``now``: the inputs are
    the same and the deadline has not come (``now < due_at``)."""
    return (due_at is None or now < due_at) and inputs == made


def renewed(made: PlanInputs, *, before: LeaseSnapshot, after: LeaseSnapshot) -> PlanInputs | None:
    """``made`` after an own renewal that :func:`only_renewed` found quiet: the same inputs with the
    Lease ``after`` (whose deadline replaces the plan's), or None when ``made`` was not made from the
    renewal ``before`` (then the next look plans again)."""
    lease = made.lease
    if made.challenge is not None:
        return None  # a renewal may answer the challenge: plan again
    if lease is None or (lease.renew_time, lease.annotations, lease.holder, lease.duration_s) != (
            before.renew_time, before.annotations, before.holder, before.duration_s):
        return None
    return PlanInputs(name=made.name, annotations=made.annotations, taints=made.taints, lease=after,
                      verdict=made.verdict, config=made.config, out_of_service_pool=made.out_of_service_pool,
                      accused=made.accused)

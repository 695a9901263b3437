"""When a Lease event needs no reconcile (edgewatch.controller.quiet.only_renewed), how the work
queue moves a deadline (WorkQueue.reschedule), and when a look may keep a node's last plan
(quiet.plan_inputs / still_holds, edgewatch.controller.planbook): tables and properties, no I/O.

The properties reuse the decision core's random inputs (tests/unit/test_decision.py)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_decision import (
    CONFIRM,
    FAST,
    GRACE,
    HEALTHY,
    NOW,
    T0,
    TTL,
    UNHEALTHY,
    UNKNOWN,
    acted,
    configs,
    leases,
    mk_lease,
    mk_node,
    mk_verdict,
    nodes,
    quarter,
    verdicts,
)

from edgewatch.controller.decision import plan
from edgewatch.controller.model import ControllerConfig, LeaseSnapshot, NodeSnapshot, NodeState, Taint, VerifiedVerdict
from edgewatch.controller.planbook import PlanBook
from edgewatch.controller.quiet import only_renewed, plan_inputs, renewed, still_holds, verdict_key
from edgewatch.controller.taints import apply_plan
from edgewatch.controller.views import lease_grace_s
from edgewatch.controller.workqueue import WorkQueue
from edgewatch.names import AUTONOMY_DURATION_ANNOTATION

T1, T2 = "2026-11-25T15:00:00.000000Z", "2026-11-25T15:00:10.000000Z"
MARK = {"edgewatch.io/delegate-heartbeat": "true", "edgewatch.io/delegated-by": "a-2",
        "edgewatch.io/delegated-renew-time": T2, "edgewatch.io/delegated-via": "peer"}
CONFIG = ControllerConfig()


def _lease(renew: str | None = T1, **kw) -> LeaseSnapshot:  # type: ignore[no-untyped-def]
    return LeaseSnapshot(renew_time=renew, observed_at=None if renew is None else 100.0, duration_s=40.0,
                         holder="n", **kw)


NORMAL = plan(node=NodeSnapshot(name="n"), lease=_lease(), verdict=None, now=101.0, config=CONFIG)
LOST = plan(node=NodeSnapshot(name="n"), lease=_lease(), verdict=None, now=200.0, config=CONFIG)
RECORDED_DISCONNECTED = plan(node=NodeSnapshot(name="n", annotations={"edgewatch.io/state": "disconnected"}),
                             lease=_lease(), verdict=None, now=101.0, config=CONFIG)  # back to normal: an Event


@pytest.mark.parametrize(("before", "after", "last", "quiet"), [
    (_lease(), _lease(T2), NORMAL, True),                                  # the kubelet renewed: quiet
    (_lease(), _lease(T2), None, False),                                   # never planned yet
    (_lease(), _lease(T2), LOST, False),                                   # a node back from an outage
    (_lease(), _lease(T2), RECORDED_DISCONNECTED, False),                  # its Event is still due
    (_lease(), _lease(), NORMAL, False),                                   # nothing renewed
    (_lease(), _lease(None), NORMAL, False),                               # renewTime removed
    (_lease(), _lease(T2, annotations=MARK), NORMAL, False),               # a carry: judged by a reconcile
    (_lease(T2, annotations=MARK), _lease(T1, annotations=MARK), NORMAL, False),  # the mark went stale
    (_lease(), _lease(T2, annotations={"x": "y"}), NORMAL, False),         # anything else changed too
    (_lease(), LeaseSnapshot(renew_time=T2, observed_at=1.0, duration_s=400.0, holder="n"), NORMAL, False),
    (None, _lease(T2), NORMAL, False),
])
def test_only_an_own_renewal_of_a_quiet_normal_node_skips_its_reconcile(before, after, last, quiet) -> None:  # type: ignore[no-untyped-def]
    assert NORMAL.requeue_after_s is not None and LOST.cloud.value == "lost"
    assert only_renewed(before=before, after=after, plan=last) is quiet


async def test_reschedule_moves_a_deadline_later_or_sooner_but_not_a_waiting_key() -> None:
    q = WorkQueue()
    q.add_after("a", 0.05)
    assert q.reschedule("a", 0.3)          # later: not due at 0.05 any more
    await asyncio.sleep(0.15)
    assert len(q) == 0
    assert q.reschedule("a", 0.0)          # sooner
    await asyncio.sleep(0.02)
    assert len(q) == 1
    assert not q.reschedule("a", 5.0)      # waiting: it will be handled anyway
    assert await q.get() == "a"
    assert not q.reschedule("a", 5.0)      # being handled: likewise
    q.done("a")
    assert q.reschedule("b", 0.01)         # no deadline yet: one is set
    await asyncio.sleep(0.05)
    assert len(q) == 1
    q.close()


# ---------------------------------------------------------------------------------------------------
# a look that finds nothing new keeps the last plan (quiet.plan_inputs / still_holds, planbook)
# ---------------------------------------------------------------------------------------------------

def settled(*, node, lease, verdict, now, config=CONFIG):  # type: ignore[no-untyped-def]
    """The node once the API matches its plan at ``now``, that plan, its inputs and its deadline: what
    the reconciler keeps for a settled plan."""
    node = apply_plan(node=node, plan=plan(node=node, lease=lease, verdict=verdict, now=now, config=config))
    p = plan(node=node, lease=lease, verdict=verdict, now=now, config=config)
    made = plan_inputs(node=node, lease=lease, verdict=verdict, config=config, now=now)
    return node, p, made, None if p.requeue_after_s is None else now + p.requeue_after_s


def holds_at(t, *, node, lease, verdict, made, due_at, config=CONFIG) -> bool:  # type: ignore[no-untyped-def]
    return still_holds(made=made, due_at=due_at, inputs=plan_inputs(node=node, lease=lease, verdict=verdict,
                                                                      config=config, now=t), now=t)


#: A verdict's time counted again: unchanged (None), or moved by up to 100 s either way.
moves = st.one_of(st.none(), st.integers(min_value=-400, max_value=400).map(lambda q: q / 4))


def moved(value: float | None, by: float | None) -> float | None:
    return value if by is None else (NOW if value is None else value) + by


@FAST
@given(node=nodes, lease=leases(), verdict=verdicts(), config=configs, dt=quarter,
       later=st.integers(min_value=0, max_value=8000).map(lambda q: q / 32), counted=moves, since=moves)
def test_a_plan_that_still_holds_is_the_plan_planning_again_would_make(  # type: ignore[no-untyped-def]
        node, lease, verdict, config, dt, later, counted, since):
    """Skipping a look never hides a change, and never a due deadline: whenever ``still_holds`` says a
    settled plan stands at a later moment — with the verdict counted again meanwhile (another
    ``counted_at``) or held since another moment (another ``since``) — planning again then gives the
    same decision."""
    now = NOW + dt / 4
    node, p, made, due_at = settled(node=node, lease=lease, verdict=verdict, now=now, config=config)
    t = now + later
    again = verdict
    if verdict is not None:
        again = VerifiedVerdict(verdict=verdict.verdict, counted_at=moved(verdict.counted_at, counted),
                                since=moved(verdict.since, since))
    if holds_at(t, node=node, lease=lease, verdict=again, made=made, due_at=due_at, config=config):
        assert acted(plan(node=node, lease=lease, verdict=again, now=t, config=config)) == acted(p)
    # and the same inputs never hold at or after the deadline
    if due_at is not None and t >= due_at:
        assert not holds_at(t, node=node, lease=lease, verdict=verdict, made=made, due_at=due_at, config=config)


@FAST
@given(node=nodes, verdict=verdicts(), config=configs, dt=quarter,
       gap=st.integers(min_value=1, max_value=800).map(lambda q: q / 32),
       later=st.integers(min_value=0, max_value=1600).map(lambda q: q / 32),
       duration=st.sampled_from([None, 40.0, 15.0]))
def test_an_own_renewal_moves_a_settled_plan_to_the_new_deadline(  # type: ignore[no-untyped-def]
        node, verdict, config, dt, gap, later, duration):
    """The quiet path (``only_renewed``) keeps a normal node's settled plan for its new renewal, until
    the new heartbeat deadline: planning at any moment before it gives the same decision."""
    now = NOW + dt / 4
    before = mk_lease(now, duration=duration)
    node, p, made, due_at = settled(node=node, lease=before, verdict=verdict, now=now, config=config)
    after = mk_lease(now + gap, duration=duration)
    if not only_renewed(before=before, after=after, plan=p):
        return
    moved = renewed(made, before=before, after=after)
    assert moved is not None and moved.lease == after
    deadline = after.observed_at + lease_grace_s(lease=after, config=config)  # type: ignore[operator]
    t = now + gap + later
    if holds_at(t, node=node, lease=after, verdict=verdict, made=moved, due_at=deadline, config=config):
        assert acted(plan(node=node, lease=after, verdict=verdict, now=t, config=config)) == acted(p)
    else:
        assert t >= deadline or verdict_key(verdict, now=t, ttl_s=config.edge_view_ttl_s) != moved.verdict


def test_an_idle_normal_node_keeps_its_plan_until_its_heartbeat_deadline() -> None:
    """What the resync of an idle node finds: the same inputs, so the plan stands until the Lease is
    overdue (``GRACE`` after the renewal was seen), and at that moment it is planned again."""
    lease = mk_lease(T0)
    node, p, made, due_at = settled(node=mk_node(), lease=lease, verdict=None, now=T0 + 1)
    assert p.effective_state is NodeState.NORMAL and due_at == T0 + GRACE
    for t in (T0 + 1, T0 + 5, T0 + GRACE - 0.001):
        assert holds_at(t, node=node, lease=lease, verdict=None, made=made, due_at=due_at)
    assert not holds_at(T0 + GRACE, node=node, lease=lease, verdict=None, made=made, due_at=due_at)


def test_a_verdict_counted_again_keeps_the_plan_and_one_gone_stale_does_not() -> None:
    """The recount (every second) moves ``counted_at`` without changing anything the plan can tell;
    a verdict no longer counted goes stale ``TTL`` later, which the plan's deadline catches."""
    lease = mk_lease(T0)  # overdue at T0 + GRACE: DISCONNECTED while the peers see it alive
    v = mk_verdict(HEALTHY, T0 + 30, T0 + 20)
    node, p, made, due_at = settled(node=mk_node(), lease=lease, verdict=v, now=T0 + 40)
    assert p.effective_state is NodeState.DISCONNECTED and due_at == T0 + 30 + TTL
    assert holds_at(T0 + 50, node=node, lease=lease, verdict=replace(v, counted_at=T0 + 49), made=made,
                    due_at=due_at)
    # counted again all along, the plan still falls due at the old count's staleness: early, never late
    assert not holds_at(due_at, node=node, lease=lease, verdict=replace(v, counted_at=due_at), made=made,
                        due_at=due_at)
    # the count stalled: stale at T0 + 30 + TTL, and the plan is made again then
    assert not holds_at(T0 + 30 + TTL + 1, node=node, lease=lease, verdict=v, made=made, due_at=None)
    # a new verdict is a new input at once
    assert not holds_at(T0 + 41, node=node, lease=lease, verdict=mk_verdict(UNHEALTHY, T0 + 41), made=made,
                        due_at=due_at)


def test_an_unknown_verdict_held_since_another_moment_is_a_new_input() -> None:
    """No edge evidence: the autonomy clock starts when the verdict became unknown (``since``), so an
    UNKNOWN verdict that began again (it was something else in between) is planned again."""
    lease = mk_lease(T0)  # overdue from T0 + GRACE
    verdict = mk_verdict(UNKNOWN, T0 + 100, T0 + 50)
    node, p, made, due_at = settled(node=mk_node(), lease=lease, verdict=verdict, now=T0 + 100)
    assert p.fail_at == T0 + 50 + 300 and due_at == p.fail_at
    again = mk_verdict(UNKNOWN, T0 + 120, T0 + 110)
    assert not holds_at(T0 + 120, node=node, lease=lease, verdict=again, made=made, due_at=due_at)
    assert plan(node=node, lease=lease, verdict=again, now=T0 + 120, config=CONFIG).fail_at == T0 + 110 + 300


def test_a_verdict_gone_stale_again_is_a_new_input() -> None:
    """A HEALTHY verdict not counted for ``TTL`` is stale, and the autonomy clock runs from when it went
    stale: counted once more and stale again, it went stale later, so it is planned again."""
    lease = mk_lease(T0)
    verdict = mk_verdict(HEALTHY, T0 + 40, T0)
    node, p, made, due_at = settled(node=mk_node(), lease=lease, verdict=verdict, now=T0 + 40 + TTL + 1)
    assert p.state is NodeState.UNKNOWN and p.fail_at == T0 + 40 + TTL + 300
    again = replace(verdict, counted_at=T0 + 50)
    t = T0 + 50 + TTL + 1
    assert not holds_at(t, node=node, lease=lease, verdict=again, made=made, due_at=due_at)
    assert plan(node=node, lease=lease, verdict=again, now=t, config=CONFIG).fail_at == T0 + 50 + TTL + 300


@pytest.mark.parametrize(("what", "deadline"), [
    ("confirmation", T0 + GRACE + CONFIRM),  # an outage is acted on confirm_s after it began
    ("autonomy", T0 + GRACE + 90),  # no edge evidence: failed when the autonomy time runs out
])
def test_a_time_driven_change_is_never_skipped(what: str, deadline: float) -> None:
    lease = mk_lease(T0)  # the node died at T0: overdue from T0 + GRACE
    node = mk_node(annotations={AUTONOMY_DURATION_ANNOTATION: "90s"})
    now = T0 + GRACE + (1 if what == "confirmation" else CONFIRM + 1)
    node, p, made, due_at = settled(node=node, lease=lease, verdict=mk_verdict(UNKNOWN, now, T0), now=now)
    verdict = mk_verdict(UNKNOWN, now, T0)
    assert due_at == deadline
    assert holds_at(deadline - 0.25, node=node, lease=lease, verdict=verdict, made=made, due_at=due_at)
    assert not holds_at(deadline, node=node, lease=lease, verdict=verdict, made=made, due_at=due_at)
    changed = plan(node=node, lease=lease, verdict=verdict, now=deadline, config=CONFIG)
    assert acted(changed) != acted(p)
    expected = NodeState.UNKNOWN if what == "confirmation" else NodeState.FAILED
    assert changed.effective_state is expected


@FAST
@given(node=nodes, lease=leases(), verdict=verdicts(), config=configs, dt=quarter,
       labels=st.dictionaries(st.sampled_from(["a", "beta.kubernetes.io/os", "edgewatch.io/pool"]),
                              st.sampled_from(["", "x", "linux"]), max_size=3))
def test_the_plan_inputs_are_all_that_plan_reads(  # type: ignore[no-untyped-def]
        node, lease, verdict, config, dt, labels):
    """A Node's labels are no input of ``plan`` (coverage is decided before): a relabel alone, e.g.
    kube-controller-manager adding ``beta.kubernetes.io/os``, leaves the inputs and the plan as they
    are. Should ``plan`` ever read labels, this fails and :class:`PlanInputs` must take them in."""
    now = NOW + dt / 4
    relabelled = replace(node, labels=labels)
    assert plan_inputs(node=relabelled, lease=lease, verdict=verdict, config=config, now=now) == plan_inputs(
        node=node, lease=lease, verdict=verdict, config=config, now=now)
    p = plan(node=node, lease=lease, verdict=verdict, now=now, config=config)
    assert plan(node=relabelled, lease=lease, verdict=verdict, now=now, config=config) == p


@pytest.mark.parametrize("change", ["annotation", "taint", "lease", "proof", "verdict", "config"])
def test_any_new_input_is_planned_again(change: str) -> None:
    lease = mk_lease(T0)
    verdict = mk_verdict(HEALTHY, T0 + 1, T0)
    node, _p, made, due_at = settled(node=mk_node(), lease=lease, verdict=verdict, now=T0 + 1)
    config = CONFIG
    if change == "annotation":
        node = replace(node, annotations={**node.annotations, AUTONOMY_DURATION_ANNOTATION: "1m"})
    elif change == "taint":
        node = replace(node, taints=(*node.taints, Taint("dedicated", "NoSchedule", "db")))
    elif change == "lease":
        lease = mk_lease(T0 + 1)
    elif change == "proof":
        lease = replace(lease, delegation_proven=False)
    elif change == "verdict":
        verdict = mk_verdict(UNKNOWN, T0 + 2, T0 + 2)
    else:
        config = ControllerConfig(confirm_s=5.0)
    assert not holds_at(T0 + 2, node=node, lease=lease, verdict=verdict, made=made, due_at=due_at, config=config)


def test_the_plan_book_counts_states_and_keeps_only_settled_plans() -> None:
    book = PlanBook()
    lease = mk_lease(T0)
    node, normal, made, due_at = settled(node=mk_node(), lease=lease, verdict=None, now=T0 + 1)
    lost = plan(node=mk_node(), lease=lease, verdict=None, now=T0 + 100, config=CONFIG)
    book.put("a", normal)
    book.put("b", lost)
    assert dict(book.counts) == {NodeState.NORMAL: 1, NodeState.UNKNOWN: 1, NodeState.DISCONNECTED: 0,
                                 NodeState.FAILED: 0}
    assert not book.holds("a", made, T0 + 2)  # put, not settled
    book.settle("a", inputs=made, due_at=due_at)
    assert book.holds("a", made, T0 + 2) and book.due_in("a", T0 + 2) == GRACE - 2
    book.put("a", lost)  # planned again: unsettled, counted once
    assert not book.holds("a", made, T0 + 2)
    assert book.counts[NodeState.UNKNOWN] == 2 and book.counts[NodeState.NORMAL] == 0
    book.pop("b")
    book.pop("nobody")
    assert set(book) == {"a"} and len(book) == 1 and book.counts[NodeState.UNKNOWN] == 1
    # the quiet path: an own renewal moves a settled plan's deadline; any other Lease unsettles it
    book.put("a", normal)
    book.settle("a", inputs=made, due_at=due_at)
    after = mk_lease(T0 + 10)
    book.renewed("a", before=lease, after=after, due_at=T0 + 10 + GRACE)
    moved = plan_inputs(node=node, lease=after, verdict=None, config=CONFIG, now=T0 + 15)
    assert book.holds("a", moved, T0 + 15) and not book.holds("a", made, T0 + 15)
    book.renewed("a", before=lease, after=mk_lease(T0 + 20), due_at=T0 + 20 + GRACE)  # not from the one it has
    assert not book.holds("a", moved, T0 + 15)

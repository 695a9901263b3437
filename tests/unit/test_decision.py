"""Tests of the controller's decision core (edgewatch.controller.decision, .views, .autonomy, .taints,
.model): the cloud x edge table and everything around it.

All times are seconds; instants are built from T0 (a realistic epoch) plus multiples of 0.25 s so that
float sums are exact and boundary tests mean what they say. Instants are on the *controller's* clock:
a Lease renewal enters as the time the controller observed it (``observed_at``), a verified verdict
with when the controller counted it (``since``, ``counted_at``); the remote texts (renewTime) are
identities only, so a test of clock skew changes the texts and not the observation times
(docs/clock-skew.md).

The cloud view's grace is the *overdue* threshold (``lease_grace_s``): a 40 s Lease renewed every
10 s counts as overdue 10 + 2 = 12 s after its last renewal, not at its 40 s expiry.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgewatch.controller.autonomy import autonomy_duration, parse_autonomy_duration
from edgewatch.controller.decision import plan
from edgewatch.controller.model import (
    CLOUD_UNREACHABLE_TAINT,
    FAILED_TAINT,
    MANAGED_ANNOTATIONS,
    MANAGED_TAINT_IDS,
    MIN_REQUEUE_S,
    STATE_ANNOTATION,
    UNREACHABLE_SINCE_ANNOTATION,
    CloudView,
    ControllerConfig,
    EdgeView,
    LeaseSnapshot,
    NodePlan,
    NodeSnapshot,
    NodeState,
    Taint,
    TaintEffect,
    Toleration,
    UnknownPolicy,
    VerifiedVerdict,
)
from edgewatch.controller.taints import annotation_patch, apply_plan, merge_taints, pod_eviction_due, tolerates
from edgewatch.controller.views import (
    cloud_view,
    decide_state,
    edge_view,
    is_delegated,
    is_fresh,
    is_held_by_controller,
    lease_grace_s,
)
from edgewatch.core.types import Verdict
from edgewatch.names import (
    AUTONOMY_DURATION_ANNOTATION,
    CLOUD_UNREACHABLE_TAINT_KEY,
    DELEGATE_HEARTBEAT_ANNOTATION,
    DELEGATED_RENEW_TIME_ANNOTATION,
    DELEGATED_VIA_ANNOTATION,
    FAILED_TAINT_KEY,
)
from edgewatch.timefmt import format_micro_time, format_rfc3339, parse_rfc3339

T0 = 1_700_000_000.0
CFG = ControllerConfig()
LEASE_DURATION = 40.0  # the kubelet's leaseDurationSeconds; it renews every LEASE_DURATION / 4 = 10 s
GRACE = 12.0  # overdue threshold: LEASE_DURATION / 4 + overdue_slack_s (2 s)
CONFIRM = 20.0
TTL = 60.0

FAST = settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------------------------------------------
# builders
# ---------------------------------------------------------------------------------------------------


def mk_lease(
    renew: float | None,
    *,
    delegated: bool = False,
    duration: float | None = 40.0,
    via: str | None = None,
    first_sight: bool = False,
    text: str | None = None,
) -> LeaseSnapshot:
    """A Lease whose current renewal the controller observed at ``renew`` (its renewTime text is
    ``text``, by default the same instant: clocks in step), renewed by a delegate (a current mark)
    when ``delegated``."""
    renew_time = None if renew is None else (text or format_micro_time(renew))
    annotations = {}
    if delegated:
        annotations[DELEGATE_HEARTBEAT_ANNOTATION] = "true"
        if renew_time is not None:
            annotations[DELEGATED_RENEW_TIME_ANNOTATION] = renew_time
    if via is not None:
        annotations[DELEGATED_VIA_ANNOTATION] = via
    return LeaseSnapshot(renew_time=renew_time, observed_at=renew, first_sight=first_sight, duration_s=duration,
                         annotations=annotations, holder="n1")


def held_lease(renew: float, *, current: bool = True) -> LeaseSnapshot:
    """A Lease renewed by the controller's own autonomy hold: a delegate mark with via=autonomy whose
    delegated-renew-time names ``renew`` (current) or an earlier renewal (stale: the kubelet renewed
    by itself since)."""
    written = renew if current else renew - 10
    return LeaseSnapshot(
        renew_time=format_micro_time(renew),
        observed_at=renew,
        duration_s=40.0,
        annotations={
            DELEGATE_HEARTBEAT_ANNOTATION: "true",
            DELEGATED_RENEW_TIME_ANNOTATION: format_micro_time(written),
            DELEGATED_VIA_ANNOTATION: "autonomy",
        },
    )


def marked(renew: float | None, mark: str | None = "true", *, written: str | None | object = ...,
           extra: dict[str, str] | None = None) -> LeaseSnapshot:
    """A Lease observed at ``renew`` (renewTime text of the same instant) with the delegate mark
    ``mark`` and ``delegated-renew-time`` ``written`` (default: names this renewal; None: absent)."""
    renew_time = None if renew is None else format_micro_time(renew)
    annotations = dict(extra or {})
    if mark is not None:
        annotations[DELEGATE_HEARTBEAT_ANNOTATION] = mark
    if written is ...:
        written = renew_time
    if written is not None:
        annotations[DELEGATED_RENEW_TIME_ANNOTATION] = written  # type: ignore[assignment]
    return LeaseSnapshot(renew_time=renew_time, observed_at=renew, duration_s=40.0, annotations=annotations)


HEALTHY, UNHEALTHY, UNKNOWN = Verdict.HEALTHY, Verdict.UNHEALTHY, Verdict.UNKNOWN


def mk_verdict(verdict: Verdict, counted: float | None, since: float | None = None) -> VerifiedVerdict:
    """A verified verdict the controller last counted at ``counted`` (``since`` if None: a verdict is
    counted when it begins) and has held since ``since``."""
    return VerifiedVerdict(verdict=verdict, counted_at=counted if counted is not None else since, since=since)


def mk_node(*, annotations=None, taints=(), name="n1") -> NodeSnapshot:
    return NodeSnapshot(name=name, labels={"pool": "a"}, annotations=dict(annotations or {}), taints=tuple(taints))


def decision(p: NodePlan) -> tuple:
    """The parts of a plan the reconciler acts on."""
    return (
        p.state,
        p.effective_state,
        p.confirmed,
        p.taints,
        p.evict_pods,
        dict(p.annotations),
        p.unreachable_since,
        p.confirm_at,
        p.fail_at,
    )


def acted(p: NodePlan) -> tuple:
    """What the reconciler acts on: the decision plus the event (the requeue delay tracks these; the
    informational views and explanation may change in between, e.g. the edge view of a NORMAL node)."""
    return decision(p) + (p.event, p.autonomy_s)


def our_taints(taints) -> set[Taint]:
    return {t for t in taints if t.ident in MANAGED_TAINT_IDS}


NS_TAINT = CLOUD_UNREACHABLE_TAINT


# ---------------------------------------------------------------------------------------------------
# the table
# ---------------------------------------------------------------------------------------------------

TABLE = [
    (CloudView.OK, EdgeView.HEALTHY, NodeState.NORMAL),
    (CloudView.OK, EdgeView.UNHEALTHY, NodeState.NORMAL),
    (CloudView.OK, EdgeView.UNKNOWN, NodeState.NORMAL),
    (CloudView.DELEGATED, EdgeView.HEALTHY, NodeState.DISCONNECTED),
    (CloudView.DELEGATED, EdgeView.UNHEALTHY, NodeState.FAILED),
    (CloudView.DELEGATED, EdgeView.UNKNOWN, NodeState.UNKNOWN),
    (CloudView.LOST, EdgeView.HEALTHY, NodeState.DISCONNECTED),
    (CloudView.LOST, EdgeView.UNHEALTHY, NodeState.FAILED),
    (CloudView.LOST, EdgeView.UNKNOWN, NodeState.UNKNOWN),
]


def test_table_covers_every_combination_once():
    assert {(c, e) for c, e, _ in TABLE} == {(c, e) for c in CloudView for e in EdgeView}
    assert len(TABLE) == len(CloudView) * len(EdgeView)


@pytest.mark.parametrize(("cloud", "edge", "expected"), TABLE)
def test_decide_state_table(cloud, edge, expected):
    assert decide_state(cloud, edge) is expected


NOW = T0 + 1000.0


def lease_for(cloud: CloudView) -> LeaseSnapshot | None:
    if cloud is CloudView.OK:
        return mk_lease(NOW - 5)
    if cloud is CloudView.DELEGATED:
        return mk_lease(NOW - 5, delegated=True)
    return mk_lease(NOW - GRACE - CONFIRM - 30)  # stale for 30 s past confirmation


EDGE_VERDICTS = {
    EdgeView.HEALTHY: [mk_verdict(HEALTHY, NOW - 1)],
    EdgeView.UNHEALTHY: [mk_verdict(UNHEALTHY, NOW - 1)],
    EdgeView.UNKNOWN: [
        None,
        mk_verdict(UNKNOWN, NOW - 1, NOW - 100),
        mk_verdict(HEALTHY, NOW - TTL - 1),
        mk_verdict(UNHEALTHY, NOW - TTL - 1),
        mk_verdict(HEALTHY, None, None),  # never counted
    ],
}
EXPECTED_TAINTS = {
    NodeState.NORMAL: set(),
    NodeState.DISCONNECTED: {NS_TAINT},
    NodeState.UNKNOWN: {NS_TAINT},
    NodeState.FAILED: {NS_TAINT, replace(FAILED_TAINT, time_added=NOW)},
}


@pytest.mark.parametrize(
    ("cloud", "edge", "expected", "verdict"),
    [(c, e, s, verdict) for c, e, s in TABLE for verdict in EDGE_VERDICTS[e]],
)
def test_plan_realises_the_table(cloud, edge, expected, verdict):
    # An outage that began 50 s ago (confirmed, autonomy not expired) as recorded by the reconciler.
    node = mk_node(annotations={UNREACHABLE_SINCE_ANNOTATION: format_rfc3339(NOW - 50)})
    lease = lease_for(cloud)
    p = plan(node=node, lease=lease, verdict=verdict, now=NOW, config=CFG)
    assert (p.cloud, p.edge, p.table_state) == (cloud, edge, expected)
    assert p.state is expected and p.effective_state is expected and p.confirmed
    assert set(p.taints) == EXPECTED_TAINTS[expected]
    assert p.evict_pods is (expected is NodeState.FAILED)
    assert dict(p.annotations)[STATE_ANNOTATION] == (
        None if expected is NodeState.NORMAL else expected.value
    )
    if expected is NodeState.NORMAL:
        assert dict(p.annotations)[UNREACHABLE_SINCE_ANNOTATION] is None
        assert p.event is None
    else:
        assert p.event is not None and p.event.type == "Warning"
        assert p.event.message.startswith(f"normal -> {expected.value}")


@pytest.mark.parametrize(
    ("edge", "expected"), [(e, s) for c, e, s in TABLE if c is CloudView.LOST]
)
def test_lease_absent_is_lost(edge, expected):
    verdict = EDGE_VERDICTS[edge][0]
    node = mk_node()
    p = plan(node=node, lease=None, verdict=verdict, now=NOW, config=CFG)
    assert (p.cloud, p.edge, p.table_state) == (CloudView.LOST, edge, expected)


@pytest.mark.parametrize(
    ("edge", "expected", "verdict"),
    [(e, s, verdict) for c, e, s in TABLE if c is CloudView.LOST for verdict in EDGE_VERDICTS[e]],
)
def test_autonomy_held_lease_is_lost_in_the_table(edge, expected, verdict):
    """A fresh Lease renewed by the controller's own autonomy hold is realised exactly like the LOST
    row of the table: it is no evidence of life."""
    node = mk_node(annotations={UNREACHABLE_SINCE_ANNOTATION: format_rfc3339(NOW - 50)})
    p = plan(node=node, lease=held_lease(NOW - 1), verdict=verdict, now=NOW, config=CFG)
    assert (p.cloud, p.edge, p.table_state) == (CloudView.LOST, edge, expected)
    assert p.state is expected and p.effective_state is expected and p.confirmed
    assert set(p.taints) == EXPECTED_TAINTS[expected]
    assert p.evict_pods is (expected is NodeState.FAILED)
    assert p.unreachable_since == NOW - 50


# ---------------------------------------------------------------------------------------------------
# freshness and the two views
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("timestamp", "now", "grace", "fresh"),
    [
        (T0, T0, 40.0, True),
        (T0, T0 + 40.0, 40.0, True),  # exactly at the boundary: still fresh
        (T0, T0 + 40.25, 40.0, False),
        (T0, math.nextafter(T0 + 40.0, math.inf), 40.0, False),  # right after it: stale
        (T0, T0 + 10.0, 10.0, True),
        (T0 + 100.0, T0, 40.0, True),  # observed "after" now (a caller's rounding): fresh
        (None, T0, 40.0, False),
        (T0, T0 + 0.0, 0.0, True),
    ],
)
def test_is_fresh(timestamp, now, grace, fresh):
    assert is_fresh(observed_at=timestamp, now=now, grace_s=grace) is fresh


@pytest.mark.parametrize(
    ("lease", "now", "expected"),
    [
        (None, T0, CloudView.LOST),
        (mk_lease(None), T0, CloudView.LOST),
        (mk_lease(None, delegated=True), T0, CloudView.LOST),
        (mk_lease(T0), T0 + GRACE, CloudView.OK),
        (mk_lease(T0), T0 + GRACE + 0.25, CloudView.LOST),
        (mk_lease(T0), T0 + 40.0, CloudView.LOST),  # long before the Lease's own expiry
        (mk_lease(T0, delegated=True), T0 + GRACE, CloudView.DELEGATED),
        (mk_lease(T0, delegated=True), T0 + GRACE + 0.25, CloudView.LOST),
        (mk_lease(T0 + 30), T0, CloudView.OK),
        # the controller's own autonomy hold (mark current, via=autonomy) is no heartbeat: LOST even
        # while fresh
        (held_lease(T0), T0, CloudView.LOST),
        (held_lease(T0), T0 + GRACE, CloudView.LOST),
        (held_lease(T0), T0 + GRACE + 0.25, CloudView.LOST),
        (mk_lease(T0, delegated=True, via="autonomy"), T0, CloudView.LOST),
        # a stale hold mark (the kubelet renewed by itself since) is the node's own renewal
        (held_lease(T0 + 10, current=False), T0 + 10, CloudView.OK),
        # via=autonomy without a delegate mark is not a delegation at all
        (mk_lease(T0, via="autonomy"), T0, CloudView.OK),
        # delegated by a peer or the coordinator: still evidence of life
        (mk_lease(T0, delegated=True, via="peer"), T0, CloudView.DELEGATED),
        (mk_lease(T0, delegated=True, via="coordinator"), T0, CloudView.DELEGATED),
        (mk_lease(T0, delegated=True, via="Autonomy"), T0, CloudView.DELEGATED),  # case-sensitive
        (marked(T0, "True"), T0, CloudView.OK),
        (marked(T0, "false"), T0, CloudView.OK),
        (marked(T0, None, extra={"openyurt.io/delegate-heartbeat": "true"}), T0, CloudView.OK),
        (marked(T0, "true", written=None), T0, CloudView.OK),  # the mark without a renewal it names
        # clock skew: the renewTime texts say nothing about freshness, only the observation does
        (mk_lease(T0, text="2000-01-01T00:00:00.000000Z"), T0 + GRACE, CloudView.OK),
        (mk_lease(T0, text="2099-01-01T00:00:00.000000Z"), T0 + GRACE + 0.25, CloudView.LOST),
        (mk_lease(T0, delegated=True, text="1999-12-31T23:00:00.000000Z"), T0 + 5, CloudView.DELEGATED),
    ],
)
def test_cloud_view(lease, now, expected):
    assert cloud_view(lease=lease, now=now, grace_s=GRACE) is expected
    # and plan() gets the same view from the default grace
    assert plan(node=mk_node(), lease=lease, verdict=None, now=now, config=CFG).cloud is expected


@pytest.mark.parametrize(
    ("lease", "held"),
    [
        (held_lease(T0), True),
        (held_lease(T0 + 10, current=False), False),  # stale mark: the kubelet renewed since
        (mk_lease(T0, via="autonomy"), False),  # no delegate mark
        (mk_lease(T0, delegated=True), False),  # no via
        (mk_lease(T0, delegated=True, via="peer"), False),
        (mk_lease(T0, delegated=True, via="coordinator"), False),
        (mk_lease(T0, delegated=True, via="Autonomy"), False),
        (mk_lease(T0), False),
        (None, False),
    ],
)
def test_is_held_by_controller(lease, held):
    assert is_held_by_controller(lease) is held
    if held:
        assert is_delegated(lease)  # a hold is a (current) delegation, of a special kind


@pytest.mark.parametrize(
    ("lease", "delegated"),
    [
        (marked(T0 + 0.123456), True),  # names this renewal
        (marked(T0 + 0.123456, written="2023-11-14T22:13:20.123456Z"), True),  # the same text
        (marked(T0 + 0.123456, written=None), False),  # the mark alone names no renewal
        (marked(T0 + 0.123456, written="2023-11-14T22:13:20.123Z"), False),  # another text: not this one
        (marked(T0 + 10.5, written="2023-11-14T22:13:20.123456Z"), False),  # kubelet renewed since: stale
        (marked(T0, written="not a time"), False),
        (marked(None, written="2023-11-14T22:13:20.000000Z"), False),
        (marked(T0, mark=None), False),  # delegated-renew-time without the mark
        (marked(T0, mark="True"), False),
        (None, False),
    ],
)
def test_is_delegated_honours_the_renew_time_of_the_mark(lease, delegated):
    assert is_delegated(lease) is delegated


def test_stale_mark_after_kubelet_renewal_is_the_nodes_own_renewal():
    # the delegate renewed at T0 (mark names T0); the kubelet renewed itself at T0+10 keeping annotations
    lease = marked(T0 + 10, written=format_micro_time(T0 + 0.5))
    p = plan(node=mk_node(), lease=lease, verdict=mk_verdict(HEALTHY, T0 + 10), now=T0 + 10, config=CFG)
    assert p.cloud is CloudView.OK and p.state is NodeState.NORMAL
    # and when it goes stale, the outage starts from that own renewal
    p = plan(node=mk_node(), lease=lease, verdict=None, now=T0 + 100, config=CFG)
    assert p.cloud is CloudView.LOST and p.unreachable_since == T0 + 10 + GRACE


def test_lease_grace_comes_from_the_lease_or_the_default():
    # the duration: the Lease's leaseDurationSeconds if positive, else the default (40 s) -> 10 + 2 s
    assert lease_grace_s(lease=None, config=CFG) == GRACE
    assert lease_grace_s(lease=mk_lease(T0, duration=None), config=CFG) == GRACE
    assert lease_grace_s(lease=mk_lease(T0, duration=0), config=CFG) == GRACE
    assert lease_grace_s(lease=mk_lease(T0, duration=-5), config=CFG) == GRACE
    assert lease_grace_s(lease=mk_lease(T0, duration=15), config=CFG) == 15 / 4 + 2  # 5.75
    cfg = ControllerConfig(default_lease_duration_s=25.0)
    assert lease_grace_s(lease=mk_lease(T0, duration=None), config=cfg) == 25 / 4 + 2  # 8.25
    # and plan() uses it: a 15 s Lease is overdue right after 5.75 s
    node = mk_node()
    ok = plan(node=node, lease=mk_lease(T0, duration=15), verdict=None, now=T0 + 5.75, config=CFG)
    assert ok.cloud is CloudView.OK
    stale = plan(node=node, lease=mk_lease(T0, duration=15), verdict=None, now=T0 + 6.0, config=CFG)
    assert stale.cloud is CloudView.LOST


def test_lease_grace_is_the_overdue_threshold_of_a_40s_lease():
    """40 s Lease, default slack: one renew interval (10 s) + 2 s = 12 s, not the 40 s expiry."""
    assert CFG.overdue_slack_s == 2.0
    assert lease_grace_s(lease=mk_lease(T0, duration=LEASE_DURATION), config=CFG) == 12.0
    node = mk_node()
    assert plan(node=node, lease=mk_lease(T0), verdict=None, now=T0 + 12.0, config=CFG).cloud is CloudView.OK
    p = plan(node=node, lease=mk_lease(T0), verdict=None, now=T0 + 12.25, config=CFG)
    assert p.cloud is CloudView.LOST and p.unreachable_since == T0 + 12
    assert "grace 12 s" in p.explanation
    # a punctual kubelet (every 10 s, up to the slack late) never leaves OK
    for late in (0.0, 1.0, 2.0):
        assert plan(node=node, lease=mk_lease(T0), verdict=None, now=T0 + 10 + late, config=CFG).cloud is CloudView.OK


@pytest.mark.parametrize(
    ("duration", "slack", "grace"),
    [
        (40.0, 2.0, 12.0),
        (40.0, 0.0, 10.0),
        (40.0, 5.5, 15.5),
        (40.0, 30.0, 40.0),  # never longer than the Lease itself
        (40.0, 100.0, 40.0),
        (8.0, 2.0, 4.0),
        (8 / 3, 2.0, 8 / 3),  # duration / 4 + slack == duration: the two branches meet
        (2.0, 2.0, 2.0),  # tiny Lease: duration / 4 + slack = 2.5 > 2, so the duration
        (1.0, 2.0, 1.0),
        (0.25, 2.0, 0.25),
        (1.0, 0.0, 0.25),
    ],
)
def test_lease_grace_is_min_of_duration_and_quarter_plus_slack(duration, slack, grace):
    cfg = ControllerConfig(overdue_slack_s=slack)
    got = lease_grace_s(lease=mk_lease(T0, duration=duration), config=cfg)
    assert got == pytest.approx(grace, abs=1e-12)
    assert got == min(duration, duration / 4 + slack)
    assert got <= duration
    # the default duration gets the same rule
    cfg = ControllerConfig(overdue_slack_s=slack, default_lease_duration_s=duration)
    assert lease_grace_s(lease=None, config=cfg) == got


@FAST
@given(
    duration=st.integers(min_value=1, max_value=4000).map(lambda q: q / 4),
    slack=st.integers(min_value=0, max_value=400).map(lambda q: q / 4),
)
def test_lease_grace_bounds(duration, slack):
    cfg = ControllerConfig(overdue_slack_s=slack)
    grace = lease_grace_s(lease=mk_lease(T0, duration=duration), config=cfg)
    assert duration / 4 <= grace <= duration  # never before the next renewal is due, never past expiry
    assert grace == min(duration, duration / 4 + slack)
    node = mk_node()
    assert plan(node=node, lease=mk_lease(T0, duration=duration), verdict=None, now=T0 + grace, config=cfg).cloud is (
        CloudView.OK
    )
    late = plan(node=node, lease=mk_lease(T0, duration=duration), verdict=None, now=T0 + grace + 0.125, config=cfg)
    assert late.cloud is CloudView.LOST


@pytest.mark.parametrize(
    ("verdict", "now", "expected"),
    [
        (None, T0, EdgeView.UNKNOWN),
        (mk_verdict(HEALTHY, T0), T0, EdgeView.HEALTHY),
        (mk_verdict(UNHEALTHY, T0), T0, EdgeView.UNHEALTHY),
        (mk_verdict(UNKNOWN, T0), T0, EdgeView.UNKNOWN),
        (mk_verdict(HEALTHY, T0), T0 + TTL, EdgeView.HEALTHY),  # at the TTL: still counts
        (mk_verdict(HEALTHY, T0), T0 + TTL + 0.25, EdgeView.UNKNOWN),  # stale
        (mk_verdict(UNHEALTHY, T0), T0 + TTL, EdgeView.UNHEALTHY),
        (mk_verdict(UNHEALTHY, T0), T0 + TTL + 0.25, EdgeView.UNKNOWN),
        (mk_verdict(HEALTHY, None, T0), T0 + 10, EdgeView.HEALTHY),  # counted when it began
        (mk_verdict(HEALTHY, None, T0), T0 + TTL + 1, EdgeView.UNKNOWN),
        (mk_verdict(HEALTHY, None, None), T0, EdgeView.UNKNOWN),  # never counted: never counts
        (mk_verdict(HEALTHY, T0 + 5, T0 - 1000), T0 + TTL, EdgeView.HEALTHY),  # the last count counts
    ],
)
def test_edge_view(verdict, now, expected):
    assert edge_view(verdict=verdict, now=now, ttl_s=TTL) is expected


@pytest.mark.parametrize("value", ["True", "False", "Unknown", "true", "", "Maybe", None, 1])
def test_the_edge_input_is_a_verified_verdict_and_nothing_else(value):
    """The decision core's edge input is the verdict the controller counted, one of three; a status
    of the EdgeHealthy condition (or anything else) is refused, so no unknown status can count."""
    with pytest.raises(ValueError):
        VerifiedVerdict(verdict=value)
    for verdict in Verdict:
        assert VerifiedVerdict(verdict=verdict.value).verdict is verdict
    for bad in (math.nan, math.inf, True, "1"):
        with pytest.raises(ValueError):
            VerifiedVerdict(verdict=HEALTHY, since=bad)
        with pytest.raises(ValueError):
            VerifiedVerdict(verdict=HEALTHY, counted_at=bad)


def test_stale_edge_condition_turns_disconnected_into_unknown():
    lease = mk_lease(T0)  # overdue from T0+12.25, outage since T0+12
    verdict = mk_verdict(HEALTHY, T0 + 50)
    node = mk_node()
    assert plan(node=node, lease=lease, verdict=verdict, now=T0 + 110, config=CFG).state is NodeState.DISCONNECTED
    p = plan(node=node, lease=lease, verdict=verdict, now=T0 + 110.25, config=CFG)
    assert p.edge is EdgeView.UNKNOWN and p.state is NodeState.UNKNOWN
    # the autonomy clock starts when the verdict went stale (T0+110), not at the outage start
    assert p.fail_at == T0 + 110 + 300


# ---------------------------------------------------------------------------------------------------
# durations
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0", 0.0), ("0s", 0.0), ("90s", 90.0), ("10m", 600.0), ("1h30m", 5400.0), ("1.5h", 5400.0), ("300ms", 0.3),
     ("+5s", 5.0)],
)
def test_parse_autonomy_duration_takes_go_durations(text, seconds):
    """Go durations (edgewatch.timefmt.parse_go_duration, tested there in full)."""
    assert parse_autonomy_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["unlimited", "Unlimited", " UNLIMITED ", "unlimited\n"])
def test_parse_autonomy_unlimited(text):
    assert parse_autonomy_duration(text) is None


@pytest.mark.parametrize("text", ["", " ", "forever", "unlimitedx", "-1s", "10", "1d", "inf"])
def test_parse_autonomy_invalid(text):
    with pytest.raises(ValueError):
        parse_autonomy_duration(text)


def test_parse_autonomy_strips_whitespace():
    assert parse_autonomy_duration(" 10m\n") == 600.0


# ---------------------------------------------------------------------------------------------------
# unknown policy x autonomy annotation
# ---------------------------------------------------------------------------------------------------

# LOST at T0 + 12.25 (Lease renewed at T0, overdue after 12 s), no edge condition: the outage began at
# T0+12 and is confirmed at T0+32 (confirm_s applies to UNKNOWN); the autonomy clock starts at T0+12.
OUTAGE = T0 + GRACE
CONFIRMED = OUTAGE + CONFIRM

AUTONOMY_CASES = [
    # policy, annotation, expected autonomy (None = unlimited), warns
    (UnknownPolicy.AUTONOMY, None, 300.0, False),
    (UnknownPolicy.AUTONOMY, "10m", 600.0, False),
    (UnknownPolicy.AUTONOMY, "90s", 90.0, False),
    (UnknownPolicy.AUTONOMY, "1h30m", 5400.0, False),
    (UnknownPolicy.AUTONOMY, "0", 0.0, False),
    (UnknownPolicy.AUTONOMY, "unlimited", None, False),
    (UnknownPolicy.AUTONOMY, "soon", 300.0, True),
    (UnknownPolicy.AUTONOMY, "-5m", 300.0, True),
    (UnknownPolicy.AUTONOMY, "300", 300.0, True),
    (UnknownPolicy.KEEP, None, None, False),
    (UnknownPolicy.KEEP, "2m", 120.0, False),
    (UnknownPolicy.KEEP, "bad", None, True),
    (UnknownPolicy.FAIL, None, 0.0, False),
    (UnknownPolicy.FAIL, "unlimited", None, False),
    (UnknownPolicy.FAIL, "5m", 300.0, False),
    (UnknownPolicy.FAIL, "bad", 0.0, True),
]


@pytest.mark.parametrize(("policy", "annotation", "autonomy", "warns"), AUTONOMY_CASES)
def test_autonomy_duration(policy, annotation, autonomy, warns):
    annotations = {} if annotation is None else {AUTONOMY_DURATION_ANNOTATION: annotation}
    value, warning = autonomy_duration(
        annotations=annotations, config=ControllerConfig(unknown_policy=policy)
    )
    assert value == autonomy
    assert (warning is not None) is warns
    if warns:
        assert AUTONOMY_DURATION_ANNOTATION in warning and repr(annotation) in warning


@pytest.mark.parametrize(("policy", "annotation", "autonomy", "warns"), AUTONOMY_CASES)
def test_unknown_policy_in_plan(policy, annotation, autonomy, warns):
    cfg = ControllerConfig(unknown_policy=policy)
    annotations = {} if annotation is None else {AUTONOMY_DURATION_ANNOTATION: annotation}
    node = mk_node(annotations=annotations)
    lease = mk_lease(T0)

    def at(now: float) -> NodePlan:
        return plan(node=node, lease=lease, verdict=None, now=now, config=cfg)

    # before confirmation nothing is enforced, whatever the policy
    early = at(OUTAGE + 13)
    assert early.effective_state is NodeState.NORMAL and early.taints == () and not early.evict_pods
    assert (len(early.warnings) == 1) is warns
    assert early.autonomy_s == autonomy

    if autonomy is None:
        for now in (CONFIRMED, T0 + 10_000, T0 + 1e7):
            p = at(now)
            assert p.state is NodeState.UNKNOWN and p.effective_state is NodeState.UNKNOWN
            assert set(p.taints) == {NS_TAINT} and not p.evict_pods and p.fail_at is None
        return
    fail_at = OUTAGE + autonomy
    assert early.fail_at == fail_at
    if fail_at > CONFIRMED:
        before = at(fail_at - 0.25)
        assert before.state is NodeState.UNKNOWN and set(before.taints) == {NS_TAINT}
        assert before.requeue_after_s == pytest.approx(0.25)
    after = at(max(fail_at, CONFIRMED))
    assert after.state is NodeState.FAILED and after.effective_state is NodeState.FAILED
    assert after.evict_pods and FAILED_TAINT.ident in {t.ident for t in after.taints}


@pytest.mark.parametrize("failed_confirm", [0.0, 5.0, 45.0])
def test_autonomy_zero_still_waits_for_confirmation(failed_confirm):
    """FAILED by an autonomy time of 0 (no edge evidence) is an UNKNOWN table state: it waits confirm_s,
    whatever failed_confirm_s says (that one is for the peers' FAILED verdict only)."""
    cfg = ControllerConfig(failed_confirm_s=failed_confirm)
    node = mk_node(annotations={AUTONOMY_DURATION_ANNOTATION: "0"})
    p = plan(node=node, lease=mk_lease(T0), verdict=None, now=OUTAGE + 5, config=cfg)
    assert p.table_state is NodeState.UNKNOWN
    assert p.state is NodeState.FAILED and not p.confirmed and p.confirm_at == CONFIRMED
    assert p.effective_state is NodeState.NORMAL and p.taints == () and not p.evict_pods
    assert p.requeue_after_s == 15.0
    p = plan(node=node, lease=mk_lease(T0), verdict=None, now=CONFIRMED - 0.25, config=cfg)
    assert p.effective_state is NodeState.NORMAL
    p = plan(node=node, lease=mk_lease(T0), verdict=None, now=CONFIRMED, config=cfg)
    assert p.effective_state is NodeState.FAILED and p.evict_pods


@pytest.mark.parametrize(
    ("verdict", "clock_start"),
    [
        (None, OUTAGE),
        (mk_verdict(UNKNOWN, T0 + 30, T0 + 200), T0 + 200),  # unknown since its transition
        (mk_verdict(UNKNOWN, T0 + 30, T0 - 500), OUTAGE),  # unknown before the outage began
        (mk_verdict(UNKNOWN, T0 + 30, None), OUTAGE),
        (mk_verdict(HEALTHY, T0 + 150), T0 + 150 + TTL),  # healthy verdict went stale at its count + TTL
        (mk_verdict(UNHEALTHY, T0 + 150), T0 + 150 + TTL),
        (mk_verdict(HEALTHY, T0 - 500), OUTAGE),
        (mk_verdict(HEALTHY, None, None), OUTAGE),
    ],
)
def test_autonomy_clock_starts_when_edge_evidence_vanished(verdict, clock_start):
    node = mk_node()
    now = T0 + 400
    if verdict is not None and verdict.verdict is not UNKNOWN and verdict.counted_at:
        now = max(now, verdict.counted_at + TTL + 1)
    p = plan(node=node, lease=mk_lease(T0), verdict=verdict, now=now, config=CFG)
    assert p.table_state is NodeState.UNKNOWN
    assert p.fail_at == clock_start + 300


# ---------------------------------------------------------------------------------------------------
# confirmation
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "config"),
    [
        (HEALTHY, CFG),  # DISCONNECTED waits confirm_s
        (None, CFG),  # UNKNOWN waits confirm_s
        (HEALTHY, ControllerConfig(failed_confirm_s=0.0)),
        (UNHEALTHY, ControllerConfig(failed_confirm_s=CONFIRM)),  # FAILED waits failed_confirm_s
        (UNHEALTHY, ControllerConfig(failed_confirm_s=CONFIRM, confirm_s=5.0)),
    ],
)
def test_nothing_is_enforced_before_confirmation(status, config):
    wait = config.failed_confirm_s if status is UNHEALTHY else config.confirm_s
    assert wait == CONFIRM
    verdict = None if status is None else mk_verdict(status, OUTAGE + wait - 1)
    node = mk_node()
    lease = mk_lease(T0)
    p = plan(node=node, lease=lease, verdict=verdict, now=OUTAGE + wait - 0.25, config=config)
    assert p.state is not NodeState.NORMAL and not p.confirmed
    assert p.effective_state is NodeState.NORMAL
    assert p.taints == () and not p.evict_pods and p.event is None
    assert p.confirm_at == OUTAGE + wait
    assert p.requeue_after_s == pytest.approx(0.25)
    # the outage start is recorded already, so it survives a restart
    assert dict(p.annotations) == {
        UNREACHABLE_SINCE_ANNOTATION: format_rfc3339(OUTAGE),
        STATE_ANNOTATION: None,
    }
    p = plan(node=node, lease=lease, verdict=verdict, now=OUTAGE + wait, config=config)
    assert p.confirmed and p.effective_state is p.state and NS_TAINT in p.taints
    assert p.event is not None


def test_failed_verdict_on_overdue_lease_is_acted_on_at_once():
    """Lease overdue (12.25 s after the last renewal) and peers see the node unhealthy: FAILED, with
    failed_confirm_s = 0 (default) enforced at once: failed taint, eviction, event."""
    assert CFG.failed_confirm_s == 0.0
    lease = mk_lease(T0)
    # still within the grace: the node renews its own Lease, so NORMAL whatever the peers say
    verdict = mk_verdict(UNHEALTHY, OUTAGE)
    node = mk_node()
    p = plan(node=node, lease=lease, verdict=verdict, now=OUTAGE, config=CFG)
    assert p.cloud is CloudView.OK and p.effective_state is NodeState.NORMAL and p.taints == ()
    assert p.requeue_after_s == MIN_REQUEUE_S
    now = OUTAGE + 0.25
    verdict = mk_verdict(UNHEALTHY, now)
    node = mk_node()
    p = plan(node=node, lease=lease, verdict=verdict, now=now, config=CFG)
    assert (p.cloud, p.edge, p.table_state) == (CloudView.LOST, EdgeView.UNHEALTHY, NodeState.FAILED)
    assert p.state is NodeState.FAILED and p.confirmed and p.confirm_at == OUTAGE
    assert p.effective_state is NodeState.FAILED and p.evict_pods
    assert set(p.taints) == {NS_TAINT, replace(FAILED_TAINT, time_added=math.ceil(now))}
    assert p.failed_taint_added_at == T0 + 13
    assert p.event is not None and p.event.reason == "EdgewatchFailed"
    assert p.event.message.startswith("normal -> failed")
    assert dict(p.annotations) == {
        UNREACHABLE_SINCE_ANNOTATION: format_rfc3339(OUTAGE),
        STATE_ANNOTATION: "failed",
    }
    # a dead node's pods go ~12 s after its last renewal instead of ~60 s (grace 40 + confirm 20)
    assert p.unreachable_since - lease.observed_at == GRACE


@pytest.mark.parametrize("failed_confirm", [0.25, 5.0, CONFIRM, 45.5])
def test_failed_verdict_waits_failed_confirm_s_when_set(failed_confirm):
    cfg = ControllerConfig(failed_confirm_s=failed_confirm)
    lease = mk_lease(T0)
    confirm_at = OUTAGE + failed_confirm
    before = confirm_at - 0.25 if failed_confirm > 0.25 else OUTAGE + 0.125
    verdict = mk_verdict(UNHEALTHY, before)
    node = mk_node()
    p = plan(node=node, lease=lease, verdict=verdict, now=before, config=cfg)
    assert p.state is NodeState.FAILED and not p.confirmed and p.confirm_at == confirm_at
    assert p.effective_state is NodeState.NORMAL and p.taints == () and not p.evict_pods
    assert p.event is None and p.failed_taint_added_at is None
    assert p.requeue_after_s == pytest.approx(confirm_at - before)
    verdict = mk_verdict(UNHEALTHY, confirm_at)
    node = mk_node()
    p = plan(node=node, lease=lease, verdict=verdict, now=confirm_at, config=cfg)
    assert p.confirmed and p.effective_state is NodeState.FAILED and p.evict_pods
    assert FAILED_TAINT.ident in {t.ident for t in p.taints}
    assert p.event is not None and p.event.reason == "EdgewatchFailed"


@pytest.mark.parametrize("failed_confirm", [0.0, 5.0])
def test_disconnected_still_waits_confirm_s(failed_confirm):
    cfg = ControllerConfig(failed_confirm_s=failed_confirm)
    lease = mk_lease(T0)
    for now in (OUTAGE + 0.25, OUTAGE + failed_confirm + 0.25, CONFIRMED - 0.25):
        verdict = mk_verdict(HEALTHY, now)
        node = mk_node()
        p = plan(node=node, lease=lease, verdict=verdict, now=now, config=cfg)
        assert p.state is NodeState.DISCONNECTED and not p.confirmed and p.confirm_at == CONFIRMED
        assert p.effective_state is NodeState.NORMAL and p.taints == () and p.event is None
    verdict = mk_verdict(HEALTHY, CONFIRMED)
    node = mk_node()
    p = plan(node=node, lease=lease, verdict=verdict, now=CONFIRMED, config=cfg)
    assert p.effective_state is NodeState.DISCONNECTED and p.taints == (NS_TAINT,)
    assert not p.evict_pods


def test_failed_acted_on_stays_failed_when_the_verdict_is_lost_before_confirm_s():
    """FAILED acted on at once (failed_confirm_s = 0) must not fall back to NORMAL when the peers'
    verdict turns Unknown before confirm_s: the outage is confirmed once acted on, and an unknown edge
    view is no evidence of life (sticky FAILED)."""
    lease = mk_lease(T0)
    verdict = mk_verdict(UNHEALTHY, OUTAGE + 1)
    node = mk_node()
    p = plan(node=node, lease=lease, verdict=verdict, now=OUTAGE + 1, config=CFG)
    assert p.effective_state is NodeState.FAILED
    node = apply_plan(node=node, plan=p)
    for now in (OUTAGE + 3, CONFIRMED - 0.25, CONFIRMED, CONFIRMED + 100):
        verdict = mk_verdict(UNKNOWN, now, OUTAGE + 3)
        p = plan(node=node, lease=lease, verdict=verdict, now=now, config=CFG)
        assert p.table_state is NodeState.UNKNOWN
        assert p.state is NodeState.FAILED and p.effective_state is NodeState.FAILED, now
        assert p.confirmed and p.evict_pods and p.event is None
        assert p.failed_taint_added_at == T0 + 13
        node = apply_plan(node=node, plan=p)


def test_failed_acted_on_becomes_disconnected_on_a_healthy_verdict_before_confirm_s():
    lease = mk_lease(T0)
    verdict = mk_verdict(UNHEALTHY, OUTAGE + 1)
    node = mk_node()
    node = apply_plan(node=node, plan=plan(node=node, lease=lease, verdict=verdict, now=OUTAGE + 1, config=CFG))
    assert node.annotations[STATE_ANNOTATION] == "failed"
    verdict = mk_verdict(HEALTHY, OUTAGE + 5)
    p = plan(node=node, lease=lease, verdict=verdict, now=OUTAGE + 5, config=CFG)
    # alive after all, but still cut off: no new pods (never back to NORMAL while unreachable)
    assert p.state is NodeState.DISCONNECTED and p.effective_state is NodeState.DISCONNECTED
    assert p.taints == (NS_TAINT,) and not p.evict_pods
    assert p.event is not None and p.event.message.startswith("failed -> disconnected")


def test_single_delegated_renewal_never_taints():
    verdict = mk_verdict(HEALTHY, T0)
    node = mk_node()
    p = plan(node=node, lease=mk_lease(T0, delegated=True), verdict=verdict, now=T0, config=CFG)
    assert p.state is NodeState.DISCONNECTED and not p.confirmed and p.taints == ()
    # next change: the delegated renewal goes overdue (12 s) before the confirmation (20 s)
    assert p.unreachable_since == T0 and p.confirm_at == T0 + CONFIRM
    assert p.requeue_after_s == GRACE
    node = apply_plan(node=node, plan=p)
    p = plan(node=node, lease=mk_lease(T0, delegated=True), verdict=verdict, now=T0 + 10, config=CFG)
    assert p.taints == ()
    node = apply_plan(node=node, plan=p)
    # the node's own kubelet renews again 10 s later
    p = plan(node=node, lease=mk_lease(T0 + 10), verdict=verdict, now=T0 + 10, config=CFG)
    assert p.state is NodeState.NORMAL and p.taints == () and p.event is None
    assert dict(p.annotations) == {UNREACHABLE_SINCE_ANNOTATION: None, STATE_ANNOTATION: None}
    node = apply_plan(node=node, plan=p)
    assert not set(node.annotations) & set(MANAGED_ANNOTATIONS)


def test_delegated_for_confirm_s_taints():
    verdict = mk_verdict(HEALTHY, T0 + 20)
    node = mk_node()
    for now in (T0, T0 + 10, T0 + 19.75, T0 + 20):
        p = plan(node=node, lease=mk_lease(now, delegated=True), verdict=verdict, now=now, config=CFG)
        node = apply_plan(node=node, plan=p)
    assert p.effective_state is NodeState.DISCONNECTED and p.taints == (NS_TAINT,)
    assert node.annotations[UNREACHABLE_SINCE_ANNOTATION] == format_rfc3339(T0)


def _replay_renewals(*, gaps, looks, edge, start, config) -> None:
    """Kubelet renewals separated by ``gaps``, planned at fractions ``looks`` of each gap with the edge
    statuses cycling through ``edge``, the reconciler applying every plan: assert nothing is ever
    enforced (no taint, eviction, event or recorded state)."""
    node = mk_node()
    renew = T0 + start
    step = 0
    for gap in [*gaps, 0.0]:
        for frac in [0.0, *sorted(looks)]:
            now = renew + gap * frac
            status = edge[step % len(edge)]
            step += 1
            verdict = None if status is None else mk_verdict(status, now)
            p = plan(node=node, lease=mk_lease(renew), verdict=verdict, now=now, config=config)
            assert p.taints == () and not p.evict_pods and p.event is None, p.explanation
            assert p.effective_state is NodeState.NORMAL
            node = apply_plan(node=node, plan=p)
            assert STATE_ANNOTATION not in node.annotations
        renew += gap


@FAST
@given(
    fracs=st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=12),
    looks=st.lists(st.floats(min_value=0.0, max_value=0.9999), min_size=1, max_size=6),
    edge=st.lists(st.sampled_from([HEALTHY, UNHEALTHY, UNKNOWN, None]), min_size=1, max_size=5),
    start=st.floats(min_value=0.0, max_value=1000.0),
    failed_confirm=st.sampled_from([0.0, 5.0, CONFIRM, 45.5]),
)
def test_missed_heartbeats_below_grace_plus_confirm_never_taint(
    fracs, looks, edge, start, failed_confirm
):
    """Kubelet renewals whose gaps stay below grace (12 s) + the confirmation that applies never cause
    a taint, an eviction or an event, with the reconciler applying every plan as it goes.

    The confirmation that applies is confirm_s (20 s) while the peers never say unhealthy (DISCONNECTED
    or UNKNOWN), and min(confirm_s, failed_confirm_s) once they may (FAILED is confirmed after
    failed_confirm_s); with the default failed_confirm_s = 0 that is the grace alone.
    """
    wait = CONFIRM if UNHEALTHY not in edge else min(CONFIRM, failed_confirm)
    limit = GRACE + wait
    gaps = [0.25 + f * (limit - 0.25 - 0.001) for f in fracs]
    assert all(0.25 <= g < limit for g in gaps)
    config = ControllerConfig(failed_confirm_s=failed_confirm)
    _replay_renewals(gaps=gaps, looks=looks, edge=edge, start=start, config=config)


@FAST
@given(
    gaps=st.lists(st.floats(min_value=0.25, max_value=GRACE), min_size=1, max_size=12),
    looks=st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=6),
    edge=st.lists(st.sampled_from([HEALTHY, UNHEALTHY, UNKNOWN, None]), min_size=1, max_size=5),
    start=st.floats(min_value=0.0, max_value=1000.0),
)
def test_punctual_kubelet_never_leaves_ok(gaps, looks, edge, start):
    """A kubelet renewing at most overdue_slack_s late (gaps <= 12 s) keeps the cloud view OK, so
    nothing happens whatever the edge says, even with FAILED acted on at once (failed_confirm_s = 0)."""
    renew = T0 + start
    for gap in gaps:
        for frac in looks:
            now = renew + gap * frac
            for status in edge:
                verdict = None if status is None else mk_verdict(status, now)
                p = plan(node=mk_node(), lease=mk_lease(renew), verdict=verdict, now=now, config=CFG)
                assert p.cloud is CloudView.OK and p.state is NodeState.NORMAL, p.explanation
                assert p.taints == () and not p.evict_pods and p.event is None
        renew += gap


@pytest.mark.parametrize("status", [HEALTHY, UNKNOWN, None])
def test_one_missed_heartbeat_never_taints(status):
    """Renewals at T0, T0+10 missed, T0+23 (13 s late: overdue from T0+12.25), then punctual again.
    The cloud view leaves OK for ~11 s, but the DISCONNECTED / UNKNOWN verdict would be confirmed only
    at T0+32, so nothing is ever enforced."""
    renewals = [T0, T0 + 23, T0 + 33, T0 + 43]
    node = mk_node()
    saw_lost = False
    for renew, nxt in zip(renewals, [*renewals[1:], T0 + 53], strict=True):
        now = renew
        while now < nxt:
            verdict = None if status is None else mk_verdict(status, now, now)
            p = plan(node=node, lease=mk_lease(renew), verdict=verdict, now=now, config=CFG)
            saw_lost |= p.cloud is CloudView.LOST
            if p.cloud is CloudView.LOST:
                assert p.unreachable_since == OUTAGE and p.confirm_at == CONFIRMED
                assert p.state in (NodeState.DISCONNECTED, NodeState.UNKNOWN) and not p.confirmed
            assert p.effective_state is NodeState.NORMAL, p.explanation
            assert p.taints == () and not p.evict_pods and p.event is None
            node = apply_plan(node=node, plan=p)
            assert STATE_ANNOTATION not in node.annotations
            now += 0.25
    assert saw_lost  # the late renewal was seen as a missed heartbeat
    assert not set(node.annotations) & set(MANAGED_ANNOTATIONS)


# ---------------------------------------------------------------------------------------------------
# random snapshots for the properties
# ---------------------------------------------------------------------------------------------------

quarter = st.integers(min_value=-4000, max_value=4000).map(lambda q: q / 4)  # -1000 .. 1000 s


@st.composite
def leases(draw) -> LeaseSnapshot | None:
    if draw(st.integers(0, 9)) == 0:
        return None
    renew = None if draw(st.integers(0, 14)) == 0 else NOW + draw(quarter) / 4
    # the renewTime text: in step with the observation, or written by a clock far off (skew)
    skew = draw(st.sampled_from([0.0, 0.0, -3600.0, 86400.0]))
    text = None if renew is None else format_micro_time(renew + skew)
    annotations = {}
    mark = draw(st.sampled_from([None, "true", "true", "false", "True"]))
    if mark is not None:
        annotations[DELEGATE_HEARTBEAT_ANNOTATION] = mark
        written = draw(st.sampled_from(["absent", "current", "older", "garbage"]))
        if written == "current" and text is not None:
            annotations[DELEGATED_RENEW_TIME_ANNOTATION] = text
        elif written == "older":
            annotations[DELEGATED_RENEW_TIME_ANNOTATION] = format_micro_time(NOW - 500.25)
        elif written == "garbage":
            annotations[DELEGATED_RENEW_TIME_ANNOTATION] = "?"
    via = draw(st.sampled_from([None, None, "peer", "coordinator", "autonomy", "autonomy"]))
    if via is not None:
        annotations[DELEGATED_VIA_ANNOTATION] = via
    duration = draw(st.sampled_from([None, 40.0, 40.0, 15.0, 0.0]))
    return LeaseSnapshot(renew_time=text, observed_at=renew, first_sight=renew is not None and draw(st.booleans()),
                         duration_s=duration, annotations=annotations, holder=draw(st.sampled_from(["n1", "n2", None])))


@st.composite
def verdicts(draw) -> VerifiedVerdict | None:
    if draw(st.integers(0, 5)) == 0:
        return None
    verdict = draw(st.sampled_from([HEALTHY, UNHEALTHY, UNKNOWN, HEALTHY, UNHEALTHY, UNKNOWN]))
    counted = draw(st.one_of(st.none(), quarter.map(lambda q: NOW + q / 4)))
    since = draw(st.one_of(st.none(), quarter.map(lambda q: NOW + q)))
    return mk_verdict(verdict, counted, since)


TAINT_KEYS = [
    CLOUD_UNREACHABLE_TAINT_KEY,
    FAILED_TAINT_KEY,
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/not-ready",
    "dedicated",
    "",
]
EFFECTS = [str(e) for e in TaintEffect]

taints_st = st.builds(
    Taint,
    st.sampled_from(TAINT_KEYS),
    st.sampled_from(EFFECTS),
    st.sampled_from(["", "", "x", "gpu"]),
    st.one_of(st.none(), quarter.map(lambda q: NOW + q)),
)
foreign_taints_st = taints_st.filter(lambda t: t.ident not in MANAGED_TAINT_IDS)


@st.composite
def node_annotations(draw) -> dict[str, str]:
    annotations = {"foreign.example/keep": draw(st.sampled_from(["1", "a"]))}
    since = draw(
        st.one_of(
            st.none(),
            quarter.map(lambda q: format_rfc3339(math.floor(NOW + q))),
            quarter.map(lambda q: format_micro_time(NOW + q)),  # fractional
            st.sampled_from(["yesterday", "", "2024-01-01T00:00:00", "2024-01-01T00:00:00.5+02:00"]),
        )
    )
    if since is not None:
        annotations[UNREACHABLE_SINCE_ANNOTATION] = since
    state = draw(st.one_of(st.none(), st.sampled_from([*[s.value for s in NodeState], "FAILED", "x"])))
    if state is not None:
        annotations[STATE_ANNOTATION] = state
    autonomy = draw(
        st.one_of(st.none(), st.sampled_from(["0", "90s", "10m", "unlimited", "nonsense", "1h"]))
    )
    if autonomy is not None:
        annotations[AUTONOMY_DURATION_ANNOTATION] = autonomy
    return annotations


nodes = st.builds(
    lambda annotations, taints: mk_node(annotations=annotations, taints=taints),
    node_annotations(),
    st.lists(taints_st, max_size=5),
)
configs = st.builds(
    ControllerConfig,
    default_lease_duration_s=st.sampled_from([40.0, 25.0]),
    edge_view_ttl_s=st.sampled_from([60.0, 30.0]),
    confirm_s=st.sampled_from([20.0, 0.0, 45.5]),
    overdue_slack_s=st.sampled_from([2.0, 0.0, 7.5, 100.0]),
    failed_confirm_s=st.sampled_from([0.0, 20.0, 5.5, 60.0]),
    unknown_policy=st.sampled_from(list(UnknownPolicy)),
    autonomy_s=st.sampled_from([300.0, 0.0, 120.25]),
)


# ---------------------------------------------------------------------------------------------------
# restart safety, foreign taints, requeue
# ---------------------------------------------------------------------------------------------------


@FAST
@given(node=nodes, lease=leases(), verdict=verdicts(), config=configs, dt=quarter)
def test_plan_is_idempotent(node, lease, verdict, config, dt):
    """Applying a plan and planning again (a restarted controller) gives the same decision, no new
    event and nothing left to write."""
    now = NOW + dt / 8
    p1 = plan(node=node, lease=lease, verdict=verdict, now=now, config=config)
    applied = apply_plan(node=node, plan=p1)
    p2 = plan(node=applied, lease=lease, verdict=verdict, now=now, config=config)
    assert decision(p2) == decision(p1)
    assert p2.requeue_after_s == p1.requeue_after_s
    assert p2.event is None
    assert annotation_patch(current=applied.annotations, desired=p2.annotations) == {}
    assert merge_taints(current=applied.taints, managed=p2.taints) == applied.taints
    assert apply_plan(node=applied, plan=p2) == applied
    assert set(p2.warnings) <= set(p1.warnings)


@FAST
@given(node=nodes, lease=leases(), verdict=verdicts(), config=configs,
       foreign=st.lists(foreign_taints_st, max_size=6))
def test_foreign_taints_are_never_touched(node, lease, verdict, config, foreign):
    node = replace(node, taints=(*foreign, *node.taints))
    p = plan(node=node, lease=lease, verdict=verdict, now=NOW, config=config)
    assert all(t.ident in MANAGED_TAINT_IDS for t in p.taints)
    after = merge_taints(current=node.taints, managed=p.taints)
    kept = [t for t in after if t.ident not in MANAGED_TAINT_IDS]
    assert kept == [t for t in node.taints if t.ident not in MANAGED_TAINT_IDS]
    assert our_taints(after) == set(p.taints)
    assert len([t for t in after if t.ident in MANAGED_TAINT_IDS]) == len(p.taints)
    # our other annotations: only the managed keys appear in the plan
    assert set(p.annotations) == set(MANAGED_ANNOTATIONS)
    applied = apply_plan(node=node, plan=p)
    for key, value in node.annotations.items():
        if key not in MANAGED_ANNOTATIONS:
            assert applied.annotations[key] == value


@FAST
@given(node=nodes, lease=leases(), verdict=verdicts(), config=configs, dt=quarter)
def test_requeue_is_positive_and_never_late(node, lease, verdict, config, dt):
    now = NOW + dt / 4
    node = apply_plan(node=node, plan=plan(node=node, lease=lease, verdict=verdict, now=now, config=config))
    p = plan(node=node, lease=lease, verdict=verdict, now=now, config=config)

    def at(t: float) -> NodePlan:
        return plan(node=node, lease=lease, verdict=verdict, now=t, config=config)

    r = p.requeue_after_s
    if r is None:
        for later in (1.0, 1e3, 1e6):
            assert acted(at(now + later)) == acted(p)
        return
    assert r > 0
    # No change before the requeue time. Here every boundary is a multiple of 1/16 s from now, so r is
    # too, except r == MIN_REQUEUE_S: a boundary that changes things right *after* now (a Lease exactly
    # at its grace), where no positive delay can be earlier than the change; the plan asks for the
    # smallest delay then.
    if r == MIN_REQUEUE_S:
        samples = [now]
    else:
        assert r >= 1 / 16
        samples = [now, now + r / 2, now + r - 1 / 32]
    for t in samples:
        assert acted(at(t)) == acted(p), t - now
    # and not needlessly early: each pending boundary changes a view, the confirmation or the state
    nxt = at(now + r + 1e-3)
    assert (nxt.cloud, nxt.edge, nxt.confirmed, nxt.state) != (p.cloud, p.edge, p.confirmed, p.state)


def test_requeue_exact_values():
    node = mk_node()
    # NORMAL: until the Lease is overdue (12 s after its renewal)
    assert plan(node=node, lease=mk_lease(T0), verdict=None, now=T0 + 10, config=CFG).requeue_after_s == 2.0
    assert plan(node=node, lease=mk_lease(T0), verdict=None, now=T0 + 12, config=CFG).requeue_after_s == MIN_REQUEUE_S
    # unconfirmed: until confirmation (outage since T0+12, confirmed at T0+32)
    assert plan(node=node, lease=mk_lease(T0), verdict=None, now=T0 + 13, config=CFG).requeue_after_s == 19.0
    # UNKNOWN, confirmed: until the autonomy runs out (T0+12+300)
    assert plan(node=node, lease=mk_lease(T0), verdict=None, now=T0 + 100, config=CFG).requeue_after_s == 212.0
    # FAILED on LOST: nothing pending
    assert plan(node=node, lease=mk_lease(T0), verdict=None, now=T0 + 400, config=CFG).requeue_after_s is None
    # FAILED verdict with failed_confirm_s set: until that confirmation
    cfg = ControllerConfig(failed_confirm_s=7.5)
    verdict = mk_verdict(UNHEALTHY, T0 + 13)
    n = mk_node()
    assert plan(node=n, lease=mk_lease(T0), verdict=verdict, now=T0 + 13, config=cfg).requeue_after_s == 6.5
    # autonomy hold: LOST though fresh, so its expiry is no boundary; the autonomy is (since + 300)
    n = mk_node(annotations={UNREACHABLE_SINCE_ANNOTATION: format_rfc3339(T0)})
    assert plan(node=n, lease=held_lease(T0 + 100), verdict=None, now=T0 + 100, config=CFG).requeue_after_s == 200.0
    # DISCONNECTED on LOST: until the edge verdict goes stale
    verdict = mk_verdict(HEALTHY, T0 + 90)
    node = mk_node()
    assert plan(node=node, lease=mk_lease(T0), verdict=verdict, now=T0 + 100, config=CFG).requeue_after_s == 50.0
    # KEEP, UNKNOWN, confirmed: nothing pending
    keep = ControllerConfig(unknown_policy=UnknownPolicy.KEEP)
    assert plan(node=mk_node(), lease=None, verdict=None, now=T0, config=keep).requeue_after_s == CONFIRM
    p = plan(
        node=mk_node(annotations={UNREACHABLE_SINCE_ANNOTATION: format_rfc3339(T0 - 100)}),
        lease=None,
        verdict=None,
        now=T0,
        config=keep,
    )
    assert p.state is NodeState.UNKNOWN and p.requeue_after_s is None


# ---------------------------------------------------------------------------------------------------
# outage start, recorded state, events
# ---------------------------------------------------------------------------------------------------


def test_outage_start_from_own_lease_ignores_a_stale_annotation():
    stale = {UNREACHABLE_SINCE_ANNOTATION: format_rfc3339(T0 - 5000), STATE_ANNOTATION: "failed"}
    node = mk_node(annotations=stale)  # left by an earlier outage; the node renewed itself since
    p = plan(node=node, lease=mk_lease(T0), verdict=None, now=CONFIRMED + 1, config=CFG)
    assert p.unreachable_since == OUTAGE
    assert dict(p.annotations)[UNREACHABLE_SINCE_ANNOTATION] == format_rfc3339(OUTAGE)
    # the recorded FAILED belongs to the earlier outage: no sticky FAILED, just UNKNOWN
    assert p.state is NodeState.UNKNOWN and p.effective_state is NodeState.UNKNOWN
    assert p.event is not None and p.event.message.startswith("failed -> unknown")


def test_outage_start_rounds_up_to_whole_seconds():
    p = plan(node=mk_node(), lease=mk_lease(T0 + 0.25), verdict=None, now=T0 + 50, config=CFG)
    assert p.unreachable_since == T0 + 13  # T0 + 0.25 + 12, rounded up
    assert parse_rfc3339(dict(p.annotations)[UNREACHABLE_SINCE_ANNOTATION]) == T0 + 13


@pytest.mark.parametrize(
    ("annotation", "since", "warns"),
    [
        (None, NOW, False),  # first sight of the delegation
        (format_rfc3339(NOW - 300), NOW - 300, False),
        ("2023-11-14T22:08:20.5+00:00", parse_rfc3339("2023-11-14T22:08:20.5Z"), False),
        ("yesterday", NOW, True),
        ("2023-11-14T22:08:20", NOW, True),  # no offset: not RFC 3339
        (format_rfc3339(NOW + 3600), NOW, True),  # in the future
    ],
)
def test_outage_start_of_delegated_node_comes_from_the_annotation(annotation, since, warns):
    annotations = {} if annotation is None else {UNREACHABLE_SINCE_ANNOTATION: annotation}
    p = plan(
        node=mk_node(annotations=annotations),
        lease=mk_lease(NOW - 1, delegated=True),
        verdict=mk_verdict(HEALTHY, NOW),
        now=NOW,
        config=CFG,
    )
    assert p.cloud is CloudView.DELEGATED
    assert p.unreachable_since == since
    assert (len(p.warnings) == 1) is warns
    text = dict(p.annotations)[UNREACHABLE_SINCE_ANNOTATION]
    if annotation is not None and not warns:
        assert text == annotation  # never rewritten
    else:
        assert text == format_rfc3339(since)


def test_outage_start_of_delegated_then_lost_node_without_annotation():
    p = plan(node=mk_node(), lease=mk_lease(T0, delegated=True), verdict=None, now=T0 + 500, config=CFG)
    assert p.cloud is CloudView.LOST and p.unreachable_since == T0 + GRACE


@pytest.mark.parametrize("verdict", [None, mk_verdict(UNKNOWN, NOW, NOW - 400)])
def test_outage_start_of_autonomy_held_node_comes_from_the_annotation(verdict):
    """The controller's autonomy hold keeps the Lease fresh, but the outage did not start at the hold's
    renewal: it comes from unreachable-since, and so does the autonomy clock."""
    since = NOW - 200
    node = mk_node(annotations={UNREACHABLE_SINCE_ANNOTATION: format_rfc3339(since)})
    lease = held_lease(NOW - 3)
    p = plan(node=node, lease=lease, verdict=verdict, now=NOW, config=CFG)
    assert p.cloud is CloudView.LOST and p.edge is EdgeView.UNKNOWN
    assert p.unreachable_since == since and p.warnings == ()
    assert dict(p.annotations)[UNREACHABLE_SINCE_ANNOTATION] == format_rfc3339(since)
    assert p.state is NodeState.UNKNOWN and p.effective_state is NodeState.UNKNOWN
    assert p.fail_at == since + 300 and p.requeue_after_s == 100.0
    # the hold goes on renewing: the clock does not move, and the autonomy runs out on time
    p = plan(node=node, lease=held_lease(since + 300), verdict=verdict, now=since + 300, config=CFG)
    assert p.unreachable_since == since
    assert p.state is NodeState.FAILED and p.effective_state is NodeState.FAILED and p.evict_pods
    # the node's own kubelet renews (the hold's mark goes stale): NORMAL
    p = plan(node=node, lease=held_lease(NOW + 10, current=False), verdict=verdict, now=NOW + 10, config=CFG)
    assert p.cloud is CloudView.OK and p.state is NodeState.NORMAL
    assert dict(p.annotations) == {UNREACHABLE_SINCE_ANNOTATION: None, STATE_ANNOTATION: None}


def test_outage_start_of_autonomy_held_node_without_annotation():
    # nothing recorded (should not happen: the hold follows a recorded outage): first sight, as for
    # a delegated Lease
    p = plan(node=mk_node(), lease=held_lease(NOW - 3), verdict=None, now=NOW, config=CFG)
    assert p.cloud is CloudView.LOST and p.unreachable_since == NOW
    assert dict(p.annotations)[UNREACHABLE_SINCE_ANNOTATION] == format_rfc3339(NOW)


def test_lifecycle_events_and_recovery():
    verdict = mk_verdict(HEALTHY, T0 + 50)
    node = mk_node(taints=[Taint("dedicated", "NoSchedule", "gpu")])
    lease = mk_lease(T0)
    events = []
    # outage since T0+12 (Lease overdue), DISCONNECTED confirmed at T0+32, FAILED at once at T0+52
    steps = [(T0 + 17, HEALTHY), (T0 + 32, HEALTHY), (T0 + 42, HEALTHY), (T0 + 52, UNHEALTHY)]
    for now, edge_status in steps:
        verdict = mk_verdict(edge_status, now)
        p = plan(node=node, lease=lease, verdict=verdict, now=now, config=CFG)
        events.append(p.event)
        node = apply_plan(node=node, plan=p)
    assert events[0] is None and events[2] is None
    assert events[1].reason == "EdgewatchDisconnected" and events[1].type == "Warning"
    assert events[1].message.startswith("normal -> disconnected")
    assert events[3].reason == "EdgewatchFailed"
    assert events[3].message.startswith("disconnected -> failed")
    assert node.annotations[STATE_ANNOTATION] == "failed"
    assert our_taints(node.taints) == {NS_TAINT, replace(FAILED_TAINT, time_added=T0 + 52)}
    # the node comes back: everything of ours goes, the foreign taint stays
    p = plan(node=node, lease=mk_lease(T0 + 200), verdict=verdict, now=T0 + 200, config=CFG)
    assert p.state is NodeState.NORMAL and p.taints == () and not p.evict_pods
    assert p.event.reason == "EdgewatchNormal" and p.event.type == "Normal"
    assert p.event.message.startswith("failed -> normal")
    node = apply_plan(node=node, plan=p)
    assert node.taints == (Taint("dedicated", "NoSchedule", "gpu"),)
    assert not set(node.annotations) & set(MANAGED_ANNOTATIONS)


def test_failed_stays_failed_without_new_evidence_and_leaves_on_evidence_of_life():
    lease = mk_lease(T0)
    verdict = mk_verdict(UNHEALTHY, T0 + 60)
    node = mk_node()
    p = plan(node=node, lease=lease, verdict=verdict, now=T0 + 61, config=CFG)
    assert p.effective_state is NodeState.FAILED
    node = apply_plan(node=node, plan=p)
    # the verdict goes stale: still failed, though the autonomy would not have run out yet
    p = plan(node=node, lease=lease, verdict=verdict, now=T0 + 130, config=CFG)
    assert p.edge is EdgeView.UNKNOWN and p.table_state is NodeState.UNKNOWN
    assert p.state is NodeState.FAILED and p.evict_pods and p.event is None
    assert p.fail_at == T0 + 120 + 300  # reported, but it changes nothing: no requeue for it
    assert p.requeue_after_s is None
    # an Unknown verdict neither
    verdict = mk_verdict(UNKNOWN, T0 + 140, T0 + 135)
    assert plan(node=node, lease=lease, verdict=verdict, now=T0 + 140, config=CFG).state is NodeState.FAILED
    # peers see it alive again: DISCONNECTED, NoExecute taint and eviction gone
    verdict = mk_verdict(HEALTHY, T0 + 150)
    p = plan(node=node, lease=lease, verdict=verdict, now=T0 + 150, config=CFG)
    assert p.state is NodeState.DISCONNECTED and p.taints == (NS_TAINT,) and not p.evict_pods
    assert p.event.message.startswith("failed -> disconnected")


def test_invalid_recorded_state_is_reported_and_treated_as_normal():
    node = mk_node(annotations={STATE_ANNOTATION: "Failed"})
    p = plan(node=node, lease=mk_lease(NOW), verdict=None, now=NOW, config=CFG)
    assert p.state is NodeState.NORMAL and p.event is None
    assert any(STATE_ANNOTATION in w for w in p.warnings)
    assert annotation_patch(current=node.annotations, desired=p.annotations) == {STATE_ANNOTATION: None}


def test_failed_taint_time_added_is_set_once_and_kept():
    verdict = mk_verdict(UNHEALTHY, T0 + 100)
    node = mk_node()
    p = plan(node=node, lease=mk_lease(T0), verdict=verdict, now=T0 + 100.5, config=CFG)
    assert p.failed_taint_added_at == T0 + 101  # whole seconds, rounded up
    node = apply_plan(node=node, plan=p)
    p = plan(node=node, lease=mk_lease(T0), verdict=verdict, now=T0 + 150, config=CFG)
    assert p.failed_taint_added_at == T0 + 101
    # a failed taint someone wrote without timeAdded, or with a value, is replaced
    for bad in (Taint(FAILED_TAINT_KEY, "NoExecute"), Taint(FAILED_TAINT_KEY, "NoExecute", "x", T0)):
        n = replace(node, taints=(NS_TAINT, bad))
        p = plan(node=n, lease=mk_lease(T0), verdict=verdict, now=T0 + 150, config=CFG)
        assert p.failed_taint_added_at == T0 + 150
        assert bad not in merge_taints(current=n.taints, managed=p.taints)
    assert plan(node=mk_node(), lease=mk_lease(NOW), verdict=None, now=NOW, config=CFG).failed_taint_added_at is None


def test_merge_taints_keeps_order_and_refuses_foreign_desired_taints():
    a, b = Taint("a", "NoSchedule"), Taint("b", "NoExecute", "v")
    current = (a, NS_TAINT, b)
    assert merge_taints(current=current, managed=[NS_TAINT]) == current
    assert merge_taints(current=current, managed=[]) == (a, b)
    failed = replace(FAILED_TAINT, time_added=T0)
    assert merge_taints(current=current, managed=[NS_TAINT, failed]) == (a, NS_TAINT, b, failed)
    # same key, other effect: not ours
    lookalike = Taint(FAILED_TAINT_KEY, "NoSchedule")
    assert merge_taints(current=(lookalike,), managed=[]) == (lookalike,)
    with pytest.raises(ValueError):
        merge_taints(current=current, managed=[a])


# ---------------------------------------------------------------------------------------------------
# tolerations and eviction timing
# ---------------------------------------------------------------------------------------------------

FT = Taint(FAILED_TAINT_KEY, "NoExecute")

TOLERATION_TABLE = [
    # toleration, taint, tolerates
    (Toleration(key=FAILED_TAINT_KEY, operator="Exists", effect="NoExecute"), FT, True),
    (Toleration(key=FAILED_TAINT_KEY, operator="Exists"), FT, True),  # empty effect: all effects
    (Toleration(operator="Exists"), FT, True),  # empty key + Exists: everything
    (Toleration(operator="Exists"), Taint("x", "NoSchedule", "v"), True),
    (Toleration(operator="Exists", effect="NoSchedule"), FT, False),
    (Toleration(key=FAILED_TAINT_KEY, operator="Exists", effect="NoSchedule"), FT, False),
    (Toleration(key=FAILED_TAINT_KEY, operator="Exists", effect="PreferNoSchedule"), FT, False),
    (Toleration(key="other", operator="Exists"), FT, False),
    (Toleration(key=FAILED_TAINT_KEY, operator="Equal", value=""), FT, True),
    (Toleration(key=FAILED_TAINT_KEY, operator="", value=""), FT, True),  # "" means Equal
    (Toleration(key=FAILED_TAINT_KEY, operator="Equal", value="x"), FT, False),
    (Toleration(key=FAILED_TAINT_KEY, operator="", value="x"), FT, False),
    (Toleration(key="k", operator="Equal", value="v"), Taint("k", "NoSchedule", "v"), True),
    (Toleration(key="k", operator="Equal", value="v"), Taint("k", "NoSchedule", "w"), False),
    (Toleration(key="k", operator="Equal", value="V"), Taint("k", "NoSchedule", "v"), False),
    (Toleration(key="k", operator="Exists", value="ignored"), Taint("k", "NoSchedule", "v"), True),
    (Toleration(key="", operator="Equal", value="v"), Taint("k", "NoSchedule", "v"), True),
    (Toleration(key="", operator="Equal", value=""), Taint("k", "NoSchedule", "v"), False),
    (Toleration(key=FAILED_TAINT_KEY, operator="exists"), FT, False),  # operators are case-sensitive
    (Toleration(key=FAILED_TAINT_KEY, operator="Lt", value="1"), FT, False),  # unknown operator
    (Toleration(key=FAILED_TAINT_KEY.upper(), operator="Exists"), FT, False),
    (Toleration(key="node.kubernetes.io/unreachable", operator="Exists", effect="NoExecute"), FT, False),
]


@pytest.mark.parametrize(("toleration", "taint", "expected"), TOLERATION_TABLE)
def test_tolerates_table(toleration, taint, expected):
    assert tolerates(toleration, taint) is expected


TOL_KEYS = ["", "k", "other"]
TOL_OPS = ["", "Equal", "Exists", "Bogus"]
TOL_VALUES = ["", "v", "w"]
TOL_EFFECTS = ["", *EFFECTS]


@pytest.mark.parametrize("taint_effect", EFFECTS)
@pytest.mark.parametrize("taint_value", ["", "v"])
def test_tolerates_exhaustive_rules(taint_effect, taint_value):
    """Every toleration over small domains against one taint, checked rule by rule."""
    taint = Taint("k", taint_effect, taint_value)
    for key in TOL_KEYS:
        for op in TOL_OPS:
            for value in TOL_VALUES:
                for effect in TOL_EFFECTS:
                    tol = Toleration(key=key, operator=op, value=value, effect=effect)
                    got = tolerates(tol, taint)
                    if effect not in ("", taint_effect) or key not in ("", "k") or op == "Bogus":
                        assert got is False, tol
                    elif op == "Exists":
                        assert got is True, tol
                    else:
                        assert got is (value == taint_value), tol


@pytest.mark.parametrize(
    ("tolerations", "expected"),
    [
        ([], 120.0),
        ([Toleration(key="other", operator="Exists", toleration_seconds=500)], 120.0),
        ([Toleration(key=FAILED_TAINT_KEY, operator="Exists", effect="NoSchedule")], 120.0),
        ([Toleration(key=FAILED_TAINT_KEY, operator="Equal", value="x", effect="NoExecute")], 120.0),
        ([Toleration(operator="Exists")], None),  # tolerates everything forever
        ([Toleration(key=FAILED_TAINT_KEY, operator="Exists", effect="NoExecute")], None),
        (
            [Toleration(key=FAILED_TAINT_KEY, operator="Exists", effect="NoExecute", toleration_seconds=60)],
            160.0,
        ),
        ([Toleration(key=FAILED_TAINT_KEY, operator="Exists", toleration_seconds=60)], 160.0),
        ([Toleration(key=FAILED_TAINT_KEY, operator="Exists", toleration_seconds=10)], 120.0),  # overdue
        ([Toleration(key=FAILED_TAINT_KEY, operator="Exists", toleration_seconds=20)], 120.0),  # due now
        ([Toleration(key=FAILED_TAINT_KEY, operator="Exists", toleration_seconds=0)], 120.0),
        ([Toleration(key=FAILED_TAINT_KEY, operator="Exists", toleration_seconds=-5)], 120.0),
        (
            [
                Toleration(key=FAILED_TAINT_KEY, operator="Exists", toleration_seconds=300),
                Toleration(operator="Exists", toleration_seconds=60),
            ],
            160.0,  # the smallest matching tolerationSeconds
        ),
        (
            [
                Toleration(key=FAILED_TAINT_KEY, operator="Exists"),  # forever, but...
                Toleration(operator="Exists", effect="NoExecute", toleration_seconds=90),
            ],
            190.0,  # ...as in the stock taint manager, a bounded toleration wins
        ),
        (
            [
                Toleration(key=FAILED_TAINT_KEY, operator="Exists", toleration_seconds=90),
                Toleration(key="other", operator="Exists", toleration_seconds=5),  # not matching
            ],
            190.0,
        ),
    ],
)
def test_pod_eviction_due(tolerations, expected):
    assert pod_eviction_due(tolerations=tolerations, taint_added_at=100.0, now=120.0) == expected


def test_pod_eviction_due_only_for_no_execute():
    assert pod_eviction_due(tolerations=[], taint_added_at=0.0, now=5.0, taint=NS_TAINT) is None


@FAST
@given(
    tols=st.lists(
        st.builds(
            Toleration,
            key=st.sampled_from(["", FAILED_TAINT_KEY, "x"]),
            operator=st.sampled_from(["", "Equal", "Exists"]),
            value=st.sampled_from(["", "v"]),
            effect=st.sampled_from(TOL_EFFECTS),
            toleration_seconds=st.one_of(st.none(), st.integers(-10, 1000).map(float)),
        ),
        max_size=4,
    ),
    added=quarter,
    now=quarter,
)
def test_pod_eviction_due_is_never_in_the_past(tols, added, now):
    due = pod_eviction_due(tolerations=tols, taint_added_at=added, now=now)
    matching = [t for t in tols if tolerates(t, FT)]
    if due is None:
        assert matching and all(t.toleration_seconds is None for t in matching)
    else:
        assert due >= now
        if due > now:
            assert due == added + min(
                t.toleration_seconds for t in matching if t.toleration_seconds is not None
            )


# ---------------------------------------------------------------------------------------------------
# config
# ---------------------------------------------------------------------------------------------------


def test_defaults():
    assert CFG.default_lease_duration_s == 40.0
    assert CFG.edge_view_ttl_s == 60.0
    assert CFG.confirm_s == 20.0
    assert CFG.overdue_slack_s == 2.0
    assert CFG.failed_confirm_s == 0.0
    assert CFG.unknown_policy is UnknownPolicy.AUTONOMY
    assert CFG.autonomy_s == 300.0
    assert ControllerConfig(unknown_policy="keep").unknown_policy is UnknownPolicy.KEEP


@pytest.mark.parametrize(
    "kwargs",
    [
        {"default_lease_duration_s": 0},
        {"default_lease_duration_s": -1},
        {"edge_view_ttl_s": 0},
        {"confirm_s": -0.5},
        {"autonomy_s": -1},
        {"autonomy_s": math.inf},
        {"confirm_s": math.nan},
        {"confirm_s": True},
        {"confirm_s": "20"},
        {"unknown_policy": "sometimes"},
        {"overdue_slack_s": -1},
        {"overdue_slack_s": -0.25},
        {"overdue_slack_s": math.inf},
        {"overdue_slack_s": math.nan},
        {"overdue_slack_s": True},
        {"overdue_slack_s": "2"},
        {"overdue_slack_s": None},
        {"failed_confirm_s": -1},
        {"failed_confirm_s": math.inf},
        {"failed_confirm_s": math.nan},
        {"failed_confirm_s": False},
        {"failed_confirm_s": "0"},
    ],
)
def test_config_rejects_bad_values(kwargs):
    with pytest.raises(ValueError):
        ControllerConfig(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"overdue_slack_s": 0},
        {"overdue_slack_s": 0.0},
        {"overdue_slack_s": 5},
        {"overdue_slack_s": 1e6},
        {"failed_confirm_s": 0},
        {"failed_confirm_s": 30.5},
        {"confirm_s": 0},
    ],
)
def test_config_accepts_zero_and_positive_values(kwargs):
    cfg = ControllerConfig(**kwargs)
    for key, value in kwargs.items():
        assert getattr(cfg, key) == value


def test_snapshots_are_frozen_copies():
    source = {"a": "1"}
    node = NodeSnapshot(name="n", annotations=source, taints=[Taint("k", "NoSchedule")])
    source["a"] = "2"
    assert node.annotations["a"] == "1" and isinstance(node.taints, tuple)
    with pytest.raises(TypeError):
        node.annotations["a"] = "3"  # type: ignore[index]
    with pytest.raises(AttributeError):
        node.name = "m"  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------------
# observed times, clock skew and controller restarts (docs/clock-skew.md)
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("skew", [-86400.0, -3600.0, -30.0, 30.0, 3600.0])
def test_skewed_clocks_change_nothing_in_the_plan(skew):
    """The same observations with renewTime texts (and marks) written by a clock ``skew`` off give
    exactly the same decisions: the texts are identities, the observations are the controller's."""
    for delegated in (False, True):
        for now in (T0 + 5, T0 + GRACE, T0 + GRACE + 0.25, T0 + 100, T0 + 400):
            verdict = mk_verdict(HEALTHY, now - 1)
            in_step = plan(node=mk_node(), lease=mk_lease(T0, delegated=delegated), verdict=verdict, now=now,
                           config=CFG)
            skewed_lease = mk_lease(T0, delegated=delegated, text=format_micro_time(T0 + skew))
            skewed = plan(node=mk_node(), lease=skewed_lease, verdict=verdict, now=now, config=CFG)
            assert acted(skewed) == acted(in_step) and skewed.cloud is in_step.cloud


def test_first_sight_of_a_normal_node_gives_a_fresh_grace():
    """A controller that just started saw the Lease once: the renewal counts from that look (as
    kube-controller-manager after a restart), and goes overdue a grace later unless renewed."""
    lease = mk_lease(T0, first_sight=True)
    p = plan(node=mk_node(), lease=lease, verdict=None, now=T0 + GRACE, config=CFG)
    assert p.cloud is CloudView.OK and p.effective_state is NodeState.NORMAL
    assert p.requeue_after_s == MIN_REQUEUE_S
    p = plan(node=mk_node(), lease=lease, verdict=None, now=T0 + GRACE + 0.25, config=CFG)
    assert p.cloud is CloudView.LOST and p.unreachable_since == T0 + GRACE


@pytest.mark.parametrize("recorded", ["failed", "disconnected", "unknown"])
def test_first_sight_never_ends_a_recorded_outage(recorded):
    """After a restart, a node recorded in an outage is not judged back on its Lease as first seen
    (that renewal may be the last one before it died); a renewal the controller sees happen is."""
    since = NOW - 200
    annotations = {STATE_ANNOTATION: recorded, UNREACHABLE_SINCE_ANNOTATION: format_rfc3339(since)}
    taints = [NS_TAINT, replace(FAILED_TAINT, time_added=since + 1)] if recorded == "failed" else [NS_TAINT]
    verdict = mk_verdict(HEALTHY, NOW) if recorded == "disconnected" else None  # its peers still see it alive
    node = mk_node(annotations=annotations, taints=taints)
    p = plan(node=node, lease=mk_lease(NOW - 1, first_sight=True), verdict=verdict, now=NOW, config=CFG)
    assert p.cloud is CloudView.LOST and p.event is None
    assert p.effective_state is NodeState(recorded)
    assert p.unreachable_since == since  # the recorded start, trusted
    assert set(p.taints) == set(taints)
    # the kubelet renews again, and the controller sees it: back to normal
    p = plan(node=node, lease=mk_lease(NOW + 5), verdict=verdict, now=NOW + 5, config=CFG)
    assert p.cloud is CloudView.OK and p.effective_state is NodeState.NORMAL and p.taints == ()


def test_first_sight_of_a_delegated_renewal_is_trusted():
    verdict = mk_verdict(HEALTHY, NOW)
    node = mk_node(annotations={STATE_ANNOTATION: "disconnected",
                                UNREACHABLE_SINCE_ANNOTATION: format_rfc3339(NOW - 60)}, taints=[NS_TAINT])
    p = plan(node=node, lease=mk_lease(NOW - 2, delegated=True, first_sight=True), verdict=verdict, now=NOW,
             config=CFG)
    assert p.cloud is CloudView.DELEGATED and p.effective_state is NodeState.DISCONNECTED and p.event is None


def test_first_sight_of_a_verdict_counts_from_the_first_look():
    """A verdict the controller first counted at ``NOW - 10`` (its first look after a start) and not
    since counts until ``NOW - 10 + TTL``."""
    verdict = mk_verdict(UNHEALTHY, NOW - 10)
    node = mk_node()
    at_ttl = plan(node=node, lease=mk_lease(T0), verdict=verdict, now=NOW - 10 + TTL, config=CFG)
    assert at_ttl.edge is EdgeView.UNHEALTHY
    after = plan(node=node, lease=mk_lease(T0), verdict=verdict, now=NOW - 10 + TTL + 0.25, config=CFG)
    assert after.edge is EdgeView.UNKNOWN


def test_lease_snapshot_needs_both_text_and_observation():
    with pytest.raises(ValueError):
        LeaseSnapshot(renew_time="2023-11-14T22:13:20.000000Z")
    with pytest.raises(ValueError):
        LeaseSnapshot(observed_at=T0)


# ---------------------------------------------------------------------------
# The end of a cut: the node's own renewal gets through, then its peers carry one more (2026-11-26)


def own_then_carried(own: float, carried: float) -> LeaseSnapshot:
    """The node renewed its own Lease (the controller saw it at ``own``), then a peer carried a
    renewal for it (seen at ``carried``): the agent still called its link down (hysteresis)."""
    return replace(mk_lease(carried, delegated=True, via="peer"), own_observed_at=own)


@pytest.mark.parametrize(
    ("own", "now", "expected"),
    [
        (T0, T0 + 1, CloudView.OK),  # reached the cloud itself 1 s ago: not cut off
        (T0, T0 + GRACE, CloudView.OK),  # fresh at the boundary
        (T0, T0 + GRACE + 0.25, CloudView.DELEGATED),  # then the carried renewal says what it says
        (None, T0 + 1, CloudView.DELEGATED),  # no own renewal watched (only a first sight, or none)
    ],
)
def test_a_carried_renewal_after_a_fresh_own_one_is_no_cut(own, now, expected):
    lease = own_then_carried(own, T0 + 0.5) if own is not None else mk_lease(T0 + 0.5, delegated=True, via="peer")
    assert cloud_view(lease=lease, now=now, grace_s=GRACE) is expected


def test_a_fresh_own_renewal_outweighs_an_unproven_carry():
    """A carry the node's own statement does not back is LOST on its own; an own renewal seen within
    the grace still says the node reached the cloud."""
    lease = replace(own_then_carried(T0, T0 + 1), delegation_proven=False)
    assert cloud_view(lease=lease, now=T0 + 2, grace_s=GRACE) is CloudView.OK
    assert cloud_view(lease=lease, now=T0 + GRACE + 0.25, grace_s=GRACE) is CloudView.LOST


def test_a_node_back_from_a_partition_is_not_failed_again_by_a_late_carry():
    """pool-split, 2026-11-26: a-5 was FAILED (cut off from the cloud, judged dead by the majority).
    The cut healed at 120 s; its kubelet's renewal got through (NORMAL at 120.8 s), its agent still
    called its link down for two probes and a peer carried one more renewal (121.6 s) while the
    peers' verdict still said unhealthy: it was FAILED again at 122.5 s, the failed NoExecute taint
    back for 0.3 s. Now the own renewal keeps it NORMAL, and the plan looks again when that
    renewal goes overdue."""
    failed = mk_node(annotations={STATE_ANNOTATION: "failed",
                                  UNREACHABLE_SINCE_ANNOTATION: format_rfc3339(T0 - 100)})
    lease = own_then_carried(T0, T0 + 0.8)
    verdict = mk_verdict(UNHEALTHY, T0 + 1.5, since=T0 - 100)
    p = plan(node=failed, lease=lease, verdict=verdict, now=T0 + 1.7, config=CFG)
    assert (p.cloud, p.edge) == (CloudView.OK, EdgeView.UNHEALTHY)
    assert p.state is NodeState.NORMAL and p.effective_state is NodeState.NORMAL
    assert not p.evict_pods and FAILED_TAINT.ident not in {t.ident for t in p.taints}
    assert p.requeue_after_s == pytest.approx(GRACE - 1.7)  # own renewal overdue at T0 + GRACE
    # If nothing else comes (no own renewal, the carry stays, the peers still say unhealthy), the
    # carried renewal counts from then on: the table's DELEGATED + UNHEALTHY.
    later = plan(node=mk_node(), lease=lease, verdict=mk_verdict(UNHEALTHY, T0 + GRACE), now=T0 + GRACE + 0.25,
                 config=CFG)
    assert (later.cloud, later.table_state) == (CloudView.DELEGATED, NodeState.FAILED)


@given(own=st.floats(-50, 50), carried=st.floats(-50, 50), now=st.floats(0, 100))
def test_an_own_renewal_never_makes_the_cloud_view_worse(own, carried, now):
    """Property: knowing the node's own renewal can only move the cloud view towards OK."""
    rank = {CloudView.OK: 0, CloudView.DELEGATED: 1, CloudView.LOST: 2}
    bare = mk_lease(T0 + carried, delegated=True, via="peer")
    with_own = replace(bare, own_observed_at=T0 + own)
    assert rank[cloud_view(lease=with_own, now=T0 + now, grace_s=GRACE)] <= rank[
        cloud_view(lease=bare, now=T0 + now, grace_s=GRACE)]

"""Tests of edgewatch.controller.decision: the cloud x edge table and everything around it.

All times are seconds; instants are built from T0 (a realistic epoch) plus multiples of 0.25 s so that
float sums are exact and boundary tests mean what they say.
"""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgewatch.controller.decision import (
    AUTONOMY_DURATION_ANNOTATION,
    CLOUD_UNREACHABLE_TAINT,
    CLOUD_UNREACHABLE_TAINT_KEY,
    DELEGATE_HEARTBEAT_ANNOTATION,
    DELEGATED_RENEW_TIME_ANNOTATION,
    FAILED_TAINT,
    FAILED_TAINT_KEY,
    MANAGED_ANNOTATIONS,
    MANAGED_TAINT_IDS,
    MIN_REQUEUE_S,
    STATE_ANNOTATION,
    UNREACHABLE_SINCE_ANNOTATION,
    CloudView,
    ConditionSnapshot,
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
    annotation_patch,
    apply_plan,
    autonomy_duration,
    cloud_view,
    decide_state,
    edge_view,
    format_go_duration,
    format_rfc3339,
    is_delegated,
    is_fresh,
    lease_grace_s,
    merge_taints,
    parse_autonomy_duration,
    parse_go_duration,
    parse_rfc3339,
    plan,
    pod_eviction_due,
    tolerates,
)

T0 = 1_700_000_000.0
CFG = ControllerConfig()
GRACE = 40.0
CONFIRM = 20.0
TTL = 60.0

FAST = settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------------------------------------------
# builders
# ---------------------------------------------------------------------------------------------------


def mk_lease(renew: float | None, *, delegated: bool = False, duration: float | None = 40.0):
    annotations = {DELEGATE_HEARTBEAT_ANNOTATION: "true"} if delegated else {}
    return LeaseSnapshot("n1", renew, duration, annotations)


def mk_cond(status: str, hb: float | None, lt: float | None = None) -> ConditionSnapshot:
    return ConditionSnapshot(status=status, last_heartbeat_time=hb, last_transition_time=lt)


def mk_node(*, annotations=None, taints=(), cond=None, name="n1") -> NodeSnapshot:
    return NodeSnapshot(name, {"pool": "a"}, dict(annotations or {}), tuple(taints), cond)


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


EDGE_CONDS = {
    EdgeView.HEALTHY: [mk_cond("True", NOW - 1)],
    EdgeView.UNHEALTHY: [mk_cond("False", NOW - 1)],
    EdgeView.UNKNOWN: [
        None,
        mk_cond("Unknown", NOW - 1, NOW - 100),
        mk_cond("True", NOW - TTL - 1),
        mk_cond("False", NOW - TTL - 1),
        mk_cond("Maybe", NOW - 1),
    ],
}
EXPECTED_TAINTS = {
    NodeState.NORMAL: set(),
    NodeState.DISCONNECTED: {NS_TAINT},
    NodeState.UNKNOWN: {NS_TAINT},
    NodeState.FAILED: {NS_TAINT, replace(FAILED_TAINT, time_added=NOW)},
}


@pytest.mark.parametrize(
    ("cloud", "edge", "expected", "cond"),
    [(c, e, s, cond) for c, e, s in TABLE for cond in EDGE_CONDS[e]],
)
def test_plan_realises_the_table(cloud, edge, expected, cond):
    # An outage that began 50 s ago (confirmed, autonomy not expired) as recorded by the reconciler.
    node = mk_node(
        cond=cond, annotations={UNREACHABLE_SINCE_ANNOTATION: format_rfc3339(NOW - 50)}
    )
    lease = lease_for(cloud)
    p = plan(node=node, lease=lease, now=NOW, config=CFG)
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
    node = mk_node(cond=EDGE_CONDS[edge][0])
    p = plan(node=node, lease=None, now=NOW, config=CFG)
    assert (p.cloud, p.edge, p.table_state) == (CloudView.LOST, edge, expected)


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
        (T0 + 100.0, T0, 40.0, True),  # future timestamp (skew)
        (None, T0, 40.0, False),
        (T0, T0 + 0.0, 0.0, True),
    ],
)
def test_is_fresh(timestamp, now, grace, fresh):
    assert is_fresh(timestamp=timestamp, now=now, grace_s=grace) is fresh


@pytest.mark.parametrize(
    ("lease", "now", "expected"),
    [
        (None, T0, CloudView.LOST),
        (mk_lease(None), T0, CloudView.LOST),
        (mk_lease(None, delegated=True), T0, CloudView.LOST),
        (mk_lease(T0), T0 + 40.0, CloudView.OK),
        (mk_lease(T0), T0 + 40.25, CloudView.LOST),
        (mk_lease(T0, delegated=True), T0 + 40.0, CloudView.DELEGATED),
        (mk_lease(T0, delegated=True), T0 + 40.25, CloudView.LOST),
        (mk_lease(T0 + 30), T0, CloudView.OK),
        (LeaseSnapshot("n1", T0, 40.0, {DELEGATE_HEARTBEAT_ANNOTATION: "True"}), T0, CloudView.OK),
        (LeaseSnapshot("n1", T0, 40.0, {DELEGATE_HEARTBEAT_ANNOTATION: "false"}), T0, CloudView.OK),
        (LeaseSnapshot("n1", T0, 40.0, {"openyurt.io/delegate-heartbeat": "true"}), T0, CloudView.OK),
    ],
)
def test_cloud_view(lease, now, expected):
    assert cloud_view(lease=lease, now=now, grace_s=40.0) is expected


def marked(renew: float | None, written: str | None) -> LeaseSnapshot:
    annotations = {DELEGATE_HEARTBEAT_ANNOTATION: "true"}
    if written is not None:
        annotations[DELEGATED_RENEW_TIME_ANNOTATION] = written
    return LeaseSnapshot("n1", renew, 40.0, annotations)


@pytest.mark.parametrize(
    ("lease", "delegated"),
    [
        (marked(T0 + 0.123456, None), True),  # the mark alone (seed 002 convention)
        (marked(T0 + 0.123456, "2023-11-14T22:13:20.123456Z"), True),  # names this renewal
        (marked(T0 + 0.123456, "2023-11-14T22:13:20.123Z"), True),  # within 1 ms
        (marked(T0 + 10.5, "2023-11-14T22:13:20.123456Z"), False),  # kubelet renewed since: stale
        (marked(T0, "not a time"), False),
        (marked(None, "2023-11-14T22:13:20Z"), False),
        (LeaseSnapshot("n1", T0, 40.0, {DELEGATED_RENEW_TIME_ANNOTATION: "2023-11-14T22:13:20Z"}), False),
        (None, False),
    ],
)
def test_is_delegated_honours_the_renew_time_of_the_mark(lease, delegated):
    assert is_delegated(lease) is delegated


def test_stale_mark_after_kubelet_renewal_is_the_nodes_own_renewal():
    # the delegate renewed at T0 (mark names T0); the kubelet renewed itself at T0+10 keeping annotations
    lease = marked(T0 + 10, format_rfc3339(T0 + 0.5))
    p = plan(node=mk_node(cond=mk_cond("True", T0 + 10)), lease=lease, now=T0 + 10, config=CFG)
    assert p.cloud is CloudView.OK and p.state is NodeState.NORMAL
    # and when it goes stale, the outage starts from that own renewal
    p = plan(node=mk_node(), lease=lease, now=T0 + 100, config=CFG)
    assert p.cloud is CloudView.LOST and p.unreachable_since == T0 + 50


def test_lease_grace_comes_from_the_lease_or_the_default():
    assert lease_grace_s(lease=None, config=CFG) == 40.0
    assert lease_grace_s(lease=mk_lease(T0, duration=None), config=CFG) == 40.0
    assert lease_grace_s(lease=mk_lease(T0, duration=0), config=CFG) == 40.0
    assert lease_grace_s(lease=mk_lease(T0, duration=15), config=CFG) == 15.0
    cfg = ControllerConfig(default_lease_duration_s=25.0)
    assert lease_grace_s(lease=mk_lease(T0, duration=None), config=cfg) == 25.0
    # and plan() uses it: a 15 s Lease is stale at 15.25 s
    node = mk_node()
    assert plan(node=node, lease=mk_lease(T0, duration=15), now=T0 + 15, config=CFG).cloud is CloudView.OK
    stale = plan(node=node, lease=mk_lease(T0, duration=15), now=T0 + 15.25, config=CFG)
    assert stale.cloud is CloudView.LOST


@pytest.mark.parametrize(
    ("cond", "now", "expected"),
    [
        (None, T0, EdgeView.UNKNOWN),
        (mk_cond("True", T0), T0, EdgeView.HEALTHY),
        (mk_cond("False", T0), T0, EdgeView.UNHEALTHY),
        (mk_cond("Unknown", T0), T0, EdgeView.UNKNOWN),
        (mk_cond("true", T0), T0, EdgeView.UNKNOWN),  # statuses are case-sensitive in the API
        (mk_cond("", T0), T0, EdgeView.UNKNOWN),
        (mk_cond("True", T0), T0 + TTL, EdgeView.HEALTHY),  # at the TTL: still counts
        (mk_cond("True", T0), T0 + TTL + 0.25, EdgeView.UNKNOWN),  # stale
        (mk_cond("False", T0), T0 + TTL, EdgeView.UNHEALTHY),
        (mk_cond("False", T0), T0 + TTL + 0.25, EdgeView.UNKNOWN),
        (mk_cond("True", None, T0), T0 + 10, EdgeView.HEALTHY),  # falls back to lastTransitionTime
        (mk_cond("True", None, T0), T0 + TTL + 1, EdgeView.UNKNOWN),
        (mk_cond("True", None, None), T0, EdgeView.UNKNOWN),  # no time at all: cannot be trusted
        (mk_cond("True", T0 + 5, T0 - 1000), T0 + TTL, EdgeView.HEALTHY),  # heartbeat wins
    ],
)
def test_edge_view(cond, now, expected):
    assert edge_view(condition=cond, now=now, ttl_s=TTL) is expected


def test_stale_edge_condition_turns_disconnected_into_unknown():
    lease = mk_lease(T0)  # stale from T0+40.25, outage since T0+40
    node = mk_node(cond=mk_cond("True", T0 + 50))
    assert plan(node=node, lease=lease, now=T0 + 110, config=CFG).state is NodeState.DISCONNECTED
    p = plan(node=node, lease=lease, now=T0 + 110.25, config=CFG)
    assert p.edge is EdgeView.UNKNOWN and p.state is NodeState.UNKNOWN
    # the autonomy clock starts when the verdict went stale (T0+110), not at the outage start
    assert p.fail_at == T0 + 110 + 300


# ---------------------------------------------------------------------------------------------------
# durations
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("+0", 0.0),
        ("-0", 0.0),
        ("0s", 0.0),
        ("90s", 90.0),
        ("10m", 600.0),
        ("1h", 3600.0),
        ("1h30m", 5400.0),
        ("1h30m15s", 5415.0),
        ("2h45m", 9900.0),
        ("1.5h", 5400.0),
        ("300ms", 0.3),
        ("1500ms", 1.5),
        (".5s", 0.5),
        ("5.s", 5.0),
        ("+5s", 5.0),
        ("1us", 1e-6),
        ("1\u00b5s", 1e-6),
        ("1\u03bcs", 1e-6),
        ("10ns", 1e-8),
        ("1.5ns", 1e-9),  # Go truncates to whole nanoseconds
        ("1m1m", 120.0),  # Go allows repeated units
        ("5m0.5s", 300.5),
    ],
)
def test_parse_go_duration_valid(text, seconds):
    assert parse_go_duration(text) == seconds
    assert parse_autonomy_duration(text) == seconds


@pytest.mark.parametrize(
    "text",
    [
        "",
        "+",
        "-",
        "10",  # a unit is required except for "0"
        "00",
        "1.0",
        "-5s",
        "-1h30m",
        "1d",
        "1h 30m",
        "1H",
        "h",
        ".s",
        "s",
        "1.2.3s",
        "abc",
        "5s ",  # Go does not strip, parse_go_duration neither
        "\u0665s",  # ARABIC-INDIC DIGIT FIVE: Go only takes ASCII digits
        "3000000h",  # > 2**63-1 ns: Go overflow
        "unlimited",  # only parse_autonomy_duration knows it
    ],
)
def test_parse_go_duration_invalid(text):
    with pytest.raises(ValueError):
        parse_go_duration(text)


@pytest.mark.parametrize("text", ["unlimited", "Unlimited", " UNLIMITED ", "unlimited\n"])
def test_parse_autonomy_unlimited(text):
    assert parse_autonomy_duration(text) is None


@pytest.mark.parametrize("text", ["", " ", "forever", "unlimitedx", "-1s", "10", "1d", "inf"])
def test_parse_autonomy_invalid(text):
    with pytest.raises(ValueError):
        parse_autonomy_duration(text)


def test_parse_autonomy_strips_whitespace():
    assert parse_autonomy_duration(" 10m\n") == 600.0


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (1, "1s"),
        (1.5, "1.5s"),
        (60, "1m0s"),
        (90, "1m30s"),
        (3600, "1h0m0s"),
        (5400.5, "1h30m0.5s"),
        (0.3, "300ms"),
        (0.0015, "1.5ms"),
        (1.5e-6, "1.5\u00b5s"),
        (1e-9, "1ns"),
        (-90, "-1m30s"),
    ],
)
def test_format_go_duration_matches_go(seconds, text):
    assert format_go_duration(seconds) == text


@FAST
@given(ns=st.integers(min_value=0, max_value=1 << 62))  # float seconds near 2**63 ns round past it
def test_duration_round_trip(ns):
    """format -> parse gives the value back (to the nanosecond), and format is canonical."""
    seconds = ns / 1e9
    text = format_go_duration(seconds)
    expected = float(Fraction(round(Fraction(seconds) * 10**9), 10**9))
    assert parse_go_duration(text) == expected
    if ns <= 8 * 10**15:  # below ~97 days a float holds every nanosecond: exact round trip
        assert parse_go_duration(text) == seconds
        assert round(Fraction(parse_go_duration(text)) * 10**9) == ns
    assert format_go_duration(parse_go_duration(text)) == text


UNITS = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


@FAST
@given(
    parts=st.lists(
        st.tuples(st.integers(min_value=0, max_value=10_000), st.sampled_from(sorted(UNITS))),
        min_size=1,
        max_size=5,
    ),
    plus=st.booleans(),
)
def test_duration_components_add_up(parts, plus):
    text = ("+" if plus else "") + "".join(f"{n}{u}" for n, u in parts)
    expected = float(Fraction(sum(n * round(UNITS[u] * 1e9) for n, u in parts), 10**9))
    assert parse_go_duration(text) == expected
    assert parse_autonomy_duration(text) == expected


@FAST
@given(
    whole=st.integers(min_value=0, max_value=100_000),
    frac=st.integers(min_value=0, max_value=999),
    unit=st.sampled_from(["h", "m", "s"]),
)
def test_duration_fractions(whole, frac, unit):
    text = f"{whole}.{frac:03d}{unit}"
    assert parse_go_duration(text) == float(Fraction(whole * 1000 + frac, 1000) * UNITS[unit])


# ---------------------------------------------------------------------------------------------------
# unknown policy x autonomy annotation
# ---------------------------------------------------------------------------------------------------

# LOST at T0 + 40.25 (Lease renewed at T0), no edge condition: the outage began at T0+40 and is
# confirmed at T0+60; the autonomy clock starts at T0+40.
OUTAGE = T0 + 40.0

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
        return plan(node=node, lease=lease, now=now, config=cfg)

    # before confirmation nothing is enforced, whatever the policy
    early = at(T0 + 50)
    assert early.effective_state is NodeState.NORMAL and early.taints == () and not early.evict_pods
    assert (len(early.warnings) == 1) is warns
    assert early.autonomy_s == autonomy

    if autonomy is None:
        for now in (T0 + 60, T0 + 10_000, T0 + 1e7):
            p = at(now)
            assert p.state is NodeState.UNKNOWN and p.effective_state is NodeState.UNKNOWN
            assert set(p.taints) == {NS_TAINT} and not p.evict_pods and p.fail_at is None
        return
    fail_at = OUTAGE + autonomy
    assert early.fail_at == fail_at
    if fail_at > T0 + 60:
        before = at(fail_at - 0.25)
        assert before.state is NodeState.UNKNOWN and set(before.taints) == {NS_TAINT}
        assert before.requeue_after_s == pytest.approx(0.25)
    after = at(max(fail_at, T0 + 60))
    assert after.state is NodeState.FAILED and after.effective_state is NodeState.FAILED
    assert after.evict_pods and FAILED_TAINT.ident in {t.ident for t in after.taints}


def test_autonomy_zero_still_waits_for_confirmation():
    node = mk_node(annotations={AUTONOMY_DURATION_ANNOTATION: "0"})
    p = plan(node=node, lease=mk_lease(T0), now=T0 + 45, config=CFG)
    assert p.state is NodeState.FAILED and not p.confirmed
    assert p.effective_state is NodeState.NORMAL and p.taints == () and not p.evict_pods
    assert p.requeue_after_s == 15.0
    p = plan(node=node, lease=mk_lease(T0), now=T0 + 60, config=CFG)
    assert p.effective_state is NodeState.FAILED and p.evict_pods


@pytest.mark.parametrize(
    ("cond", "clock_start"),
    [
        (None, OUTAGE),
        (mk_cond("Unknown", T0 + 30, T0 + 200), T0 + 200),  # unknown since its transition
        (mk_cond("Unknown", T0 + 30, T0 - 500), OUTAGE),  # unknown before the outage began
        (mk_cond("Unknown", T0 + 30, None), OUTAGE),
        (mk_cond("True", T0 + 150), T0 + 150 + TTL),  # healthy verdict went stale at hb + TTL
        (mk_cond("False", T0 + 150), T0 + 150 + TTL),
        (mk_cond("True", T0 - 500), OUTAGE),
        (mk_cond("True", None, None), OUTAGE),
    ],
)
def test_autonomy_clock_starts_when_edge_evidence_vanished(cond, clock_start):
    node = mk_node(cond=cond)
    now = T0 + 400
    if cond is not None and cond.status in ("True", "False") and cond.last_heartbeat_time:
        now = max(now, cond.last_heartbeat_time + TTL + 1)
    p = plan(node=node, lease=mk_lease(T0), now=now, config=CFG)
    assert p.table_state is NodeState.UNKNOWN
    assert p.fail_at == clock_start + 300


# ---------------------------------------------------------------------------------------------------
# confirmation
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["True", "False", None])
def test_nothing_is_enforced_before_confirmation(status):
    cond = None if status is None else mk_cond(status, T0 + 59)
    node = mk_node(cond=cond)
    lease = mk_lease(T0)
    p = plan(node=node, lease=lease, now=T0 + 59.75, config=CFG)
    assert p.state is not NodeState.NORMAL and not p.confirmed
    assert p.effective_state is NodeState.NORMAL
    assert p.taints == () and not p.evict_pods and p.event is None
    assert p.confirm_at == T0 + 60
    assert p.requeue_after_s == pytest.approx(0.25)
    # the outage start is recorded already, so it survives a restart
    assert dict(p.annotations) == {
        UNREACHABLE_SINCE_ANNOTATION: format_rfc3339(OUTAGE),
        STATE_ANNOTATION: None,
    }
    p = plan(node=node, lease=lease, now=T0 + 60, config=CFG)
    assert p.confirmed and p.effective_state is p.state and NS_TAINT in p.taints
    assert p.event is not None


def test_single_delegated_renewal_never_taints():
    node = mk_node(cond=mk_cond("True", T0))
    p = plan(node=node, lease=mk_lease(T0, delegated=True), now=T0, config=CFG)
    assert p.state is NodeState.DISCONNECTED and not p.confirmed and p.taints == ()
    assert p.unreachable_since == T0 and p.requeue_after_s == CONFIRM
    node = apply_plan(node=node, plan=p)
    p = plan(node=node, lease=mk_lease(T0, delegated=True), now=T0 + 10, config=CFG)
    assert p.taints == ()
    node = apply_plan(node=node, plan=p)
    # the node's own kubelet renews again 10 s later
    p = plan(node=node, lease=mk_lease(T0 + 10), now=T0 + 10, config=CFG)
    assert p.state is NodeState.NORMAL and p.taints == () and p.event is None
    assert dict(p.annotations) == {UNREACHABLE_SINCE_ANNOTATION: None, STATE_ANNOTATION: None}
    node = apply_plan(node=node, plan=p)
    assert not set(node.annotations) & set(MANAGED_ANNOTATIONS)


def test_delegated_for_confirm_s_taints():
    node = mk_node(cond=mk_cond("True", T0 + 20))
    for now in (T0, T0 + 10, T0 + 19.75, T0 + 20):
        p = plan(node=node, lease=mk_lease(now, delegated=True), now=now, config=CFG)
        node = apply_plan(node=node, plan=p)
    assert p.effective_state is NodeState.DISCONNECTED and p.taints == (NS_TAINT,)
    assert node.annotations[UNREACHABLE_SINCE_ANNOTATION] == format_rfc3339(T0)


@FAST
@given(
    gaps=st.lists(
        st.floats(min_value=0.25, max_value=GRACE + CONFIRM - 0.001), min_size=1, max_size=12
    ),
    looks=st.lists(st.floats(min_value=0.0, max_value=0.9999), min_size=1, max_size=6),
    edge=st.lists(st.sampled_from(["True", "False", "Unknown", None]), min_size=1, max_size=5),
    start=st.floats(min_value=0.0, max_value=1000.0),
)
def test_missed_heartbeats_below_grace_plus_confirm_never_taint(gaps, looks, edge, start):
    """Kubelet renewals whose gaps stay below grace + confirm never cause a taint, an eviction or an
    event, whatever the edge says, with the reconciler applying every plan as it goes."""
    node = mk_node()
    renew = T0 + start
    step = 0
    for gap in [*gaps, 0.0]:
        for frac in [0.0, *sorted(looks)]:
            now = renew + gap * frac
            status = edge[step % len(edge)]
            step += 1
            cond = None if status is None else mk_cond(status, now)
            node = replace(node, edge_condition=cond)
            p = plan(node=node, lease=mk_lease(renew), now=now, config=CFG)
            assert p.taints == () and not p.evict_pods and p.event is None, p.explanation
            assert p.effective_state is NodeState.NORMAL
            node = apply_plan(node=node, plan=p)
            assert STATE_ANNOTATION not in node.annotations
        renew += gap


# ---------------------------------------------------------------------------------------------------
# random snapshots for the properties
# ---------------------------------------------------------------------------------------------------

quarter = st.integers(min_value=-4000, max_value=4000).map(lambda q: q / 4)  # -1000 .. 1000 s


@st.composite
def leases(draw) -> LeaseSnapshot | None:
    if draw(st.integers(0, 9)) == 0:
        return None
    renew = None if draw(st.integers(0, 14)) == 0 else NOW + draw(quarter) / 4
    annotations = {}
    mark = draw(st.sampled_from([None, "true", "true", "false", "True"]))
    if mark is not None:
        annotations[DELEGATE_HEARTBEAT_ANNOTATION] = mark
        written = draw(st.sampled_from(["absent", "current", "older", "garbage"]))
        if written == "current" and renew is not None:
            annotations[DELEGATED_RENEW_TIME_ANNOTATION] = format_rfc3339(renew)
        elif written == "older":
            annotations[DELEGATED_RENEW_TIME_ANNOTATION] = format_rfc3339(NOW - 500.25)
        elif written == "garbage":
            annotations[DELEGATED_RENEW_TIME_ANNOTATION] = "?"
    duration = draw(st.sampled_from([None, 40.0, 40.0, 15.0, 0.0]))
    return LeaseSnapshot(draw(st.sampled_from(["n1", "n2", None])), renew, duration, annotations)


@st.composite
def conditions(draw) -> ConditionSnapshot | None:
    if draw(st.integers(0, 5)) == 0:
        return None
    status = draw(st.sampled_from(["True", "False", "Unknown", "True", "False", "bogus"]))
    hb = draw(st.one_of(st.none(), quarter.map(lambda q: NOW + q / 4)))
    lt = draw(st.one_of(st.none(), quarter.map(lambda q: NOW + q)))
    return ConditionSnapshot(status, hb, lt)


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
            quarter.map(lambda q: format_rfc3339(NOW + q)),  # fractional
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
    lambda annotations, taints, cond: mk_node(annotations=annotations, taints=taints, cond=cond),
    node_annotations(),
    st.lists(taints_st, max_size=5),
    conditions(),
)
configs = st.builds(
    ControllerConfig,
    default_lease_duration_s=st.sampled_from([40.0, 25.0]),
    edge_view_ttl_s=st.sampled_from([60.0, 30.0]),
    confirm_s=st.sampled_from([20.0, 0.0, 45.5]),
    unknown_policy=st.sampled_from(list(UnknownPolicy)),
    autonomy_s=st.sampled_from([300.0, 0.0, 120.25]),
)


# ---------------------------------------------------------------------------------------------------
# restart safety, foreign taints, requeue
# ---------------------------------------------------------------------------------------------------


@FAST
@given(node=nodes, lease=leases(), config=configs, dt=quarter)
def test_plan_is_idempotent(node, lease, config, dt):
    """Applying a plan and planning again (a restarted controller) gives the same decision, no new
    event and nothing left to write."""
    now = NOW + dt / 8
    p1 = plan(node=node, lease=lease, now=now, config=config)
    applied = apply_plan(node=node, plan=p1)
    p2 = plan(node=applied, lease=lease, now=now, config=config)
    assert decision(p2) == decision(p1)
    assert p2.requeue_after_s == p1.requeue_after_s
    assert p2.event is None
    assert annotation_patch(current=applied.annotations, desired=p2.annotations) == {}
    assert merge_taints(current=applied.taints, managed=p2.taints) == applied.taints
    assert apply_plan(node=applied, plan=p2) == applied
    assert set(p2.warnings) <= set(p1.warnings)


@FAST
@given(node=nodes, lease=leases(), config=configs, foreign=st.lists(foreign_taints_st, max_size=6))
def test_foreign_taints_are_never_touched(node, lease, config, foreign):
    node = replace(node, taints=(*foreign, *node.taints))
    p = plan(node=node, lease=lease, now=NOW, config=config)
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
@given(node=nodes, lease=leases(), config=configs, dt=quarter)
def test_requeue_is_positive_and_never_late(node, lease, config, dt):
    now = NOW + dt / 4
    node = apply_plan(node=node, plan=plan(node=node, lease=lease, now=now, config=config))
    p = plan(node=node, lease=lease, now=now, config=config)

    def at(t: float) -> NodePlan:
        return plan(node=node, lease=lease, now=t, config=config)

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
    # NORMAL: until the Lease goes stale
    assert plan(node=node, lease=mk_lease(T0), now=T0 + 10, config=CFG).requeue_after_s == 30.0
    assert plan(node=node, lease=mk_lease(T0), now=T0 + 40, config=CFG).requeue_after_s == MIN_REQUEUE_S
    # unconfirmed: until confirmation
    assert plan(node=node, lease=mk_lease(T0), now=T0 + 41, config=CFG).requeue_after_s == 19.0
    # UNKNOWN, confirmed: until the autonomy runs out
    assert plan(node=node, lease=mk_lease(T0), now=T0 + 100, config=CFG).requeue_after_s == 240.0
    # FAILED on LOST: nothing pending
    assert plan(node=node, lease=mk_lease(T0), now=T0 + 400, config=CFG).requeue_after_s is None
    # DISCONNECTED on LOST: until the edge verdict goes stale
    node = mk_node(cond=mk_cond("True", T0 + 90))
    assert plan(node=node, lease=mk_lease(T0), now=T0 + 100, config=CFG).requeue_after_s == 50.0
    # KEEP, UNKNOWN, confirmed: nothing pending
    keep = ControllerConfig(unknown_policy=UnknownPolicy.KEEP)
    assert plan(node=mk_node(), lease=None, now=T0, config=keep).requeue_after_s == CONFIRM
    p = plan(
        node=mk_node(annotations={UNREACHABLE_SINCE_ANNOTATION: format_rfc3339(T0 - 100)}),
        lease=None,
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
    p = plan(node=node, lease=mk_lease(T0), now=T0 + 61, config=CFG)
    assert p.unreachable_since == T0 + 40
    assert dict(p.annotations)[UNREACHABLE_SINCE_ANNOTATION] == format_rfc3339(T0 + 40)
    # the recorded FAILED belongs to the earlier outage: no sticky FAILED, just UNKNOWN
    assert p.state is NodeState.UNKNOWN and p.effective_state is NodeState.UNKNOWN
    assert p.event is not None and p.event.message.startswith("failed -> unknown")


def test_outage_start_rounds_up_to_whole_seconds():
    p = plan(node=mk_node(), lease=mk_lease(T0 + 0.25), now=T0 + 50, config=CFG)
    assert p.unreachable_since == T0 + 41
    assert parse_rfc3339(dict(p.annotations)[UNREACHABLE_SINCE_ANNOTATION]) == T0 + 41


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
        node=mk_node(annotations=annotations, cond=mk_cond("True", NOW)),
        lease=mk_lease(NOW - 1, delegated=True),
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
    p = plan(node=mk_node(), lease=mk_lease(T0, delegated=True), now=T0 + 500, config=CFG)
    assert p.cloud is CloudView.LOST and p.unreachable_since == T0 + 40


def test_lifecycle_events_and_recovery():
    cond = mk_cond("True", T0 + 50)
    node = mk_node(cond=cond, taints=[Taint("dedicated", "NoSchedule", "gpu")])
    lease = mk_lease(T0)
    events = []
    for now, edge_status in [(T0 + 45, "True"), (T0 + 60, "True"), (T0 + 70, "True"), (T0 + 80, "False")]:
        node = replace(node, edge_condition=mk_cond(edge_status, now))
        p = plan(node=node, lease=lease, now=now, config=CFG)
        events.append(p.event)
        node = apply_plan(node=node, plan=p)
    assert events[0] is None and events[2] is None
    assert events[1].reason == "EdgewatchDisconnected" and events[1].type == "Warning"
    assert events[1].message.startswith("normal -> disconnected")
    assert events[3].reason == "EdgewatchFailed"
    assert events[3].message.startswith("disconnected -> failed")
    assert node.annotations[STATE_ANNOTATION] == "failed"
    assert our_taints(node.taints) == {NS_TAINT, replace(FAILED_TAINT, time_added=T0 + 80)}
    # the node comes back: everything of ours goes, the foreign taint stays
    p = plan(node=node, lease=mk_lease(T0 + 200), now=T0 + 200, config=CFG)
    assert p.state is NodeState.NORMAL and p.taints == () and not p.evict_pods
    assert p.event.reason == "EdgewatchNormal" and p.event.type == "Normal"
    assert p.event.message.startswith("failed -> normal")
    node = apply_plan(node=node, plan=p)
    assert node.taints == (Taint("dedicated", "NoSchedule", "gpu"),)
    assert not set(node.annotations) & set(MANAGED_ANNOTATIONS)


def test_failed_stays_failed_without_new_evidence_and_leaves_on_evidence_of_life():
    lease = mk_lease(T0)
    node = mk_node(cond=mk_cond("False", T0 + 60))
    p = plan(node=node, lease=lease, now=T0 + 61, config=CFG)
    assert p.effective_state is NodeState.FAILED
    node = apply_plan(node=node, plan=p)
    # the verdict goes stale: still failed, though the autonomy would not have run out yet
    p = plan(node=node, lease=lease, now=T0 + 130, config=CFG)
    assert p.edge is EdgeView.UNKNOWN and p.table_state is NodeState.UNKNOWN
    assert p.state is NodeState.FAILED and p.evict_pods and p.event is None
    assert p.fail_at == T0 + 120 + 300  # reported, but it changes nothing: no requeue for it
    assert p.requeue_after_s is None
    # an Unknown verdict neither
    node = replace(node, edge_condition=mk_cond("Unknown", T0 + 140, T0 + 135))
    assert plan(node=node, lease=lease, now=T0 + 140, config=CFG).state is NodeState.FAILED
    # peers see it alive again: DISCONNECTED, NoExecute taint and eviction gone
    node = replace(node, edge_condition=mk_cond("True", T0 + 150))
    p = plan(node=node, lease=lease, now=T0 + 150, config=CFG)
    assert p.state is NodeState.DISCONNECTED and p.taints == (NS_TAINT,) and not p.evict_pods
    assert p.event.message.startswith("failed -> disconnected")


def test_invalid_recorded_state_is_reported_and_treated_as_normal():
    node = mk_node(annotations={STATE_ANNOTATION: "Failed"})
    p = plan(node=node, lease=mk_lease(NOW), now=NOW, config=CFG)
    assert p.state is NodeState.NORMAL and p.event is None
    assert any(STATE_ANNOTATION in w for w in p.warnings)
    assert annotation_patch(current=node.annotations, desired=p.annotations) == {STATE_ANNOTATION: None}


def test_failed_taint_time_added_is_set_once_and_kept():
    node = mk_node(cond=mk_cond("False", T0 + 100))
    p = plan(node=node, lease=mk_lease(T0), now=T0 + 100.5, config=CFG)
    assert p.failed_taint_added_at == T0 + 101  # whole seconds, rounded up
    node = apply_plan(node=node, plan=p)
    p = plan(node=node, lease=mk_lease(T0), now=T0 + 150, config=CFG)
    assert p.failed_taint_added_at == T0 + 101
    # a failed taint someone wrote without timeAdded, or with a value, is replaced
    for bad in (Taint(FAILED_TAINT_KEY, "NoExecute"), Taint(FAILED_TAINT_KEY, "NoExecute", "x", T0)):
        n = replace(node, taints=(NS_TAINT, bad))
        p = plan(node=n, lease=mk_lease(T0), now=T0 + 150, config=CFG)
        assert p.failed_taint_added_at == T0 + 150
        assert bad not in merge_taints(current=n.taints, managed=p.taints)
    assert plan(node=mk_node(), lease=mk_lease(NOW), now=NOW, config=CFG).failed_taint_added_at is None


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
# times, config
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ts"),
    [
        ("1970-01-01T00:00:00Z", 0.0),
        ("2023-11-14T22:13:20Z", T0),
        ("2023-11-14T22:13:20z", T0),
        ("2023-11-14t22:13:20Z", T0),
        ("2023-11-15T00:13:20+02:00", T0),
        ("2023-11-14T22:13:20.25Z", T0 + 0.25),
    ],
)
def test_parse_rfc3339(text, ts):
    assert parse_rfc3339(text) == ts


def test_parse_rfc3339_truncates_beyond_microseconds():
    assert parse_rfc3339("2023-11-14T22:13:20.1234567Z") == parse_rfc3339("2023-11-14T22:13:20.123456Z")
    assert parse_rfc3339("2023-11-14T22:13:20.123456Z") == pytest.approx(T0 + 0.123456, abs=1e-6)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "2023-11-14",
        "2023-11-14T22:13:20",
        "2023-11-14 22:13",
        "2023-13-14T22:13:20Z",
        "soon",
        "1700000000",
    ],
)
def test_parse_rfc3339_invalid(text):
    with pytest.raises(ValueError):
        parse_rfc3339(text)


@FAST
@given(seconds=st.integers(min_value=0, max_value=4_000_000_000))
def test_rfc3339_round_trip(seconds):
    text = format_rfc3339(float(seconds))
    assert text.endswith("Z") and "." not in text
    assert parse_rfc3339(text) == seconds


def test_defaults():
    assert CFG.default_lease_duration_s == 40.0
    assert CFG.edge_view_ttl_s == 60.0
    assert CFG.confirm_s == 20.0
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
    ],
)
def test_config_rejects_bad_values(kwargs):
    with pytest.raises(ValueError):
        ControllerConfig(**kwargs)


def test_snapshots_are_frozen_copies():
    source = {"a": "1"}
    node = NodeSnapshot("n", {}, source, [Taint("k", "NoSchedule")])
    source["a"] = "2"
    assert node.annotations["a"] == "1" and isinstance(node.taints, tuple)
    with pytest.raises(TypeError):
        node.annotations["a"] = "3"  # type: ignore[index]
    with pytest.raises(AttributeError):
        node.name = "m"  # type: ignore[misc]

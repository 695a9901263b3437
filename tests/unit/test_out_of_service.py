"""Kubernetes' out-of-service taint (KEP-2268) on a node FAILED on verified
evidence, opt-in (docs/out-of-service.md).

The taint is planned iff the switch is on (pool listed in ``outOfServicePools`` or the node's
``edgewatch.io/out-of-service: enabled``, which wins) AND the enforced state is FAILED AND the edge
view is UNHEALTHY AND the cloud view is LOST. Table-tested over switch x cloud x edge, plus the
sticky / autonomy FAILED cases, plus a property over every input.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgewatch.controller.coverage import Coverage, parse_out_of_service_pools, pool_out_of_service
from edgewatch.controller.decision import out_of_service_enabled, plan
from edgewatch.controller.model import (
    FAILED_TAINT,
    OUT_OF_SERVICE_TAINT,
    STATE_ANNOTATION,
    UNREACHABLE_SINCE_ANNOTATION,
    CloudView,
    EdgeView,
    NodeState,
    Taint,
    TaintEffect,
)
from edgewatch.controller.planbook import PlanBook
from edgewatch.controller.quiet import plan_inputs, renewed
from edgewatch.controller.taints import apply_plan, merge_taints
from edgewatch.core.grouping import parse_grouping_config
from edgewatch.names import OUT_OF_SERVICE_ANNOTATION, OUT_OF_SERVICE_TAINT_KEY, POOL_LABEL
from edgewatch.timefmt import format_rfc3339
from test_decision import (  # the decision tests' builders and strategies
    CFG,
    EDGE_VERDICTS,
    FAST,
    NOW,
    NS_TAINT,
    TABLE,
    configs,
    lease_for,
    leases,
    mk_lease,
    mk_node,
    mk_verdict,
    node_annotations,
    taints_st,
    verdicts,
    UNHEALTHY,
    UNKNOWN,
)

OOS = OUT_OF_SERVICE_TAINT
SINCE_50 = {UNREACHABLE_SINCE_ANNOTATION: format_rfc3339(NOW - 50)}


def _oos(p) -> bool:  # type: ignore[no-untyped-def]
    return any(t.ident == OOS.ident for t in p.taints)


# switch: (pool listed, annotation) -> on?
SWITCHES = [
    (False, None, False),
    (True, None, True),
    (False, "enabled", True),
    (True, "disabled", False),
    (True, "Enabled ", True),
    (False, "yes", False),  # not a clear yes: off, with a warning
    (True, "yes", False),
]


@pytest.mark.parametrize(("pool", "annotation", "on"), SWITCHES)
def test_switch_resolution(pool, annotation, on):
    annotations = {} if annotation is None else {OUT_OF_SERVICE_ANNOTATION: annotation}
    got, warning = out_of_service_enabled(annotations=annotations, pool_enabled=pool)
    assert got is on
    assert (warning is not None) is (annotation == "yes")


@pytest.mark.parametrize(("pool", "annotation", "on"), SWITCHES)
@pytest.mark.parametrize(("cloud", "edge", "expected", "verdict"),
                         [(c, e, s, v) for c, e, s in TABLE for v in EDGE_VERDICTS[e]])
def test_table_switch_x_cloud_x_edge(pool, annotation, on, cloud, edge, expected, verdict):
    """Every combination: the taint iff switch on, cloud LOST, edge UNHEALTHY (state FAILED)."""
    annotations = dict(SINCE_50)
    if annotation is not None:
        annotations[OUT_OF_SERVICE_ANNOTATION] = annotation
    p = plan(node=mk_node(annotations=annotations), lease=lease_for(cloud), verdict=verdict, now=NOW,
             config=CFG, out_of_service_pool=pool)
    assert (p.cloud, p.edge, p.state) == (cloud, edge, expected)
    want = on and cloud is CloudView.LOST and edge is EdgeView.UNHEALTHY
    assert _oos(p) is want
    if want:
        assert set(p.taints) == {NS_TAINT, replace(FAILED_TAINT, time_added=NOW), OOS}
        assert p.evict_pods and "out of service" in p.explanation
    # the rest of the plan does not depend on the switch
    off = plan(node=mk_node(annotations=SINCE_50), lease=lease_for(cloud), verdict=verdict, now=NOW, config=CFG)
    assert {t for t in p.taints if t.ident != OOS.ident} == set(off.taints)
    assert (p.state, p.effective_state, p.evict_pods, dict(p.annotations)) == (
        off.state, off.effective_state, off.evict_pods, dict(off.annotations))


@pytest.mark.parametrize("pool", [True, False])
def test_delegated_cut_off_node_seen_dead_is_failed_but_never_out_of_service(pool):
    """A carried heartbeat (cut off, alive) with a dead verdict: FAILED by the table, no taint."""
    p = plan(node=mk_node(annotations=SINCE_50), lease=mk_lease(NOW - 5, delegated=True),
             verdict=mk_verdict(UNHEALTHY, NOW - 1), now=NOW, config=CFG, out_of_service_pool=pool)
    assert p.cloud is CloudView.DELEGATED and p.state is NodeState.FAILED and not _oos(p)


def test_failed_by_autonomy_is_never_out_of_service():
    """No edge evidence, autonomy over: FAILED, but not on verified evidence."""
    node = mk_node(annotations={UNREACHABLE_SINCE_ANNOTATION: format_rfc3339(NOW - 1000)})
    p = plan(node=node, lease=None, verdict=None, now=NOW, config=CFG, out_of_service_pool=True)
    assert p.state is NodeState.FAILED and p.edge is EdgeView.UNKNOWN and not _oos(p)


def test_sticky_failed_drops_the_taint_when_the_verdict_goes_unknown():
    annotations = {**SINCE_50, STATE_ANNOTATION: "failed"}
    node = mk_node(annotations=annotations, taints=[NS_TAINT, replace(FAILED_TAINT, time_added=NOW - 40), OOS])
    p = plan(node=node, lease=lease_for(CloudView.LOST), verdict=mk_verdict(UNKNOWN, NOW - 1, NOW - 10),
             now=NOW, config=CFG, out_of_service_pool=True)
    assert p.state is NodeState.FAILED and not _oos(p)
    assert OOS not in merge_taints(current=node.taints, managed=p.taints)


def test_not_before_confirmation():
    """failed_confirm_s > 0: nothing enforced yet, so no out-of-service taint yet."""
    config = replace(CFG, failed_confirm_s=60.0)
    node = mk_node(annotations={UNREACHABLE_SINCE_ANNOTATION: format_rfc3339(NOW - 10)})
    p = plan(node=node, lease=mk_lease(NOW - 22), verdict=mk_verdict(UNHEALTHY, NOW - 1), now=NOW, config=config,
             out_of_service_pool=True)
    assert p.state is NodeState.FAILED and not p.confirmed and not _oos(p)


def test_removed_when_the_heartbeat_comes_back():
    node = mk_node(annotations={**SINCE_50, STATE_ANNOTATION: "failed"},
                   taints=[NS_TAINT, replace(FAILED_TAINT, time_added=NOW - 40), OOS])
    p = plan(node=node, lease=mk_lease(NOW - 1), verdict=mk_verdict(UNHEALTHY, NOW - 1), now=NOW, config=CFG,
             out_of_service_pool=True)
    assert p.effective_state is NodeState.NORMAL and p.taints == ()
    assert merge_taints(current=node.taints, managed=p.taints) == ()


def test_an_operators_out_of_service_taint_is_never_touched():
    """The manual procedure of the Kubernetes docs (value nodeshutdown) is someone else's taint."""
    manual = Taint(OUT_OF_SERVICE_TAINT_KEY, TaintEffect.NO_EXECUTE, "nodeshutdown")
    node = mk_node(annotations=SINCE_50, taints=[manual])
    for lease, verdict in [(mk_lease(NOW - 1), None), (lease_for(CloudView.LOST), mk_verdict(UNHEALTHY, NOW - 1))]:
        p = plan(node=node, lease=lease, verdict=verdict, now=NOW, config=CFG, out_of_service_pool=True)
        merged = merge_taints(current=node.taints, managed=p.taints)
        assert manual in merged
        assert len([t for t in merged if t.ident == OOS.ident]) == 1  # the API allows one per key+effect


@FAST
@given(node=st.builds(lambda a, t, sw: mk_node(annotations={**a, **sw}, taints=t), node_annotations(),
                      st.lists(st.one_of(taints_st, st.just(OOS)), max_size=5),
                      st.sampled_from([{}, {OUT_OF_SERVICE_ANNOTATION: "enabled"},
                                       {OUT_OF_SERVICE_ANNOTATION: "disabled"}, {OUT_OF_SERVICE_ANNOTATION: "x"}])),
       lease=leases(), verdict=verdicts(), config=configs, pool=st.booleans(), dt=st.integers(-400, 400))
def test_property_never_unless_unhealthy_lost_and_switch_on(node, lease, verdict, config, pool, dt):
    now = NOW + dt / 4
    p = plan(node=node, lease=lease, verdict=verdict, now=now, config=config, out_of_service_pool=pool)
    switch, _ = out_of_service_enabled(annotations=node.annotations, pool_enabled=pool)
    if _oos(p):
        assert switch and p.edge is EdgeView.UNHEALTHY and p.cloud is CloudView.LOST
        assert p.effective_state is NodeState.FAILED
    else:
        assert not (switch and p.effective_state is NodeState.FAILED and p.edge is EdgeView.UNHEALTHY
                    and p.cloud is CloudView.LOST)
        assert OOS not in apply_plan(node=node, plan=p).taints  # ours is removed when not planned
    # idempotent with the switch too
    applied = apply_plan(node=node, plan=p)
    again = plan(node=applied, lease=lease, verdict=verdict, now=now, config=config, out_of_service_pool=pool)
    assert again.taints == p.taints and merge_taints(current=applied.taints, managed=again.taints) == applied.taints


# -- the switch's input: ConfigMap parsing, pools, and the skip memo ---------------------------------


def test_configmap_key_is_accepted_by_the_agents_parser():
    parse_grouping_config({"outOfServicePools": "a,b"})  # no "unknown key"


@pytest.mark.parametrize(("raw", "pools"), [("", frozenset()), (" a , b,,", frozenset({"a", "b"})),
                                            ("*", frozenset({"*"}))])
def test_parse_pools(raw, pools):
    assert parse_out_of_service_pools({"outOfServicePools": raw}) == pools
    assert parse_out_of_service_pools({}) == frozenset()


@pytest.mark.parametrize("raw", ["a b", "-a", "x" * 64, "a/b"])
def test_parse_pools_refuses_bad_names(raw):
    with pytest.raises(ValueError, match="outOfServicePools"):
        parse_out_of_service_pools({"outOfServicePools": raw})


def test_pool_membership():
    assert pool_out_of_service(labels={POOL_LABEL: "a"}, pools=frozenset({"a"}))
    assert not pool_out_of_service(labels={POOL_LABEL: "b"}, pools=frozenset({"a"}))
    assert not pool_out_of_service(labels={}, pools=frozenset({"a"}))
    assert pool_out_of_service(labels={}, pools=frozenset({"*"}))
    assert not pool_out_of_service(labels={POOL_LABEL: "a"}, pools=frozenset())


def test_coverage_reports_a_pools_change_and_keeps_the_old_on_error():
    cov = Coverage()
    assert cov.apply({"outOfServicePools": "a"}) is True
    assert cov.apply({"outOfServicePools": "a"}) is False
    with pytest.raises(ValueError):
        cov.apply({"outOfServicePools": "bad name"})
    assert cov.out_of_service_pools == frozenset({"a"})
    assert cov.apply(None) is True and cov.out_of_service_pools == frozenset()


def test_a_settled_plan_is_not_reused_when_the_switch_changes():
    node, lease, verdict = mk_node(annotations=SINCE_50), lease_for(CloudView.LOST), mk_verdict(UNHEALTHY, NOW - 1)
    off = plan_inputs(node=node, lease=lease, verdict=verdict, config=CFG, now=NOW)
    on = plan_inputs(node=node, lease=lease, verdict=verdict, config=CFG, now=NOW, out_of_service_pool=True)
    assert off != on
    book = PlanBook()
    book.put("n1", plan(node=node, lease=lease, verdict=verdict, now=NOW, config=CFG))
    book.settle("n1", inputs=off, due_at=None)
    assert book.holds("n1", off, NOW + 1) and not book.holds("n1", on, NOW + 1)
    # the quiet path's renewal keeps the switch
    before, after = mk_lease(NOW - 5), mk_lease(NOW)
    made = plan_inputs(node=node, lease=before, verdict=verdict, config=CFG, now=NOW, out_of_service_pool=True)
    moved = renewed(made, before=before, after=after)
    assert moved is not None and moved.out_of_service_pool is True

"""Playground report: the summary figures exactly as defined (edge cases included), the expectation
checks and their comparison grammar, the baseline flag, and the side-by-side tables."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from edgewatch_lab.playground.checks import check_expectations
from edgewatch_lab.playground.report import (
    REPORT_KEYS,
    NodeRecord,
    Recording,
    build_report,
    down_intervals,
    last_renewal_before,
)
from edgewatch_lab.playground.summarytable import format_summary_table, summary_markdown, summary_rows
from edgewatch_lab.playground.scenario import Scenario, parse_scenario

NODES = ["a-1", "a-2", "a-3", "a-4", "a-5"]


def recording(baseline: bool = False, ended_at: float | None = 100.0) -> Recording:
    r = Recording(scenario="t", baseline=baseline, timings={"node_monitor_grace_s": 20},
                  started_at=1_700_000_000.0, ended_at=ended_at)
    for n in NODES:
        r.add_node(n, "a").observe_state(0.0, "normal")
    return r


def scenario(expect: list[dict[str, Any]], end: float = 100) -> Scenario:
    return parse_scenario({
        "name": "t",
        "topology": {"pools": [{"name": "a", "nodes": 5}]},
        "steps": [{"at": 10, "action": "kill", "node": "a-5"}, {"at": end, "action": "end"}],
        "expect": expect,
    })


def summary(r: Recording) -> dict[str, Any]:
    return build_report(r)["summary"]


# --------------------------------------------------------------------------------------------------
# recording helpers


def test_observe_state_records_transitions_only():
    n = NodeRecord("a-1", "a")
    assert n.observe_state(0, "normal") is True
    assert n.observe_state(5, "normal") is False
    assert n.observe_state(6, "unknown") is True
    assert n.observe_state(9, "normal") is True
    assert n.states == [(0, "normal"), (6, "unknown"), (9, "normal")]


def test_observe_ready_opens_and_closes_intervals():
    n = NodeRecord("a-1", "a")
    n.observe_ready(0, True)
    n.observe_ready(10, False)
    n.observe_ready(12, False)
    n.observe_ready(20, True)
    n.observe_ready(30, False)
    assert n.not_ready == [[10, 20], [30, None]]


def test_record_taint_rejects_unknown_change():
    with pytest.raises(ValueError, match="added"):
        NodeRecord("a-1", "a").record_taint(1, "k:NoSchedule", "changed")


@pytest.mark.parametrize("kills,revives,expected", [
    ([], [], []),
    ([10], [], [(10, None)]),
    ([10], [20], [(10, 20)]),
    ([10, 30], [20], [(10, 20), (30, None)]),
    ([10, 15], [20], [(10, 20)]),          # a kill while down changes nothing
    ([10], [5, 20, 25], [(10, 20)]),       # a revive while up changes nothing
    ([20, 10], [30, 15], [(10, 15), (20, 30)]),  # order of the lists does not matter
    ([10, 20], [20], [(10, 20), (20, None)]),    # revive and kill at the same time: revive first
])
def test_down_intervals(kills, revives, expected):
    assert down_intervals(kills, revives) == expected


def test_recording_round_trips_through_json():
    r = recording()
    a5 = r.nodes["a-5"]
    a5.record_kill(10.5, pods=2)
    a5.record_eviction(12, "web-1")
    a5.record_taint(11, "edgewatch.io/failed:NoExecute", "added")
    a5.observe_ready(30, False)
    r.add_fault(10.5, "kill", node="a-5")
    back = Recording.from_dict(json.loads(json.dumps(r.to_dict())))
    assert back == r
    assert build_report(back) == build_report(r)


# --------------------------------------------------------------------------------------------------
# report shape


def test_report_shape():
    r = recording(ended_at=None)
    r.add_fault(5, "cut-cloud", pool="a", detail="nft drop")
    r.add_fault(1, "loss", nodes=["a-1"], percent=30)
    a1 = r.nodes["a-1"]
    a1.observe_ready(7, False)
    a1.record_taint(8, "node.kubernetes.io/unreachable:NoExecute", "added")
    a1.record_endpoint_removal(9, "web-a")
    a5 = r.nodes["a-5"]
    a5.record_kill(40)
    a5.record_revive(50)
    a5.record_kill(60, pods=0)
    a5.record_eviction(44, "web-b")
    rep = build_report(r)
    json.dumps(rep)  # plain data
    assert tuple(rep) == REPORT_KEYS
    assert rep["scenario"] == "t" and rep["baseline"] is False and rep["timings"] == {"node_monitor_grace_s": 20}
    assert [f["t"] for f in rep["faults"]] == [1, 5, 60]  # sorted; the end added at the last time seen
    assert rep["faults"][-1]["action"] == "end"
    assert rep["faults"][1] == {"t": 5, "action": "cut-cloud", "pool": "a", "detail": "nft drop"}
    assert list(rep["nodes"]) == NODES
    n1 = rep["nodes"]["a-1"]
    assert set(n1) == {"pool", "covered", "touched", "killed_at", "states", "not_ready", "evictions",
                       "endpoint_removals", "taints",
                       "kills"}
    assert n1["killed_at"] is None
    assert n1["states"] == [[0.0, "normal"]]
    assert n1["not_ready"] == [[7, None]]
    assert n1["taints"] == [[8, "node.kubernetes.io/unreachable:NoExecute", "added"]]
    assert n1["endpoint_removals"] == [{"t": 9, "pod": "web-a"}]
    n5 = rep["nodes"]["a-5"]
    assert n5["killed_at"] == 40
    assert n5["kills"] == [{"t": 40, "revived_at": 50, "pods": None}, {"t": 60, "revived_at": None, "pods": 0}]
    assert set(rep["summary"]) == {"evictions_on_live_nodes", "endpoint_removals_on_live_nodes",
                                   "killed_nodes_not_evicted", "max_detection_s", "max_eviction_s", "undetected",
                                   "max_not_ready_after_kill_s", "pool_scope_cloud_bytes", "pool_scope_open_watches",
                                   "max_statefulset_move_s", "statefulsets_not_moved", "live_nodes_not_ready",
                                   "false_verdicts_on_live_nodes", "agent_cpu_pct", "agent_rss_mib",
                                   "peer_packets_per_min", "peer_connections_per_min", "peer_kib_per_min",
                                   "cloud_packets_per_min", "cloud_kib_per_min"}
    assert rep["summary"]["live_nodes_not_ready"] == 1  # a-1, NotReady at 7 s while alive
    assert rep["summary"]["agent_cpu_pct"] is None  # no node_costs recorded
    assert rep["statefulsets"] == {}


def test_recorded_end_fault_is_not_duplicated():
    r = recording(ended_at=80)
    r.add_fault(80, "end")
    rep = build_report(r)
    assert [f["action"] for f in rep["faults"]] == ["end"]


def test_report_orders_nodes_numerically():
    r = Recording(scenario="t", baseline=False, ended_at=10)
    for name in ("a-10", "a-2", "a-1"):
        r.add_node(name, "a")
    assert list(build_report(r)["nodes"]) == ["a-1", "a-2", "a-10"]


# --------------------------------------------------------------------------------------------------
# summary


def test_quiet_run():
    assert summary(recording()) == {
        "evictions_on_live_nodes": 0, "endpoint_removals_on_live_nodes": 0, "killed_nodes_not_evicted": [],
        "max_detection_s": None, "max_eviction_s": None, "undetected": [], "max_not_ready_after_kill_s": None,
        "pool_scope_cloud_bytes": None, "pool_scope_open_watches": None,
        "max_statefulset_move_s": None, "statefulsets_not_moved": [],
        "live_nodes_not_ready": 0, "false_verdicts_on_live_nodes": 0,
        "agent_cpu_pct": None, "agent_rss_mib": None, "peer_packets_per_min": None,
        "peer_connections_per_min": None, "peer_kib_per_min": None, "cloud_packets_per_min": None,
        "cloud_kib_per_min": None,
    }


def test_live_evictions_and_removals_are_counted():
    r = recording()
    r.nodes["a-1"].record_eviction(30, "p1")
    r.nodes["a-2"].record_eviction(31, "p2")
    r.nodes["a-2"].record_eviction(32, "p3")
    r.nodes["a-3"].record_endpoint_removal(25, "p4")
    s = summary(r)
    assert s["evictions_on_live_nodes"] == 3
    assert s["endpoint_removals_on_live_nodes"] == 1


def test_eviction_at_the_exact_kill_time_is_not_live():
    r = recording()
    a5 = r.nodes["a-5"]
    a5.record_kill(20)
    a5.record_eviction(20, "p")
    a5.record_endpoint_removal(20, "p")
    a5.observe_state(24, "failed")
    s = summary(r)
    assert s["evictions_on_live_nodes"] == 0
    assert s["endpoint_removals_on_live_nodes"] == 0
    assert s["max_eviction_s"] == 0.0
    assert s["max_detection_s"] == 4.0
    assert s["killed_nodes_not_evicted"] == []


def test_eviction_just_before_the_kill_or_at_the_revive_is_live():
    r = recording()
    a5 = r.nodes["a-5"]
    a5.record_kill(20)
    a5.record_revive(40)
    a5.record_eviction(19.999, "p0")
    a5.record_eviction(40, "p1")
    s = summary(r)
    assert s["evictions_on_live_nodes"] == 2
    assert s["max_eviction_s"] is None
    assert s["killed_nodes_not_evicted"] == ["a-5"]  # pods unknown, so assumed present


def test_multiple_kills_and_revives():
    r = recording(ended_at=200)
    a5 = r.nodes["a-5"]
    a5.record_kill(10, pods=2)
    a5.observe_state(13, "failed")
    a5.record_eviction(15, "p1")
    a5.record_eviction(17, "p2")        # 7 s after the first kill
    a5.record_revive(30)
    a5.observe_state(33, "normal")
    a5.record_eviction(40, "p3")        # live: between revive and the second kill
    a5.record_kill(50, pods=1)
    a5.record_kill(55)                  # already down: ignored
    a5.observe_state(59, "failed")      # detected 9 s after the second kill
    a5.record_eviction(62, "p4")        # 12 s after the second kill
    a5.record_revive(70)
    a5.observe_state(72, "normal")
    a5.record_kill(100, pods=0)         # nothing to evict; detection 20 s
    a5.observe_state(120, "failed")
    s = summary(r)
    assert s["evictions_on_live_nodes"] == 1
    assert s["max_eviction_s"] == 12.0
    assert s["max_detection_s"] == 20.0
    assert s["killed_nodes_not_evicted"] == []  # the kill without an eviction had no pods
    assert s["undetected"] == []


def test_eviction_time_is_to_the_last_eviction_after_the_kill():
    r = recording()
    a5 = r.nodes["a-5"]
    a5.record_eviction(5, "before")     # before the kill: live, not part of the eviction time
    a5.record_kill(10, pods=3)
    a5.record_eviction(19, "p3")
    a5.record_eviction(12, "p1")
    a5.record_eviction(13, "p2")
    s = summary(r)
    assert s["max_eviction_s"] == 9.0
    assert s["evictions_on_live_nodes"] == 1


def test_had_pods_stands_in_for_pods_at_kill():
    r = recording()
    r.nodes["a-4"].record_kill(10)
    r.nodes["a-4"].had_pods = False          # never had a pod: nothing to evict
    r.nodes["a-5"].record_kill(10)
    r.nodes["a-5"].had_pods = True           # had pods, none evicted
    r.nodes["a-3"].record_kill(10, pods=2)
    r.nodes["a-3"].had_pods = False          # the exact count wins
    rep = build_report(r)
    assert [rep["nodes"][n]["kills"][0]["pods"] for n in ("a-3", "a-4", "a-5")] == [2, 0, None]
    assert rep["summary"]["killed_nodes_not_evicted"] == ["a-3", "a-5"]


def test_undetected_kill_counts_the_time_until_the_end():
    r = recording(ended_at=100)
    a3 = r.nodes["a-3"]
    a3.record_kill(40, pods=1)
    a3.observe_state(45, "unknown")
    a4 = r.nodes["a-4"]
    a4.record_kill(50)
    a4.observe_state(52, "failed")
    s = summary(r)
    assert s["max_detection_s"] == 60.0
    assert s["undetected"] == ["a-3"]
    assert s["killed_nodes_not_evicted"] == ["a-3", "a-4"]


def test_undetected_kill_then_revive_counts_until_the_revive_and_a_later_failed_is_not_detection():
    r = recording(ended_at=100)
    a3 = r.nodes["a-3"]
    a3.record_kill(40)
    a3.record_revive(55)
    a3.observe_state(60, "failed")   # after the revive: not a detection of that kill
    s = summary(r)
    assert s["max_detection_s"] == 15.0
    assert s["undetected"] == ["a-3"]


def test_already_failed_at_the_kill_is_detected_at_once():
    r = recording()
    a2 = r.nodes["a-2"]
    a2.observe_state(10, "failed")
    a2.record_kill(20)
    assert summary(r)["max_detection_s"] == 0.0


def test_baseline_detection_uses_not_ready():
    r = recording(baseline=True)
    a5 = r.nodes["a-5"]
    a5.record_kill(10)
    a5.observe_state(15, "failed")     # not a baseline state: ignored
    a5.observe_state(32.5, "not_ready")
    s = summary(r)
    assert s["max_detection_s"] == 22.5
    assert s["undetected"] == []
    edgewatch = recording(baseline=False)
    edgewatch.nodes["a-5"].record_kill(10)
    edgewatch.nodes["a-5"].observe_state(32.5, "not_ready")
    assert summary(edgewatch)["undetected"] == ["a-5"]


def test_times_are_rounded():
    r = recording()
    a5 = r.nodes["a-5"]
    a5.record_kill(0.1)
    a5.observe_state(0.3, "failed")
    a5.record_eviction(0.7, "p")
    s = summary(r)
    assert s["max_detection_s"] == 0.2 and s["max_eviction_s"] == 0.6


# --------------------------------------------------------------------------------------------------
# expectations


def evicting_run(baseline: bool = False) -> dict[str, Any]:
    """a-2 loses 2 pods, a-3 one; a-5 is killed at 10, failed at 16, evicted at 13 and 19."""
    r = recording(baseline=baseline)
    r.nodes["a-2"].record_eviction(30, "p1")
    r.nodes["a-2"].record_eviction(31, "p2")
    r.nodes["a-3"].record_eviction(32, "p3")
    r.nodes["a-3"].record_endpoint_removal(28, "p3")
    r.nodes["a-3"].observe_ready(27, False)
    r.nodes["a-3"].observe_ready(37, True)
    a5 = r.nodes["a-5"]
    a5.record_kill(10, pods=2)
    a5.observe_state(16, "not_ready" if baseline else "failed")
    a5.record_eviction(13, "p4")
    a5.record_eviction(19, "p5")
    return build_report(r)


def test_count_expectation_detail_names_the_nodes():
    [res] = check_expectations(scenario([{"nodes": ["a-1", "a-2", "a-3", "a-4"], "evictions": 0}]), evicting_run())
    assert res.passed is False
    assert res.description == "a-1..a-4: evictions == 0"
    assert res.detail == "expected evictions == 0 on a-1..a-4, saw 3: a-2 (2), a-3 (1)"


@pytest.mark.parametrize("spec,passed", [
    (3, True), (2, False), (">0", True), (">3", False), (">=3", True), ("<=2", False), ("<4", True),
    ("==3", True), ("== 4", False),
])
def test_count_comparisons(spec, passed):
    [res] = check_expectations(scenario([{"nodes": ["a-2", "a-3"], "evictions": spec}]), evicting_run())
    assert res.passed is passed, res.detail


def test_pool_target_and_endpoint_removals():
    [res] = check_expectations(scenario([{"pool": "a", "endpoint_removals": 0}]), evicting_run())
    assert not res.passed
    assert res.description == "pool a: endpoint removals == 0"
    assert res.detail == "expected endpoint removals == 0 on pool a, saw 1: a-3 (1)"
    [ok] = check_expectations(scenario([{"nodes": ["a-1"], "endpoint_removals": 0}]), evicting_run())
    assert ok.passed and ok.detail == "expected endpoint removals == 0 on a-1, saw 0"


def test_never_not_ready():
    sc = scenario([{"nodes": ["a-1", "a-2"], "never_not_ready": True},
                   {"nodes": ["a-3", "a-4"], "never_not_ready": True},
                   {"nodes": ["a-3", "a-4"], "never_not_ready": False},
                   {"nodes": ["a-1"], "never_not_ready": False}])
    results = check_expectations(sc, evicting_run())
    assert [r.passed for r in results] == [True, False, True, False]
    assert "a-3 from 27 s (until 37 s)" in results[1].detail


def test_evicted_and_detected_within():
    sc = scenario([{"nodes": ["a-5"], "evicted_within_s": 9, "detected_within_s": 6},
                   {"nodes": ["a-5"], "evicted_within_s": 8.9, "detected_within_s": 5.9}])
    results = check_expectations(sc, evicting_run())
    assert [r.passed for r in results] == [True, True, False, False]
    assert "a-5 last eviction 9 s after the kill at 10 s" in results[0].detail
    assert "a-5 failed 6 s after the kill at 10 s" in results[1].detail


def test_detection_detail_says_where_the_kill_fell_in_the_heartbeat():
    """A dead node is judged one grace after its last own renewal the controller saw, so the detail
    of a detection names how long before the kill that renewal was seen (CI once failed at 13.037 s
    against 13 s with no way to tell the phase from the controller's lag)."""
    r = recording()
    a5 = r.nodes["a-5"]
    a5.renewals.extend([0.2, 10.1, 20.3])  # 20.3: after the kill, never its own
    a5.record_kill(21, pods=1)
    a5.observe_state(32.5, "failed")
    rep = build_report(r)
    assert rep["nodes"]["a-5"]["kills"] == [{"t": 21, "revived_at": None, "pods": 1, "last_renewal": 20.3}]
    [res] = check_expectations(scenario([{"nodes": ["a-5"], "detected_within_s": 12}]), rep)
    assert res.passed
    assert res.detail.endswith("a-5 failed 11.5 s after the kill at 21 s "
                               "(its last own Lease renewal seen 0.7 s before the kill)")
    no_renewal = recording()
    no_renewal.nodes["a-5"].record_kill(21, pods=1)
    kills = build_report(no_renewal)["nodes"]["a-5"]["kills"]
    assert "last_renewal" not in kills[0]


@pytest.mark.parametrize(("renewals", "t", "expected"), [
    ([], 5.0, None), ([6.0], 5.0, None), ([5.0], 5.0, 5.0), ([1.0, 4.0, 9.0], 5.0, 4.0),
    ([4.0, 1.0], 5.0, 4.0),
])
def test_last_renewal_before(renewals, t, expected):
    assert last_renewal_before(renewals, t) == expected


@given(st.lists(st.floats(0, 1e4, allow_nan=False)), st.floats(0, 1e4, allow_nan=False))
def test_last_renewal_before_is_the_latest_not_after(renewals, t):
    last = last_renewal_before(renewals, t)
    if last is None:
        assert all(r > t for r in renewals)
    else:
        assert last <= t and last in renewals and not any(last < r <= t for r in renewals)


def test_within_fails_for_a_target_never_killed_or_never_evicted():
    sc = scenario([{"nodes": ["a-1"], "evicted_within_s": 100},
                   {"nodes": ["a-1"], "detected_within_s": 100}])
    results = check_expectations(sc, evicting_run())
    assert [r.passed for r in results] == [False, False]
    assert all("a-1 never killed" in r.detail for r in results)

    r = recording()
    r.nodes["a-5"].record_kill(10)
    [ev, det] = check_expectations(scenario([{"nodes": ["a-5"], "evicted_within_s": 100,
                                              "detected_within_s": 100}]), build_report(r))
    assert not ev.passed and "no eviction after the kill at 10 s" in ev.detail
    assert not det.passed and "never failed after the kill at 10 s (waited 90 s)" in det.detail


def test_evicted_within_needs_every_pod_and_pods_to_evict():
    r = recording()
    a5 = r.nodes["a-5"]
    a5.record_kill(10, pods=3)
    a5.record_eviction(11, "p1")
    a5.record_eviction(12, "p2")
    [res] = check_expectations(scenario([{"nodes": ["a-5"], "evicted_within_s": 100}]), build_report(r))
    assert not res.passed and "only 2 of its 3 pods" in res.detail

    r = recording()
    r.nodes["a-5"].record_kill(10, pods=0)
    [res] = check_expectations(scenario([{"nodes": ["a-5"], "evicted_within_s": 100}]), build_report(r))
    assert not res.passed and "no pods at the kill" in res.detail


def test_within_checks_every_kill():
    r = recording(ended_at=200)
    a5 = r.nodes["a-5"]
    a5.record_kill(10, pods=1)
    a5.record_eviction(12, "p1")
    a5.observe_state(11, "failed")
    a5.record_revive(50)
    a5.observe_state(51, "normal")
    a5.record_kill(100, pods=1)
    a5.record_eviction(130, "p2")      # second kill: 30 s
    a5.observe_state(125, "failed")    # second kill: 25 s
    [ev, det] = check_expectations(scenario([{"nodes": ["a-5"], "evicted_within_s": 15,
                                              "detected_within_s": 10}], end=200), build_report(r))
    assert not ev.passed and "30 s after the kill at 100 s" in ev.detail
    assert not det.passed and "25 s after the kill at 100 s" in det.detail


def test_state_at_end():
    sc = scenario([{"nodes": ["a-5"], "state_at_end": "failed"},
                   {"nodes": ["a-1", "a-5"], "state_at_end": "normal"}])
    results = check_expectations(sc, evicting_run())
    assert [r.passed for r in results] == [True, False]
    assert results[1].detail == "expected a-1, a-5 normal at the end, saw a-1 normal, a-5 failed"

    r = recording()
    r.nodes["a-1"].states.clear()
    [res] = check_expectations(scenario([{"nodes": ["a-1"], "state_at_end": "normal"}]), build_report(r))
    assert not res.passed and "no state recorded" in res.detail


def test_baseline_flag_selects_expectations():
    sc = scenario([
        {"nodes": ["a-2"], "evictions": 0},                                   # edgewatch only
        {"nodes": ["a-2"], "evictions": ">0", "baseline": True},              # baseline only
        {"nodes": ["a-5"], "detected_within_s": 6, "state_at_end": "not_ready", "baseline": True},
    ])
    ew = check_expectations(sc, evicting_run(baseline=False))
    assert [r.description for r in ew] == ["a-2: evictions == 0"]
    assert [r.passed for r in ew] == [False]
    base = check_expectations(sc, evicting_run(baseline=True))
    assert [r.description for r in base] == ["a-2: evictions > 0", "a-5: not_ready within 6 s of a kill",
                                             "a-5: state not_ready at the end"]
    assert all(r.passed for r in base), [r.detail for r in base]


def test_missing_node_fails_and_wrong_scenario_raises():
    rep = evicting_run()
    del rep["nodes"]["a-4"]
    [res] = check_expectations(scenario([{"pool": "a", "evictions": ">=0"}]), rep)
    assert not res.passed and "no record of a-4" in res.detail
    rep["scenario"] = "other"
    with pytest.raises(ValueError, match="other"):
        check_expectations(scenario([{"pool": "a", "evictions": 0}]), rep)


# --------------------------------------------------------------------------------------------------
# tables


def pair() -> tuple[dict[str, Any], dict[str, Any]]:
    ew = recording()
    a5 = ew.nodes["a-5"]
    a5.record_kill(10, pods=1)
    a5.observe_state(14.25, "failed")
    a5.record_eviction(16, "p")
    base = recording(baseline=True)
    for n in ("a-1", "a-2"):
        base.nodes[n].record_eviction(50, f"p-{n}")
        base.nodes[n].record_endpoint_removal(30, f"p-{n}")
    base.nodes["a-5"].record_kill(10, pods=1)
    return build_report(ew), build_report(base)


def test_summary_rows_and_markdown():
    ew, base = pair()
    assert summary_rows(ew, base) == [
        ("evictions on live nodes", "0", "2"),
        ("endpoint removals on live nodes", "0", "2"),
        ("killed nodes not evicted", "0", "1 (a-5)"),
        ("max detection s", "4.2", "90.0 (undetected: a-5)"),
        ("max eviction s", "6.0", "-"),
        ("uncovered node: kill -> NotReady s", "-", "-"),
        ("live nodes that went NotReady", "0", "0"),
        ("false verdicts on live nodes (failed / unhealthy)", "0", "-"),
    ]
    md = summary_markdown(ew, base)
    assert md.splitlines()[0] == "| | edgewatch | stock Kubernetes |"
    assert "| killed nodes not evicted | 0 | 1 (a-5) |" in md
    assert len(md.splitlines()) == 2 + 8
    assert summary_rows(ew, None)[0] == ("evictions on live nodes", "0", "-")


def test_rich_table():
    ew, base = pair()
    table = format_summary_table(ew, base)
    assert [c.header for c in table.columns] == ["", "edgewatch", "stock Kubernetes"]
    assert table.row_count == 8
    console = Console(record=True, width=120)
    console.print(table)
    text = console.export_text()
    assert "max detection s" in text and "undetected: a-5" in text and "scenario t" in text


def test_uncovered_node_is_judged_by_stock_not_ready_and_reported_apart():
    r = Recording(scenario="mixed", baseline=False)
    edge = r.add_node("a-1", "a")
    cloud = r.add_node("cloud-2", "cloud")
    cloud.covered = False
    edge.observe_state(0, "normal")
    cloud.observe_state(0, "normal")
    cloud.record_kill(10, pods=2)
    cloud.observe_state(31.5, "not_ready")
    cloud.record_eviction(62, "web-c")
    cloud.record_eviction(62.5, "web-d")
    r.add_fault(80, "end")
    rep = build_report(r)
    assert rep["nodes"]["cloud-2"]["covered"] is False
    assert rep["summary"]["max_not_ready_after_kill_s"] == 21.5
    assert rep["summary"]["max_detection_s"] is None  # no covered node was killed
    assert rep["summary"]["undetected"] == []


def test_untouched_expectation_fails_on_any_mark():
    sc = parse_scenario({
        "name": "t", "topology": {"pools": [{"name": "a", "nodes": 1}], "cloud_nodes": 2},
        "steps": [{"at": 5, "action": "kill", "node": "cloud-2"}, {"at": 60, "action": "end"}],
        "expect": [{"nodes": ["cloud-2"], "untouched": True}]})
    r = Recording(scenario="t", baseline=False)
    r.add_node("a-1", "a")
    c = r.add_node("cloud-2", "cloud")
    c.covered = False
    r.add_fault(60, "end")
    assert all(e.passed for e in check_expectations(sc, build_report(r)))
    c.touched.append((12.0, "lease mark autonomy"))
    results = check_expectations(sc, build_report(r))
    assert not results[0].passed and "lease mark autonomy at 12" in results[0].detail


# --------------------------------------------------------------------------------------------------
# kube-proxy following the Service (the pool-cache checks)


def _proxy_report(proxy: list, *, baseline: bool = False) -> dict:
    r = Recording(scenario="pool-cache", baseline=baseline, ended_at=100)
    r.add_node("a-5", "a")
    r.nodes["a-5"].kube_proxy = proxy
    r.service_endpoints = [(0.0, ["10.0.0.1:8080"]), (31.0, ["10.0.0.1:8080", "10.0.0.2:8080"]),
                           (61.5, ["10.0.0.2:8080"])]
    r.add_fault(10, "cut-cloud")
    r.add_fault(30, "scale")
    r.add_fault(60, "scale")
    return build_report(r)


def _proxy_checks(report: dict, **expect) -> list:
    from edgewatch_lab.playground.scenario import parse_scenario

    sc = parse_scenario({
        "name": "pool-cache", "topology": {"pools": [{"name": "a", "nodes": 5, "kube_proxy": ["a-5"]}]},
        "steps": [{"at": 10, "action": "cut-cloud", "pool": "a"}, {"at": 30, "action": "scale", "replicas": 2},
                  {"at": 60, "action": "scale", "replicas": 1}, {"at": 100, "action": "end"}],
        "expect": [{"nodes": ["a-5"], "baseline": report["baseline"], **expect}]})
    return check_expectations(sc, report)


def test_kube_proxy_following_is_measured_from_when_the_cloud_settled():
    rep = _proxy_report([(0.0, ["10.0.0.1:8080"]), (33.0, ["10.0.0.1:8080", "10.0.0.2:8080"]),
                         (62.0, ["10.0.0.2:8080"])])
    [res] = _proxy_checks(rep, kube_proxy_follows_within_s=3)
    assert res.passed, res.detail
    assert "2 endpoints 2 s after the cloud" in res.detail and "1 endpoints 0.5 s" in res.detail
    [res] = _proxy_checks(rep, kube_proxy_follows_within_s=1)
    assert not res.passed


def test_a_kube_proxy_that_never_catches_up_misses():
    rep = _proxy_report([(0.0, ["10.0.0.1:8080"])], baseline=True)
    [res] = _proxy_checks(rep, kube_proxy_misses=True)
    assert res.passed and "never programmed" in res.detail
    [res] = _proxy_checks(rep, kube_proxy_follows_within_s=30)
    assert not res.passed


def test_kube_proxy_checks_need_a_kube_proxy_on_the_node():
    from edgewatch_lab.playground.scenario import ScenarioError, parse_scenario

    with pytest.raises(ScenarioError, match="run no kube-proxy"):
        parse_scenario({"name": "x", "topology": {"pools": [{"name": "a", "nodes": 2}]},
                        "steps": [{"at": 5, "action": "scale", "replicas": 1}, {"at": 10, "action": "end"}],
                        "expect": [{"nodes": ["a-1"], "kube_proxy_follows_within_s": 5}]})
    with pytest.raises(ScenarioError, match="not in pool"):
        parse_scenario({"name": "x", "topology": {"pools": [{"name": "a", "nodes": 2, "kube_proxy": ["b-1"]}]},
                        "steps": [{"at": 10, "action": "end"}]})


# --------------------------------------------------------------------------------------------------
# CoreDNS following the Service (its answers are addresses: the cloud's endpoints without ports)


def _dns_report(answers: list, *, baseline: bool = False) -> dict:
    r = Recording(scenario="pool-cache", baseline=baseline, ended_at=100)
    r.add_node("a-4", "a")
    r.nodes["a-4"].coredns = answers
    r.service_endpoints = [(0.0, ["10.0.0.1:8080"]), (31.0, ["10.0.0.1:8080", "10.0.0.2:8080"]),
                           (61.5, ["10.0.0.2:8080"])]
    r.add_fault(10, "cut-cloud")
    r.add_fault(30, "scale")
    r.add_fault(60, "scale")
    return build_report(r)


def _dns_checks(report: dict, **expect) -> list:
    from edgewatch_lab.playground.scenario import parse_scenario

    sc = parse_scenario({
        "name": "pool-cache", "topology": {"pools": [{"name": "a", "nodes": 5, "coredns": ["a-4"]}]},
        "steps": [{"at": 10, "action": "cut-cloud", "pool": "a"}, {"at": 30, "action": "scale", "replicas": 2},
                  {"at": 60, "action": "scale", "replicas": 1}, {"at": 100, "action": "end"}],
        "expect": [{"nodes": ["a-4"], "baseline": report["baseline"], **expect}]})
    return check_expectations(sc, report)


def test_coredns_following_compares_addresses():
    rep = _dns_report([(0.0, ["10.0.0.1"]), (32.5, ["10.0.0.1", "10.0.0.2"]), (62.0, ["10.0.0.2"])])
    assert rep["nodes"]["a-4"]["coredns"][1] == [32.5, ["10.0.0.1", "10.0.0.2"]]
    [res] = _dns_checks(rep, coredns_follows_within_s=2)
    assert res.passed, res.detail
    assert res.description == "a-4: CoreDNS follows each scale within 2 s"
    assert "2 endpoints 1.5 s after the cloud" in res.detail and "1 endpoints 0.5 s" in res.detail
    [res] = _dns_checks(rep, coredns_follows_within_s=1)
    assert not res.passed
    assert Recording.from_dict(json.loads(json.dumps(Recording(
        scenario="x", baseline=False, nodes={"a-4": NodeRecord(name="a-4", pool="a", coredns=[(1.0, ["10.0.0.1"])])}
    ).to_dict()))).nodes["a-4"].coredns == [(1.0, ["10.0.0.1"])]


def test_a_coredns_that_never_catches_up_misses():
    rep = _dns_report([(0.0, ["10.0.0.1"])], baseline=True)
    [res] = _dns_checks(rep, coredns_misses=True)
    assert res.passed and "never answered" in res.detail
    [res] = _dns_checks(rep, coredns_follows_within_s=30)
    assert not res.passed


def test_coredns_checks_need_a_coredns_on_a_simulated_node():
    from edgewatch_lab.playground.scenario import ScenarioError, parse_scenario

    with pytest.raises(ScenarioError, match="run no CoreDNS"):
        parse_scenario({"name": "x", "topology": {"pools": [{"name": "a", "nodes": 2, "kube_proxy": ["a-1"]}]},
                        "steps": [{"at": 5, "action": "scale", "replicas": 1}, {"at": 10, "action": "end"}],
                        "expect": [{"nodes": ["a-1"], "coredns_follows_within_s": 5}]})
    with pytest.raises(ScenarioError, match="coredns: 'b-1' not in pool"):
        parse_scenario({"name": "x", "topology": {"pools": [{"name": "a", "nodes": 2, "coredns": ["b-1"]}]},
                        "steps": [{"at": 10, "action": "end"}]})
    with pytest.raises(ScenarioError, match="are real nodes"):
        parse_scenario({"name": "x", "topology": {"pools": [{"name": "a", "nodes": 2, "real_nodes": 1,
                                                             "coredns": ["a-1"]}]},
                        "steps": [{"at": 10, "action": "end"}]})


def test_false_verdicts_and_not_ready_count_live_nodes_only():
    """A verdict or NotReady while a node is alive counts; the same after its kill does not."""
    r = recording()
    r.nodes["a-1"].observe_state(5.0, "failed")  # alive: a false verdict
    r.nodes["a-2"].observe_ready(6.0, False)  # alive: NotReady
    r.nodes["a-5"].record_kill(10, pods=0)
    r.nodes["a-5"].observe_ready(12.0, False)
    r.nodes["a-5"].observe_state(14.0, "failed")  # dead: the right verdict
    s = summary(r)
    assert s["false_verdicts_on_live_nodes"] == 1
    assert s["live_nodes_not_ready"] == 1


def test_superedge_false_verdicts_are_its_unhealthy_votes_and_stock_has_none():
    r = recording()
    r.system = "superedge"
    r.nodes["a-3"].observe_state(5.0, "unhealthy")
    r.nodes["a-4"].observe_state(5.0, "failed")  # not a SuperEdge verdict
    assert summary(r)["false_verdicts_on_live_nodes"] == 1
    assert summary(recording(baseline=True))["false_verdicts_on_live_nodes"] is None

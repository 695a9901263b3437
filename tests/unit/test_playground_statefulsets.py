"""The playground's StatefulSets (docs/out-of-service.md): what the observer records of their pods
(edgewatch_lab.playground.statefulsets.record_pods), where a report says the pod went
(statefulset_outcome, build_report's ``statefulsets`` and summary row), the expectations
``moved_within_s`` / ``moved`` / ``stays`` and ``out_of_service_taint`` judged on hand-made reports,
the StatefulSet the runner creates, and the ``outOfServicePools`` key both install methods carry."""

from __future__ import annotations

import json
from typing import Any

import pytest

from edgewatch_lab.playground import install
from edgewatch_lab.playground.checks import check_expectations
from edgewatch_lab.playground.report import Recording, build_report
from edgewatch_lab.playground.summarytable import summary_rows
from edgewatch_lab.playground.scenario import Scenario, load_scenario, parse_scenario
from edgewatch_lab.playground.statefulsets import StatefulSetSeries, record_pods, statefulset_outcome
from edgewatch_lab.testing.workload import APP_LABEL, STATEFULSET_LABEL, pinned_statefulset

NODES = ["a-1", "a-2", "a-3", "a-4", "a-5"]
OOS = "node.kubernetes.io/out-of-service:NoExecute"


def pod(uid: str, node: str, *, ready: bool = True, deleting: bool = False, name: str = "db-0") -> dict[str, Any]:
    return {"pod": name, "uid": uid, "node": node, "ready": ready, "deleting": deleting}


# --------------------------------------------------------------------------------------------------
# recording


def test_record_pods_appends_changes_only_and_tells_pods_apart_by_uid():
    s = StatefulSetSeries(node="a-5")
    record_pods(s, 0.0, [pod("u1", "a-5")])
    record_pods(s, 0.25, [pod("u1", "a-5")])  # nothing changed
    record_pods(s, 12.0, [pod("u1", "a-5", deleting=True)])
    record_pods(s, 30.0, [])  # force-deleted
    record_pods(s, 30.25, [])
    record_pods(s, 30.5, [pod("u2", "", ready=False)])  # same name, new pod, not yet bound
    record_pods(s, 31.0, [pod("u2", "a-3", ready=False)])
    record_pods(s, 32.0, [pod("u2", "a-3")])
    assert [(e["t"], e["uid"], e["node"], e["ready"], e["deleting"], e["gone"]) for e in s.pods] == [
        (0.0, "u1", "a-5", True, False, False),
        (12.0, "u1", "a-5", True, True, False),
        (30.0, "u1", "a-5", False, True, True),
        (30.5, "u2", "", False, False, False),
        (31.0, "u2", "a-3", False, False, False),
        (32.0, "u2", "a-3", True, False, False),
    ]
    assert all(e["pod"] == "db-0" for e in s.pods)


# --------------------------------------------------------------------------------------------------
# outcome


def moved_series() -> StatefulSetSeries:
    """db's pod on a-5 (killed at 160), evicted at 170, force-deleted at 190, Ready on a-3 at 192.5."""
    s = StatefulSetSeries(node="a-5")
    record_pods(s, 0.0, [pod("u1", "a-5")])
    record_pods(s, 170.0, [pod("u1", "a-5", deleting=True)])
    record_pods(s, 190.0, [pod("u2", "", ready=False)])
    record_pods(s, 191.0, [pod("u2", "a-3", ready=False)])
    record_pods(s, 192.5, [pod("u2", "a-3")])
    return s


def test_outcome_of_a_pod_moved_off_a_dead_node_is_measured_from_the_kill():
    out = statefulset_outcome(moved_series(), kills={"a-5": [160.0]})
    assert out == {
        "node": "a-5", "start": {"t": 0.0, "pod": "db-0", "uid": "u1", "node": "a-5"},
        "killed_at": 160.0, "on_node_at_kill": True, "deleted_at": 170.0, "gone_at": 190.0, "moved_at": 192.5, "moved_to": "a-3", "moved_s": 32.5,
        "at_end": [pod("u2", "a-3")], "stays": False,
    }


def test_outcome_of_a_pod_stuck_terminating_never_moves():
    s = StatefulSetSeries(node="a-5")
    record_pods(s, 0.0, [pod("u1", "a-5")])
    record_pods(s, 200.0, [pod("u1", "a-5", deleting=True)])
    record_pods(s, 210.0, [pod("u1", "a-5", ready=False, deleting=True)])
    out = statefulset_outcome(s, kills={"a-5": [160.0]})
    assert out["deleted_at"] == 200.0 and out["gone_at"] is None and out["moved_at"] is None and out["moved_s"] is None
    assert out["at_end"] == [pod("u1", "a-5", ready=False, deleting=True)] and out["stays"] is False


def test_outcome_of_a_pod_that_stays():
    s = StatefulSetSeries(node="a-1")
    record_pods(s, 0.0, [pod("u1", "a-1")])
    record_pods(s, 40.0, [pod("u1", "a-1", ready=False)])  # not ready for a while: still the same pod
    record_pods(s, 140.0, [pod("u1", "a-1")])
    out = statefulset_outcome(s, kills={"a-5": [160.0]})
    assert out["killed_at"] is None and out["deleted_at"] is None and out["moved_at"] is None
    assert out["stays"] is True and out["at_end"] == [pod("u1", "a-1")]


def test_recreated_on_the_same_node_is_no_move_and_without_a_kill_moves_count_from_t0():
    s = StatefulSetSeries(node="a-1")
    record_pods(s, 0.0, [pod("u1", "a-1")])
    record_pods(s, 60.0, [pod("u1", "a-1", deleting=True)])
    record_pods(s, 131.0, [pod("u2", "a-1")])  # back on its node after the cut: not moved
    out = statefulset_outcome(s, kills={})
    assert out["deleted_at"] == 60.0 and out["moved_at"] is None and out["stays"] is False
    record_pods(s, 150.0, [pod("u3", "a-2")])
    out = statefulset_outcome(s, kills={})
    assert (out["moved_to"], out["moved_s"]) == ("a-2", 150.0)


def test_a_pod_evicted_before_its_node_dies_moves_from_t0_and_is_no_dead_node_move():
    """Stock Kubernetes in cut-and-kill: the cut-off pool's pods are evicted, gone when the link is
    back, recreated on the first node Ready; the kill of a-5 later finds no pod of the set there."""
    s = StatefulSetSeries(node="a-5")
    record_pods(s, 0.0, [pod("u1", "a-5")])
    record_pods(s, 69.8, [pod("u1", "a-5", deleting=True)])
    record_pods(s, 131.4, [pod("u2", "a-4", ready=False)])
    record_pods(s, 138.2, [pod("u2", "a-4")])
    out = statefulset_outcome(s, kills={"a-5": [160.0]})
    assert (out["killed_at"], out["on_node_at_kill"], out["deleted_at"], out["gone_at"]) == (160.0, False, 69.8, 131.4)
    assert (out["moved_to"], out["moved_at"], out["moved_s"]) == ("a-4", 138.2, 138.2)
    r = Recording(scenario="t", baseline=True, ended_at=260.0)
    r.add_node("a-5", "a").record_kill(160.0)
    r.statefulsets = {"db": s}
    summary = build_report(r)["summary"]
    assert summary["max_statefulset_move_s"] is None and summary["statefulsets_not_moved"] == []


def test_a_replacement_ready_elsewhere_before_the_kill_does_not_count():
    s = StatefulSetSeries(node="a-5")
    record_pods(s, 0.0, [pod("u1", "a-5"), pod("u0", "a-2")])  # an odd leftover on a-2 at the start
    out = statefulset_outcome(s, kills={"a-5": [160.0]})
    assert out["start"]["uid"] == "u1" and out["moved_at"] is None


def test_no_pod_seen():
    out = statefulset_outcome(StatefulSetSeries(node="a-5"), kills={"a-5": [1.0]})
    assert out["start"] is None and out["moved_at"] is None and out["stays"] is False and out["at_end"] == []


# --------------------------------------------------------------------------------------------------
# report


def recording(baseline: bool = False) -> Recording:
    r = Recording(scenario="t", baseline=baseline, ended_at=260.0)
    for n in NODES:
        r.add_node(n, "a").observe_state(0.0, "normal")
    r.nodes["a-5"].record_kill(160.0, pods=3)
    r.add_fault(160.0, "kill", node="a-5")
    stays = StatefulSetSeries(node="a-1")
    record_pods(stays, 0.0, [pod("v1", "a-1", name="db-a1-0")])
    if baseline:
        stuck = StatefulSetSeries(node="a-5")
        record_pods(stuck, 0.0, [pod("u1", "a-5", name="db-a5-0")])
        record_pods(stuck, 210.0, [pod("u1", "a-5", deleting=True, name="db-a5-0")])
        record_pods(stays, 62.0, [pod("v1", "a-1", deleting=True, name="db-a1-0")])
        r.statefulsets = {"db-a5": stuck, "db-a1": stays}
    else:
        moved = moved_series()
        for e in moved.pods:
            e["pod"] = "db-a5-0"
        r.statefulsets = {"db-a5": moved, "db-a1": stays}
        r.nodes["a-5"].record_taint(170.0, "edgewatch.io/failed:NoExecute", "added")
        r.nodes["a-5"].record_taint(170.2, OOS, "added")
    return r


def test_report_carries_each_statefulset_and_the_summary_its_move():
    rep = build_report(recording())
    json.dumps(rep)
    assert list(rep["statefulsets"]) == ["db-a1", "db-a5"]
    a5 = rep["statefulsets"]["db-a5"]
    assert (a5["killed_at"], a5["moved_to"], a5["moved_s"]) == (160.0, "a-3", 32.5)
    assert [(e["t"], e["uid"]) for e in a5["pods"]] == [(0.0, "u1"), (170.0, "u1"), (190.0, "u1"), (190.0, "u2"),
                                                        (191.0, "u2"), (192.5, "u2")]  # u1 gone at 190
    assert rep["statefulsets"]["db-a1"]["stays"] is True
    assert rep["summary"]["max_statefulset_move_s"] == 32.5 and rep["summary"]["statefulsets_not_moved"] == []
    base = build_report(recording(baseline=True))
    assert base["summary"]["max_statefulset_move_s"] is None
    assert base["summary"]["statefulsets_not_moved"] == ["db-a5"]
    row = ("StatefulSet pod of a dead node: kill -> Ready elsewhere s", "32.5", "never (db-a5)")
    assert row in summary_rows(rep, base)
    # shown only when measured: a run without StatefulSets has no such row
    plain = Recording(scenario="t", baseline=False, ended_at=10.0)
    assert all(label != row[0] for label, _a, _b in summary_rows(build_report(plain), None))


def test_recording_with_statefulsets_round_trips_through_json():
    r = recording()
    back = Recording.from_dict(json.loads(json.dumps(r.to_dict())))
    assert back == r
    assert build_report(back) == build_report(r)
    assert Recording.from_dict({"scenario": "t", "baseline": False}).statefulsets == {}  # older reports


# --------------------------------------------------------------------------------------------------
# expectations


def scenario(expect: list[dict[str, Any]]) -> Scenario:
    return parse_scenario({
        "name": "t",
        "topology": {"pools": [{"name": "a", "nodes": 5, "out_of_service": True}]},
        "steps": [{"at": 160, "action": "kill", "node": "a-5"}, {"at": 260, "action": "end"}],
        "statefulsets": [{"name": "db-a5", "node": "a-5"}, {"name": "db-a1", "node": "a-1"}],
        "expect": expect,
    })


def test_moved_within_holds_within_the_bound_only():
    results = check_expectations(scenario([{"statefulset": "db-a5", "moved_within_s": 32.5},
                                           {"statefulset": "db-a5", "moved_within_s": 32.4},
                                           {"statefulset": "db-a5", "moved": True},
                                           {"statefulset": "db-a5", "moved": False}]), build_report(recording()))
    assert [r.passed for r in results] == [True, False, True, False]
    assert results[0].description == "statefulset db-a5: Ready on another node within 32.5 s of its node's kill"
    assert results[0].detail == ("saw db-a5-0 on a-5 at the start, a-5 killed at 160 s; deleted at 170 s, gone at 190 s; "
                                 "Ready on a-3 at 192.5 s (32.5 s after the kill); at the end: db-a5-0 on a-3 Ready")


def test_stays_and_moved_on_stock_kubernetes():
    sc = scenario([{"statefulset": "db-a5", "baseline": True, "moved": False},
                   {"statefulset": "db-a5", "baseline": True, "moved_within_s": 90},
                   {"statefulset": "db-a1", "baseline": True, "stays": False},
                   {"statefulset": "db-a1", "baseline": True, "stays": True}])
    results = check_expectations(sc, build_report(recording(baseline=True)))
    assert [r.passed for r in results] == [True, False, True, False]
    assert results[0].detail.endswith("never Ready on another node; at the end: db-a5-0 on a-5 (the start pod) "
                                      "Terminating")
    assert "deleted at 62 s" in results[2].detail


def test_stays_on_edgewatch():
    [ok] = check_expectations(scenario([{"statefulset": "db-a1", "stays": True}]), build_report(recording()))
    assert ok.passed and ok.detail == ("saw db-a1-0 on a-1 at the start; never deleted; never Ready on another "
                                       "node; at the end: db-a1-0 on a-1 (the start pod) Ready")


def test_statefulset_checks_fail_without_a_record_or_a_pod():
    sc = scenario([{"statefulset": "db-a5", "moved": False}, {"statefulset": "db-a1", "stays": True}])
    rep = build_report(recording())
    del rep["statefulsets"]["db-a5"]
    rep["statefulsets"]["db-a1"] = statefulset_outcome(StatefulSetSeries(node="a-1"), kills={}) | {"pods": []}
    missing, no_pod = check_expectations(sc, rep)
    assert not missing.passed and missing.detail == "no record of StatefulSet db-a5 in the report"
    assert not no_pod.passed and no_pod.detail == "no pod of StatefulSet db-a1 was seen"


def test_out_of_service_taint_expectation():
    sc = scenario([{"nodes": ["a-5"], "out_of_service_taint": True},
                   {"nodes": ["a-1", "a-2", "a-3", "a-4"], "out_of_service_taint": False},
                   {"nodes": ["a-4", "a-5"], "out_of_service_taint": True},
                   {"nodes": ["a-4", "a-5"], "out_of_service_taint": False}])
    results = check_expectations(sc, build_report(recording()))
    assert [r.passed for r in results] == [True, True, False, False]
    assert results[0].description == "a-5: got the out-of-service taint"
    assert results[0].detail == "expected a-5 tainted node.kubernetes.io/out-of-service, saw it on a-5 at 170.2 s"
    assert results[1].detail.endswith("saw it on none")
    # a taint with another value (by hand) is the same key: recorded as key:effect
    [base] = check_expectations(scenario([{"nodes": ["a-5"], "baseline": True, "out_of_service_taint": False}]),
                                build_report(recording(baseline=True)))
    assert base.passed


# --------------------------------------------------------------------------------------------------
# the StatefulSet the runner creates, and the ConfigMap key


def test_pinned_statefulset_prefers_its_node_and_is_not_selected_by_the_sample_services():
    sts = pinned_statefulset(namespace="w", name="db-a5", node="a-5").to_dict()
    spec = sts["spec"]
    assert spec["replicas"] == 1 and "serviceName" not in spec
    assert spec["selector"]["matchLabels"] == {STATEFULSET_LABEL: "db-a5"} == spec["template"]["metadata"]["labels"]
    assert not set(APP_LABEL) & set(spec["template"]["metadata"]["labels"])
    affinity = spec["template"]["spec"]["affinity"]["nodeAffinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in affinity  # free to move
    [term] = affinity["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["preference"]["matchExpressions"] == [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["a-5"]}]


@pytest.mark.parametrize("pools,expected", [([], None), (["a"], "a"), (["a", "b"], "a,b")])
def test_out_of_service_pools_reach_both_install_methods(pools: list[str], expected: str | None):
    config = install.edgewatch_config(grouping=False, coordinators={}, out_of_service_pools=pools)
    assert config.get("outOfServicePools") == expected
    assert config["poolCoordinators"] == "" and config["grouping"] == "off"
    patch = next(p for p in install.overlay(config=config, controller_args=[], controller_replicas=1)["patches"]
                 if p["target"]["kind"] == "ConfigMap")
    assert (f"outOfServicePools: {expected}" in patch["patch"]) == (expected is not None)
    values = install.values(config=config, controller_args=[], controller_replicas=1)
    assert values["config"].get("outOfServicePools") == expected


def test_cut_and_kill_installs_with_pool_a_out_of_service():
    sc = load_scenario("cut-and-kill")
    config = install.edgewatch_config(grouping=sc.topology.grouping, coordinators={"a": "http://x:2379"},
                                      out_of_service_pools=sc.out_of_service_pools())
    assert config["outOfServicePools"] == "a"
    assert config["poolCoordinators"] == "a: http://x:2379\n"

"""The real-node expectation keys (lease_carried, containers_stopped, replaced_within_s), the
recording fields behind them, and the scenario rules for ``real_nodes``: pure, on synthetic data."""

from __future__ import annotations

import json
from typing import Any

import pytest

from edgewatch_lab.playground.checks import check_expectations
from edgewatch_lab.playground.report import Recording, build_report
from edgewatch_lab.playground.scenario import Scenario, ScenarioError, parse_scenario

NODES = ["a-1", "a-2", "a-3"]


def recording() -> Recording:
    r = Recording(scenario="t", baseline=False, timings={}, started_at=1.0, ended_at=100.0)
    for n in NODES:
        rec = r.add_node(n, "a")
        rec.observe_state(0.0, "normal")
        rec.real = n != "a-3"
    return r


def scenario(expect: list[dict[str, Any]], *, real: int = 2, steps: list[dict[str, Any]] | None = None) -> Scenario:
    return parse_scenario({
        "name": "t",
        "topology": {"pools": [{"name": "a", "nodes": 3, "real_nodes": real}]},
        "steps": (steps or [{"at": 10, "action": "kill", "node": "a-1"}]) + [{"at": 100, "action": "end"}],
        "expect": expect,
    })


def judge(r: Recording, expect: list[dict[str, Any]]) -> list[tuple[bool, str]]:
    return [(e.passed, e.detail) for e in check_expectations(scenario(expect), build_report(r))]


# -- lease_carried ---------------------------------------------------------------------------------


def test_lease_carried_then_own_again_passes():
    r = recording()
    r.nodes["a-1"].lease += [(0.0, "own"), (13.0, "carried"), (70.0, "mark-copied"), (73.0, "own")]
    [(ok, detail)] = judge(r, [{"nodes": ["a-1"], "lease_carried": True}])
    assert ok, detail
    assert "carried at 13 s" in detail


@pytest.mark.parametrize("states", [
    [(0.0, "own")],                                           # never carried
    [(0.0, "own"), (13.0, "carried")],                        # still carried at the end
    [(0.0, "own"), (13.0, "carried"), (70.0, "mark-copied")],  # the stale mark never cleared
    [(0.0, "own"), (13.0, "carried"), (70.0, "own holder=a-2")],  # someone else holds it
    [],                                                       # no Lease seen at all
])
def test_lease_carried_fails_unless_carried_and_own_at_the_end(states):
    r = recording()
    r.nodes["a-1"].lease += states
    [(ok, _)] = judge(r, [{"nodes": ["a-1"], "lease_carried": True}])
    assert not ok


def test_lease_never_carried():
    r = recording()
    r.nodes["a-1"].lease += [(0.0, "own")]
    assert judge(r, [{"nodes": ["a-1"], "lease_carried": False}])[0][0]
    r.nodes["a-1"].lease += [(5.0, "carried"), (9.0, "own")]
    assert not judge(r, [{"nodes": ["a-1"], "lease_carried": False}])[0][0]


# -- containers_stopped ----------------------------------------------------------------------------


@pytest.mark.parametrize(("counts", "passed"), [([6, 0], True), ([6, 2], False), ([0, 0], False), (None, False)])
def test_containers_stopped(counts, passed):
    r = recording()
    r.nodes["a-1"].record_kill(10.0, pods=2)
    if counts is not None:
        r.nodes["a-1"].containers_at_kill[10.0] = counts
    [(ok, detail)] = judge(r, [{"nodes": ["a-1"], "containers_stopped": True}])
    assert ok == passed, detail


def test_containers_stopped_fails_for_a_node_never_killed():
    r = recording()
    [(ok, detail)] = judge(r, [{"nodes": ["a-2"], "containers_stopped": True}])
    assert not ok and "never killed" in detail


# -- replaced_within_s -----------------------------------------------------------------------------


def test_replaced_measures_from_the_kill_to_the_count_before_it():
    r = recording()
    r.nodes["a-1"].record_kill(10.0, pods=2)
    r.live_ready += [(0.0, 6), (10.2, 4), (15.0, 5), (17.5, 6)]
    [(ok, detail)] = judge(r, [{"nodes": ["a-1"], "replaced_within_s": 10}])
    assert ok and "7.5 s after the kill" in detail
    [(ok, _)] = judge(r, [{"nodes": ["a-1"], "replaced_within_s": 5}])
    assert not ok


def test_replaced_fails_when_the_count_never_comes_back():
    r = recording()
    r.nodes["a-1"].record_kill(10.0, pods=2)
    r.live_ready += [(0.0, 6), (10.2, 4), (15.0, 5)]
    [(ok, detail)] = judge(r, [{"nodes": ["a-1"], "replaced_within_s": 60}])
    assert not ok and "never back to 6" in detail


def test_replaced_ignores_a_stale_sample_before_the_drop():
    # A poll at the kill that still counts the dead node's pods is not a replacement.
    r = recording()
    r.nodes["a-1"].record_kill(10.0, pods=2)
    r.live_ready += [(0.0, 5), (10.0, 6), (10.3, 4), (30.0, 6)]
    [(ok, detail)] = judge(r, [{"nodes": ["a-1"], "replaced_within_s": 25}])
    assert ok and "20 s after" in detail


def test_recording_with_real_node_fields_round_trips_through_json():
    r = recording()
    r.nodes["a-1"].record_kill(10.0, pods=2)
    r.nodes["a-1"].containers_at_kill[10.0] = [6, 0]
    r.nodes["a-1"].lease += [(0.0, "own"), (3.0, "carried")]
    r.live_ready += [(0.0, 6)]
    r.node_costs["a-1"] = {"kind": "real", "cpu_pct": 4.0, "rss_mib": 300.0, "ready_s": 10.0}
    back = Recording.from_dict(json.loads(json.dumps(r.to_dict())))
    assert back == r
    report = build_report(back)
    assert report["nodes"]["a-1"]["real"] is True and report["nodes"]["a-1"]["kills"][0]["containers"] == [6, 0]
    assert "real" not in report["nodes"]["a-3"]
    assert report["node_costs"]["a-1"]["kind"] == "real"


# -- scenario rules ----------------------------------------------------------------------------------


def test_real_nodes_are_the_first_of_their_pool():
    sc = scenario([{"nodes": ["a-1"], "containers_stopped": True}], real=2)
    assert sc.real_node_names() == ["a-1", "a-2"]
    assert sc.is_real("a-2") and not sc.is_real("a-3")
    assert scenario([{"nodes": ["a-1"], "evictions": 0}], real=0).real_node_names() == []


def test_more_real_nodes_than_nodes_is_an_error():
    with pytest.raises(ScenarioError, match="real_nodes"):
        scenario([{"nodes": ["a-1"], "evictions": 0}], real=4)


def test_skew_on_a_real_node_is_an_error():
    with pytest.raises(ScenarioError, match="real node"):
        scenario([{"nodes": ["a-1"], "evictions": 0}],
                 steps=[{"at": 10, "action": "skew", "node": "a-1", "seconds": 30}])
    scenario([{"nodes": ["a-1"], "evictions": 0}], steps=[{"at": 10, "action": "skew", "node": "a-3", "seconds": 30}])


def test_containers_stopped_on_a_simulated_node_is_an_error():
    with pytest.raises(ScenarioError, match="simulated"):
        scenario([{"nodes": ["a-3"], "containers_stopped": True}])


def test_kube_proxy_key_on_a_real_node_is_an_error():
    with pytest.raises(ScenarioError, match="run their own kube-proxy"):
        parse_scenario({"name": "t", "topology": {"pools": [{"name": "a", "nodes": 3, "real_nodes": 1,
                                                               "kube_proxy": ["a-1"]}]},
                        "steps": [{"at": 10, "action": "end"}]})

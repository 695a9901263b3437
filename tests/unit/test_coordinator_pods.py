"""The playground's pool coordinators as pods (docs/lab.md): what is recorded of them, how a
report measures their recovery, the scenario keys, and the etcd the lab's "image" carries."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from edgewatch_lab.playground.checks import check_expectations
from edgewatch_lab.playground.coordinators import (
    CoordinatorSeries,
    cache_source_is_coordinator,
    coordinator_recoveries,
    leader_from_conditions,
    newest_placement,
)
from edgewatch_lab.playground.report import NodeRecord, Recording, build_report
from edgewatch_lab.playground.runner import with_coordinator_mode
from edgewatch_lab.playground.scenario import ScenarioError, load_scenario, parse_scenario
from edgewatch_lab.testing.podrunner import PodRunnerConfig, container_path
from edgewatch_lab.testing.podsetup import ContainerSetup


def pod(name: str, node: str | None, *, ready: bool, created: str, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    return {"metadata": meta, "spec": {"nodeName": node} if node else {},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


# -- placement, leader, cache source ----------------------------------------------------------------


def test_newest_placement_ignores_deleted_pods_and_takes_the_newest() -> None:
    old = pod("c-1", "a-1", ready=True, created="2026-01-01T00:00:00Z", deleting=True)
    new = pod("c-2", "a-3", ready=False, created="2026-01-01T00:00:30Z")
    assert newest_placement([old]) == (None, False)
    assert newest_placement([old, new]) == ("a-3", False)
    new["status"]["conditions"][0]["status"] = "True"
    assert newest_placement([new, old]) == ("a-3", True)
    assert newest_placement([pod("c-3", None, ready=True, created="2026-01-01T00:01:00Z")]) == (None, False)
    assert newest_placement([]) == (None, False)


def msg(role: str, leader: str | None) -> str:
    return f"pool a: {role}; leader {leader or 'none'}; coordinator ready"


def test_leader_from_conditions_counts_only_live_voters_and_live_leaders() -> None:
    messages = {"a-1": msg("leader", "a-1"), "a-2": msg("follower", "a-1"), "a-3": msg("follower", "a-1")}
    assert leader_from_conditions(messages, alive=["a-1", "a-2", "a-3"]) == "a-1"
    # a-1 died: its stale condition and the votes for it do not count
    assert leader_from_conditions(messages, alive=["a-2", "a-3"]) is None
    messages = {"a-1": msg("leader", "a-1"), "a-2": msg("leader", "a-2"), "a-3": msg("follower", "a-2"),
                "a-4": None, "a-5": msg("pending", None)}
    assert leader_from_conditions(messages, alive=["a-1", "a-2", "a-3", "a-4", "a-5"]) == "a-2"
    assert leader_from_conditions({"a-1": msg("leader", "a-1"), "a-2": msg("leader", "a-2")},
                                  alive=["a-1", "a-2"]) == "a-1"  # a tie: the smallest name
    assert leader_from_conditions({"a-1": "garbage"}, alive=["a-1"]) is None


def test_cache_source_from_agent_metrics() -> None:
    text = ('# HELP edgewatch_poolcache_source x\n# TYPE edgewatch_poolcache_source gauge\n'
            'edgewatch_poolcache_source{source="cloud"} 0.0\nedgewatch_poolcache_source{source="coordinator"} 1.0\n')
    assert cache_source_is_coordinator(text)
    assert not cache_source_is_coordinator(text.replace('"coordinator"} 1.0', '"coordinator"} 0.0'))
    assert not cache_source_is_coordinator("")
    assert not cache_source_is_coordinator('edgewatch_poolcache_source{source="coordinator"} x')


def test_series_note_appends_only_changes() -> None:
    s = CoordinatorSeries()
    s.note("cache", 1.0, 4, 5)
    s.note("cache", 2.0, 4, 5)
    s.note("cache", 3.0, 5, 5)
    s.note("leader", 1.0, None)
    assert s.cache == [[1.0, 4, 5], [3.0, 5, 5]]
    assert s.leader == [[1.0, None]]


# -- recoveries -------------------------------------------------------------------------------------

SERIES = {
    "pods": [[0.0, "a-2", True], [28.0, "a-4", False], [41.0, "a-4", True]],
    "urls": [[0.0, "https://198.18.1.11:12379"], [30.0, None], [42.0, "https://198.18.1.13:12379"]],
    "leader": [[0.0, "a-5"], [24.0, None], [50.0, "a-3"]],
    "cache": [[0.0, 5, 5], [20.5, 4, 4], [32.0, 0, 4], [55.0, 3, 4], [57.0, 4, 4]],
}
KILL = {"t": 20.0, "action": "kill-coordinator", "pool": "a", "node": "a-2"}


def test_recovery_is_measured_from_the_kill() -> None:
    [rec] = coordinator_recoveries(SERIES, [KILL], pool="a", end=160.0)
    assert rec == {"t": 20.0, "node": "a-2", "moved_to": "a-4", "ready_s": 21.0, "url_s": 22.0, "back_s": 21.0,
                   "led_s": 30.0, "cache_s": 37.0}


def test_recovery_never_back() -> None:
    series = {**SERIES, "pods": [[0.0, "a-2", True], [28.0, "a-4", False]]}
    [rec] = coordinator_recoveries(series, [KILL], pool="a", end=160.0)
    assert rec["ready_s"] is None and rec["back_s"] is None and rec["led_s"] is None and rec["cache_s"] is None
    assert coordinator_recoveries(SERIES, [KILL], pool="b", end=160.0) == []


def test_recovery_of_a_lab_process_uses_the_revive() -> None:
    faults = [{"t": 20.0, "action": "kill-coordinator", "pool": "a"},
              {"t": 40.0, "action": "revive-coordinator", "pool": "a"}]
    series = {"pods": [], "urls": [], "leader": [[0.0, "a-5"], [24.0, None], [46.0, "a-5"]],
              "cache": [[0.0, 5, 5], [32.0, 0, 5], [52.0, 5, 5]]}
    [rec] = coordinator_recoveries(series, faults, pool="a", end=100.0)
    assert rec["moved_to"] is None and rec["back_s"] == 20.0 and rec["led_s"] == 26.0 and rec["cache_s"] == 32.0


def test_a_value_already_holding_when_the_coordinator_is_back_counts_then() -> None:
    series = {**SERIES, "leader": [[0.0, "a-5"], [24.0, None], [40.0, "a-3"]]}
    [rec] = coordinator_recoveries(series, [KILL], pool="a", end=160.0)
    assert rec["led_s"] == 21.0


# -- the report and its checks ----------------------------------------------------------------------

SCENARIO = {
    "name": "coordinator-pod-test",
    "topology": {"pools": [{"name": "a", "nodes": 3, "coordinator": True}], "coordinators": "pods"},
    "steps": [{"at": 20, "action": "kill-coordinator", "pool": "a"}, {"at": 100, "action": "end"}],
    "expect": [
        {"pool": "a", "coordinator_moved_within_s": 30, "led_within_s": 35, "cache_from_coordinator_within_s": 36},
        {"pool": "a", "killed": True, "state_at_end": "failed"},
        {"pool": "a", "killed": False, "never_not_ready": True},
    ],
}


def recording() -> Recording:
    nodes = {n: NodeRecord(name=n, pool="a", covered=True) for n in ("a-1", "a-2", "a-3")}
    for n in nodes.values():
        n.states.append((0.0, "normal"))
    nodes["a-2"].record_kill(20.0, pods=2)
    nodes["a-2"].states.append((30.0, "failed"))
    rec = Recording(scenario="coordinator-pod-test", baseline=False, nodes=nodes,
                    faults=[KILL, {"t": 100.0, "action": "end"}], ended_at=100.0)
    rec.coordinators["a"] = CoordinatorSeries(**SERIES)
    return rec


def test_report_carries_the_coordinator_and_the_checks_judge_it() -> None:
    scenario = parse_scenario(SCENARIO)
    report = build_report(recording())
    assert report["coordinators"]["a"]["recoveries"][0]["cache_s"] == 37.0
    assert Recording.from_dict(recording().to_dict()).coordinators["a"].cache == SERIES["cache"]
    results = check_expectations(scenario, report)
    assert [r.passed for r in results] == [True, True, False, True, True]
    assert "37 s after the kill at 20 s (a-2 killed, moved to a-4)" in results[2].detail
    assert "a-2 (killed of pool a)" in results[3].description


def test_killed_filter_with_no_match_fails() -> None:
    data = {**SCENARIO, "expect": [{"pool": "a", "killed": True, "state_at_end": "failed"}]}
    rec = recording()
    rec.nodes["a-2"].killed_at.clear()
    [result] = check_expectations(parse_scenario(data), build_report(rec))
    assert not result.passed and "no node of pool a was killed" in result.detail


def test_coordinator_checks_without_a_kill_fail() -> None:
    rec = recording()
    rec.faults = [{"t": 100.0, "action": "end"}]
    results = check_expectations(parse_scenario(SCENARIO), build_report(rec))
    assert not results[0].passed and "no kill-coordinator" in results[0].detail


# -- scenario keys ----------------------------------------------------------------------------------


def test_coordinators_mode_defaults_to_process() -> None:
    data = {**SCENARIO, "topology": {"pools": [{"name": "a", "nodes": 3, "coordinator": True}]}, "expect": []}
    assert parse_scenario(data).topology.coordinators == "process"
    with pytest.raises(ScenarioError, match="coordinators"):
        parse_scenario({**data, "topology": {**data["topology"], "coordinators": "containers"}})


@pytest.mark.parametrize(("change", "problem"), [
    ({"expect": [{"nodes": ["a-1"], "led_within_s": 5}]}, "give the pool"),
    ({"topology": {"pools": [{"name": "a", "nodes": 3, "coordinator": True}]},
      "expect": [{"pool": "a", "coordinator_moved_within_s": 5}]}, "needs coordinators: pods"),
    ({"topology": {"pools": [{"name": "a", "nodes": 3}], "coordinators": "pods"},
      "steps": [{"at": 100, "action": "end"}], "expect": [{"pool": "a", "led_within_s": 5}]}, "has no coordinator"),
])
def test_coordinator_keys_are_checked(change: dict[str, Any], problem: str) -> None:
    with pytest.raises(ScenarioError, match=problem):
        parse_scenario({**SCENARIO, **change})


def test_with_coordinator_mode_overrides_the_topology() -> None:
    scenario = load_scenario("pool-cache")
    assert with_coordinator_mode(scenario, None) is scenario
    pods = with_coordinator_mode(scenario, "pods")
    assert pods.topology.coordinators == "pods" and pods.steps == scenario.steps
    with pytest.raises(ValueError, match="coordinator mode"):
        with_coordinator_mode(scenario, "pod")


def test_builtin_coordinator_pod_scenario() -> None:
    scenario = load_scenario("coordinator-pod")
    assert scenario.topology.coordinators == "pods"
    assert [s.action for s in scenario.steps].count("kill-coordinator") == 1


# -- the lab's image carries etcd -------------------------------------------------------------------


def test_container_path_puts_the_image_programs_first() -> None:
    assert container_path() == "/usr/local/bin:/usr/bin:/bin"
    assert container_path(("/opt/etcd",)) == "/opt/etcd:/usr/local/bin:/usr/bin:/bin"
    assert container_path(["/usr/bin", ""]) == "/usr/bin:/usr/local/bin:/bin"


def test_exec_spec_gives_the_container_etcd(tmp_path: Path) -> None:
    from edgewatch_lab.testing.podrunner import ContainerState, PodState

    config = PodRunnerConfig(node_name="a-1", node_address="198.18.1.10", node_root=tmp_path,
                             image_prefix="ghcr.io/edgewatch/edgewatch", apiserver_host="198.18.1.1",
                             apiserver_port=6443, image_bin_dirs=("/opt/etcd-bin",))
    spec = {"name": "coordinator", "command": ["edgewatch", "pool-coordinator"], "env": []}
    p = PodState(uid="u1", pod={"metadata": {"name": "c", "namespace": "edgewatch", "uid": "u1"}, "spec": {}})
    setup = ContainerSetup(client=None, config=config, pods={"u1": p})
    out = asyncio.run(setup.exec_spec(p, ContainerState(spec=spec)))
    assert out["env"]["PATH"].split(":")[0] == "/opt/etcd-bin"
    assert "/opt/etcd-bin" in out["image_paths"]

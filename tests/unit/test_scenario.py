"""Playground scenarios: the built-ins load and say what they should, every validation rule rejects
with a message naming the step / expectation and the field, and scenarios round-trip through YAML."""

from __future__ import annotations

import copy
import operator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from edgewatch_lab.playground.scenario import (
    Comparison,
    Scenario,
    ScenarioError,
    builtin_scenarios,
    dump_scenario,
    load_scenario,
    parse_scenario,
)

EXPECTED_BUILTINS = {"real-nodes", "cut-and-kill", "cloud-partition", "node-failure", "pool-split", "pool-split-25", "flaky-link",
                     "leader-failover", "clock-skew", "mixed-cluster", "pool-cache", "coordinator-pod",
                     "coordinator-real-nodes", "upgrade", "uninstall", "controller-outage", "controller-failover"}


def base() -> dict[str, Any]:
    return {
        "name": "t",
        "description": "test",
        "topology": {"pools": [{"name": "a", "nodes": 5, "coordinator": True},
                               {"name": "b", "nodes": 2}]},
        "steps": [
            {"at": 10, "action": "cut-cloud", "pool": "a"},
            {"at": 20, "action": "kill", "node": "a-2"},
            {"at": 30, "action": "revive", "node": "a-2"},
            {"at": 40, "action": "restore-cloud", "pool": "a"},
            {"at": 60, "action": "end"},
        ],
        "expect": [{"pool": "a", "evictions": 0}],
    }


def with_steps(*steps: dict[str, Any], expect: list | None = None) -> dict[str, Any]:
    d = base()
    d["steps"] = list(steps) + [{"at": 500, "action": "end"}]
    if expect is not None:
        d["expect"] = expect
    return d


def problems_of(data: dict[str, Any]) -> str:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data, "test.yaml")
    assert "test.yaml" in str(info.value)
    return str(info.value)


# --------------------------------------------------------------------------------------------------
# built-ins


def test_builtins_are_the_seventeen_scenarios():
    assert set(builtin_scenarios()) == EXPECTED_BUILTINS
    for path in builtin_scenarios().values():
        assert path.suffix == ".yaml" and path.is_file()


@pytest.mark.parametrize("name", sorted(EXPECTED_BUILTINS))
def test_every_builtin_loads(name: str):
    s = load_scenario(name)
    assert s.name == name
    assert s.description.strip()
    assert s.expect, "a built-in scenario must say what should happen"
    assert [st.action for st in s.steps][-1] == "end"
    assert s.timings.node_monitor_grace_s == 20 and s.timings.toleration_s == 30
    assert s.expectations_for(baseline=False), "every built-in has edgewatch expectations"


def _entry(s: Scenario, nodes: list[str], baseline: bool = False) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for e in s.expect:
        if e.target_nodes(s) == nodes and e.baseline == baseline:
            merged.update({k: getattr(e, k) for k in e.checks()})
    return merged


def test_cut_and_kill_targets():
    s = load_scenario("cut-and-kill")
    assert s.pool("a").coordinator and s.pool("a").nodes == 5
    assert [(st.at, st.action) for st in s.steps] == [
        (10, "cut-cloud"), (130, "restore-cloud"), (160, "kill"), (260, "end")]
    live = _entry(s, ["a-1", "a-2", "a-3", "a-4"])
    assert live["evictions"] == 0 and live["endpoint_removals"] == 0 and live["never_not_ready"] is True
    assert live["out_of_service_taint"] is False
    dead = _entry(s, ["a-5"])
    assert dead == {"detected_within_s": 15, "evicted_within_s": 16, "state_at_end": "failed",
                    "out_of_service_taint": True}
    stock = _entry(s, ["a-1", "a-2", "a-3", "a-4"], baseline=True)
    assert Comparison.parse(stock["evictions"]) == Comparison(">", 0)


def _statefulset_entry(s: Scenario, name: str, baseline: bool = False) -> dict[str, Any]:
    return {k: getattr(e, k) for e in s.expect if e.statefulset == name and e.baseline == baseline
            for k in e.checks()}


def test_cut_and_kill_opts_its_pool_in_and_follows_two_statefulsets():
    s = load_scenario("cut-and-kill")
    assert s.pool("a").out_of_service and s.out_of_service_pools() == ["a"]
    assert [(x.name, x.node) for x in s.statefulsets] == [("db-a5", "a-5"), ("db-a1", "a-1")]
    killed = {st.node for st in s.steps if st.action == "kill"}
    assert killed == {"a-5"}  # db-a5's node dies, db-a1's is only cut off
    assert _statefulset_entry(s, "db-a5") == {"moved_within_s": 90}
    assert _statefulset_entry(s, "db-a1") == {"stays": True}
    assert _statefulset_entry(s, "db-a5", baseline=True) == {"stays": False}
    assert _statefulset_entry(s, "db-a1", baseline=True) == {"stays": False}


def test_only_pools_opted_in_are_out_of_service_and_statefulsets_are_optional():
    d = base()
    assert parse_scenario(copy.deepcopy(d)).out_of_service_pools() == []
    assert parse_scenario(copy.deepcopy(d)).statefulsets == []
    d["topology"]["pools"][1]["out_of_service"] = True
    d["statefulsets"] = [{"name": "db", "node": "b-2"}]
    d["expect"].append({"statefulset": "db", "moved_within_s": 60, "moved": True, "stays": False})
    s = parse_scenario(d)
    assert s.out_of_service_pools() == ["b"] and s.statefulset_names() == ["db"]
    assert s.expect[1].checks() == ["moved_within_s", "moved", "stays"]
    assert s.expect[1].target_nodes(s) == []
    assert parse_scenario(yaml.safe_load(dump_scenario(s))) == s


def test_node_failure_and_pool_split_targets():
    nf = load_scenario("node-failure")
    assert not nf.pool("a").coordinator
    assert _entry(nf, ["a-3"]) == {"detected_within_s": 10, "evicted_within_s": 11, "state_at_end": "failed"}
    assert _entry(nf, ["a-1", "a-2", "a-4", "a-5"])["evictions"] == 0
    lan_cut = next(st for st in nf.steps if st.action == "split")  # a-5 cut from its LAN only: challenged, kept
    assert lan_cut.sides == [["a-1", "a-2", "a-3", "a-4"], ["a-5"]] and not any(st.action == "cut-cloud" for st in nf.steps)

    ps = load_scenario("pool-split")
    split = next(st for st in ps.steps if st.action == "split")
    cut = next(st for st in ps.steps if st.action == "cut-cloud")
    assert split.at == cut.at == 15 and cut.nodes == ["a-4", "a-5"]
    assert _entry(ps, ["a-1", "a-2", "a-3"])["evictions"] == 0
    for minority in ("a-4", "a-5"):  # failed while split (cut from the cloud, outvoted), so evicted
        assert Comparison.parse(_entry(ps, [minority])["evictions"]) == Comparison(">", 0)


def test_flaky_link_and_leader_failover_targets():
    fl = load_scenario("flaky-link")
    losses = [(st.at, st.percent) for st in fl.steps if st.action == "loss"]
    assert losses == [(10, 30), (100, 0)] and fl.end_time == 130
    assert _entry(fl, fl.node_names())["evictions"] == 0
    lf = load_scenario("leader-failover")
    assert [st.action for st in lf.steps] == ["cut-cloud", "kill-leader", "kill-coordinator", "revive-coordinator",
                                             "restore-cloud", "end"]
    assert _entry(lf, ["a-1"]) == {"evictions": 0, "endpoint_removals": 0, "never_not_ready": True}


def test_helpers():
    s = parse_scenario(base())
    assert s.node_names() == ["a-1", "a-2", "a-3", "a-4", "a-5", "b-1", "b-2"]
    assert s.pool_of("b-2") == "b" and s.pool_of("a-5") == "a"
    with pytest.raises(KeyError, match="a-6"):
        s.pool_of("a-6")
    assert s.end_time == 60
    assert s.nodes_of("b") == ["b-1", "b-2"]
    assert s.steps[0].nodes_affected(s) == ["a-1", "a-2", "a-3", "a-4", "a-5"]
    assert s.timings.autonomy_s == 300  # defaults


# --------------------------------------------------------------------------------------------------
# sorting and round trip


def test_steps_are_sorted_stably_and_indices_refer_to_the_file():
    d = with_steps({"at": 30, "action": "heal"}, {"at": 5, "action": "cut-cloud", "nodes": ["a-1"]},
                   {"at": 5, "action": "loss", "nodes": ["a-1"], "percent": 20})
    s = parse_scenario(d)
    assert [(st.at, st.action) for st in s.steps] == [(5, "cut-cloud"), (5, "loss"), (30, "heal"), (500, "end")]
    # an error in the second step as written names steps[1], not its sorted position
    d["steps"][1]["nodes"] = ["a-9"]
    assert "steps[1] (cut-cloud).nodes: no node 'a-9'" in problems_of(d)


@pytest.mark.parametrize("name", sorted(EXPECTED_BUILTINS))
def test_round_trip(name: str, tmp_path: Path):
    s = load_scenario(name)
    text = dump_scenario(s)
    assert parse_scenario(yaml.safe_load(text)) == s
    path = tmp_path / "copy.yaml"
    path.write_text(text)
    assert load_scenario(str(path)) == s
    assert yaml.safe_load(text)["steps"][0]["action"] == s.steps[0].action


def test_file_path_wins_and_unknown_names_fail(tmp_path: Path):
    with pytest.raises(ScenarioError, match="no scenario 'nope'.*cut-and-kill"):
        load_scenario("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nsteps: [\n")
    with pytest.raises(ScenarioError, match=r"not valid YAML \(line \d+, column \d+\)"):
        load_scenario(str(bad))
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(ScenarioError, match="expected a mapping"):
        load_scenario(bad)


# --------------------------------------------------------------------------------------------------
# validation errors


def mutate(fn):
    d = base()
    fn(d)
    return d


CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("unknown top-level key", mutate(lambda d: d.update(bogus=1)), ["bogus: unknown key"]),
    ("unknown step key", mutate(lambda d: d["steps"][0].update(nodez=["a-1"])),
     ["steps[0] (cut-cloud).nodez: unknown key"]),
    ("unknown timing", mutate(lambda d: d.update(timings={"grace": 3})), ["timings.grace: unknown key"]),
    ("unknown pool key", mutate(lambda d: d["topology"]["pools"][0].update(size=3)),
     ["topology.pools[0].size: unknown key"]),
    ("unknown action", mutate(lambda d: d["steps"][0].update(action="explode")), ["steps[0].action: unknown action 'explode'", "cut-cloud, restore-cloud"]),
    ("missing action", mutate(lambda d: d["steps"][0].pop("action")), ["steps[0].action: missing"]),
    ("no end", mutate(lambda d: d["steps"].pop()), ["exactly one 'end' step, found 0"]),
    ("two ends", mutate(lambda d: d["steps"].append({"at": 70, "action": "end"})),
     ["exactly one 'end' step, found 2", "steps[4]", "steps[5]"]),
    ("end not last", mutate(lambda d: d["steps"].append({"at": 61, "action": "heal"})),
     ["steps[5] (heal).at", "'end' must be last"]),
    ("step at the end time", mutate(lambda d: d["steps"].append({"at": 60, "action": "heal"})),
     ["steps[5] (heal).at", "not before the end step (steps[4]"]),
    ("duplicate", mutate(lambda d: d["steps"].append({"at": 10, "action": "cut-cloud", "pool": "a"})),
     ["steps[5] (cut-cloud): duplicate of steps[0]"]),
    ("duplicate nodes in another order",
     with_steps({"at": 1, "action": "cut-cloud", "nodes": ["a-1", "a-2"]},
                {"at": 1, "action": "cut-cloud", "nodes": ["a-2", "a-1"]}),
     ["steps[1] (cut-cloud): duplicate of steps[0]"]),
    ("negative time", mutate(lambda d: d["steps"][0].update(at=-1)), ["steps[0] (cut-cloud).at"]),
    ("unknown node", mutate(lambda d: d["steps"][1].update(node="a-9")),
     ["steps[1] (kill).node: no node 'a-9'", "a-1..a-5"]),
    ("unknown pool", mutate(lambda d: d["steps"][0].update(pool="zz")),
     ["steps[0] (cut-cloud).pool: no pool 'zz'"]),
    ("pool and nodes", mutate(lambda d: d["steps"][0].update(nodes=["a-1"])),
     ["steps[0] (cut-cloud)", "exactly one of 'pool' or 'nodes'"]),
    ("neither pool nor nodes", with_steps({"at": 1, "action": "restore-cloud"}),
     ["steps[0] (restore-cloud)", "exactly one of 'pool' or 'nodes'"]),
    ("split sides overlap",
     with_steps({"at": 1, "action": "split", "pool": "a", "sides": [["a-1", "a-2"], ["a-2", "a-3"]]}),
     ["steps[0] (split)", "not disjoint", "'a-2'"]),
    ("split side empty", with_steps({"at": 1, "action": "split", "pool": "a", "sides": [["a-1"], []]}),
     ["steps[0] (split)", "sides[1] is empty"]),
    ("split one side", with_steps({"at": 1, "action": "split", "pool": "a", "sides": [["a-1"]]}),
     ["steps[0] (split).sides"]),
    ("split outside the pool",
     with_steps({"at": 1, "action": "split", "pool": "a", "sides": [["a-1"], ["b-1"]]}),
     ["steps[0] (split).sides: 'b-1' not in pool 'a'"]),
    ("split unknown node", with_steps({"at": 1, "action": "split", "pool": "a", "sides": [["a-1"], ["a-7"]]}),
     ["steps[0] (split).sides: no node 'a-7'"]),
    ("percent above 100", with_steps({"at": 1, "action": "loss", "nodes": ["a-1"], "percent": 101}),
     ["steps[0] (loss).percent", "100"]),
    ("percent below 0", with_steps({"at": 1, "action": "loss", "nodes": ["a-1"], "percent": -1}),
     ["steps[0] (loss).percent", "0"]),
    ("percent missing", with_steps({"at": 1, "action": "loss", "nodes": ["a-1"]}),
     ["steps[0] (loss).percent: Field required"]),
    ("coordinator action without coordinator", with_steps({"at": 1, "action": "kill-coordinator", "pool": "b"}),
     ["steps[0] (kill-coordinator).pool: pool 'b' has no coordinator"]),
    ("kill-leader without coordinator", with_steps({"at": 1, "action": "kill-leader", "pool": "b"}),
     ["steps[0] (kill-leader).pool: pool 'b' has no coordinator"]),
    ("revive-coordinator without kill", with_steps({"at": 1, "action": "revive-coordinator", "pool": "a"}),
     ["steps[0] (revive-coordinator).pool", "needs an earlier kill-coordinator"]),
    ("kill twice", with_steps({"at": 1, "action": "kill", "node": "a-1"}, {"at": 2, "action": "kill", "node": "a-1"}),
     ["steps[1] (kill).node: a-1 is already dead (killed by steps[0])"]),
    ("revive a live node", with_steps({"at": 1, "action": "revive", "node": "a-1"}),
     ["steps[0] (revive).node: a-1 is not dead"]),
    ("extra key on end", mutate(lambda d: d["steps"][4].update(node="a-1")), ["steps[4] (end).node: unknown key"]),
    ("duplicate pool", mutate(lambda d: d["topology"]["pools"].append({"name": "a", "nodes": 1})),
     ["pool 'a' is defined twice"]),
    ("bad pool name", mutate(lambda d: d["topology"]["pools"][0].update(name="A_1")),
     ["topology.pools[0].name"]),
    ("zero nodes", mutate(lambda d: d["topology"]["pools"][0].update(nodes=0)), ["topology.pools[0].nodes"]),
    # expectations
    ("expect both targets", mutate(lambda d: d["expect"][0].update(nodes=["a-1"])),
     ["expect[0]", "exactly one of 'pool', 'nodes' or 'statefulset'"]),
    ("expect a pool and a statefulset", mutate(lambda d: d["expect"][0].update(statefulset="db")),
     ["expect[0]", "exactly one of 'pool', 'nodes' or 'statefulset'"]),
    ("expect no target", mutate(lambda d: d["expect"][0].pop("pool")), ["expect[0]", "exactly one of"]),
    ("expect unknown key", mutate(lambda d: d["expect"][0].update(eviction=0)), ["expect[0].eviction: unknown key"]),
    ("expect nothing to check", mutate(lambda d: d["expect"].append({"pool": "a"})),
     ["expect[1]", "nothing to check"]),
    ("expect unknown node", mutate(lambda d: d["expect"].append({"nodes": ["c-1"], "evictions": 0})),
     ["expect[1].nodes: no node 'c-1'"]),
    ("expect unknown pool", mutate(lambda d: d["expect"][0].update(pool="q")), ["expect[0].pool: no pool 'q'"]),
    ("bad comparison", mutate(lambda d: d["expect"][0].update(evictions="=>1")),
     ["expect[0].evictions", "bad comparison '=>1'", "==, >, >=, <, <="]),
    ("comparison not a number", mutate(lambda d: d["expect"][0].update(endpoint_removals=">x")),
     ["expect[0].endpoint_removals", "bad comparison"]),
    ("negative count", mutate(lambda d: d["expect"][0].update(evictions=-1)), ["expect[0].evictions", "negative"]),
    ("bool count", mutate(lambda d: d["expect"][0].update(evictions=True)), ["expect[0].evictions"]),
    ("float count", mutate(lambda d: d["expect"][0].update(evictions=1.5)), ["expect[0].evictions"]),
    ("impossible comparison", mutate(lambda d: d["expect"][0].update(evictions="<0")),
     ["expect[0].evictions", "can never hold"]),
    ("edgewatch state in a baseline expectation",
     mutate(lambda d: d["expect"].append({"pool": "a", "baseline": True, "state_at_end": "failed"})),
     ["expect[1]", "'failed' is not a state of baseline", "normal, not_ready"]),
    ("baseline state in an edgewatch expectation",
     mutate(lambda d: d["expect"].append({"pool": "a", "state_at_end": "not_ready"})),
     ["expect[1]", "'not_ready' is not a state of edgewatch runs"]),
    ("never_not_ready not a bool", mutate(lambda d: d["expect"][0].update(never_not_ready="yes")),
     ["expect[0].never_not_ready"]),
    ("zero seconds", mutate(lambda d: d["expect"][0].update(evicted_within_s=0)), ["expect[0].evicted_within_s"]),
    # StatefulSets and their expectations
    ("statefulset on an unknown node", mutate(lambda d: d.update(statefulsets=[{"name": "db", "node": "a-9"}])),
     ["statefulsets[0].node: no node 'a-9'"]),
    ("statefulset on the control-plane node",
     mutate(lambda d: d.update(statefulsets=[{"name": "db", "node": "cloud-1"}])),
     ["statefulsets[0].node: cloud-1 is the control-plane node"]),
    ("statefulset declared twice",
     mutate(lambda d: d.update(statefulsets=[{"name": "db", "node": "a-1"}, {"name": "db", "node": "a-2"}])),
     ["statefulsets[1].name: 'db' is declared twice (statefulsets[0])"]),
    ("statefulset bad name", mutate(lambda d: d.update(statefulsets=[{"name": "DB", "node": "a-1"}])),
     ["statefulsets[0].name"]),
    ("statefulset unknown key", mutate(lambda d: d.update(statefulsets=[{"name": "db", "node": "a-1", "replicas": 2}])),
     ["statefulsets[0].replicas: unknown key"]),
    ("expect an undeclared statefulset", mutate(lambda d: d["expect"].append({"statefulset": "db", "moved": True})),
     ["expect[1].statefulset: no StatefulSet 'db'", "none declared"]),
    ("statefulset key on nodes", mutate(lambda d: d["expect"].append({"nodes": ["a-1"], "moved_within_s": 30})),
     ["expect[1]", "moved_within_s: give the statefulset"]),
    ("node key on a statefulset",
     mutate(lambda d: (d.update(statefulsets=[{"name": "db", "node": "a-1"}]),
                       d["expect"].append({"statefulset": "db", "stays": True, "evictions": 0}))),
     ["expect[1]", "evictions: not about a StatefulSet"]),
    ("killed on a statefulset",
     mutate(lambda d: (d.update(statefulsets=[{"name": "db", "node": "a-1"}]),
                       d["expect"].append({"statefulset": "db", "moved": True, "killed": True}))),
     ["expect[1]", "killed: not about a StatefulSet"]),
    ("out_of_service not a bool", mutate(lambda d: d["topology"]["pools"][0].update(out_of_service="yes")),
     ["topology.pools[0].out_of_service"]),
]


@pytest.mark.parametrize("data,needles", [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_validation_errors(data: dict[str, Any], needles: list[str]):
    message = problems_of(copy.deepcopy(data))
    for needle in needles:
        assert needle in message, f"{needle!r} not in:\n{message}"


def test_every_problem_is_reported_at_once():
    d = base()
    d["steps"][0]["pool"] = "zz"
    d["expect"][0]["pool"] = "q"
    with pytest.raises(ScenarioError) as info:
        parse_scenario(d)
    assert len(info.value.problems) == 2
    assert any("steps[0]" in p for p in info.value.problems)
    assert any("expect[0]" in p for p in info.value.problems)


def test_valid_variants_are_accepted():
    d = with_steps(
        {"at": 1, "action": "kill-coordinator", "pool": "a"},
        {"at": 2, "action": "revive-coordinator", "pool": "a"},
        {"at": 3, "action": "kill-leader", "pool": "a"},
        {"at": 4, "action": "loss", "pool": "b", "percent": 0},
        {"at": 4.5, "action": "loss", "pool": "b", "percent": 100},
        {"at": 5, "action": "split", "pool": "a", "sides": [["a-1"], ["a-2", "a-3"], ["a-4"]]},
        {"at": 6, "action": "restart-controller"},
        {"at": 6.5, "action": "scale-controller", "replicas": 0},
        {"at": 7, "action": "kill", "node": "b-1"},
        {"at": 8, "action": "revive", "node": "b-1"},
        {"at": 8, "action": "kill", "node": "b-1"},
        expect=[{"nodes": ["a-1"], "baseline": True, "state_at_end": "not_ready", "evictions": ">= 2"},
                {"pool": "b", "endpoint_removals": "<=2", "detected_within_s": 1.5}],
    )
    s = parse_scenario(d)
    assert len(s.steps) == 12
    assert [st.describe() for st in s.steps if st.action == "scale-controller"] == ["scale the controller to 0"]
    assert s.expect[0].comparison("evictions") == Comparison(">=", 2)
    assert s.expect[1].comparison("endpoint_removals") == Comparison("<=", 2)
    assert s.expectations_for(baseline=True) == [s.expect[0]]


# --------------------------------------------------------------------------------------------------
# comparison grammar

OPS = {"==": operator.eq, ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}


@pytest.mark.parametrize("spec,op,value", [
    (0, "==", 0), (3, "==", 3), ("3", "==", 3), (">0", ">", 0), ("> 0", ">", 0), ("<=2", "<=", 2),
    (" >= 10 ", ">=", 10), ("==4", "==", 4), ("<1", "<", 1),
])
def test_comparison_parses(spec, op, value):
    c = Comparison.parse(spec)
    assert (c.op, c.value) == (op, value)
    assert Comparison.parse(str(c)) == c


@pytest.mark.parametrize("spec", ["", ">", "=1", "!=1", ">-1", "1.5", "> 1 2", "=>1", "<0", None, 1.0, True, -3])
def test_comparison_rejects(spec):
    with pytest.raises(ValueError):
        Comparison.parse(spec)


@given(op=st.sampled_from(sorted(OPS)), value=st.integers(0, 50), observed=st.integers(0, 60))
def test_comparison_agrees_with_python(op, value, observed):
    if op == "<" and value == 0:
        return
    assert Comparison.parse(f"{op}{value}")(observed) == OPS[op](observed, value)


def test_cloud_nodes_default_to_the_control_plane_node_only():
    sc = parse_scenario(base())
    assert sc.cloud_node_names() == ["cloud-1"]
    assert sc.worker_node_names() == sc.node_names()          # cloud-1 is tainted: no workload
    assert sc.pool_of("cloud-1") == "cloud" and not sc.is_covered("cloud-1") and sc.is_covered("a-1")


def test_cloud_workers_can_be_killed_skewed_and_expected_on():
    d = with_steps({"at": 10, "action": "kill", "node": "cloud-2"},
                   {"at": 20, "action": "skew", "node": "cloud-3", "seconds": 30},
                   {"at": 30, "action": "skew", "node": "a-1", "seconds": -45},
                   {"at": 40, "action": "skew", "node": "a-1", "seconds": 0},
                   expect=[{"nodes": ["cloud-2"], "untouched": True, "detected_within_s": 35},
                           {"nodes": ["a-1"], "never_tainted": True}])
    d["topology"]["cloud_nodes"] = 3
    sc = parse_scenario(d)
    assert sc.all_node_names()[-3:] == ["cloud-1", "cloud-2", "cloud-3"]
    assert sc.worker_node_names()[-2:] == ["cloud-2", "cloud-3"]
    assert [s.describe() for s in sc.steps][:4] == ["kill cloud-2", "skew cloud-3 +30 s", "skew a-1 -45 s",
                                                   "skew a-1 +0 s"]


@pytest.mark.parametrize(("data", "needle"), [
    (with_steps({"at": 10, "action": "kill", "node": "cloud-1"}), "cloud-1 is the control-plane node"),
    (with_steps({"at": 10, "action": "skew", "node": "cloud-1", "seconds": 5}), "cannot be faulted"),
    (with_steps({"at": 10, "action": "skew", "node": "a-1", "seconds": 4000}), "less than or equal to 3600"),
    (with_steps({"at": 10, "action": "skew", "node": "a-1"}), "seconds"),
    (with_steps({"at": 10, "action": "skew", "node": "z-9", "seconds": 1}), "no node 'z-9'"),
    (with_steps({"at": 10, "action": "kill", "node": "cloud-2"}), "no node 'cloud-2'"),  # one cloud node only
])
def test_skew_and_cloud_node_validation(data: dict[str, Any], needle: str):
    assert needle in problems_of(data)


def test_pool_named_cloud_is_reserved():
    d = base()
    d["topology"]["pools"][1]["name"] = "cloud"
    assert "reserved for the cloud nodes" in problems_of(d)


def test_cloud_nodes_bounds():
    d = base()
    d["topology"]["cloud_nodes"] = 0
    assert "cloud_nodes" in problems_of(d)

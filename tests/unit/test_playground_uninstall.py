"""The playground's ``uninstall`` step (docs/uninstall.md, day 2): the expectations ``clean_at_end`` and
``evicted_after_uninstall_within_s`` judged on hand-made reports
(edgewatch_lab.playground.uninstallcheck), their validation on an expectation, the scenario-wide
rules about the step (edgewatch_lab.playground.crosscheck), and the built-in ``uninstall`` scenario."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from edgewatch_lab.playground.expectation import UNINSTALL_KEYS, Expectation
from edgewatch_lab.playground.scenario import Scenario, ScenarioError, load_scenario, parse_scenario
from edgewatch_lab.playground.steps import ACTIONS, Uninstall
from edgewatch_lab.playground.uninstallcheck import check_clean, check_evicted_after

TARGETS = ["a-1", "a-2"]


def report(*, uninstall: dict[str, Any] | None | str = "clean",
           marks: dict[str, list] | None = None,
           evictions: dict[str, list[float]] | None = None) -> dict[str, Any]:
    """A report after an uninstall at 45 s that left nothing (unless told otherwise)."""
    if uninstall == "clean":
        uninstall = {"t": 45.0, "cleanup_exit": 0, "cleanup": "removed 12 marks",
                     "left": {"objects": [], "terminating_pods": [], "namespaces": {}, "errors": []}}
    marks = marks if marks is not None else {n: [[0.0, ["annotation edgewatch.io/state"]], [50.0, []]]
                                             for n in TARGETS}
    evictions = evictions or {}
    nodes = {n: {"marks": marks.get(n, []),
                 "evictions": [{"t": t, "pod": f"sample-{i}"} for i, t in enumerate(evictions.get(n, []))]}
             for n in sorted(set(TARGETS) | set(marks) | set(evictions))}
    return {"uninstall": uninstall, "nodes": nodes}


def left(**kw: Any) -> dict[str, Any]:
    r = report()
    r["uninstall"]["left"].update(kw)
    return r


# --------------------------------------------------------------------------------------------------
# clean_at_end


def test_clean_passes_and_lists_the_pods_still_terminating():
    r = left(terminating_pods=["default/sample-1", "default/sample-2"])
    desc, passed, detail = check_clean(r, TARGETS, "pool a", True)
    assert passed
    assert "pool a" in desc and "nothing of edgewatch left" in desc
    assert detail.startswith("nothing left")
    assert "default/sample-1" in detail and "default/sample-2" in detail


def test_clean_without_terminating_pods_says_nothing_left_only():
    desc, passed, detail = check_clean(report(), TARGETS, "pool a", True)
    assert passed and detail == "nothing left"


def test_a_mark_at_the_end_fails_naming_the_node_and_the_mark():
    marks = {"a-1": [[0.0, []], [50.0, []]],
             "a-2": [[0.0, ["taint edgewatch.io/held"]], [47.5, ["condition EdgewatchHeld", "lease edgewatch.io/x"]]]}
    desc, passed, detail = check_clean(report(marks=marks), TARGETS, "pool a", True)
    assert not passed
    assert "a-2" in detail and "47.5" in detail
    assert "condition EdgewatchHeld" in detail and "lease edgewatch.io/x" in detail
    # only the marks at the end count: the taint gone by then is not named, nor is the clean a-1
    assert "taint edgewatch.io/held" not in detail
    assert "a-1" not in detail


def test_marks_only_before_the_end_do_not_fail():
    marks = {n: [[0.0, ["taint edgewatch.io/held"]], [60.0, []]] for n in TARGETS}
    assert check_clean(report(marks=marks), TARGETS, "pool a", True)[1]


def test_a_target_never_observed_is_not_clean():
    marks = {"a-1": [[0.0, []]]}  # a-2 has no marks series
    _, passed, detail = check_clean(report(marks=marks), TARGETS, "pool a", True)
    assert not passed and "a-2: never observed" in detail


def test_only_the_targets_marks_count():
    marks = {"a-1": [[0.0, []]], "a-2": [[0.0, []]], "a-9": [[0.0, ["taint edgewatch.io/held"]]]}
    assert check_clean(report(marks=marks), TARGETS, "nodes", True)[1]
    assert not check_clean(report(marks=marks), [*TARGETS, "a-9"], "nodes", True)[1]


def test_leftover_objects_fail_and_are_named():
    r = left(objects=["edgewatch/ConfigMap/roster", "ClusterRole/edgewatch-agent"])
    _, passed, detail = check_clean(r, TARGETS, "pool a", True)
    assert not passed
    assert "objects" in detail and "edgewatch/ConfigMap/roster" in detail and "ClusterRole/edgewatch-agent" in detail


def test_errors_looking_fail():
    r = left(errors=["list leases: forbidden"])
    _, passed, detail = check_clean(r, TARGETS, "pool a", True)
    assert not passed and "could not look" in detail and "list leases: forbidden" in detail


def test_terminating_pods_alone_do_not_fail_but_are_not_shown_when_something_else_is_left():
    r = left(terminating_pods=["default/sample-1"])
    assert check_clean(r, TARGETS, "pool a", True)[1]
    r = left(terminating_pods=["default/sample-1"], objects=["Namespace/edgewatch"])
    _, passed, detail = check_clean(r, TARGETS, "pool a", True)
    assert not passed and detail.startswith("left: ")


@pytest.mark.parametrize("code", [1, 2, None])
def test_a_failed_edgewatch_uninstall_fails(code: int | None):
    r = report()
    r["uninstall"]["cleanup_exit"] = code
    r["uninstall"]["cleanup"] = "error: cannot reach the API server"
    _, passed, detail = check_clean(r, TARGETS, "pool a", True)
    assert not passed
    assert f"edgewatch uninstall exited {code}" in detail and "cannot reach the API server" in detail


def test_false_inverts_the_verdict():
    desc, passed, _ = check_clean(report(), TARGETS, "pool a", False)
    assert not passed and "something of edgewatch left" in desc
    _, passed, detail = check_clean(left(objects=["Namespace/edgewatch"]), TARGETS, "pool a", False)
    assert passed and "Namespace/edgewatch" in detail
    r = report()
    r["uninstall"]["cleanup_exit"] = 1
    assert check_clean(r, TARGETS, "pool a", False)[1]


@pytest.mark.parametrize("value", [True, False])
def test_without_an_uninstall_record_clean_at_end_fails(value: bool):
    _, passed, detail = check_clean(report(uninstall=None), TARGETS, "pool a", value)
    assert not passed and "no uninstall step ran" in detail


def test_clean_tolerates_a_record_without_left():
    r = report()
    del r["uninstall"]["left"]
    assert check_clean(r, TARGETS, "pool a", True)[1]


# --------------------------------------------------------------------------------------------------
# evicted_after_uninstall_within_s


def test_evicted_in_time_passes_with_each_lag():
    r = report(evictions={"a-1": [112.0, 100.5], "a-2": [70.25]})
    desc, passed, detail = check_evicted_after(r, TARGETS, "a-1, a-2", 75.0)
    assert passed
    assert "75.0" in desc and "a-1, a-2" in desc
    # the first eviction after the step counts: a-1 at 100.5 (55.5 s), a-2 at 70.25 (25.2 s)
    assert "a-1 55.5 s" in detail and "a-2 25.2 s" in detail


def test_an_eviction_at_the_step_itself_counts_as_after():
    r = report(evictions={"a-1": [45.0], "a-2": [46.0]})
    _, passed, detail = check_evicted_after(r, TARGETS, "nodes", 10.0)
    assert passed and "a-1 0.0 s" in detail


def test_an_eviction_before_the_step_fails_even_with_one_in_time_after():
    r = report(evictions={"a-1": [30.0, 60.0], "a-2": [50.0]})
    _, passed, detail = check_evicted_after(r, TARGETS, "nodes", 75.0)
    assert not passed
    assert "a-1 evicted at 30.0 s, before the uninstall at 45.0 s" in detail
    assert "a-2" not in detail


def test_no_eviction_after_the_step_fails():
    r = report(evictions={"a-1": [60.0]})
    _, passed, detail = check_evicted_after(r, TARGETS, "nodes", 75.0)
    assert not passed and "a-2 never evicted after the uninstall at 45.0 s" in detail


def test_an_eviction_too_late_fails_with_its_lag():
    r = report(evictions={"a-1": [60.0], "a-2": [145.0]})
    _, passed, detail = check_evicted_after(r, TARGETS, "nodes", 75.0)
    assert not passed and "a-2 evicted 100.0 s after the uninstall" in detail
    assert "a-1" not in detail


def test_the_limit_is_inclusive():
    r = report(evictions={"a-1": [120.0], "a-2": [120.0]})
    assert check_evicted_after(r, TARGETS, "nodes", 75.0)[1]
    assert not check_evicted_after(r, TARGETS, "nodes", 74.9)[1]


def test_without_an_uninstall_record_evicted_after_fails():
    r = report(uninstall=None, evictions={"a-1": [60.0], "a-2": [60.0]})
    _, passed, detail = check_evicted_after(r, TARGETS, "nodes", 75.0)
    assert not passed and "no uninstall step ran" in detail


# --------------------------------------------------------------------------------------------------
# the expectation keys


def test_the_uninstall_keys_are_known():
    assert UNINSTALL_KEYS == ("clean_at_end", "evicted_after_uninstall_within_s")
    assert "uninstall" in ACTIONS
    assert Uninstall.model_validate({"at": 3, "action": "uninstall"}).at == 3


@pytest.mark.parametrize("key,value", [("clean_at_end", True), ("clean_at_end", False),
                                       ("evicted_after_uninstall_within_s", 75)])
def test_the_keys_are_accepted_on_nodes_or_a_pool(key: str, value: Any):
    assert getattr(Expectation(pool="a", **{key: value}), key) == value
    assert getattr(Expectation(nodes=["a-1"], **{key: value}), key) == value


@pytest.mark.parametrize("key,value", [("clean_at_end", True), ("evicted_after_uninstall_within_s", 75)])
def test_the_keys_are_refused_on_baseline_runs(key: str, value: Any):
    with pytest.raises(ValidationError, match=f"{key}: baseline .*no edgewatch to uninstall"):
        Expectation(pool="a", baseline=True, **{key: value})


@pytest.mark.parametrize("key,value", [("clean_at_end", True), ("evicted_after_uninstall_within_s", 75)])
def test_the_keys_are_refused_on_a_statefulset(key: str, value: Any):
    with pytest.raises(ValidationError, match=f"{key}: not about a StatefulSet"):
        Expectation(statefulset="db", **{key: value})


@pytest.mark.parametrize("value", [0, -1])
def test_the_eviction_bound_must_be_positive(value: float):
    with pytest.raises(ValidationError, match="evicted_after_uninstall_within_s"):
        Expectation(pool="a", evicted_after_uninstall_within_s=value)


def test_clean_at_end_must_be_a_bool():
    with pytest.raises(ValidationError, match="clean_at_end"):
        Expectation(pool="a", clean_at_end="yes")


# --------------------------------------------------------------------------------------------------
# the scenario-wide rules


def scenario(*steps: dict[str, Any], expect: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "name": "t",
        "description": "test",
        "topology": {"pools": [{"name": "a", "nodes": 5}]},
        "steps": [*steps, {"at": 500, "action": "end"}],
        "expect": expect if expect is not None else [{"pool": "a", "clean_at_end": True}],
    }


def problems_of(data: dict[str, Any]) -> str:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(copy.deepcopy(data), "test.yaml")
    with pytest.raises(ValidationError):
        Scenario.model_validate(copy.deepcopy(data))
    message = str(info.value)
    assert "test.yaml" in message
    return message


def test_one_uninstall_with_its_expectations_is_valid():
    s = parse_scenario(scenario({"at": 10, "action": "cut-cloud", "nodes": ["a-1"]},
                                {"at": 45, "action": "uninstall"},
                                expect=[{"pool": "a", "clean_at_end": True},
                                        {"nodes": ["a-1"], "evicted_after_uninstall_within_s": 75}]))
    assert [st.action for st in s.steps] == ["cut-cloud", "uninstall", "end"]
    assert isinstance(s.steps[1], Uninstall)


def test_two_uninstall_steps_are_refused():
    message = problems_of(scenario({"at": 40, "action": "uninstall"}, {"at": 30, "action": "uninstall"}))
    # the later one (steps[0], at 40) is named, against the first in time (steps[1], at 30)
    assert "steps[0] (uninstall): edgewatch is already uninstalled by steps[1]" in message


@pytest.mark.parametrize("action,at", [("rollout", 60), ("rollout", 45), ("restart-controller", 60),
                                       ("restart-controller", 45)])
def test_a_rollout_or_a_controller_restart_at_or_after_the_uninstall_is_refused(action: str, at: float):
    message = problems_of(scenario({"at": 45, "action": "uninstall"}, {"at": at, "action": action}))
    assert f"steps[1] ({action}).at: edgewatch is uninstalled at 45 s (steps[0])" in message
    assert f"nothing is left to {action.replace('-', ' ')}" in message


@pytest.mark.parametrize("action", ["rollout", "restart-controller"])
def test_a_rollout_or_a_controller_restart_before_the_uninstall_is_fine(action: str):
    s = parse_scenario(scenario({"at": 45, "action": "uninstall"}, {"at": 20, "action": action}))
    assert [st.action for st in s.steps] == [action, "uninstall", "end"]


@pytest.mark.parametrize("exp", [{"pool": "a", "clean_at_end": True},
                                 {"nodes": ["a-1"], "clean_at_end": False},
                                 {"nodes": ["a-1"], "evicted_after_uninstall_within_s": 30}])
def test_an_uninstall_key_without_an_uninstall_step_is_refused(exp: dict[str, Any]):
    key = next(k for k in UNINSTALL_KEYS if k in exp)
    message = problems_of(scenario({"at": 45, "action": "rollout"}, expect=[{"pool": "a", "evictions": 0}, exp]))
    assert f"expect[1]: {key} needs an uninstall step" in message


def test_an_expectation_refused_for_baseline_surfaces_as_a_scenario_error():
    message = problems_of(scenario({"at": 45, "action": "uninstall"},
                                   expect=[{"pool": "a", "baseline": True, "clean_at_end": True}]))
    assert "expect[0]" in message and "no edgewatch to uninstall" in message


# --------------------------------------------------------------------------------------------------
# the built-in scenario


def test_the_builtin_uninstall_scenario_loads_and_uninstalls_before_its_end():
    s = load_scenario("uninstall")
    actions = [st.action for st in s.steps]
    assert actions.count("uninstall") == 1
    assert actions[-1] == "end"
    uninstall = next(st for st in s.steps if st.action == "uninstall")
    assert uninstall.at < s.steps[-1].at
    assert not any(st.action in ("rollout", "restart-controller") and st.at >= uninstall.at for st in s.steps)
    judged = {k for e in s.expect for k in UNINSTALL_KEYS if getattr(e, k) is not None}
    assert judged == set(UNINSTALL_KEYS)
    assert any(e.clean_at_end is True for e in s.expect)
    assert all(not e.baseline for e in s.expect if e.clean_at_end is not None
               or e.evicted_after_uninstall_within_s is not None)

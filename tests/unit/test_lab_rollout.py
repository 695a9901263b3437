"""The playground's rollout record (edgewatch_lab.playground.rollout): when a Deployment's rollout
is complete, and what the report says per node."""

from __future__ import annotations

import pytest

from edgewatch_lab.playground.rollout import NodeRollout, RolloutWatch, daemonset_rolled, rollout_complete


def _dep(*, generation: int = 2, observed: int = 2, want: int = 2, updated: int = 2, replicas: int = 2,
         available: int = 2) -> dict:
    return {"metadata": {"generation": generation}, "spec": {"replicas": want},
            "status": {"observedGeneration": observed, "updatedReplicas": updated, "replicas": replicas,
                       "availableReplicas": available}}


@pytest.mark.parametrize(("dep", "done"), [
    (_dep(), True),
    (_dep(observed=1), False),           # the controller has not seen the new template yet
    (_dep(updated=1), False),            # one replica still old
    (_dep(replicas=3), False),           # a surge replica (or an old one) still there
    (_dep(available=1), False),          # a new replica not available yet
    ({"metadata": {}, "spec": {}, "status": {}}, False),
])
def test_a_deployment_rollout_is_complete_as_kubectl_rollout_status_says(dep: dict, done: bool) -> None:
    assert rollout_complete(dep) is done


@pytest.mark.parametrize(("status", "done"), [
    ({"observedGeneration": 3, "desiredNumberScheduled": 5, "updatedNumberScheduled": 5, "numberAvailable": 5}, True),
    ({"observedGeneration": 2, "desiredNumberScheduled": 5, "updatedNumberScheduled": 5, "numberAvailable": 5}, False),
    ({"observedGeneration": 3, "desiredNumberScheduled": 5, "updatedNumberScheduled": 4, "numberAvailable": 5}, False),
    ({"observedGeneration": 3, "desiredNumberScheduled": 5, "updatedNumberScheduled": 5, "numberAvailable": 4}, False),
])
def test_a_daemonset_rollout_is_done_as_kubectl_rollout_status_says(status: dict, done: bool) -> None:
    assert daemonset_rolled({"metadata": {"generation": 3}, "status": status}) is done


def test_the_summary_counts_from_the_rollout_step_and_names_nodes_not_updated() -> None:
    watch = RolloutWatch(namespace="edgewatch", started_s=30.0, nodes=["a-1", "a-2", "a-3"])
    watch.agents = {"a-1": NodeRollout(old_uid="u1", old_gone_s=32.0, updated_s=41.25),
                    "a-2": NodeRollout(old_uid="u2"),  # cut off: its old pod stays Terminating
                    "a-3": NodeRollout(old_uid="u3", old_gone_s=45.0, updated_s=50.0)}
    watch.controller_done_s = 44.0
    out = watch.summary()
    assert out["nodes"]["a-1"] == {"old_gone_s": 2.0, "updated_s": 11.2}
    assert out["nodes"]["a-2"] == {"old_gone_s": None, "updated_s": None}
    assert out["agents_done_s"] is None and out["agents_updated"] == 2 and out["agents"] == 3
    assert out["controller_done_s"] == 14.0
    watch.agents_done_s = 110.0
    assert watch.summary()["agents_done_s"] == 80.0


def _updated(*nodes: str) -> dict:
    return {n: {"old_gone_s": 1.0, "updated_s": 9.0} for n in nodes}


FIRST = {"started_at": 20.0, "nodes": {**_updated("a-1", "a-2"), "a-3": {"old_gone_s": None, "updated_s": None}}}
SECOND = {"started_at": 110.0, "nodes": _updated("a-3", "x-9")}  # x-9 is not a target
TARGETS = ["a-1", "a-2", "a-3"]


def test_agents_updated_holds_only_if_every_rollout_updated_enough_targets() -> None:
    from edgewatch_lab.playground.checks import _check_updated
    from edgewatch_lab.playground.expectation import Expectation

    exp = Expectation(nodes=TARGETS, agents_updated=">=2")
    ok = _check_updated({"rollouts": [FIRST]}, exp, TARGETS, "a-1..a-3")
    assert ok.passed and "rollout 1 at 20 s: 2 (a-1, a-2)" in ok.detail
    bad = _check_updated({"rollouts": [FIRST, SECOND]}, exp, TARGETS, "a-1..a-3")
    assert not bad.passed and "rollout 2 at 110 s: 1 (a-3)" in bad.detail
    none = _check_updated({"rollouts": []}, exp, ["a-1"], "a-1")
    assert not none.passed and "no rollout" in none.detail


def test_agents_updated_takes_one_count_per_rollout() -> None:
    from edgewatch_lab.playground.checks import _check_updated
    from edgewatch_lab.playground.expectation import Expectation

    exp = Expectation(nodes=TARGETS, agents_updated=[2, ">=1"])
    assert _check_updated({"rollouts": [FIRST, SECOND]}, exp, TARGETS, "a-1..a-3").passed
    assert not _check_updated({"rollouts": [SECOND, FIRST]}, exp, TARGETS, "a-1..a-3").passed
    short = _check_updated({"rollouts": [FIRST]}, exp, TARGETS, "a-1..a-3")
    assert not short.passed and "2 counts for 1 rollouts" in short.detail


def test_agents_updated_is_not_for_baseline_runs() -> None:
    from pydantic import ValidationError

    from edgewatch_lab.playground.expectation import Expectation

    with pytest.raises(ValidationError, match="no edgewatch to roll"):
        Expectation(pool="a", agents_updated=1, baseline=True)

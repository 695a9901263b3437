"""The playground's rollout record (edgewatch_lab.playground.rollout): when a Deployment's rollout
is complete, and what the report says per node."""

from __future__ import annotations

import pytest

from edgewatch_lab.playground.rollout import NodeRollout, RolloutWatch, rollout_complete


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


def test_the_summary_counts_from_the_rollout_step_and_names_nodes_not_rolled() -> None:
    watch = RolloutWatch(namespace="edgewatch", started_s=30.0, nodes=["a-1", "a-2", "a-3"])
    watch.agents = {"a-1": NodeRollout(old_uid="u1", old_gone_s=32.0, new_ready_s=41.25),
                    "a-2": NodeRollout(old_uid="u2"),  # cut off: its old pod stays Terminating
                    "a-3": NodeRollout(old_uid="u3", old_gone_s=45.0, new_ready_s=50.0)}
    watch.controller_done_s = 44.0
    out = watch.summary()
    assert out["nodes"]["a-1"] == {"old_gone_s": 2.0, "new_ready_s": 11.2}
    assert out["nodes"]["a-2"] == {"old_gone_s": None, "new_ready_s": None}
    assert out["agents_done_s"] is None and out["agents_rolled"] == 2 and out["agents"] == 3
    assert out["controller_done_s"] == 14.0
    watch.agents["a-2"] = NodeRollout(old_uid="u2", old_gone_s=100.0, new_ready_s=110.0)
    assert watch.summary()["agents_done_s"] == 80.0

"""The playground's step registry: every action a scenario file may name has exactly one handler,
and each handler's fault record says what it acted on (a cluster stand-in records the calls; the
real faults are played by the e2e scenarios)."""

from __future__ import annotations

import asyncio
import typing
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import TypeAdapter

from edgewatch_lab.playground import actions, steps


def _step_models() -> list[type]:
    union = typing.get_args(steps.Step)[0]
    return list(typing.get_args(union))


def test_every_step_model_has_one_handler_and_every_handler_a_step_model() -> None:
    literals = {typing.get_args(model.model_fields["action"].annotation)[0] for model in _step_models()}
    assert literals == set(actions.ACTIONS) == set(steps.ACTIONS)


class _Lab:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> Any:
        def record(*args: Any) -> None:
            self.calls.append((name, args))
        return record


def _context(lab: _Lab) -> actions.StepContext:
    scenario = SimpleNamespace(node_names=lambda: ["a-1", "a-2", "b-1"],
                               pool_of=lambda n: n.split("-")[0])
    cluster = SimpleNamespace(lab=lab, edgewatch=False, coordinator_pods=False, coordinators={})
    return actions.StepContext(cluster=cluster, client=None, scenario=scenario,  # type: ignore[arg-type]
                               recording=None, observer=None, state=actions.ActionState())  # type: ignore[arg-type]


@pytest.mark.parametrize(("raw", "call", "record"), [
    ({"at": 1, "action": "cut-cloud", "pool": "a"}, ("cut_cloud", (["a-1", "a-2"],)), {"nodes": ["a-1", "a-2"]}),
    ({"at": 1, "action": "restore-cloud", "nodes": ["b-1"]}, ("restore_cloud", (["b-1"],)), {"nodes": ["b-1"]}),
    ({"at": 1, "action": "loss", "nodes": ["a-2"], "percent": 30}, ("loss", (["a-2"], 30)),
     {"nodes": ["a-2"], "percent": 30}),
    ({"at": 2, "action": "heal"}, ("heal", ()), {}),
])
def test_network_steps_act_on_their_nodes_and_record_them(raw: dict[str, Any], call: tuple[str, tuple[Any, ...]],
                                                          record: dict[str, Any]) -> None:
    lab = _Lab()
    step = TypeAdapter(steps.Step).validate_python(raw)
    fault = asyncio.run(actions.perform(_context(lab), step, t=1.5))
    assert lab.calls == [call]
    assert fault == {"t": 1.5, "action": raw["action"], **record, "done_at": 1.5}


@pytest.mark.parametrize("action", ["rollout", "uninstall", "restart-controller", "kill-controller-leader"])
def test_edgewatch_steps_do_nothing_on_a_baseline_run(action: str) -> None:
    lab = _Lab()
    step = TypeAdapter(steps.Step).validate_python({"at": 3, "action": action})
    fault = asyncio.run(actions.perform(_context(lab), step, t=3.0))
    assert fault == {"t": 3.0, "action": action, "done_at": 3.0}
    assert lab.calls == []

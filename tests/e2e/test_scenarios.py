"""Every built-in scenario, end to end: the real control plane, nodes in network namespaces with
the real agent, the controller, real faults — and the scenario's own expectations must hold.

The stock-Kubernetes side of cut-and-kill (its `baseline: true` expectations) runs in `make demo`
and `edgewatch playground compare`, not here: it adds four minutes and tests Kubernetes, not us.
"""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from edgewatch.playground.runner import run_scenario
from edgewatch.playground.scenario import builtin_scenarios, load_scenario

pytestmark = [pytest.mark.root, pytest.mark.controlplane]

RUNS = [(name, False) for name in sorted(builtin_scenarios())]


@pytest.mark.parametrize(("name", "baseline"), RUNS, ids=[f"{n}{'-baseline' if b else ''}" for n, b in RUNS])
def test_builtin_scenario_meets_its_expectations(name: str, baseline: bool, binaries) -> None:  # type: ignore[no-untyped-def]
    scenario = load_scenario(name)
    assert scenario.expectations_for(baseline=baseline), f"{name} has no expectations to check"
    out = io.StringIO()
    result = run_scenario(scenario, baseline=baseline, console=Console(file=out, width=120), live=False)
    summary = result.report["summary"]
    print(f"\n{name} ({'stock Kubernetes' if baseline else 'edgewatch'}): {summary}")
    failed = [f"{e.description}: {e.detail}" for e in result.expectations if not e.passed]
    assert not failed, f"{name}: " + "; ".join(failed) + f" (logs: {result.logs[:1]})"

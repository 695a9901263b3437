"""The smoke run of the comparison with SuperEdge (docs/peers.md): SuperEdge v0.9.0's edge-health and
edge-health-admission installed in the lab as ``edgewatch playground run --system superedge``
installs them (its manifests, its binaries built by ``make peers``, the webhook's TLS from a CA the
lab makes), a node killed — and its agents must have exchanged their results and voted the dead
node unhealthy (the ``nodeunhealth: yes`` annotation needs the results of at least two peers within
60 s: one agent alone never writes it), the live nodes never, and the webhook must have kept
kube-controller-manager's NoExecute taint off the dead node until that verdict. So the comparison
(``make compare-peers``) cannot silently break.
"""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from edgewatch_lab.playground.runner import run_scenario
from edgewatch_lab.playground.scenario import Scenario

pytestmark = [pytest.mark.root, pytest.mark.controlplane, pytest.mark.peers]

#: A pool of 4 (a vote needs 3 live agents to reach the majority of 4); a-4 dies at 5 s. SuperEdge
#: exchanges results every 60 s (fixed), so its verdict comes 0-75 s after the kill.
SMOKE = Scenario.model_validate({
    "name": "superedge-smoke",
    "description": "SuperEdge in the lab: a-4 dies at 5 s; its peers vote it unhealthy.",
    "topology": {"pools": [{"name": "a", "nodes": 4}]},
    "steps": [{"at": 5, "action": "kill", "node": "a-4"}, {"at": 95, "action": "end"}],
})


def test_superedge_agents_vote_a_killed_node_unhealthy(binaries) -> None:  # type: ignore[no-untyped-def]
    result = run_scenario(SMOKE, baseline=False, system="superedge", console=Console(file=io.StringIO()),
                          live=False, binaries=binaries)
    report = result.report
    assert report["system"] == "superedge" and not report["baseline"]
    assert result.expectations == [], "a SuperEdge run is measured, not judged"
    nodes = report["nodes"]
    dead = [s for _t, s in nodes["a-4"]["states"]]
    assert "unhealthy" in dead, f"a-4 never voted unhealthy: {nodes['a-4']['states']} (logs: {result.logs[:1]})"
    for name in ("a-1", "a-2", "a-3"):
        assert all(s != "unhealthy" for _t, s in nodes[name]["states"]), (name, nodes[name]["states"])
        assert not nodes[name]["evictions"], (name, nodes[name]["evictions"])
    # the webhook: the NoExecute taint of the dead node comes only after the verdict
    verdict = next(t for t, s in nodes["a-4"]["states"] if s == "unhealthy")
    no_execute = [t for t, taint, change in nodes["a-4"]["taints"]
                  if taint == "node.kubernetes.io/unreachable:NoExecute" and change == "added"]
    assert all(t >= verdict for t in no_execute), (verdict, nodes["a-4"]["taints"])
    assert report["summary"]["max_detection_s"] is not None and report["summary"]["max_detection_s"] <= 90

"""Every built-in scenario, end to end: the real control plane, nodes in network namespaces,
edgewatch installed as shipped (the kustomize base, its RBAC, its pods run by the kubelet
simulator), real faults — and the scenario's own expectations must hold. Every edgewatch run also
proves, from the apiserver's audit log, that the agents and the controller used only their own
ServiceAccounts (never the admin credential; only ``edgewatch uninstall``, the operator's command in
the uninstall scenario, uses it) and that each agent's token was bound to its node.

pool-cache runs a real kube-proxy (built with the other binaries) on a cut-off node; real-nodes
runs real kubelets, containerd and runc (marked ``realnodes``) beside simulated nodes.

``make test`` leaves out the scenarios in ``OUTSIDE_MAKE_TEST`` (a bigger one plays the same
machinery); ``make scenarios`` runs every one (``EDGEWATCH_E2E_ALL=1``).

The stock-Kubernetes sides of cut-and-kill, mixed-cluster and pool-cache (their `baseline: true`
expectations) run in `make demo` and `edgewatch playground compare`, not here: they add ten
minutes and test Kubernetes, not us (that a stock kube-proxy cut off from the cloud misses
changes, that a stock cluster evicts a cut-off pool).

One scenario, node-failure (``HELM_SCENARIO``), installs edgewatch through the Helm chart
(charts/edgewatch, ``--install helm``) instead of the kustomize base, so both ways are covered
without another run; its run asserts the release was deployed and its record Secret exists.

One scenario, cut-and-kill (``PROMETHEUS_SCENARIO``), runs with a real Prometheus (``--prometheus``)
that scrapes the controller and agents and evaluates the shipped alert rules: the killed node's
``EdgewatchNodeFailed`` must fire within 90 s of the kill, no alert may name a cut-off live node
(judged by expectations added to the scenario for that run: ``alert_within_s``, ``no_alerts``) and
``EdgewatchEvidenceRefused`` must not fire (nobody forges evidence in the lab).
"""

from __future__ import annotations

import io
import os

import pytest
from rich.console import Console

from edgewatch_lab.playground.runner import run_scenario
from edgewatch_lab.playground.scenario import Scenario, builtin_scenarios, load_scenario

AGENT_SA = "system:serviceaccount:edgewatch:edgewatch-agent"
CONTROLLER_SA = "system:serviceaccount:edgewatch:edgewatch-controller"
#: The pool coordinator's pod (``coordinators: pods``): its own ServiceAccount, to request its certificate.
COORDINATOR_SA = "system:serviceaccount:edgewatch:edgewatch-coordinator"
#: ``edgewatch uninstall`` (the ``uninstall`` step) runs as the operator: the lab's admin certificate.
OPERATOR = "edgewatch-admin"

pytestmark = [pytest.mark.root, pytest.mark.controlplane]

#: The scenario whose edgewatch run installs through the chart (a short one); the others use deploy/.
HELM_SCENARIO = "node-failure"
#: The scenario whose edgewatch run has a real Prometheus, and the alert expectations added for it.
PROMETHEUS_SCENARIO = "cut-and-kill"
ALERT_EXPECTATIONS = [{"nodes": ["a-5"], "alert_within_s": 90},
                      {"nodes": ["a-1", "a-2", "a-3", "a-4"], "no_alerts": True}]
NODE_ALERTS = {"EdgewatchNodeCutOff", "EdgewatchAgentNotReady"}


def _with_alert_expectations(scenario: Scenario) -> Scenario:
    data = scenario.model_dump(mode="json", exclude_none=True)
    data["expect"] = [*data.get("expect", []), *ALERT_EXPECTATIONS]
    return Scenario.model_validate(data)


def _expected_cost_s(name: str) -> float:
    """A rough wall time of one run (seconds): its timeline, plus real nodes' start and big pools.

    ``make test`` runs the scenarios two at a time (pytest-xdist hands them out in this order), so
    the longest go first and the short ones fill in behind them.
    """
    scenario = load_scenario(name)
    nodes = len(scenario.node_names())
    return scenario.end_time + (90.0 if scenario.real_node_names() else 0.0) + 3.0 * max(0, nodes - 6)


#: Built-in scenarios ``make test`` leaves to ``make scenarios`` (which runs every one), and why: a
#: bigger one runs the same machinery, and the suite must stay under its time budget.
OUTSIDE_MAKE_TEST = {"pool-split": "pool-split-25 plays the same split (a pool cut in two sides, the cloud "
                                   "link of one side lost) at 25 nodes",
                     "coordinator-real-nodes": "coordinator-pod plays the same coordinator death and move on "
                                               "simulated nodes, and real-nodes runs real kubelets with containerd "
                                               "(the image's etcd on a real node is its only addition)",
                     "mixed-cluster": "tests/integration/test_controller.py::test_uncovered_node_gets_stock_behaviour_"
                                      "and_coverage_follows_the_configmap proves an uncovered node's death is left to "
                                      "stock Kubernetes, and every other scenario checks edgewatch touches no "
                                      "node it does not cover"}


def _selected(name: str) -> bool:
    only = os.environ.get("EDGEWATCH_E2E_ONLY")
    if only is not None:
        return name == only
    return os.environ.get("EDGEWATCH_E2E_ALL") == "1" or name not in OUTSIDE_MAKE_TEST


RUNS = [(name, False) for name in sorted(builtin_scenarios(), key=lambda n: (-_expected_cost_s(n), n))
        if _selected(name)]


#: Scenarios with more nodes than this run alone (marker ``alone``; ``make test`` runs them after the
#: others, which go two at a time): starting 25 nodes while another scenario plays its timeline
#: loaded 2 cores so much that the other's steps ran a minute late (an upgrade's rollout step took
#: 60 s instead of 4).
ALONE_ABOVE_NODES = 12


def _marks(name: str) -> list[pytest.MarkDecorator]:
    scenario = load_scenario(name)
    marks = [pytest.mark.realnodes] if scenario.real_node_names() else []
    if len(scenario.node_names()) > ALONE_ABOVE_NODES:
        marks.append(pytest.mark.alone)
    return marks


PARAMS = [pytest.param(n, b, id=f"{n}{'-baseline' if b else ''}", marks=_marks(n)) for n, b in RUNS]


@pytest.mark.parametrize(("name", "baseline"), PARAMS)
def test_builtin_scenario_meets_its_expectations(name: str, baseline: bool, binaries) -> None:  # type: ignore[no-untyped-def]
    scenario = load_scenario(name)
    assert scenario.expectations_for(baseline=baseline), f"{name} has no expectations to check"
    out = io.StringIO()
    method = "helm" if name == HELM_SCENARIO and not baseline else "kustomize"
    prometheus = name == PROMETHEUS_SCENARIO and not baseline
    if prometheus:
        scenario = _with_alert_expectations(scenario)
    result = run_scenario(scenario, baseline=baseline, console=Console(file=out, width=120), live=False,
                          install_method=method, prometheus=prometheus)
    summary = result.report["summary"]
    print(f"\n{name} ({'stock Kubernetes' if baseline else 'edgewatch'}, install {result.install}): {summary}")
    if prometheus:
        print(f"{name} alerts: {result.report['alerts']}")
        alerts = result.report["alerts"]
        assert alerts is not None, f"{name}: no alerts recorded although Prometheus ran"
        kill = next(f["t"] for f in result.report["faults"] if f["action"] == "kill")
        failed_at = [a["firing_at_s"] for a in alerts
                     if a["alertname"] == "EdgewatchNodeFailed" and a["firing_at_s"] is not None]
        assert any(kill <= t <= kill + 90 for t in failed_at), \
            f"{name}: EdgewatchNodeFailed not firing within 90 s of the kill at {kill}: {alerts}"
        about_nodes = [a for a in alerts if a["alertname"] in NODE_ALERTS]
        assert not about_nodes, f"{name}: alerts about nodes: {about_nodes}"
        # nobody forges evidence in the lab: a refusal alert here is a false alarm (kube-root-ca.crt
        # was once read as a node's key record at every start)
        refused = [a for a in alerts if a["alertname"] == "EdgewatchEvidenceRefused"]
        assert not refused, f"{name}: evidence refused: {refused}"
    failed = [f"{e.description}: {e.detail}" for e in result.expectations if not e.passed]
    blind = result.report.get("observer_errors", [])
    assert not failed, (f"{name}: " + "; ".join(failed) + f" (logs: {result.logs[:1]}; the observer's "
                        f"failed polls: {len(blind)}, first {blind[:3]})")
    if not baseline:
        assert result.install["method"] == method, f"{name}: installed {result.install}, not with {method}"
        if method == "helm":
            assert result.install["status"] == "deployed" and result.install["revision"] == 1, result.install
            assert result.install["chart"].startswith("edgewatch-"), result.install
            assert result.install["secret"] == "secret/sh.helm.release.v1.edgewatch.v1", result.install
        ids = result.report["identities"]
        users = {(i["component"], i["username"]) for i in ids}
        expected = {("agent", AGENT_SA), ("controller", CONTROLLER_SA)}
        # the agent's cloud-link probe reads /readyz without its token (readable by everyone);
        # nothing else may go without a credential
        anonymous = [i for i in ids if i["username"] == "system:anonymous"]
        assert all(i["component"] == "agent" and set(i["paths"]) <= {"/readyz"} for i in anonymous), \
            f"{name}: requests without a credential: {anonymous}"
        if anonymous:
            expected.add(("agent", "system:anonymous"))
        if scenario.topology.coordinators == "pods":
            expected.add(("pool-coordinator", COORDINATOR_SA))
        if any(s.action == "uninstall" for s in scenario.steps):
            expected.add(("uninstall", OPERATOR))
        assert users == expected, f"{name}: identities {ids}"
        agent = next(i for i in ids if i["component"] == "agent" and i["username"] == AGENT_SA)
        assert agent["requests"] > 0 and set(agent["node_names"]) <= set(scenario.node_names())
        assert agent["node_names"], "agent tokens carry no node claim (not bound to their pods)"

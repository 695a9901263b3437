"""edgewatch's Grafana dashboard (deploy/monitoring/dashboard.json): every panel query is checked by
promtool against the series edgewatch really exports, so a renamed metric or label fails here.

How: the controller's and the agent's Prometheus registries are built from the product's metric
classes and given one sample per label set they export in operation; their text exposition (what a
scrape reads) becomes promtool's input series (counters and histograms growing, gauges flat). Each
panel target's ``expr``, with Grafana's ``$__rate_interval``/``$__interval``/``$__range`` replaced by
fixed durations, becomes a recording rule; ``promtool check rules`` parses them and ``promtool test
rules`` asserts each returns at least one sample. The chart ships the same bytes
(charts/edgewatch/files/dashboard.json, rendered as a ConfigMap with
monitoring.grafanaDashboard.enabled).

Needs promtool and helm (``make binaries``); a missing or failing one fails these tests (no skip).
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from edgewatch.agent.coordinator.metrics import AgentCoordinatorMetrics
from edgewatch.agent.metrics import AgentMetrics
from edgewatch.controller.cutoff import CutOffTracker
from edgewatch.controller.metrics import ControllerMetrics
from edgewatch.controller.model import NodeState
from edgewatch.core.types import Verdict
from edgewatch.kube.leases import RenewOutcome
from edgewatch.poolcache.sources import NodeCacheMetrics, Source

from _tools import helm, promtool, run  # noqa: F401 - helm and promtool are fixtures

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "monitoring" / "dashboard.json"
CHART = ROOT / "charts" / "edgewatch"
CHART_DASHBOARD = CHART / "files" / "dashboard.json"

# Grafana's interval variables -> fixed PromQL durations (the test's scrape interval is 1m).
GRAFANA_VARS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}
MINUTES = 40  # input series length; expressions are evaluated at 30m
EVAL_AT = "30m"


def load() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def all_panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, rows' nested panels included."""
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def targets(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(``p<panel id>_<refId>``, expr with Grafana's variables replaced) for every panel target."""
    out = []
    for panel in all_panels(dashboard):
        for target in panel.get("targets", []):
            expr = target["expr"]
            for var, value in GRAFANA_VARS.items():
                expr = expr.replace(var, value)
            out.append((f"p{panel['id']}_{target['refId']}", expr))
    return out


# -- the real exposition -----------------------------------------------------------------------------

def controller_registry() -> CollectorRegistry:
    """The controller's registry with a sample for each label set it exports in operation."""
    registry = CollectorRegistry()
    m = ControllerMetrics(registry)
    m.leader.set(1)
    m.queue_depth.set(2)
    for i, state in enumerate(NodeState):
        m.nodes.labels(state=state.value).set(i + 1)
        m.transitions.labels(to=state.value).inc()
    for result in ("ok", "error"):
        m.reconciles.labels(result=result).inc()
    for seconds in (0.004, 0.03, 0.2):
        m.reconcile_seconds.observe(seconds)
    for result in ("new", "duplicate", "bad_signature"):
        m.evidence.labels(result=result).inc()
    m.unproven_carries.inc()
    CutOffTracker(m.node_cut_off, clock=lambda: 1_000.0).judged("e1", pool="p1", state=NodeState.UNKNOWN, now=400.0)
    return registry


def agent_registry() -> CollectorRegistry:
    """One agent's registry (the agent, its pool-coordinator client and its node pool cache share it)."""
    registry = CollectorRegistry()
    a = AgentMetrics(registry)
    for node in ("e1", "e2"):
        a.set_state(a.verdict, node=node, label="verdict", value=Verdict.HEALTHY.value,
                    values=tuple(v.value for v in Verdict))
    a.carrying.set(1)
    a.period_seconds.set(0.05)
    a.cloud_link_changed(True)
    a.delegations.labels(outcome=RenewOutcome.RENEWED.value).inc()
    a.relayed.labels(result="new").inc()
    a.key_record_refused("bad_key_proof")
    c = AgentCoordinatorMetrics(registry)
    c.healthy.set(1)
    c.ready.set(1)
    c.delegated.set(1)
    c.forwards.labels(outcome=RenewOutcome.RENEWED.value).inc()
    n = NodeCacheMetrics(registry)
    for source in Source:
        n.source.labels(source=source.value).set(1 if source is Source.COORDINATOR else 0)
    n.last_known.set(0)
    n.switches.labels(to=Source.COORDINATOR.value).inc()
    n.feed_errors.labels(source=Source.CLOUD.value, reason="timeout").inc()
    return registry


def input_series() -> list[dict[str, str]]:
    """promtool input series from the registries' text exposition, labelled as a scrape labels them:
    counters and histograms grow by their exposed value every minute, the rest stay flat."""
    out = []
    for registry, instance in ((controller_registry(), "c1:51006"), (agent_registry(), "a1:51005")):
        for family in text_string_to_metric_families(generate_latest(registry).decode()):
            for sample in family.samples:
                labels = {**sample.labels, "instance": instance, "namespace": "edgewatch"}
                selector = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
                grows = family.type in ("counter", "histogram") and not sample.name.endswith("_created")
                values = f"{sample.value:g}+{sample.value:g}x{MINUTES}" if grows else f"{sample.value:g}x{MINUTES}"
                out.append({"series": f"{sample.name}{{{selector}}}", "values": values})
    return out


def test_the_exposition_holds_the_series_the_dashboard_needs() -> None:
    names = {s["series"].split("{")[0] for s in input_series()}
    assert {"edgewatch_controller_nodes", "edgewatch_controller_node_cut_off_seconds",
            "edgewatch_controller_reconcile_seconds_bucket", "edgewatch_controller_evidence_total",
            "edgewatch_agent_carrying", "edgewatch_poolcache_source"} <= names


# -- promtool ---------------------------------------------------------------------------------------

def check_with_promtool(promtool: Path, dashboard: dict[str, Any], folder: Path) -> subprocess.CompletedProcess[str]:
    """Write every target as a recording rule plus a promtool unit test asserting it returns at least
    one sample on the real series; run `promtool check rules`, then `promtool test rules`."""
    exprs = targets(dashboard)
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"edgewatch_dashboard:{name}", "expr": expr}
                                                        for name, expr in exprs]}]}
    (folder / "dashboard.rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False, width=1000))
    cases = [{"expr": f"count(edgewatch_dashboard:{name}) > bool 0", "eval_time": EVAL_AT,
              "exp_samples": [{"labels": "{}", "value": 1}]} for name, _ in exprs]
    tests = {"rule_files": ["dashboard.rules.yaml"], "evaluation_interval": "1m",
             "tests": [{"interval": "1m", "input_series": input_series(), "promql_expr_test": cases}]}
    (folder / "dashboard.test.yaml").write_text(yaml.safe_dump(tests, sort_keys=False, width=1000))
    checked = run(promtool, "check", "rules", "dashboard.rules.yaml", cwd=folder)
    if checked.returncode != 0:
        return checked
    return run(promtool, "test", "rules", "dashboard.test.yaml", cwd=folder)


def test_every_panel_query_parses_and_returns_samples_on_the_real_series(promtool: Path, tmp_path: Path) -> None:
    dashboard = load()
    exprs = targets(dashboard)
    assert len(exprs) >= 15, exprs
    for name, expr in exprs:
        assert "$" not in expr, f"{name}: a Grafana variable the test does not replace: {expr}"
        # nothing that would hide a missing series behind another one
        assert not re.search(r"\bor\b|\bvector\(|\babsent", expr), f"{name}: {expr}"
    proc = check_with_promtool(promtool, dashboard, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout + proc.stderr, proc.stdout + proc.stderr


CUT_OFF = "edgewatch_controller_node_cut_off_seconds"


@pytest.mark.parametrize("why", ["a renamed metric", "a query that does not parse"])
def test_a_dashboard_with_a_wrong_query_is_caught(promtool: Path, tmp_path: Path, why: str) -> None:
    """The check can fail: one target with a misspelled metric (or a broken one) fails promtool,
    which names that target."""
    dashboard = copy.deepcopy(load())
    panel, target = next((p, t) for p in all_panels(dashboard) for t in p.get("targets", []) if CUT_OFF in t["expr"])
    if why == "a renamed metric":
        target["expr"] = target["expr"].replace(CUT_OFF, "edgewatch_controller_node_cutoff_seconds")
    else:
        target["expr"] = target["expr"] + ")"
    proc = check_with_promtool(promtool, dashboard, tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"{why} was not caught: {out}"
    if why == "a renamed metric":
        assert f"edgewatch_dashboard:p{panel['id']}_{target['refId']}" in out, out
    else:
        assert "parse error" in out, out


# -- the dashboard model --------------------------------------------------------------------------

def test_datasource_is_the_variable_never_a_uid() -> None:
    dashboard = load()
    (var,) = [v for v in dashboard["templating"]["list"] if v["name"] == "datasource"]
    assert var["type"] == "datasource" and var["query"] == "prometheus"

    def datasources(node: Any) -> Iterator[Any]:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "datasource":
                    yield value
                else:
                    yield from datasources(value)
        elif isinstance(node, list):
            for item in node:
                yield from datasources(item)

    found = list(datasources(dashboard["panels"]))
    assert found and all(ds == {"type": "prometheus", "uid": "${datasource}"} for ds in found), found
    assert "__inputs" not in dashboard


def test_the_panels_issue_24_asks_for_are_there() -> None:
    dashboard = load()
    queries = " ".join(expr for _, expr in targets(dashboard))
    for topic, series in {"node states": "edgewatch_controller_nodes",
                          "verdict latency": "edgewatch_controller_reconcile_seconds_bucket",
                          "carried heartbeats": "edgewatch_agent_carrying",
                          "evidence refused": "edgewatch_controller_evidence_total",
                          "pool cache uplink": "edgewatch_poolcache_source",
                          "per-node cut-off": "edgewatch_controller_node_cut_off_seconds"}.items():
        assert series in queries, f"no panel shows {topic} ({series})"
    ids = [p["id"] for p in all_panels(dashboard)]
    assert len(ids) == len(set(ids)), ids


# -- one source: the chart ships the same bytes ------------------------------------------------------

def test_the_chart_ships_the_same_dashboard(helm: Path) -> None:
    assert CHART_DASHBOARD.read_bytes() == DASHBOARD.read_bytes(), (
        "charts/edgewatch/files/dashboard.json differs from deploy/monitoring/dashboard.json: copy one to the other")
    default = run(helm, "template", "edgewatch", CHART, "--namespace", "edgewatch")
    assert default.returncode == 0, default.stderr
    assert not [d for d in yaml.safe_load_all(default.stdout) if d and d["metadata"]["name"] == "edgewatch-dashboard"]
    proc = run(helm, "template", "edgewatch", CHART, "--namespace", "edgewatch",
               "--set", "monitoring.grafanaDashboard.enabled=true",
               "--set", "monitoring.grafanaDashboard.labels.release=kps",
               "--set", "monitoring.grafanaDashboard.annotations.grafana_folder=Edge")
    assert proc.returncode == 0, proc.stderr
    (cm,) = [d for d in yaml.safe_load_all(proc.stdout) if d and d["metadata"]["name"] == "edgewatch-dashboard"]
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["namespace"] == "edgewatch"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1" and cm["metadata"]["labels"]["release"] == "kps"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "Edge"}
    assert cm["data"]["edgewatch.json"] == DASHBOARD.read_text()
    lint = run(helm, "lint", "--strict", CHART, "--set", "monitoring.grafanaDashboard.enabled=true")
    assert lint.returncode == 0, lint.stdout + lint.stderr

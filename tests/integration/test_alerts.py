"""edgewatch's alert rules (deploy/monitoring/): checked and unit-tested with promtool, computed only
from series the controller really exports, and rendered the same by the chart.

One source: deploy/monitoring/prometheusrule.yaml (the prometheus-operator's PrometheusRule). The
plain rules file beside it, edgewatch.rules.yaml (what promtool and a Prometheus without the
operator read), must equal its spec (regenerate it: `.venv/bin/python tests/integration/test_alerts.py`);
the chart's templates/monitoring.yaml must render the same spec with monitoring.prometheusRule.enabled.

Needs promtool (`hack/binaries/build.sh promtool`), helm (`... build.sh helm`) and kubectl
(`... build.sh`), all built by `make binaries`; a missing or failing one fails these tests (no
skip). No apiserver.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from edgewatch.controller.metrics import ControllerMetrics
from edgewatch.controller.model import NodeState

from _tools import helm, promtool, run  # noqa: F401 - helm and promtool are fixtures

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
RULE = MONITORING / "prometheusrule.yaml"
RULES_FILE = MONITORING / "edgewatch.rules.yaml"
UNIT_TESTS = MONITORING / "alerts.test.yaml"
PODMONITOR = MONITORING / "podmonitor.yaml"
CHART = ROOT / "charts" / "edgewatch"
CONTROLLER = ROOT / "deploy" / "40-controller.yaml"

# The alerts docs/operations.md lists; each must exist and have a firing and a non-firing promtool case.
ALERTS = {"EdgewatchNodeFailed", "EdgewatchNodeCutOff", "EdgewatchEvidenceRefused", "EdgewatchControllerNoLeader",
          "EdgewatchControllerNotReconciling", "EdgewatchPoolCoordinatorNotReady", "EdgewatchAgentNotReady",
          "EdgewatchCarryClockMissing"}

RULES_HEADER = (
    "# GENERATED from prometheusrule.yaml's spec (the one source; tests/integration/test_alerts.py checks\n"
    "# they are equal): the plain rules file promtool and a Prometheus without the operator read.\n"
    "# Regenerate: .venv/bin/python tests/integration/test_alerts.py\n")


class _Literal(yaml.SafeDumper):
    """Multi-line strings (the expressions) as literal blocks, as written in the PrometheusRule."""


_Literal.add_representer(str, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s,
                                                               style="|" if "\n" in s else None))


def rule_spec() -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load(RULE.read_text())["spec"]
    return spec


def rules_file_text() -> str:
    """edgewatch.rules.yaml as generated from the PrometheusRule's spec."""
    return RULES_HEADER + yaml.dump(rule_spec(), Dumper=_Literal, sort_keys=False, width=1000)


def alert_rules() -> list[dict[str, Any]]:
    return [r for g in rule_spec()["groups"] for r in g["rules"] if "alert" in r]


# -- one source ------------------------------------------------------------------------------------

def test_rules_file_is_the_prometheusrule_spec() -> None:
    assert yaml.safe_load(RULES_FILE.read_text()) == rule_spec(), (
        "deploy/monitoring/edgewatch.rules.yaml differs from prometheusrule.yaml's spec; regenerate it: "
        ".venv/bin/python tests/integration/test_alerts.py")
    assert RULES_FILE.read_text() == rules_file_text(), "regenerate edgewatch.rules.yaml (same rules, other text)"


def test_the_alerts_issue_24_asks_for_exist_with_severity_and_annotations() -> None:
    rules = alert_rules()
    assert {r["alert"] for r in rules} == ALERTS
    for r in rules:
        assert r["labels"]["severity"] in {"warning", "critical"}, r["alert"]
        assert r["annotations"]["summary"] and r["annotations"]["description"], r["alert"]


# -- promtool --------------------------------------------------------------------------------------

def test_promtool_check_rules(promtool: Path) -> None:
    proc = run(promtool, "check", "rules", RULES_FILE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_promtool_test_rules(promtool: Path) -> None:
    proc = run(promtool, "test", "rules", UNIT_TESTS.name, cwd=MONITORING)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_promtool_test_rules_fails_a_wrong_expectation(promtool: Path, tmp_path: Path) -> None:
    """The unit tests can fail: the same cases with one expected severity changed."""
    (tmp_path / RULES_FILE.name).write_text(RULES_FILE.read_text())
    text = UNIT_TESTS.read_text()
    assert "{severity: critical}" in text
    (tmp_path / UNIT_TESTS.name).write_text(text.replace("{severity: critical}", "{severity: warning}", 1))
    proc = run(promtool, "test", "rules", UNIT_TESTS.name, cwd=tmp_path)
    assert proc.returncode != 0 and "EdgewatchControllerNoLeader" in proc.stdout + proc.stderr, proc.stdout


def test_every_alert_has_a_firing_and_a_non_firing_case() -> None:
    cases: dict[str, set[bool]] = {}
    for test in yaml.safe_load(UNIT_TESTS.read_text())["tests"]:
        for case in test.get("alert_rule_test", []):
            cases.setdefault(case["alertname"], set()).add(bool(case.get("exp_alerts")))
            for alert in case.get("exp_alerts") or []:
                assert alert.get("exp_labels") and alert.get("exp_annotations"), case
    for name in ALERTS:
        assert cases.get(name) == {True, False}, f"{name}: needs a firing and a non-firing promtool case"


# -- the series are the controller's ---------------------------------------------------------------

PROMQL_WORDS = {"sum", "max", "min", "avg", "count", "by", "without", "on", "ignoring", "group_left", "group_right",
                "and", "or", "unless", "offset", "rate", "increase", "irate", "vector", "absent", "time",
                "max_over_time", "min_over_time", "avg_over_time", "bool"}


def exported() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Every series name the controller exports on a fresh registry -> (its metric, its labels):
    a counter c as c_total (and c_created), a histogram h as h_bucket, h_sum, h_count."""
    metrics = ControllerMetrics(CollectorRegistry())
    out: dict[str, tuple[str, tuple[str, ...]]] = {}
    for m in vars(metrics).values():
        if not isinstance(m, MetricWrapperBase):
            continue
        name, labels = m._name, tuple(m._labelnames)  # noqa: SLF001 (the names the registry exposes)
        suffixes = {"counter": ["_total", "_created"], "histogram": ["_bucket", "_sum", "_count", "_created"],
                    "gauge": [""]}[m._type]  # noqa: SLF001
        for s in suffixes:
            out[name + s] = (name, labels)
    # The exposition itself names them too (a renamed attribute, a changed type).
    names = {s.name for fam in metrics.registry.collect() for s in fam.samples}
    assert names <= set(out), names - set(out)
    return out


def selectors(expr: str) -> list[tuple[str, dict[str, str]]]:
    """The series selectors of a PromQL expression: (name, {label: matcher value})."""
    out = []
    for m in re.finditer(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?", re.sub(r"\b(by|on|without|ignoring)\s*\([^)]*\)",
                                                                               r"\1", expr)):
        name, matchers = m.group(1), m.group(2) or ""
        before = expr[:m.start()].rstrip()
        if name in PROMQL_WORDS or re.fullmatch(r"\d+[smhdwy]", name) or (before.endswith("[") or name.isdigit()):
            continue
        labels = dict(re.findall(r'([a-zA-Z_]+)\s*(?:=~|!~|!=|=)\s*"([^"]*)"', matchers))
        out.append((name, labels))
    return out


def test_selectors_parse_what_they_should() -> None:
    got = selectors('max by (namespace) (x_total{state="a",result!~"b|c"}[10m] offset 10m) and on (instance) y == 1')
    assert got == [("x_total", {"state": "a", "result": "b|c"}), ("y", {})]


def test_every_series_in_the_rules_is_one_the_controller_exports() -> None:
    names = exported()
    states = {s.value for s in NodeState}
    used = set()
    for rule in alert_rules():
        sels = selectors(rule["expr"])
        assert sels, rule["alert"]
        for name, labels in sels:
            assert name in names, f"{rule['alert']}: {name} is not a series the controller exports ({sorted(names)})"
            used.add(name)
            metric, labelnames = names[name]
            for label, value in labels.items():
                assert label in labelnames, f"{rule['alert']}: {metric} has no label {label} ({labelnames})"
                if label == "state":
                    assert set(value.split("|")) <= states, f"{rule['alert']}: {value} names no NodeState"
    assert {"edgewatch_controller_nodes", "edgewatch_controller_leader", "edgewatch_controller_reconciles_total",
            "edgewatch_controller_evidence_total"} <= used


# -- the chart and the kustomization --------------------------------------------------------------

def rendered(helm: Path, *values: str) -> dict[tuple[str, str], dict[str, Any]]:
    proc = run(helm, "template", "edgewatch", CHART, "--namespace", "edgewatch", *values)
    assert proc.returncode == 0, proc.stderr
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(proc.stdout) if d}


def test_chart_renders_no_monitoring_object_by_default(helm: Path) -> None:
    kinds = {kind for kind, _ in rendered(helm)}
    assert not kinds & {"PrometheusRule", "PodMonitor"}, kinds


def test_chart_renders_deploy_monitoring_when_enabled(helm: Path) -> None:
    objs = rendered(helm, "--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.podMonitor.enabled=true")
    for path in (RULE, PODMONITOR):
        want = yaml.safe_load(path.read_text())
        got = objs[(want["kind"], want["metadata"]["name"])]
        assert got == want, f"the chart's {want['kind']} differs from {path.relative_to(ROOT)}"
    only_rule = rendered(helm, "--set", "monitoring.prometheusRule.enabled=true",
                         "--set", "monitoring.prometheusRule.labels.release=kps", "--set", "namespace.name=ops")
    rule = only_rule[("PrometheusRule", "edgewatch")]
    assert ("PodMonitor", "edgewatch-controller") not in only_rule
    assert rule["metadata"]["namespace"] == "ops" and rule["metadata"]["labels"]["release"] == "kps"
    proc = run(helm, "lint", "--strict", CHART, "--set", "monitoring.prometheusRule.enabled=true",
               "--set", "monitoring.podMonitor.enabled=true")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bad = run(helm, "template", "edgewatch", CHART, "--set", "monitoring.podMonitor.interval=often")
    assert bad.returncode != 0 and "interval" in bad.stderr, bad.stderr


def test_podmonitor_and_the_metrics_service_select_the_controller_pods_metrics_port() -> None:
    pm = yaml.safe_load(PODMONITOR.read_text())
    docs = {d["kind"]: d for d in yaml.safe_load_all(CONTROLLER.read_text())}
    deployment, service = docs["Deployment"], docs["Service"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pm["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    ports = {p["name"]: p for c in deployment["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in ports and endpoint["path"] == "/metrics"
    # with the shipped scraper's token (deploy/13-rbac-metrics.yaml: /metrics needs one)
    rbac = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all((ROOT / "deploy/13-rbac-metrics.yaml")
                                                                              .read_text())}
    secret = rbac[("Secret", endpoint["authorization"]["credentials"]["name"])]
    assert endpoint["authorization"]["type"] == "Bearer" and endpoint["authorization"]["credentials"]["key"] == "token"
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert secret["metadata"]["namespace"] == pm["metadata"]["namespace"]
    assert ("ServiceAccount", secret["metadata"]["annotations"]["kubernetes.io/service-account.name"]) in rbac
    assert f"--metrics-port={ports[endpoint['port']]['containerPort']}" in deployment["spec"]["template"]["spec"][
        "containers"][0]["args"]
    # the headless Service (for a ServiceMonitor or kubernetes_sd role endpoints) reaches the same port
    assert service["spec"]["selector"].items() <= pod_labels.items() and service["spec"]["clusterIP"] == "None"
    (svc_port,) = service["spec"]["ports"]
    assert svc_port["targetPort"] == endpoint["port"] and svc_port["port"] == ports[endpoint["port"]]["containerPort"]


def test_deploy_monitoring_builds_and_stays_out_of_the_base(binaries: Any) -> None:
    proc = run(binaries.kubectl, "kustomize", MONITORING)
    assert proc.returncode == 0, proc.stderr
    kinds = sorted(d["kind"] for d in yaml.safe_load_all(proc.stdout) if d)
    assert kinds == ["PodMonitor", "PrometheusRule"]
    base = yaml.safe_load((ROOT / "deploy" / "kustomization.yaml").read_text())
    assert not any("monitoring" in r for r in base["resources"])


if __name__ == "__main__":  # regenerate edgewatch.rules.yaml from the PrometheusRule
    RULES_FILE.write_text(rules_file_text())
    print(f"wrote {RULES_FILE.relative_to(ROOT)}", file=sys.stderr)

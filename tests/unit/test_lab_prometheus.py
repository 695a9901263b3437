"""The playground's real Prometheus, without running it: the configuration it gets (against the
shipped PodMonitor and pod specs), how ``ALERTS`` series become the report's ``alerts``, the HTTP
query's error handling (a local stand-in server), and the ``alert_within_s`` / ``no_alerts``
expectations judged on a report."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from edgewatch_lab.playground.checks import check_expectations
from edgewatch_lab.playground.prometheus import (
    PrometheusError,
    alerts_from_series,
    format_alerts,
    query_alerts,
    render_config,
    rules_file,
)
from edgewatch_lab.playground.report import REPORT_KEYS, Recording, build_report
from edgewatch_lab.playground.scenario import ScenarioError, parse_scenario

ROOT = Path(__file__).resolve().parents[2]
START = 1_800_000_000.0


def _config() -> dict[str, Any]:
    return render_config(kubeconfig=Path("/run/lab/kubeconfig"), rules=rules_file(ROOT), namespace="edgewatch")


def _job(config: dict[str, Any], name: str) -> dict[str, Any]:
    return next(j for j in config["scrape_configs"] if j["job_name"] == name)


def _kept(job: dict[str, Any], source: str) -> str:
    return next(r["regex"] for r in job["relabel_configs"]
                if r.get("action") == "keep" and r["source_labels"] == [source])


def test_config_intervals_rules_and_discovery() -> None:
    config = _config()
    assert yaml.safe_load(json.dumps(config)) == config  # written as JSON, read as YAML
    assert config["global"] == {"scrape_interval": "5s", "evaluation_interval": "5s", "scrape_timeout": "4s"}
    assert config["rule_files"] == [str(ROOT / "deploy/monitoring/edgewatch.rules.yaml")]
    assert Path(config["rule_files"][0]).is_file()
    assert {j["job_name"] for j in config["scrape_configs"]} == {"edgewatch-controller", "edgewatch-agent"}
    for job in config["scrape_configs"]:
        assert job["kubernetes_sd_configs"] == [{"role": "pod", "kubeconfig_file": "/run/lab/kubeconfig",
                                                 "namespaces": {"names": ["edgewatch"]}}]
        targets = {r.get("target_label") for r in job["relabel_configs"]}
        assert "node" not in targets and "instance" not in targets  # the controller's own node label stays
    assert "alerting" not in config and "remote_write" not in config
    assert render_config(kubeconfig=Path("k"), rules=Path("r"), interval_s=0.5)["global"]["scrape_interval"] == "500ms"
    with pytest.raises(ValueError):
        render_config(kubeconfig=Path("k"), rules=Path("r"), interval_s=0)


def test_controller_job_is_the_shipped_podmonitor() -> None:
    monitor = yaml.safe_load((ROOT / "deploy/monitoring/podmonitor.yaml").read_text())
    job = _job(_config(), "edgewatch-controller")
    [(label, value)] = monitor["spec"]["selector"]["matchLabels"].items()
    assert label == "app.kubernetes.io/name"
    assert _kept(job, "__meta_kubernetes_pod_label_app_kubernetes_io_name") == value
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert _kept(job, "__meta_kubernetes_pod_container_port_name") == endpoint["port"]
    assert job["metrics_path"] == endpoint["path"]


def _ports(manifest: str) -> tuple[str, set[str]]:
    doc = next(d for d in yaml.safe_load_all((ROOT / "deploy" / manifest).read_text())
               if d and d.get("kind") in ("DaemonSet", "Deployment"))
    pod = doc["spec"]["template"]
    names = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
    return pod["metadata"]["labels"]["app.kubernetes.io/name"], names


@pytest.mark.parametrize(("job_name", "manifest"), [("edgewatch-controller", "40-controller.yaml"),
                                                    ("edgewatch-agent", "30-agent.yaml")])
def test_jobs_select_ports_the_pods_have(job_name: str, manifest: str) -> None:
    app, ports = _ports(manifest)
    job = _job(_config(), job_name)
    assert _kept(job, "__meta_kubernetes_pod_label_app_kubernetes_io_name") == app
    assert _kept(job, "__meta_kubernetes_pod_container_port_name") in ports


def _series(name: str, state: str, times: list[float], **labels: str) -> dict[str, Any]:
    return {"metric": {"__name__": "ALERTS", "alertname": name, "alertstate": state, **labels},
            "values": [[START + t, "1"] for t in times]}


def test_pending_then_firing_in_scenario_seconds() -> None:
    series = [
        _series("EdgewatchNodeFailed", "firing", [237.0, 238.0, 239.0], namespace="edgewatch", severity="warning"),
        _series("EdgewatchNodeFailed", "pending", [float(t) for t in range(177, 237)], namespace="edgewatch",
                severity="warning"),
    ]
    [alert] = alerts_from_series(series, start_wall=START)
    assert alert == {"alertname": "EdgewatchNodeFailed", "labels": {"namespace": "edgewatch", "severity": "warning"},
                     "pending_at_s": 177.0, "firing_at_s": 237.0, "last_seen_s": 239.0}
    assert format_alerts([alert]) == ["EdgewatchNodeFailed{namespace=edgewatch}: pending at 177.0 s, firing at 237.0 s"]


def test_episodes_labels_order_and_other_states() -> None:
    series = [
        _series("EdgewatchNodeCutOff", "pending", [50.0, 51.0, 90.0, 91.0], node="a-2", pool="a"),
        _series("EdgewatchNodeCutOff", "pending", [40.0], node="a-1", pool="a"),
        _series("EdgewatchEvidenceRefused", "firing", [10.0], result="forged"),  # no `for`: never pending
        _series("EdgewatchNodeCutOff", "inactive", [1.0], node="a-3"),           # not a state of ALERTS
        {"metric": {"alertstate": "firing"}, "values": [[START, "1"]]},            # no name
    ]
    alerts = alerts_from_series(series, start_wall=START, max_gap_s=15)
    assert [(a["alertname"], a["labels"].get("node"), a["pending_at_s"], a["firing_at_s"]) for a in alerts] == [
        ("EdgewatchEvidenceRefused", None, None, 10.0),
        ("EdgewatchNodeCutOff", "a-1", 40.0, None),
        ("EdgewatchNodeCutOff", "a-2", 50.0, None),
        ("EdgewatchNodeCutOff", "a-2", 90.0, None),  # 39 s later: a new episode
    ]
    assert alerts[0]["labels"] == {"result": "forged"}
    assert alerts_from_series([], start_wall=START) == []
    assert format_alerts(None) == ["Prometheus did not run (--prometheus)"]
    assert format_alerts([]) == ["no alert pending or firing"]


class _Stub(BaseHTTPRequestHandler):
    body = b""
    status = 200
    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        type(self).seen.append(self.path)
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: Any) -> None:
        """Quiet: no access log on the test's stderr."""


@pytest.fixture
def stub():
    server = HTTPServer(("127.0.0.1", 0), _Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Stub.seen = []
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _answer(result: Any, *, status: str = "success", kind: str = "matrix") -> bytes:
    return json.dumps({"status": status, "data": {"resultType": kind, "result": result}}).encode()


def test_query_alerts_reads_the_matrix(stub: HTTPServer) -> None:
    _Stub.status, _Stub.body = 200, _answer([_series("EdgewatchNodeFailed", "firing", [5.0])])
    url = f"http://127.0.0.1:{stub.server_address[1]}"
    [alert] = query_alerts(url, start_wall=START, end_wall=START + 60, timeout_s=5)
    assert alert["firing_at_s"] == 5.0
    assert _Stub.seen[0].startswith("/api/v1/query_range?query=ALERTS&") and "step=1" in _Stub.seen[0]
    assert f"start={START:.3f}" in _Stub.seen[0]
    [alert] = query_alerts(url, start_wall=START + 10, end_wall=START + 60, timeout_s=5, since_wall=START)
    assert alert["firing_at_s"] == -5.0  # before t=0: negative
    assert f"start={START:.3f}" in _Stub.seen[1]
    _Stub.body = _answer([_series("EdgewatchNodeFailed", "firing", [0.0])])
    [alert] = query_alerts(url, start_wall=START, end_wall=START + 60, timeout_s=5)
    assert str(alert["firing_at_s"]) == "0.0"  # not -0.0


@pytest.mark.parametrize(("status", "body", "needle"), [
    (200, b"x" * 2000, "over 1000 bytes"),
    (200, b"not json", "not JSON"),
    (400, json.dumps({"status": "error", "error": "bad"}).encode(), "HTTP 400"),
    (200, _answer([], kind="vector"), "HTTP 200"),
])
def test_query_alerts_errors(stub: HTTPServer, status: int, body: bytes, needle: str) -> None:
    _Stub.status, _Stub.body = status, body
    url = f"http://127.0.0.1:{stub.server_address[1]}"
    with pytest.raises(PrometheusError, match=needle):
        query_alerts(url, start_wall=START, end_wall=START + 60, timeout_s=5, max_bytes=1000)


def test_query_alerts_connection_refused() -> None:
    server = HTTPServer(("127.0.0.1", 0), _Stub)
    port = server.server_address[1]
    server.server_close()
    with pytest.raises(PrometheusError, match="querying ALERTS failed"):
        query_alerts(f"http://127.0.0.1:{port}", start_wall=START, end_wall=START + 60, timeout_s=2)


# --------------------------------------------------------------------------------------------------
# the report and the expectations


def _scenario(expect: list[dict[str, Any]]):  # type: ignore[no-untyped-def]
    return parse_scenario({
        "name": "t", "topology": {"pools": [{"name": "a", "nodes": 3}]},
        "steps": [{"at": 10, "action": "cut-cloud", "pool": "a"}, {"at": 50, "action": "kill", "node": "a-3"},
                  {"at": 150, "action": "end"}],
        "expect": expect,
    })


def _report(alerts: list[dict[str, Any]] | None) -> dict[str, Any]:
    r = Recording(scenario="t", baseline=False, started_at=START, ended_at=150.0, alerts=alerts)
    for n in ("a-1", "a-2", "a-3"):
        r.add_node(n, "a").observe_state(0.0, "normal")
    r.nodes["a-3"].record_kill(50.0, pods=2)
    return build_report(r)


def _alert(name: str, firing: float | None, pending: float = 1.0, **labels: str) -> dict[str, Any]:
    return {"alertname": name, "labels": labels, "pending_at_s": pending, "firing_at_s": firing, "last_seen_s": 150.0}


EXPECT = [{"nodes": ["a-3"], "alert_within_s": 90}, {"nodes": ["a-1", "a-2"], "no_alerts": True}]


def test_report_carries_alerts_or_null() -> None:
    rep = _report([_alert("EdgewatchNodeFailed", 120.0, 60.0, namespace="edgewatch")])
    assert tuple(rep) == REPORT_KEYS and "alerts" in REPORT_KEYS
    assert rep["alerts"][0]["firing_at_s"] == 120.0
    assert _report(None)["alerts"] is None
    saved = Recording(scenario="x", baseline=False, alerts=rep["alerts"]).to_dict()
    back = Recording.from_dict(json.loads(json.dumps(saved)))
    assert back.alerts == rep["alerts"]


def test_alert_expectations_pass() -> None:
    alerts = [_alert("EdgewatchNodeFailed", 126.0, 66.0, namespace="edgewatch"),
              _alert("EdgewatchNodeCutOff", None, node="a-1", pool="a")]  # pending only: not fired
    results = check_expectations(_scenario(EXPECT), _report(alerts))
    assert [r.passed for r in results] == [True, True], results
    assert "EdgewatchNodeFailed firing 76 s after the kill of a-3 at 50 s" in results[0].detail


def test_alert_expectations_fail() -> None:
    alerts = [_alert("EdgewatchNodeFailed", 145.0, namespace="edgewatch"),   # 95 s after the kill
              _alert("EdgewatchAgentNotReady", 100.0, node="a-2", pool="a")]
    within, none = check_expectations(_scenario(EXPECT), _report(alerts))
    assert not within.passed and "95 s after the kill" in within.detail
    assert not none.passed and "EdgewatchAgentNotReady on a-2 firing at 100 s" in none.detail
    [late] = check_expectations(_scenario(EXPECT[:1]), _report([_alert("EdgewatchNodeFailed", 40.0)]))
    assert not late.passed and "no alert fired for a-3" in late.detail  # before the kill: not this one
    [named] = check_expectations(_scenario(EXPECT[:1]), _report([_alert("Other", 70.0, node="a-3")]))
    assert named.passed  # an alert whose node label names the killed node counts too


def test_alert_expectations_need_prometheus() -> None:
    results = check_expectations(_scenario(EXPECT), _report(None))
    assert [r.passed for r in results] == [False, False]
    assert all("needs --prometheus" in r.detail for r in results)


def test_alert_expectation_validation() -> None:
    with pytest.raises(ScenarioError, match="baseline"):
        _scenario([{"nodes": ["a-3"], "baseline": True, "alert_within_s": 90}])
    with pytest.raises(ScenarioError, match="does not cover"):
        parse_scenario({"name": "x", "topology": {"pools": [{"name": "a", "nodes": 2}], "cloud_nodes": 2},
                        "steps": [{"at": 10, "action": "end"}],
                        "expect": [{"nodes": ["cloud-2"], "no_alerts": True}]})
    with pytest.raises(ScenarioError, match="greater than 0"):
        _scenario([{"nodes": ["a-3"], "alert_within_s": 0}])

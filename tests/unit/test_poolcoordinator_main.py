"""The pool coordinator's command: its arguments, the CLI entry, the ops endpoints and metrics."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry, generate_latest

from edgewatch.cli import main
from edgewatch.opsserver import serve_ops
from edgewatch.poolcoordinator.main import check_arguments
from edgewatch.poolcoordinator.metrics import CoordinatorMetrics


@pytest.fixture
def etcd(tmp_path: Path) -> str:
    binary = tmp_path / "etcd"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    return str(binary)


def _check(etcd: str, **kw: object) -> tuple[str | None, str]:
    args: dict[str, object] = dict(pool="factory-1", node="edge-1", host_ip="10.0.0.5", port=12379, ops_port=12380,
                                   etcd_binary=etcd)
    args.update(kw)
    return check_arguments(**args)  # type: ignore[arg-type]


def test_good_arguments(etcd: str) -> None:
    assert _check(etcd) == (etcd, "")
    assert _check(etcd, host_ip="fd00::1")[0] == etcd


@pytest.mark.parametrize(("bad", "says"), [
    ({"pool": ""}, "--pool"), ({"node": None}, "NODE_NAME"), ({"node": ""}, "NODE_NAME"),
    ({"host_ip": None}, "HOST_IP"), ({"host_ip": "node-1"}, "HOST_IP"), ({"port": 0}, "--port"),
    ({"port": 65533}, "--port"), ({"ops_port": 12381}, "--ops-port"), ({"ops_port": 12379}, "--ops-port"),
    ({"ops_port": 70000}, "--ops-port"), ({"etcd_binary": "/no/such/etcd"}, "etcd"),
])
def test_bad_arguments_say_why(etcd: str, bad: dict[str, object], says: str) -> None:
    binary, why = _check(etcd, **bad)
    assert binary is None and says in why


def test_etcd_is_found_on_path(etcd: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(Path(etcd).parent))
    assert _check(etcd, etcd_binary=None)[0] == etcd


def test_the_command_exits_2_on_bad_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    result = CliRunner().invoke(main, ["pool-coordinator", "--pool", "factory-1", "--log-format", "text"])
    assert result.exit_code == 2
    assert "pool-coordinator" in CliRunner().invoke(main, ["--help"]).output


def test_the_metrics_have_the_documented_names() -> None:
    registry = CollectorRegistry()
    ready = {"v": False}
    m = CoordinatorMetrics(registry=registry, members=lambda: 3, ready=lambda: ready["v"],
                           expiry={"serving": lambda: 100.0, "root": lambda: 50.0})
    m.etcd_restarts.inc()
    m.acl_reconciles.labels("ok").inc()
    m.request_result("root")("issued")
    value = registry.get_sample_value
    assert value("edgewatch_pool_coordinator_etcd_restarts_total") == 1
    assert value("edgewatch_pool_coordinator_acl_reconciles_total", {"result": "ok"}) == 1
    assert value("edgewatch_pool_coordinator_members") == 3
    assert value("edgewatch_pool_coordinator_ready") == 0
    ready["v"] = True
    assert value("edgewatch_pool_coordinator_ready") == 1
    assert value("edgewatch_pool_coordinator_certificate_expiry_seconds", {"certificate": "serving"}) == 100
    assert value("edgewatch_pool_coordinator_certificate_expiry_seconds", {"certificate": "root"}) == 50
    assert value("edgewatch_pool_coordinator_certificate_requests_total",
                 {"certificate": "root", "result": "issued"}) == 1
    assert b"edgewatch_pool_coordinator_members 3.0" in generate_latest(registry)


def test_the_ops_endpoints_say_why_not_ready() -> None:
    registry = CollectorRegistry()
    reason: dict[str, str | None] = {"v": "etcd does not answer"}
    with serve_ops(address="127.0.0.1", port=0, registry=registry, readiness=lambda: reason["v"]) as port:
        base = f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(f"{base}/healthz", timeout=5) as resp:
            assert resp.status == 200
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{base}/readyz", timeout=5)
        assert err.value.code == 503 and err.value.read() == b"not ready: etcd does not answer\n"
        reason["v"] = None
        with urllib.request.urlopen(f"{base}/readyz", timeout=5) as resp:
            assert resp.status == 200
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{base}/nothing", timeout=5)
        assert err.value.code == 404

"""How the agent starts as shipped: in-cluster credentials and NODE_NAME from the
DaemonSet, hostNetwork defaults, and the pool coordinator taken from the ConfigMap — followed live,
never crashing on bad input."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from lightkube import KubeConfig

from edgewatch.agent import main as agent_main
from edgewatch.agent.agent import Agent
from edgewatch.agent.config import AgentConfig
from edgewatch.agent.exchangeloop import peer_session
from edgewatch.agent.membership import NodeInfo
from edgewatch.cli import main
from edgewatch.core.types import NodeName
from edgewatch.names import POOL_LABEL
from edgewatch.poolcache.resources import DEFAULT_RESOURCES
from edgewatch.kube.http import http_client_of

ME = NodeName("e-1")


def _key(tmp_path: Path) -> Path:
    return tmp_path / "identity.key"  # made by the agent on first start


# -- the DaemonSet's command line ------------------------------------------------------------------


def test_the_daemonset_command_line_takes_node_from_env_and_defaults_for_host_network(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(agent_main, "run_agent", lambda **opts: seen.update(opts) or 0)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("NODE_NAME", "edge-node-7")
    result = CliRunner().invoke(main, ["agent", "--identity-file", str(_key(tmp_path)), "--state-dir", "/var/lib/edgewatch"])
    assert result.exit_code == 0, result.output
    assert seen["node"] == "edge-node-7"
    assert seen["kubeconfig"] is None  # in-cluster
    assert seen["listen_address"] == "0.0.0.0" and seen["port"] == 51005
    assert seen["kubelet_healthz_url"] == "http://127.0.0.1:10248/healthz"
    assert seen["coordinator_url"] is None and seen["pool"] is None  # from the ConfigMap


def test_help_says_where_the_coordinator_comes_from() -> None:
    text = " ".join(CliRunner().invoke(main, ["agent", "--help"]).output.split())
    assert "poolCoordinators" in text and "followed live" in text


def _service_account(tmp_path: Path) -> Path:
    from edgewatch_lab.testing.pki import CertificateAuthority

    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text("token-1")
    (sa / "namespace").write_text("edgewatch")
    CertificateAuthority(folder=sa)  # writes ca.crt (and ca.key, unused)
    return sa


def test_in_cluster_client_from_the_service_account_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sa = _service_account(tmp_path)
    original = KubeConfig.from_service_account.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(KubeConfig, "from_service_account",
                        classmethod(lambda cls, service_account=sa: original(cls, service_account)))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    client = agent_main._client(None)
    assert client is not None
    http = http_client_of(client)
    assert str(http.base_url).rstrip("/") == "https://10.96.0.1:6443"
    # (its User-Agent is set by the transport: tests/unit/test_kube_client.py sends a request)
    asyncio.run(client.close())  # type: ignore[attr-defined]


def test_outside_a_cluster_without_kubeconfig_exits_2_with_a_clear_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(agent_main, "configure_logging", lambda **_: None)
    # Whatever machine runs the test (a pod has a real ServiceAccount folder), the agent looks in an
    # empty one: the in-cluster lookup must fail and say so.
    original = KubeConfig.from_service_account
    monkeypatch.setattr(KubeConfig, "from_service_account",
                        lambda service_account=None: original(tmp_path / "no-serviceaccount"))
    with caplog.at_level(logging.ERROR):
        code = agent_main.run_agent(node="n1", identity_file=_key(tmp_path), kubeconfig=None, listen_address="0.0.0.0",
                                    port=51005, namespace="edgewatch", kubelet_healthz_url="http://127.0.0.1:10248/healthz",
                                    coordinator_url=None, pool=None, state_dir=None, exchange_period=1.0,
                                    vote_ttl=5.0, probe_timeout=0.8, log_level="INFO", log_format="text")
    assert code == 2
    assert any("cannot reach the API" in r.getMessage() for r in caplog.records)


def test_a_bad_coordinator_flag_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(agent_main, "configure_logging", lambda **_: None)
    with caplog.at_level(logging.ERROR):
        code = agent_main.run_agent(node="n1", identity_file=_key(tmp_path), kubeconfig=None, listen_address="0.0.0.0",
                                    port=51005, namespace="edgewatch", kubelet_healthz_url="http://127.0.0.1:10248/healthz",
                                    coordinator_url="etcd:2379", pool=None, state_dir=None, exchange_period=1.0,
                                    vote_ttl=5.0, probe_timeout=0.8, log_level="INFO", log_format="text")
    assert code == 2 and any("--coordinator" in r.getMessage() for r in caplog.records)


# -- source address with a wildcard listen address ---------------------------------------------------


def _agent(tmp_path: Path, **config: Any) -> Agent:
    return Agent(config=AgentConfig(node=ME, identity_file=_key(tmp_path), **config), client=object())  # type: ignore[arg-type]


def test_peer_traffic_leaves_from_the_internal_ip_when_listening_on_all_addresses(tmp_path: Path) -> None:
    agent = _agent(tmp_path)
    assert agent.exchange.source_address() is None  # node list not known yet: the kernel picks
    agent.membership.own = NodeInfo(name=ME, address="127.0.0.1", labels={})
    assert agent.exchange.source_address() == "127.0.0.1"
    assert _agent(tmp_path, listen_address="127.0.0.9").exchange.source_address() == "127.0.0.9"


async def test_an_internal_ip_that_is_not_local_falls_back_to_the_kernel(caplog: pytest.LogCaptureFixture) -> None:
    session = peer_session("192.0.2.123")  # TEST-NET-1: not an address of this host
    try:
        assert session.connector is not None and getattr(session.connector, "_local_addr_infos", None) is None
    finally:
        await session.close()
    assert any("cannot send peer traffic from 192.0.2.123" in r.getMessage() for r in caplog.records)
    bound = peer_session("127.0.0.1")
    try:
        infos = getattr(bound.connector, "_local_addr_infos", None)
        assert infos and infos[0][4] == ("127.0.0.1", 0)
    finally:
        await bound.close()


# -- the pool coordinator from the ConfigMap ---------------------------------------------------------


def _with_config(agent: Agent, text: str | None, *, pool: str | None = "a", cached: str = "") -> None:
    agent.membership.own = NodeInfo(name=ME, address="127.0.0.1", labels={POOL_LABEL: pool} if pool else {})
    agent.membership.apply_config({"poolCoordinators": text, "poolScopeResources": cached} if text is not None
                                  else None)
    agent.membership.config_synced.set()


def test_coordinator_wanted(tmp_path: Path) -> None:
    agent = _agent(tmp_path)
    assert agent.coordinators.wanted() is None  # nothing known yet
    _with_config(agent, "a: http://198.18.0.10:2379\nb: http://198.18.0.11:2379")
    assert agent.coordinators.wanted() == ("http://198.18.0.10:2379", "a", DEFAULT_RESOURCES)
    # The cached resources are part of the target: a change restarts the coordinator with them.
    agent.membership.apply_config({"poolCoordinators": "a: http://198.18.0.10:2379", "poolScopeResources": "off"})
    assert agent.coordinators.wanted() == ("http://198.18.0.10:2379", "a", ())
    _with_config(agent, "b: http://198.18.0.11:2379")
    assert agent.coordinators.wanted() is None  # our pool has no entry
    _with_config(agent, "a: http://198.18.0.10:2379", pool=None)
    assert agent.coordinators.wanted() is None  # we have no pool
    # --pool overrides the label; --coordinator overrides the ConfigMap.
    pinned = _agent(tmp_path, pool="b")
    _with_config(pinned, "a: http://198.18.0.10:2379\nb: http://198.18.0.11:2379")
    assert pinned.coordinators.wanted() == ("http://198.18.0.11:2379", "b", DEFAULT_RESOURCES)
    flag = _agent(tmp_path, coordinator_url="http://10.1.1.1:2379")
    assert flag.coordinators.wanted() is None  # waits for the ConfigMap and the node (its pool label)
    _with_config(flag, "a: http://198.18.0.10:2379")
    assert flag.coordinators.wanted() == ("http://10.1.1.1:2379", "a", DEFAULT_RESOURCES)


def test_an_auto_pool_goes_where_the_controller_says_its_coordinator_runs(tmp_path: Path) -> None:
    agent = _agent(tmp_path)
    _with_config(agent, "a: auto\nb: http://198.18.0.11:2379")
    assert agent.coordinators.wanted() is None  # not Ready anywhere yet: the peer path carries heartbeats
    agent.membership._apply_discovery({"a": "https://198.18.0.20:12379", "b": "https://198.18.0.21:12379"})
    assert agent.coordinators.wanted() == ("https://198.18.0.20:12379", "a", DEFAULT_RESOURCES)
    agent.membership._apply_discovery({"a": "https://198.18.0.22:12379"})  # rescheduled to another node
    assert agent.coordinators.wanted() == ("https://198.18.0.22:12379", "a", DEFAULT_RESOURCES)
    agent.membership._apply_discovery({})
    assert agent.coordinators.wanted() is None
    other = _agent(tmp_path)
    _with_config(other, "a: http://198.18.0.10:2379")  # an explicit URL is not replaced by a discovery
    other.membership._apply_discovery({"a": "https://198.18.0.20:12379"})
    assert other.coordinators.wanted() == ("http://198.18.0.10:2379", "a", DEFAULT_RESOURCES)


async def test_the_coordinator_follows_the_config_map_live(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    agent = _agent(tmp_path)
    # Ports nobody listens on: the sessions fail and retry quietly, which is all this test needs.
    _with_config(agent, "a: http://127.0.0.1:9", cached="off")  # (a fake API client: no cache)
    task = asyncio.create_task(agent.coordinators.run(poll_s=0.02))
    try:
        await asyncio.sleep(0.2)
        assert agent.coordinator_target == ("http://127.0.0.1:9", "a", ()) and agent.coordinator is not None
        first = agent.coordinator
        _with_config(agent, "a: http://127.0.0.1:10", cached="off")  # the operator changes the URL
        await asyncio.sleep(0.2)
        assert agent.coordinator_target == ("http://127.0.0.1:10", "a", ()) and agent.coordinator is not first
        assert first._closing  # noqa: SLF001 - the old session was closed, not leaked
        second = agent.coordinator
        _with_config(agent, "a: ftp://127.0.0.1:10", cached="off")  # a bad value: logged, the previous URL stays
        await asyncio.sleep(0.2)
        assert agent.coordinator is second and not task.done()
        _with_config(agent, "a: http://127.0.0.1:9", cached="off")
        await asyncio.sleep(0.2)
        assert agent.coordinator_target == ("http://127.0.0.1:9", "a", ())
        _with_config(agent, "")  # entry removed: the coordinator stops, the peer path carries
        await asyncio.sleep(0.2)
        assert agent.coordinator is None and agent.coordinator_target is None
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert any("scheme" in r.getMessage() and "pool a" in r.getMessage() for r in caplog.records)


async def test_tls_with_an_http_url_is_refused_once_not_crashing(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    from edgewatch.agent.coordinator import CoordinatorTLS

    tls = CoordinatorTLS(ca_file=tmp_path / "ca", cert_file=tmp_path / "c", key_file=tmp_path / "k")
    agent = _agent(tmp_path, coordinator_tls=tls)
    _with_config(agent, "a: http://127.0.0.1:9")
    with caplog.at_level(logging.ERROR):
        task = asyncio.create_task(agent.coordinators.run(poll_s=0.02))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    refusals = [r for r in caplog.records if "not joining pool a" in r.getMessage()]
    assert len(refusals) == 1 and agent.coordinator is None


def test_per_node_metric_series_are_dropped_when_a_node_leaves(tmp_path: Path) -> None:
    from edgewatch.core.quorum import decide_all

    from edgewatch.core.detector import PeerDetector

    agent = _agent(tmp_path)
    reg = agent.metrics.registry
    agent.peers.detectors[NodeName("a-9")] = PeerDetector(now=0.0)  # a watched neighbour
    agent.exchange.export(decide_all(group=frozenset({NodeName("a-9"), NodeName("a-10")}), votes={}, now=0.0, vote_ttl_s=5.0))
    assert reg.get_sample_value("edgewatch_agent_verdict", {"node": "a-9", "verdict": "unknown"}) == 1
    # a-10 is in the group but not watched: no series (1,000 members must not cost 3,000 series)
    assert reg.get_sample_value("edgewatch_agent_verdict", {"node": "a-10", "verdict": "unknown"}) is None
    assert reg.get_sample_value("edgewatch_agent_peer_dead_after_failures", {"node": "a-9"}) == 3  # a clean link
    del agent.peers.detectors[NodeName("a-9")]
    agent.exchange.export({})  # a-9 left the group
    assert reg.get_sample_value("edgewatch_agent_verdict", {"node": "a-9", "verdict": "unknown"}) is None
    assert reg.get_sample_value("edgewatch_agent_peer_dead_after_failures", {"node": "a-9"}) is None


async def test_the_node_certificate_is_wanted_for_an_auto_pool_or_with_the_flag(tmp_path: Path) -> None:
    state = tmp_path / "state"
    agent = _agent(tmp_path, state_dir=state)
    assert agent.certificates is not None  # made, but run only once wanted
    assert not agent.coordinators.certificate_wanted()
    _with_config(agent, "a: http://198.18.0.10:2379")
    assert not agent.coordinators.certificate_wanted()
    assert await agent.coordinators._tls_for("a") is None  # an explicit URL keeps the configured TLS (none)
    _with_config(agent, "a: auto")
    assert agent.coordinators.certificate_wanted()  # an edgewatch-run coordinator: certificates only
    assert agent.coordinators._certificate_ready is False
    flagged = _agent(tmp_path, state_dir=state, coordinator_client_certificate=True)
    assert flagged.coordinators.certificate_wanted()
    assert _agent(tmp_path).certificates is None  # no state folder, no certificate

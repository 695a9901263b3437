"""The agent's cloud work with a slow apiserver: publishing EdgeHealthy, carrying
cut-off peers' Leases and writing the role run independently, every call bounded; one slow Lease
never delays another node's carry.

The apiserver is a small fake whose calls can be made to hang; the Lease renewal is the real one
(``edgewatch.kube.leases.renew_on_behalf``), so a carried node's renewTime really moves in the fake.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from pathlib import Path
from typing import Any

import pytest
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from prometheus_client import CollectorRegistry

from _keys import ring

from edgewatch.agent.agent import Agent
from edgewatch.agent.carrier import HeartbeatCarrier
from edgewatch.agent.config import AgentConfig
from edgewatch.agent.metrics import AgentMetrics
from edgewatch.core.duties import Duties
from edgewatch.core.quorum import Decision
from edgewatch.core.types import NodeName, Verdict
from edgewatch.core.wire import sign_heartbeat

ME, B, C, D = NodeName("e-1"), NodeName("e-2"), NodeName("e-3"), NodeName("e-4")
HANG_S = 3600.0


class SlowKube:
    """Leases in memory; ``hang`` names the (operation, object name) pairs that never answer."""

    def __init__(self) -> None:
        old = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=60)
        self.leases = {n: Lease(metadata=ObjectMeta(name=n, namespace="kube-node-lease", resourceVersion="1",
                                                    annotations={}),
                                spec=LeaseSpec(holderIdentity=n, leaseDurationSeconds=40, renewTime=old))
                       for n in (ME, B, C, D)}
        self.hang: set[tuple[str, str]] = set()
        self.replaced: list[tuple[float, str]] = []
        self.patched: list[tuple[float, str]] = []

    async def _maybe_hang(self, op: str, name: str) -> None:
        if (op, name) in self.hang or (op, "*") in self.hang:
            await asyncio.sleep(HANG_S)

    async def get(self, res: Any, name: str, *, namespace: str | None = None) -> Lease:
        await self._maybe_hang("get", name)
        return Lease.from_dict(self.leases[name].to_dict())

    async def replace(self, obj: Lease) -> Lease:
        name = obj.metadata.name
        await self._maybe_hang("replace", name)
        obj.metadata.resourceVersion = str(int(obj.metadata.resourceVersion) + 1)
        self.leases[name] = obj
        self.replaced.append((time.monotonic(), name))
        return obj

    async def patch(self, res: Any, name: str, body: Any, **_kw: Any) -> None:
        await self._maybe_hang("patch", name)
        self.patched.append((time.monotonic(), name))


def _key(tmp_path: Path) -> Path:
    return tmp_path / "identity.key"  # made by the agent


def _agent(tmp_path: Path, kube: SlowKube, **config: Any) -> Agent:
    cfg = AgentConfig(node=ME, identity_file=_key(tmp_path), carry_interval_s=0.3, api_timeout_s=0.5, **config)
    agent = Agent(config=cfg, client=kube)  # type: ignore[arg-type]
    agent.carrier.poll_s = 0.05
    agent.carrier.retry_s = 0.1
    return agent




def _alive(agent: Agent, *nodes: NodeName, seq: int = 1) -> None:
    """The peers' heartbeats have just been received (their last sign of life is now)."""
    for node in nodes:
        hb = sign_heartbeat(origin=node, incarnation=1, seq=seq, kubelet_ok=True, cloud_ok=False, alive=[node],
                            dead=[], keyring=ring(node))
        agent.peers.book.offer(hb, now=time.monotonic(), age_s=0.1)


async def _heartbeats(agent: Agent, *nodes: NodeName, every_s: float = 0.1) -> None:
    """The peers keep sending heartbeats (a new life sign every ``every_s``)."""
    seq = 1
    while True:
        seq += 1
        _alive(agent, *nodes, seq=seq)
        await asyncio.sleep(every_s)


def _decisions(*nodes: NodeName) -> dict[NodeName, Decision]:
    return {n: Decision(subject=n, verdict=Verdict.HEALTHY, alive_count=3, dead_count=0, group_size=3, votes_counted=3)
            for n in nodes}


async def _run_for(coro: Any, seconds: float, *also: Any) -> None:
    tasks = [asyncio.create_task(c) for c in (coro, *also)]
    await asyncio.sleep(seconds)
    for task in tasks:
        task.cancel()
    for task in tasks:
        with pytest.raises(asyncio.CancelledError):
            await task


def _renewed(kube: SlowKube, node: NodeName) -> int:
    return sum(1 for _t, n in kube.replaced if n == node)


async def test_a_hanging_status_write_never_delays_carrying(tmp_path: Path) -> None:
    kube = SlowKube()
    kube.hang.add(("patch", "*"))  # every status write (the role condition) hangs
    agent = _agent(tmp_path, kube)
    _alive(agent, C)
    agent.peers.decisions = _decisions(ME, B, C)
    agent.exchange.duties = Duties(carry=frozenset({C}), statements=frozenset({C}), able=True)
    await _run_for(agent.carrier.run(), 2.0, agent.role.run(), agent.own_mark.run(), _heartbeats(agent, C))
    assert _renewed(kube, C) >= 4, kube.replaced  # every 0.3 s, whatever the status writes do


async def test_one_slow_lease_never_delays_another_nodes_carry(tmp_path: Path) -> None:
    kube = SlowKube()
    kube.hang.add(("get", B))  # B's Lease GET never answers
    agent = _agent(tmp_path, kube)
    _alive(agent, B, C, D)
    agent.peers.decisions = _decisions(ME, B, C, D)
    agent.exchange.duties = Duties(carry=frozenset({B, C, D}), statements=frozenset({B, C, D}), able=True)
    started = time.monotonic()
    await _run_for(agent.carrier.run(), 1.6, _heartbeats(agent, B, C, D))
    for node in (C, D):
        first = min(t for t, n in kube.replaced if n == node)
        assert first - started < 0.3, f"{node} waited for {B}"
        assert _renewed(kube, node) >= 4
    assert _renewed(kube, B) == 0
    timeouts = agent.metrics.registry.get_sample_value("edgewatch_agent_delegations_total", {"outcome": "timeout"})
    assert timeouts is not None and timeouts >= 2  # B's attempts were bounded and retried
    # The renewTime written is this node's clock minus the locally measured age of the life sign.
    written = kube.leases[C].spec.renewTime
    assert abs((dt.datetime.now(dt.timezone.utc) - written).total_seconds()) < 2.5


async def test_carrying_stops_and_awaits_when_duties_change(tmp_path: Path) -> None:
    kube = SlowKube()
    metrics = AgentMetrics(CollectorRegistry())
    calls: list[NodeName] = []

    async def renew(*, node: NodeName, alive_at: dt.datetime) -> Any:
        calls.append(node)
        await asyncio.sleep(HANG_S if node == B else 0)
        return type("R", (), {"outcome": "renewed", "detail": ""})()

    wanted = {B, C}

    class Peers:
        """Every node gave a sign of life just now; ``wanted`` are to be carried."""

        def life_sign(self, node: NodeName) -> float:
            return time.monotonic()

        def carry_wanted(self) -> frozenset[NodeName]:
            return frozenset(wanted)

    carrier = HeartbeatCarrier(renew=renew, life_signs=Peers(), wanted=Peers(), metrics=metrics,
                               interval_s=0.1, timeout_s=5.0, poll_s=0.02)
    task = asyncio.create_task(carrier.run())
    await asyncio.sleep(0.3)
    assert set(carrier.tasks) == {B, C}
    b_task = carrier.tasks[B]
    wanted.discard(B)  # B is no longer ours to carry: its hung renewal is cancelled and awaited
    await asyncio.sleep(0.2)
    assert set(carrier.tasks) == {C} and b_task.done() and b_task.cancelled()
    assert metrics.carrying._value.get() == 1  # noqa: SLF001
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not carrier.tasks and metrics.carrying._value.get() == 0  # noqa: SLF001
    assert calls.count(C) >= 3 and kube is not None


async def test_no_carrying_and_no_writes_while_our_own_link_is_down(tmp_path: Path) -> None:
    kube = SlowKube()
    agent = _agent(tmp_path, kube)
    _alive(agent, C)
    agent.peers.decisions = _decisions(ME, C)
    agent.exchange.duties = Duties(carry=frozenset({C}), statements=frozenset({C}), able=True)
    agent.link.state = type(agent.link.state)(up=False)
    await _run_for(agent.carrier.run(), 1.2, agent.role.run(), agent.own_mark.run())
    assert kube.replaced == [] and kube.patched == []


def test_carrier_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        HeartbeatCarrier(renew=lambda **_: None, life_signs=None, wanted=None,  # type: ignore[arg-type,return-value]
                         metrics=AgentMetrics(CollectorRegistry()), interval_s=0, timeout_s=1)


async def test_own_stale_mark_is_looked_for_until_our_kubelet_has_renewed(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Right after our link is back the mark is still current (our kubelet has not renewed yet):
    keep looking, and stop once it is removed."""
    import edgewatch.agent.ownmark as ownmark_module

    answers = iter([False, False, True])
    calls: list[str] = []

    async def clear(*, client: Any, node: str) -> bool:
        calls.append(node)
        return next(answers, False)

    monkeypatch.setattr(ownmark_module, "clear_stale_mark", clear)
    agent = _agent(tmp_path, SlowKube())
    agent.own_mark.every_s, agent.own_mark.window_s = 0.05, 5.0
    await _run_for(agent.own_mark.run(), 0.6)
    assert calls == [ME, ME, ME]  # looked until it was removed, then stopped


async def test_a_probe_refused_anonymously_asks_again_with_the_token_and_keeps_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """An apiserver with anonymous requests off (``--anonymous-auth=false``) answers 401 without a
    token: the probe asks again at once with it, and sends it from then on (a loopback HTTP
    server stands in for that apiserver)."""
    from aiohttp import web

    from edgewatch.agent.cloudlink import ApiserverProbe
    from edgewatch.kube.client import api_client

    seen: list[str | None] = []

    async def readyz(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.Response(text="ok") if request.headers.get("Authorization") else web.Response(status=401)

    app = web.Application()
    app.router.add_get("/readyz", readyz)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    (tmp_path / "kc").write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {token: the-token}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n")
    client = api_client(str(tmp_path / "kc"))
    try:
        probe = ApiserverProbe(client=client)
        assert await probe() is True and not probe.anonymous
        assert await probe() is True
        assert seen == [None, "Bearer the-token", "Bearer the-token"]
    finally:
        await client.close()
        await runner.cleanup()

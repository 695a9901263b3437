"""The edge agent, composed: membership, cloud link, peer exchange, verdict publishing, heartbeat
carrying (peer path and, with ``--coordinator``, the pool coordinator), and the ops endpoints.

Structure: one ``asyncio.TaskGroup``; every loop is a task in it and all are cancelled and awaited
on shutdown. Two loops do the periodic work:

- the **exchange loop** (every ``exchange_period_s``): kubelet health, sign our heartbeat, exchange
  with peers, decide verdicts, compute duties. It never waits on the cloud, so a slow or cut link
  never delays the edge's own judgement;
- the **cloud loop** (every second): publishes EdgeHealthy for the nodes this agent writes for,
  renews the Leases of the cut-off peers it carries, and clears a stale delegate mark from its own
  Lease once its own link is back. Level-triggered: it acts on the newest duties, never on a queue
  of past ones.

Ops endpoints on the peer port: ``/healthz`` (the loops run), ``/readyz`` (the node list is known
and a period has completed), ``/metrics`` (Prometheus).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import httpx2 as httpx
from aiohttp import web
from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Node
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from edgewatch.agent.cloudlink import CloudLinkMonitor
from edgewatch.agent.config import AgentConfig
from edgewatch.agent.coordinator import PoolCoordinator
from edgewatch.agent.delegation import RenewOutcome, clear_stale_mark, renew_on_behalf
from edgewatch.agent.membership import Membership
from edgewatch.agent.metrics import AgentMetrics
from edgewatch.agent.peers import EXCHANGE_PATH, PeerExchange
from edgewatch.agent.publisher import ConditionPublisher
from edgewatch.core.duties import Duties, PeerReport, assign_duties
from edgewatch.core.signing import Keyring, load_keyring
from edgewatch.core.types import Health, NodeName, Verdict
from edgewatch.names import POOL_LABEL, ROLE_CONDITION_TYPE

log = logging.getLogger(__name__)


async def apiserver_ready(client: AsyncClient) -> bool:
    """GET /readyz on the apiserver with the client's own TLS and credentials.

    /readyz is readable by everyone (system:public-info-viewer) and costs the apiserver no etcd
    read, so probing it every 2 s from every node is cheap. Uses lightkube's underlying httpx client.
    """
    http = client._client._client  # lightkube AsyncClient -> GenericAsyncClient -> httpx AsyncClient
    resp = await http.get("/readyz")
    return resp.status_code == 200


class KeyringFile:
    """The HMAC keyring, re-read when the mounted Secret file changes (key rotation without restart)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._mtime = path.stat().st_mtime_ns
        self.keyring = load_keyring(path)

    def __call__(self) -> Keyring:
        return self.keyring

    def reload_if_changed(self) -> bool:
        """Re-read the file if it changed; a broken file keeps the old keyring (logged)."""
        try:
            mtime = self.path.stat().st_mtime_ns
            if mtime == self._mtime:
                return False
            self.keyring = load_keyring(self.path)
            self._mtime = mtime
            log.info("reloaded keyring from %s: key ids %s", self.path, list(self.keyring.key_ids))
            return True
        except (OSError, ValueError) as exc:
            log.error("keeping the old keyring: cannot load %s: %s", self.path, exc)
            return False


@dataclass(frozen=True)
class AgentSnapshot:
    """What the agent knows right now, for status, tests and the playground."""

    node: NodeName
    group: frozenset[NodeName]
    kubelet_ok: bool
    cloud_ok: bool
    verdicts: dict[NodeName, Verdict]
    peer_health: dict[NodeName, Health]
    duties: Duties | None
    role: str | None


class Agent:
    """One edge agent.

    Args:
        config: settings (see ``AgentConfig``).
        client: API client for this node's identity.
        registry: Prometheus registry (a fresh one by default; many agents may share a process).
    """

    def __init__(self, *, config: AgentConfig, client: AsyncClient, registry: CollectorRegistry | None = None) -> None:
        self.config = config
        self.client = client
        self.registry = registry or CollectorRegistry()
        self.metrics = AgentMetrics(self.registry)
        self.keyring = KeyringFile(config.key_file)
        self.membership = Membership(client=client, namespace=config.namespace, state_dir=config.state_dir,
                                     on_reject=lambda r: self.metrics.config_rejected.labels(reason=r).inc())
        self.link = CloudLinkMonitor(probe=lambda: apiserver_ready(client), config=config.cloud_link,
                                     on_change=lambda up: self.metrics.cloud_link_up.set(1 if up else 0))
        self.metrics.cloud_link_up.set(1)
        self.peers = PeerExchange(me=config.node, config=config, keyring=self.keyring, membership=self.membership,
                                  metrics=self.metrics, cloud_ok=lambda: self.link.up)
        self.publisher = ConditionPublisher(client=client, me=config.node, membership=self.membership,
                                            metrics=self.metrics, refresh_s=config.publish_refresh_s)
        self.duties: Duties | None = None
        self.coordinator: PoolCoordinator | None = None
        self._carried_at: dict[NodeName, float] = {}
        self._check_own_mark = True
        self._role_written: tuple[tuple[object, ...], float] | None = None
        self.started = asyncio.Event()

    # -- queries --------------------------------------------------------------------------------------

    def _verdict_of(self, node: str) -> str:
        decision = self.peers.decisions.get(NodeName(node))
        return decision.verdict.value if decision else Verdict.UNKNOWN.value

    def snapshot(self) -> AgentSnapshot:
        """The agent's current view (cheap; for status and tests)."""
        now = time.monotonic()
        return AgentSnapshot(
            node=self.config.node, group=self.peers.group, kubelet_ok=self.peers.kubelet_ok, cloud_ok=self.link.up,
            verdicts={n: d.verdict for n, d in self.peers.decisions.items()},
            peer_health={n: d.state(now=now) for n, d in self.peers.detectors.items()},
            duties=self.duties, role=str(self.coordinator.role) if self.coordinator else None,
        )

    # -- main -------------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Run every loop until cancelled; shut down cleanly (all tasks cancelled and awaited)."""
        connector = None
        if self.config.listen_address not in ("0.0.0.0", "::"):
            # Talk from our own address, so peers can bind our messages to our InternalIP.
            connector = aiohttp.TCPConnector(local_addr=(self.config.listen_address, 0))
        async with aiohttp.ClientSession(connector=connector) as session:
            runner = await self._start_server()
            try:
                async with asyncio.TaskGroup() as tg:
                    tg.create_task(self.membership.run())
                    tg.create_task(self.link.run())
                    tg.create_task(self._exchange_loop(session))
                    tg.create_task(self._cloud_loop())
                    tg.create_task(self._keyring_loop())
                    if self.config.coordinator_url:
                        tg.create_task(self._run_coordinator(self.config.coordinator_url))
                    self.started.set()
            finally:
                await runner.cleanup()

    async def _run_coordinator(self, url: str) -> None:
        """Join the pool coordinator; the pool is ``--pool`` or this node's ``edgewatch.io/pool`` label."""
        pool = self.config.pool
        while pool is None:
            info = self.membership.nodes.get(self.config.node)
            if info is not None:
                pool = info.labels.get(POOL_LABEL) or "default"
            else:
                await asyncio.sleep(1)
        self.coordinator = PoolCoordinator(url=url, pool=pool, node=self.config.node, kube=self.client,
                                           cloud_ok=lambda: self.link.up, verdict_of=self._verdict_of,
                                           tls=self.config.coordinator_tls, registry=self.registry)
        log.info("joining pool %s through coordinator %s", pool, url)
        await self.coordinator.run()

    async def _start_server(self) -> web.AppRunner:
        app = web.Application(client_max_size=self.config.wire.max_bytes + 1024)
        app.router.add_post(EXCHANGE_PATH, self.peers.handle)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, self.config.listen_address, self.config.port).start()
        log.info("agent %s listening on %s:%d", self.config.node, self.config.listen_address, self.config.port)
        return runner

    async def _healthz(self, _req: web.Request) -> web.Response:
        return web.Response(text="ok\n") if self.started.is_set() else web.Response(status=503, text="starting\n")

    async def _readyz(self, _req: web.Request) -> web.Response:
        known = self.membership.synced.is_set() or bool(self.membership.nodes)
        if known and self.peers.periods > 0:
            return web.Response(text="ok\n")
        return web.Response(status=503, text="node list not known yet\n" if not known else "no period yet\n")

    async def _metrics(self, _req: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _keyring_loop(self) -> None:
        while True:
            await asyncio.sleep(10)
            self.keyring.reload_if_changed()

    async def _kubelet_ok(self, session: aiohttp.ClientSession) -> bool:
        try:
            async with session.get(self.config.kubelet_healthz_url, timeout=aiohttp.ClientTimeout(total=0.5)) as resp:
                return resp.status == 200
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            return False

    async def _exchange_loop(self, session: aiohttp.ClientSession) -> None:
        period = self.config.votes.exchange_period_s
        while True:
            started = time.monotonic()
            self.peers.kubelet_ok = await self._kubelet_ok(session)
            decisions = await self.peers.run_period(session)
            self._update_duties()
            self._export(decisions)
            self.metrics.period_seconds.set(time.monotonic() - started)
            await asyncio.sleep(max(0.0, period - (time.monotonic() - started)))

    def _reports(self) -> dict[NodeName, PeerReport | None]:
        now = time.monotonic()
        ttl = self.config.votes.vote_ttl_s
        reports: dict[NodeName, PeerReport | None] = {}
        for member in self.peers.group:
            entry = self.peers.book.get(member)
            if entry is not None and now - entry.received_at <= ttl:
                reports[member] = PeerReport(cloud_ok=entry.heartbeat.cloud_ok, kubelet_ok=entry.heartbeat.kubelet_ok)
        return reports

    def _update_duties(self) -> None:
        if not (self.membership.synced.is_set() or self.membership.nodes):
            return  # without the node list our "group" is just us: no cloud duties on that basis
        carry_enabled = self.coordinator is None or not self.coordinator.covers_delegation()
        self.duties = assign_duties(me=self.config.node, group=self.peers.group,
                                    verdicts={n: d.verdict for n, d in self.peers.decisions.items()},
                                    reports=self._reports(), carry_enabled=carry_enabled)
        self.metrics.carrying.set(len(self.duties.carry))

    def _export(self, decisions: dict) -> None:  # type: ignore[type-arg]
        verdicts = tuple(v.value for v in Verdict)
        healths = tuple(h.value for h in Health)
        now = time.monotonic()
        for node, decision in decisions.items():
            self.metrics.set_state(self.metrics.verdict, node=node, label="verdict", value=decision.verdict.value,
                                   values=verdicts)
        for node, detector in self.peers.detectors.items():
            self.metrics.set_state(self.metrics.peer_health, node=node, label="health",
                                   value=detector.state(now=now).value, values=healths)

    async def _cloud_loop(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            if not self.link.up:
                self._check_own_mark = True
                continue
            duties = self.duties
            if duties is None:
                continue
            await self.publisher.publish(duties.publish, self.peers.decisions)
            await self._carry(duties.carry)
            await self._publish_role()
            if self._check_own_mark:
                with contextlib.suppress(ApiError, httpx.HTTPError, OSError):
                    if await clear_stale_mark(client=self.client, node=self.config.node):
                        log.info("removed the stale delegate mark from our own Lease")
                    self._check_own_mark = False

    async def _publish_role(self) -> None:
        """Show this node's pool-coordinator role on its own Node (condition ``EdgePoolCoordinator``,
        for ``kubectl describe node`` and ``edgewatch status``): on change, else every minute."""
        coordinator = self.coordinator
        if coordinator is None:
            return
        role = str(coordinator.role)
        value = (role, coordinator.healthy, coordinator.ready, coordinator.leader)
        now = time.monotonic()
        if self._role_written is not None and self._role_written[0] == value and now - self._role_written[1] < 60:
            return
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        state = "ready" if coordinator.ready else ("healthy" if coordinator.healthy else "unreachable")
        body = {"status": {"conditions": [{
            "type": ROLE_CONDITION_TYPE, "status": "True" if coordinator.healthy else "False",
            "reason": role.capitalize(), "lastHeartbeatTime": stamp, "lastTransitionTime": stamp,
            "message": f"pool {coordinator.pool}: {role}; leader {coordinator.leader or 'none'}; coordinator {state}",
        }]}}
        try:
            await self.client.patch(Node.Status, self.config.node, body)
            self._role_written = (value, now)
        except (ApiError, httpx.HTTPError, OSError) as exc:
            log.info("writing %s failed: %s", ROLE_CONDITION_TYPE, exc or type(exc).__name__)

    async def _carry(self, carry: frozenset[NodeName]) -> None:
        now = time.monotonic()
        for gone in set(self._carried_at) - carry:
            log.info("stopped carrying %s", gone, extra={"kind": "carry_stop", "peer": gone})
            del self._carried_at[gone]
        for peer in sorted(carry):
            last = self._carried_at.get(peer)
            if last is not None and now - last < self.config.carry_interval_s:
                continue
            entry = self.peers.book.get(peer)
            if entry is None:
                continue
            # The peer's last life sign, on the wall clock: its newest heartbeat's receipt time.
            alive_at = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=time.monotonic() - entry.received_at)
            result = await renew_on_behalf(client=self.client, node=peer, delegate=self.config.node, via="peer",
                                           alive_at=alive_at)
            self.metrics.delegations.labels(outcome=result.outcome.value).inc()
            if result.outcome is RenewOutcome.RENEWED:
                if last is None:
                    log.info("carrying the heartbeat of %s", peer, extra={"kind": "carry_start", "peer": peer})
                self._carried_at[peer] = now
            else:
                log.info("carrying %s: %s %s", peer, result.outcome.value, result.detail)


def configure_logging(*, level: str, json_logs: bool) -> None:
    """Structured logs: JSON lines (default in containers) or key=value text for terminals."""
    import structlog

    renderer = structlog.processors.JSONRenderer() if json_logs else structlog.dev.ConsoleRenderer(colors=False)
    formatter = structlog.stdlib.ProcessorFormatter(
        processor=renderer,
        foreign_pre_chain=[structlog.processors.TimeStamper(fmt="iso"), structlog.stdlib.add_log_level,
                           structlog.stdlib.ExtraAdder()],
    )
    handler = logging.StreamHandler()
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("httpx", "httpx2", "aiohttp.access", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

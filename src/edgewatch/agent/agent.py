"""The edge agent, composed: identity, membership, cloud link, peer exchange, signed evidence for
the controller, heartbeat carrying (peer path and the pool coordinator), and the ops endpoints.

Structure: one ``asyncio.TaskGroup``; every loop is a task in it (loops with sub-tasks have their own
TaskGroup inside), and all are cancelled and awaited on shutdown.

- the **exchange loop** (every ``exchange_period_s``): kubelet health, sign our heartbeat, exchange
  with peers, decide verdicts, compute duties. It never waits on the cloud, so a slow or cut link
  never delays the edge's own judgement;
- the **cloud loops**, independent of each other so a slow apiserver call in one never delays
  another, each call bounded by ``api_timeout_s``, all level-triggered (they act on the newest
  duties, never on a queue of past ones):
  - *evidence* (``edgewatch.agent.reporter``): this node's signed statement, and those of the
    cut-off peers it carries, in its own Lease ``edgewatch-nodes/<node>`` (on change, at least every
    10 s). The controller verifies and counts them itself and shows the verdict in the
    ``EdgeHealthy`` condition; agents no longer write any verdict;
  - *carry* (``edgewatch.agent.carrier``): one task per carried cut-off peer renewing its Lease
    every ``carry_interval_s``;
  - *role* (every second): this node's ``EdgePoolCoordinator`` condition, on change or every ten minutes;
  - *own mark*: clears a stale delegate mark from our own Lease once our link is back (looking
    every 2 s for 90 s, since the mark goes stale only when our kubelet renews by itself);
- the **identity loop** (``edgewatch.agent.identity``): publishes this node's public key and keeps
  every other node's current for the peer wire;
- the **coordinator loop**: runs the pool coordinator for ``--coordinator URL``, or — without it —
  for this node's pool's entry in the ConfigMap's ``poolCoordinators`` (pool: ``--pool`` or the node
  label ``edgewatch.io/pool``). A change of the entry or of the label restarts the coordinator
  session with the new URL or pool, live (leadership is released first).

Peer traffic leaves from the listen address, or — listening on a wildcard address (0.0.0.0, the
DaemonSet's hostNetwork default) — from this node's InternalIP once its own Node is read (peers
bind a sender to its InternalIP), if that address is local; otherwise the kernel picks the source.

Ops endpoints on the peer port: ``/healthz`` (the loops run), ``/readyz`` (the group roster is known
and a period has completed), ``/metrics`` (Prometheus). The port's server bounds connections per
source and of strangers, and the time to read a request (``edgewatch.agent.peerserver``).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import socket
import ssl
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from edgewatch.agent.cachehost import PoolCacheHost
from edgewatch.agent.carrier import HeartbeatCarrier
from edgewatch.agent.cloudclock import CloudClock
from edgewatch.agent.cloudlink import CloudLinkMonitor
from edgewatch.agent.config import AgentConfig
from edgewatch.agent.coordinator import CoordinatorError, PoolCoordinator
from edgewatch.agent.identity import IdentityKeeper
from edgewatch.agent.reporter import EvidenceReporter
from edgewatch.agent.membership import Membership
from edgewatch.agent.metrics import AgentMetrics
from edgewatch.agent.peers import EXCHANGE_PATH, PeerExchange
from edgewatch.agent.peerserver import KnownSources, PeerServer
from edgewatch.core.duties import Duties, assign_duties
from edgewatch.core.beacon import BeaconHolder
from edgewatch.core.wire import Heartbeat
from edgewatch.core.identity import NodeKeyring, load_or_create_key_file
from edgewatch.core.types import Health, NodeName, Verdict
from edgewatch.leases import RenewOutcome, clear_stale_mark, renew_on_behalf
from edgewatch.names import POOL_LABEL, ROLE_CONDITION_TYPE
from edgewatch.poolcache.apiserver import Upstream
from edgewatch.poolcache.resources import PoolResource
from edgewatch.kube.errors import API_ERRORS
from edgewatch.kube.http import http_client_of

log = logging.getLogger(__name__)


async def apiserver_ready(client: AsyncClient) -> bool:
    """GET /readyz on the apiserver with the client's own TLS and credentials.

    /readyz is readable by everyone (system:public-info-viewer) and costs the apiserver no etcd
    read, so probing it every 2 s from every node is cheap. Uses lightkube's underlying httpx client.
    """
    http = http_client_of(client)
    if http is None:
        raise TypeError("the cloud link probe needs a lightkube AsyncClient")
    resp = await http.get("/readyz")
    return resp.status_code == 200


ROLE_REFRESH_S = 600.0
"""Seconds between two writes of an unchanged ``EdgePoolCoordinator`` condition (ten minutes)."""


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

    def __init__(self, *, config: AgentConfig, client: AsyncClient, registry: CollectorRegistry | None = None,
                 cloud_endpoint: tuple[str, ssl.SSLContext | None] | None = None) -> None:
        self.config = config
        self.client = client
        self.registry = registry or CollectorRegistry()
        self.metrics = AgentMetrics(self.registry)
        self.keyring = NodeKeyring(node=config.node, keys=load_or_create_key_file(config.identity_file))
        self.identity = IdentityKeeper(client=client, keyring=self.keyring, namespace=config.identity_namespace,
                                       state_dir=config.state_dir,
                                       on_reject=lambda r: self.metrics.key_records_rejected.labels(reason=r).inc(),
                                       on_event=lambda: self.metrics.watch_events.labels(resource="keys").inc())
        self.membership = Membership(client=client, node=config.node, namespace=config.namespace,
                                     state_dir=config.state_dir,
                                     on_reject=lambda r: self.metrics.config_rejected.labels(reason=r).inc(),
                                     on_save_error=lambda r: self.metrics.state_save_failures.labels(reason=r).inc(),
                                     on_event=lambda r: self.metrics.watch_events.labels(resource=r).inc())
        self.link = CloudLinkMonitor(probe=lambda: apiserver_ready(client), config=config.cloud_link,
                                     on_change=self._cloud_link_changed)
        self.metrics.cloud_link_up.set(1)
        self.beacon = BeaconHolder()
        self.peers = PeerExchange(me=config.node, config=config, keyring=lambda: self.keyring, membership=self.membership,
                                  metrics=self.metrics, cloud_ok=lambda: self.link.up, beacon=self.beacon,
                                  pool_leader=self._pool_leader)
        self.evidence_carry: frozenset[NodeName] = frozenset()
        # carried renewTimes are written in the controller's clock (the apiserver bounds them by it)
        self.cloud_clock = CloudClock()
        self.reporter = EvidenceReporter(
            client=client, node=config.node, beacon=self.beacon, own=lambda: self.peers.own,
            carried=self._carried_statements, cloud_ok=lambda: self.link.up,
            on_write=lambda r: self.metrics.evidence_writes.labels(result=r).inc(),
            config_namespace=config.namespace, namespace=config.identity_namespace, state_dir=config.state_dir,
            timeout_s=config.api_timeout_s,
            on_event=lambda: self.metrics.watch_events.labels(resource="beacon").inc(), cloud_clock=self.cloud_clock)
        self.carrier = HeartbeatCarrier(renew=self._renew_for_peer, life_sign=self._life_sign, metrics=self.metrics,
                                        interval_s=config.carry_interval_s, timeout_s=config.api_timeout_s,
                                        wall=self.cloud_clock.now)
        self.duties: Duties | None = None
        self.coordinator: PoolCoordinator | None = None
        self.coordinator_target: tuple[str, str, tuple[PoolResource, ...]] | None = None  # (url, pool, cached)
        self._coordinator_collectors: list[object] = []
        self._role_written: tuple[tuple[object, ...], float] | None = None
        self.started = asyncio.Event()
        self._exported: set[str] = set()  # nodes with per-node metric series
        self.pool_cache: PoolCacheHost | None = None
        http = http_client_of(client)
        if config.pool_cache_port and http is not None:
            self.pool_cache = PoolCacheHost(
                resources=lambda: self.membership.pool_resources if self.membership.config_synced.is_set() else None,
                http=http,
                upstream=Upstream(url=cloud_endpoint[0], ssl=cloud_endpoint[1]) if cloud_endpoint else None,
                coordinator=lambda: self.coordinator, cloud_ok=lambda: self.link.up,
                address=config.pool_cache_address, port=config.pool_cache_port, state_dir=config.state_dir)

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
        async with aiohttp.ClientSession() as local:  # kubelet probe: loopback, no source binding
            server = await self._start_server()
            try:
                async with asyncio.TaskGroup() as tg:
                    tg.create_task(self.membership.run())
                    tg.create_task(self.link.run())
                    tg.create_task(self._exchange_loop(local))
                    tg.create_task(self._cloud_loops())
                    tg.create_task(self.identity.run())
                    tg.create_task(self.reporter.run())
                    tg.create_task(self._coordinator_loop())
                    if self.pool_cache is not None:
                        tg.create_task(self.pool_cache.run())
                    self.started.set()
            finally:
                await server.close()

    # -- pool coordinator ------------------------------------------------------------------------------

    def _pool(self) -> str | None:
        """This node's pool: ``--pool``, else its ``edgewatch.io/pool`` label (None while the node is
        not known, or has no label)."""
        if self.config.pool:
            return self.config.pool
        info = self.membership.own
        return (info.labels.get(POOL_LABEL) or None) if info is not None else None

    def coordinator_wanted(self) -> tuple[str, str, tuple[PoolResource, ...]] | None:
        """The (URL, pool, pool-scope resources its leader caches) the coordinator should run for
        now, or None.

        ``--coordinator URL`` wins (pool: ``--pool``, the node's label, or ``default``, once the node
        is known). Otherwise the ConfigMap's ``poolCoordinators`` entry for this node's pool, once
        the ConfigMap has been read.
        """
        if not self.membership.config_synced.is_set():
            return None  # the ConfigMap names the cached resources
        cached = self.membership.pool_resources
        if self.config.coordinator_url:
            if self.config.pool:
                return (self.config.coordinator_url, self.config.pool, cached)
            if self.membership.own is None:
                return None
            return (self.config.coordinator_url, self._pool() or "default", cached)
        pool = self._pool()
        url = self.membership.pool_coordinators.url_for(pool)
        return (url, pool, cached) if url and pool else None

    async def _coordinator_loop(self, *, poll_s: float = 1.0) -> None:
        """Keep the pool coordinator running for :meth:`coordinator_wanted`; restart it when that
        changes. A coordinator that cannot be built (bad URL or pool name, TLS with http) is logged
        once per target and not run; nothing here ends the agent."""
        refused: tuple[str, str, tuple[PoolResource, ...]] | None = None
        waiting_logged = False
        async with asyncio.TaskGroup() as tg:
            try:
                while True:
                    want = self.coordinator_wanted()
                    if want != self.coordinator_target and (want is None or want != refused):
                        await self._stop_coordinator()
                        refused = None
                        if want is not None and not self._start_coordinator(tg, *want):
                            refused = want  # logged once; tried again only if the target changes
                    if want is None and not self.config.coordinator_url and self.membership.config_synced.is_set() \
                            and self.membership.own is not None and not waiting_logged:
                        log.info("no pool coordinator for pool %s (ConfigMap key poolCoordinators); peer path only",
                                 self._pool() or "(node has no edgewatch.io/pool label)")
                        waiting_logged = True
                    if want is not None:
                        waiting_logged = False
                    await asyncio.sleep(poll_s)
            finally:
                await self._stop_coordinator()

    def _start_coordinator(self, tg: asyncio.TaskGroup, url: str, pool: str, cached: tuple[PoolResource, ...]) -> bool:
        try:
            coordinator = PoolCoordinator(url=url, pool=pool, node=self.config.node, kube=self.client,
                                          cloud_ok=lambda: self.link.up, verdict_of=self._verdict_of,
                                          tls=self.config.coordinator_tls, registry=self._coordinator_registry(),
                                          pool_resources=cached, wall=self.cloud_clock.now)
        except CoordinatorError as exc:
            log.error("not joining pool %s through %s: %s", pool, url, exc,
                      extra={"kind": "coordinator_config", "pool": pool})
            return False
        self.coordinator = coordinator
        self.coordinator_target = (url, pool, cached)
        log.info("joining pool %s through coordinator %s", pool, url, extra={"pool": pool})
        tg.create_task(coordinator.run(), name="pool-coordinator")
        return True

    async def _stop_coordinator(self) -> None:
        coordinator, self.coordinator, self.coordinator_target = self.coordinator, None, None
        if coordinator is not None:
            log.info("leaving pool %s", coordinator.pool, extra={"pool": coordinator.pool})
            await coordinator.close(graceful=True)

    def _coordinator_registry(self) -> CollectorRegistry:
        """Our registry, as seen by a (new) coordinator session: the previous session's collectors
        are unregistered first, since a restarted session registers the same metric names."""
        for collector in self._coordinator_collectors:
            with contextlib.suppress(KeyError):
                self.registry.unregister(collector)  # type: ignore[arg-type]
        self._coordinator_collectors = []
        return _TrackingRegistry(self.registry, self._coordinator_collectors)  # type: ignore[return-value]

    async def _start_server(self) -> PeerServer:
        """The peer port's server (``edgewatch.agent.peerserver``: connection bounds, read deadline)."""
        app = web.Application(client_max_size=self.config.wire.max_bytes + 1024)
        app.router.add_post(EXCHANGE_PATH, self.peers.handle)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        server = PeerServer(app=app, config=self.config.server, host=self.config.listen_address, port=self.config.port,
                            known=KnownSources(membership=self.membership, extra=(self.config.listen_address,)),
                            metrics=self.metrics)
        await server.start()
        log.info("agent %s listening on %s:%d", self.config.node, self.config.listen_address, self.config.port)
        return server

    async def _healthz(self, _req: web.Request) -> web.Response:
        return web.Response(text="ok\n") if self.started.is_set() else web.Response(status=503, text="starting\n")

    async def _readyz(self, _req: web.Request) -> web.Response:
        known = self.membership.synced.is_set() or self.membership.roster is not None
        if known and self.peers.periods > 0:
            return web.Response(text="ok\n")
        return web.Response(status=503, text="group roster not known yet\n" if not known else "no period yet\n")

    async def _metrics(self, _req: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        if self.pool_cache is not None:
            body += generate_latest(self.pool_cache.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _kubelet_ok(self, session: aiohttp.ClientSession) -> bool:
        try:
            async with session.get(self.config.kubelet_healthz_url, timeout=aiohttp.ClientTimeout(total=0.5)) as resp:
                return resp.status == 200
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            return False

    def source_address(self) -> str | None:
        """Where peer traffic should leave from: the listen address, or with a wildcard listen
        address this node's InternalIP (None while unknown: the kernel picks)."""
        if self.config.listen_address not in ("0.0.0.0", "::", ""):
            return self.config.listen_address
        return self.membership.address_of(self.config.node)

    async def _exchange_loop(self, local: aiohttp.ClientSession) -> None:
        period = self.config.votes.exchange_period_s
        source: str | None = None
        session: aiohttp.ClientSession | None = None
        try:
            while True:
                started = time.monotonic()
                wanted = self.source_address()
                if session is None or wanted != source:
                    if session is not None:
                        await session.close()
                    source = wanted
                    session = _peer_session(source)
                self.peers.kubelet_ok = await self._kubelet_ok(local)
                decisions = await self.peers.run_period(session)
                self._update_duties()
                self._export(decisions)
                self.metrics.period_seconds.set(time.monotonic() - started)
                await asyncio.sleep(max(0.0, period - (time.monotonic() - started)))
        finally:
            if session is not None:
                await session.close()

    def _update_duties(self) -> None:
        if not (self.membership.synced.is_set() or self.membership.roster is not None):
            return  # without the roster our "group" is just us: no cloud duties on that basis
        carry_enabled = self.coordinator is None or not self.coordinator.covers_delegation()
        now = time.monotonic()
        self.duties = assign_duties(me=self.config.node, cloud_ok=self.link.up, reachable=self.peers.reachable(now=now),
                                    verdicts={n: d.verdict for n, d in self.peers.decisions.items()},
                                    reports=self.peers.reports(now=now), carry_enabled=carry_enabled)
        # The statements of the cut-off peers that named us go into our evidence whichever path
        # carries their Lease: the controller needs the node's own signed word either way.
        self.evidence_carry = self.duties.statements
        self.metrics.carrying.set(len(self.duties.carry))

    def _carried_statements(self) -> list[Heartbeat]:
        """The newest signed heartbeats of the cut-off peers whose statements we carry."""
        out = []
        for node in sorted(self.evidence_carry):
            entry = self.peers.book.get(node)
            if entry is not None:
                out.append(entry.heartbeat)
        return out

    def _export(self, decisions: dict) -> None:  # type: ignore[type-arg]
        verdicts = tuple(v.value for v in Verdict)
        healths = tuple(h.value for h in Health)
        now = time.monotonic()
        # Series for this node and the peers it watches only (at most 2 * rings + contacts), never
        # the whole group: a 1,000-node group would otherwise cost every agent 6,000 series.
        current = {self.config.node} | set(self.peers.detectors)
        for gone in self._exported - current:  # left the group or no longer watched: drop its series
            self.metrics.forget(gone, verdicts=verdicts, healths=healths)
        self._exported = current
        for node, decision in decisions.items():
            if node not in current:
                continue
            self.metrics.set_state(self.metrics.verdict, node=node, label="verdict", value=decision.verdict.value,
                                   values=verdicts)
        for node, detector in self.peers.detectors.items():
            self.metrics.set_state(self.metrics.peer_health, node=node, label="health",
                                   value=detector.state(now=now).value, values=healths)

    # -- cloud loops ----------------------------------------------------------------------------------

    async def _cloud_loops(self) -> None:
        """The cloud-facing work as independent loops (see the module docstring)."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.carrier.run(self._carry_wanted))
            tg.create_task(self._role_loop())
            tg.create_task(self._own_mark_loop())

    def _cloud_link_changed(self, up: bool) -> None:
        """The link monitor's change notice: the metric, and the pool coordinator at once (it no
        longer polls the link)."""
        self.metrics.cloud_link_up.set(1 if up else 0)
        if self.coordinator is not None:
            self.coordinator.cloud_link_changed()

    def _pool_leader(self) -> NodeName | None:
        """The pool leader while the pool coordinator carries heartbeats (the carrier a cut-off node
        names), else None."""
        leader = self.coordinator.leader if self.coordinator is not None else None
        return NodeName(leader) if leader else None

    def _carry_wanted(self) -> frozenset[NodeName]:
        duties = self.duties
        if duties is None or not self.link.up:
            return frozenset()
        return duties.carry

    def _life_sign(self, node: NodeName) -> float | None:
        """Monotonic time of ``node``'s last sign of life: its newest heartbeat's local receipt
        minus the age it arrived with."""
        entry = self.peers.book.get(node)
        return entry.signed_at if entry is not None else None

    async def _renew_for_peer(self, *, node: NodeName, alive_at: dt.datetime) -> object:
        return await renew_on_behalf(client=self.client, node=node, delegate=self.config.node, via="peer",
                                     alive_at=alive_at)

    async def _role_loop(self, *, every_s: float = 1.0) -> None:
        while True:
            await asyncio.sleep(every_s)
            if self.link.up:
                await self._publish_role()

    async def _own_mark_loop(self, *, every_s: float = 2.0, window_s: float = 90.0) -> None:
        """After our own link comes back (and once at start), remove the stale delegate mark from
        our own Lease. The mark goes stale only when our kubelet renews by itself (up to 10 s later,
        and peers may still carry us until they see our link up), so look every ``every_s`` for
        ``window_s`` seconds (two Lease durations) or until it is removed; each look is bounded."""
        check_until: float | None = time.monotonic() + window_s
        while True:
            await asyncio.sleep(every_s)
            if not self.link.up:
                check_until = None  # start the window when the link is back
                continue
            now = time.monotonic()
            if check_until is None:
                check_until = now + window_s
            if now > check_until:
                continue
            try:
                async with asyncio.timeout(self.config.api_timeout_s):
                    removed = await clear_stale_mark(client=self.client, node=self.config.node)
            except API_ERRORS as exc:
                log.debug("checking our own Lease's mark failed: %s", exc or type(exc).__name__)
                continue
            if removed:
                log.info("removed the stale delegate mark from our own Lease")
                check_until = now  # done for this outage

    async def _publish_role(self) -> None:
        """Show this node's pool-coordinator role on its own Node (condition ``EdgePoolCoordinator``,
        for ``kubectl describe node`` and ``edgewatch status``): on change, else every
        ``ROLE_REFRESH_S``. Every Node write is a watch event for every Node watcher (agents once
        watched every Node: a per-minute refresh cost a 1,000-node pool 1,000 x 1,000 events a
        minute; issue 11)."""
        coordinator = self.coordinator
        if coordinator is None:
            return
        role = str(coordinator.role)
        value = (role, coordinator.healthy, coordinator.ready, coordinator.leader)
        now = time.monotonic()
        if self._role_written is not None and self._role_written[0] == value and now - self._role_written[1] < ROLE_REFRESH_S:
            return
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        state = "ready" if coordinator.ready else ("healthy" if coordinator.healthy else "unreachable")
        body = {"status": {"conditions": [{
            "type": ROLE_CONDITION_TYPE, "status": "True" if coordinator.healthy else "False",
            "reason": role.capitalize(), "lastHeartbeatTime": stamp, "lastTransitionTime": stamp,
            "message": f"pool {coordinator.pool}: {role}; leader {coordinator.leader or 'none'}; coordinator {state}",
        }]}}
        try:
            async with asyncio.timeout(self.config.api_timeout_s):
                await self.client.patch(Node.Status, self.config.node, body)
            self._role_written = (value, now)
        except API_ERRORS as exc:
            log.info("writing %s failed: %s", ROLE_CONDITION_TYPE, exc or type(exc).__name__)


class _TrackingRegistry:
    """Forwards ``register``/``unregister`` to a registry and remembers what was registered (the
    only calls prometheus_client's metric constructors make on a registry)."""

    def __init__(self, registry: CollectorRegistry, collectors: list[object]) -> None:
        self._registry = registry
        self._collectors = collectors

    def register(self, collector: object) -> None:
        self._registry.register(collector)  # type: ignore[arg-type]
        self._collectors.append(collector)

    def unregister(self, collector: object) -> None:
        self._registry.unregister(collector)  # type: ignore[arg-type]


def _bindable(address: str) -> bool:
    """Whether this host can send from ``address`` (it is one of its own addresses)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((address, 0))
        return True
    except OSError:
        return False


def _peer_session(source: str | None) -> aiohttp.ClientSession:
    """A client session for peer exchanges that sends from ``source`` (so peers can bind our
    messages to our InternalIP), or from whatever the kernel picks if ``source`` is None or not an
    address of this host."""
    if source is not None and not _bindable(source):
        log.warning("cannot send peer traffic from %s (not an address of this host); letting the kernel "
                    "choose — peers refuse our messages unless that is our InternalIP", source)
        source = None
    connector = aiohttp.TCPConnector(local_addr=(source, 0)) if source else None
    return aiohttp.ClientSession(connector=connector)

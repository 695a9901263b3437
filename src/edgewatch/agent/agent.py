"""The edge agent, composed: identity, membership, cloud link, peer exchange, signed evidence for
the controller, heartbeat carrying (peer path and the pool coordinator), and the ops endpoints.

Structure: :class:`Agent` is the composition root and nothing more. It builds the parts in
dependency order, hands each one the objects it reads (typed by small Protocols: the shared ones in
``edgewatch.agent.ports``, the others in the module that consumes them), subscribes the listeners of
the one event (the cloud link's flips), and runs every part's loop as a task of one
``asyncio.TaskGroup``; on shutdown every task is cancelled and awaited (a part with sub-tasks keeps
its own TaskGroup inside). No part reaches back into the agent, and data flows one way: a part reads
its producers' current state, or is told of a change.

The parts, in the order they are built (each reads only parts built before it):

- **metrics** (``edgewatch.agent.metrics``): also the sink of every part's events (watch events,
  refused configuration and keys, failed saves, evidence writes, the cloud link's flips);
- **cloud link** (``edgewatch.agent.cloudlink``): GET /readyz every 2 s, with hysteresis; read as
  ``link.up`` by the parts below, and it tells its subscribers when it flips;
- **membership** (``edgewatch.agent.membership``): the own Node, the ConfigMap and the group's
  roster, kept by watches;
- **identity** (``edgewatch.agent.identity``): publishes this node's public key and exchange key
  and keeps every other node's current for the peer wire;
- **liveness datagrams** (``edgewatch.agent.datagrams``): the peer port's UDP side, peer protocol
  v6's 36-byte liveness datagram to each peer of the exchange every period; a peer's proofs of
  life feed its failure detector once they arrive, and its statements are then exchanged only on
  change, on a pull and every ``wire.statement_refresh_s`` (``edgewatch.agent.statementcadence``);
- **peer exchange** (``edgewatch.agent.peers``): detectors, heartbeat book, the exchange protocol,
  the local verdicts;
- **coordinator runner** (``edgewatch.agent.coordinating``): runs the pool coordinator for
  ``--coordinator URL`` or this node's pool's entry in the ConfigMap's ``poolCoordinators``,
  restarting it live when that changes (leadership is released first);
- **exchange loop** (``edgewatch.agent.exchangeloop``, every ``exchange_period_s``): kubelet health,
  one peer exchange, verdicts, this node's duties. It never waits on the cloud, so a slow or cut
  link never delays the edge's own judgement;
- the **cloud loops**, independent of each other so a slow apiserver call in one never delays
  another, each call bounded by ``api_timeout_s``, all level-triggered (they act on the newest
  duties, never on a queue of past ones):
  - *evidence* (``edgewatch.agent.reporter``): this node's signed statement, and those of the
    cut-off peers it carries, in its own Lease ``edgewatch-nodes/<node>`` (on change, at least every
    10 s), and the controller's beacon it signs with. The controller verifies and counts them
    itself and shows the verdict in the ``EdgeHealthy`` condition; agents write no verdict;
  - *carry* (``edgewatch.agent.carrier``): one task per carried cut-off peer renewing its Lease
    every ``carry_interval_s``;
  - *role* (``edgewatch.agent.role``, every second): this node's ``EdgePoolCoordinator`` condition,
    on change or every ten minutes;
  - *own mark* (``edgewatch.agent.ownmark``): clears a stale delegate mark from our own Lease once
    our link is back;
- **pool cache** (``edgewatch.agent.cachehost``, with ``pool_cache_port``): the node's pool-scope
  caches and their local endpoint;
- **coordinator certificate** (``edgewatch.agent.certrequester``, with
  ``coordinator_client_certificate``): this node's client certificate for the pool coordinator,
  requested from the controller's signer, stored and rotated; the coordinator runner is told of every
  new one and its sessions authenticate with it (``edgewatch.agent.coordinating``).

Ops endpoints on the peer port (``edgewatch.agent.ops``): ``/healthz`` (the loops run), ``/readyz``
(the group roster is known and a period has completed), ``/metrics`` (Prometheus). The port's server
bounds connections per source and of strangers, and the time to read a request
(``edgewatch.agent.peerserver``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import ssl
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from edgewatch.agent.cachehost import PoolCacheHost
from edgewatch.agent.carrier import HeartbeatCarrier, PeerPathRenewal
from edgewatch.agent.certrequester import CertificateRequester
from edgewatch.agent.certstore import CertificateFiles
from edgewatch.agent.clockreader import ControlPlaneClockReader
from edgewatch.agent.cloudclock import CloudClock
from edgewatch.agent.cloudlink import ApiserverProbe, CloudLinkMonitor
from edgewatch.agent.config import AgentConfig
from edgewatch.agent.coordinating import CoordinatorRunner, Target
from edgewatch.agent.datagrams import LivenessEndpoint
from edgewatch.waits import stop_task
from edgewatch.agent.exchangeserver import ExchangeServer
from edgewatch.agent.exchangeloop import ExchangeLoop
from edgewatch.agent.identity import IdentityKeeper
from edgewatch.agent.membership import Membership
from edgewatch.agent.metrics import AgentMetrics
from edgewatch.agent.ops import Exported, OpsEndpoints
from edgewatch.agent.ownmark import OwnMarkCleaner
from edgewatch.agent.peers import EXCHANGE_PATH, PeerExchange
from edgewatch.agent.peerserver import KnownSources, PeerServer
from edgewatch.agent.reporter import EvidenceReporter
from edgewatch.agent.role import RolePublisher
from edgewatch.core.beacon import BeaconHolder
from edgewatch.core.duties import Duties
from edgewatch.core.identity import NodeKeyring, load_or_create_key_file
from edgewatch.core.pairkey import ExchangeKey
from edgewatch.core.types import Health, NodeName, Verdict
from edgewatch.kube.api import AsyncClient
from edgewatch.kube.http import http_client_of
from edgewatch.metricsauth import MetricsGuard
from edgewatch.poolcache.apiserver import Upstream

if TYPE_CHECKING:  # imported by the coordinator runner when a coordinator starts (gRPC)
    from edgewatch.agent.coordinator.pool import PoolCoordinator

log = logging.getLogger(__name__)

__all__ = ["Agent", "AgentSnapshot"]

SHUTDOWN_RECANCEL_S = 15.0
"""On shutdown, a part still running this many seconds after its cancellation dropped it: it is
named in a warning, with its stack, and cancelled again (longer than any part's own bounded
clean-up: the pool coordinator's release of its leadership takes at most a few seconds)."""

CERTIFICATE_WANTED_POLL_S = 1.0
"""How often the agent checks whether it needs its coordinator client certificate yet (its pool
turned ``auto``), seconds."""


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
    """One edge agent: builds its parts (see the module docstring) and runs them.

    Args (keyword-only):
        config: settings (see ``AgentConfig``).
        client: API client for this node's identity.
        registry: Prometheus registry (a fresh one by default; many agents may share a process).
        cloud_endpoint: the apiserver's URL and TLS context, where the pool cache forwards what it
            does not cache (None: nothing is forwarded).

    Raises:
        OSError, ValueError: the identity file cannot be read or created (``load_or_create_key_file``).
    """

    def __init__(self, *, config: AgentConfig, client: AsyncClient, registry: CollectorRegistry | None = None,
                 cloud_endpoint: tuple[str, ssl.SSLContext | None] | None = None) -> None:
        self.config = config
        self.client = client
        self.registry = registry or CollectorRegistry()
        self.started = asyncio.Event()
        self.metrics = AgentMetrics(self.registry)
        self.keyring = NodeKeyring(node=config.node, keys=load_or_create_key_file(config.identity_file))
        # peer protocol v6: the X25519 key of this node's pair keys, derived from its signing key
        self.exchange_key = ExchangeKey.derived_from(self.keyring.own_keys[0])
        # carried renewTimes are written on the control plane's clock (the apiserver bounds them by it)
        self.cloud_clock = CloudClock()
        self.beacon = BeaconHolder()

        self.link = CloudLinkMonitor(probe=ApiserverProbe(client=client), config=config.cloud_link)
        self.membership = Membership(client=client, node=config.node, namespace=config.namespace,
                                     state_dir=config.state_dir, events=self.metrics)
        self.identity = IdentityKeeper(client=client, keyring=self.keyring, namespace=config.identity_namespace,
                                       state_dir=config.state_dir, events=self.metrics, exchange_key=self.exchange_key)
        news = asyncio.Event()  # the peer exchange wakes the reporter: new suspicions are written at once
        self.peers = PeerExchange(me=config.node, config=config, keyring=self.keyring, membership=self.membership,
                                  metrics=self.metrics, link=self.link, beacon=self.beacon, news=news)
        self.liveness = LivenessEndpoint(me=config.node, key=self.exchange_key, keys=self.identity,
                                         host=config.listen_address, port=config.port, events=self.metrics,
                                         statements=self.peers)
        self.coordinators = CoordinatorRunner(
            node=config.node, url=config.coordinator_url, pool=config.pool, tls=config.coordinator_tls, kube=client,
            registry=self.registry, link=self.link, verdicts=self.peers, signer=self.keyring, settings=self.membership,
            clock=self.cloud_clock, namespace=config.namespace, api_timeout_s=config.api_timeout_s,
            node_certificate=CertificateFiles.under(config.state_dir) if config.state_dir is not None else None,
            certificate_always=config.coordinator_client_certificate)
        self.exchange = ExchangeLoop(
            node=config.node, listen_address=config.listen_address, kubelet_healthz_url=config.kubelet_healthz_url,
            period_s=config.votes.exchange_period_s, peers=self.peers, roster=self.membership, link=self.link,
            pool=self.coordinators, metrics=self.metrics, liveness=self.liveness)
        self.reporter = EvidenceReporter(
            client=client, node=config.node, beacon=self.beacon, statements=self.exchange, link=self.link,
            config_namespace=config.namespace, namespace=config.identity_namespace, state_dir=config.state_dir,
            timeout_s=config.api_timeout_s, events=self.metrics, cloud_clock=self.cloud_clock, news=news)
        # the control plane's clock (kube-controller-manager's leader Lease), read only while carrying
        self.clock_reader = ControlPlaneClockReader(client=client, clock=self.cloud_clock, wanted=self.carries,
                                                    events=self.metrics, timeout_s=config.api_timeout_s)
        self.carrier = HeartbeatCarrier(
            renew=PeerPathRenewal(client=client, delegate=config.node), life_signs=self.peers, wanted=self.exchange,
            metrics=self.metrics, interval_s=config.carry_interval_s, timeout_s=config.api_timeout_s,
            wall=self.cloud_clock.now, before_renew=self.clock_reader.fresh)
        self.role = RolePublisher(client=client, node=config.node, coordinators=self.coordinators, link=self.link,
                                  timeout_s=config.api_timeout_s)
        self.own_mark = OwnMarkCleaner(client=client, node=config.node, link=self.link,
                                       timeout_s=config.api_timeout_s)
        self.pool_cache: PoolCacheHost | None = None
        http = http_client_of(client)
        if config.pool_cache_port and http is not None:
            self.pool_cache = PoolCacheHost(
                resources=self.membership, http=http,
                upstream=Upstream(url=cloud_endpoint[0], tls=cloud_endpoint[1]) if cloud_endpoint else None,
                coordinators=self.coordinators, link=self.link, verifier=self.keyring,
                address=config.pool_cache_address, port=config.pool_cache_port, state_dir=config.state_dir)
        self.certificates: CertificateRequester | None = None
        if config.state_dir is not None:  # requested once wanted: the flag, or an 'auto' pool
            self.certificates = CertificateRequester(
                client=client, node=config.node, state_dir=config.state_dir, registry=self.registry,
                timeout_s=config.api_timeout_s, lifetime_s=config.coordinator_certificate_lifetime_s,
                listeners=(self.coordinators,))
        exported: list[Exported] = [self.metrics] if self.pool_cache is None else [self.metrics, self.pool_cache]
        self.metrics_guard: MetricsGuard | None = None
        if http is not None:  # who may read /metrics: asked of the cloud (edgewatch.metricsauth)
            self.metrics_guard = MetricsGuard(http=http, link=self.link)
            self.registry.register(self.metrics_guard.collector)
        self.ops = OpsEndpoints(started=self.started, roster=self.membership, exchange=self.peers, exported=exported,
                                guard=self.metrics_guard)

        # The one event: the cloud link's flips (the metric, and the pool coordinator at once).
        self.metrics.cloud_link_changed(self.link.up)
        self.link.subscribe(self.metrics)
        self.link.subscribe(self.coordinators)

    # -- queries (status, tests, the playground) -------------------------------------------------------

    @property
    def coordinator(self) -> PoolCoordinator | None:
        """The pool coordinator running now, or None."""
        return self.coordinators.current

    @property
    def coordinator_target(self) -> Target | None:
        """The (URL, pool, cached resources) the running coordinator was started for, or None."""
        return self.coordinators.target

    def snapshot(self) -> AgentSnapshot:
        """The agent's current view (cheap; for status and tests)."""
        now = time.monotonic()
        coordinator = self.coordinators.current
        return AgentSnapshot(
            node=self.config.node, group=self.peers.group, kubelet_ok=self.peers.kubelet_ok, cloud_ok=self.link.up,
            verdicts={n: d.verdict for n, d in self.peers.decisions.items()},
            peer_health={n: d.state(now=now) for n, d in self.peers.detectors.items()},
            duties=self.exchange.duties, role=str(coordinator.role) if coordinator is not None else None,
        )

    # -- main ------------------------------------------------------------------------------------------

    def carries(self) -> bool:
        """True while this agent writes carried renewTimes: it carries a peer (peer path) or leads
        its pool's coordinator (which forwards the pool's carried heartbeats)."""
        return bool(self.carrier.tasks) or self.coordinators.pool_leader() == self.config.node

    def _loops(self) -> dict[str, Coroutine[Any, Any, None]]:
        """Every part's loop, by task name."""
        loops: dict[str, Coroutine[Any, Any, None]] = {
            "membership": self.membership.run(),
            "cloud-link": self.link.run(),
            "exchange": self.exchange.run(),
            "carry": self.carrier.run(),
            "control-plane-clock": self.clock_reader.run(),
            "role": self.role.run(),
            "own-mark": self.own_mark.run(),
            "identity": self.identity.run(),
            "evidence": self.reporter.run(),
            "coordinator": self.coordinators.run(),
            "liveness": self.liveness.run(),  # the peer port's UDP side (v6 liveness datagrams)
        }
        if self.pool_cache is not None:
            loops["pool-cache"] = self.pool_cache.run()
        if self.certificates is not None:
            loops["coordinator-certificate"] = self._certificate_when_wanted(self.certificates)
        return loops

    async def _certificate_when_wanted(self, requester: CertificateRequester) -> None:
        """Run the certificate requester once this node needs a certificate (``--coordinator-
        certificate``, or its pool's coordinator is run by edgewatch), then for good (rotation)."""
        while not self.coordinators.certificate_wanted():
            await asyncio.sleep(CERTIFICATE_WANTED_POLL_S)
        await requester.run()

    async def run(self) -> None:
        """Serve the peer port and run every loop until cancelled; shut down cleanly (every task
        cancelled and awaited -- one that drops its cancellation is cancelled again every
        :data:`SHUTDOWN_RECANCEL_S` -- the server closed).

        Raises:
            OSError: the peer port cannot be bound.
        """
        server = await self._start_server()
        stragglers: asyncio.Task[Any] | None = None
        try:
            async with asyncio.TaskGroup() as tg:
                tasks = [tg.create_task(loop, name=name) for name, loop in self._loops().items()]
                self.started.set()
                try:
                    await asyncio.wait(tasks)  # until cancelled, or a part fails (the group cancels us)
                finally:
                    # The group cancels every part and waits for it. A part that drops its
                    # cancellation (asyncio.wait_for on Python 3.11 does, when what it waits for
                    # completes as the cancel arrives) would hold the shutdown for ever: name it,
                    # with its stack, and cancel it again (edgewatch.waits).
                    stragglers = asyncio.create_task(self._recancel_stragglers(tasks), name="agent-shutdown")
        finally:
            if stragglers is not None:
                stragglers.cancel()
            await server.close()

    @staticmethod
    async def _recancel_stragglers(tasks: list[asyncio.Task[None]]) -> None:
        await asyncio.gather(*(stop_task(t, cancel=False, recancel_s=SHUTDOWN_RECANCEL_S, give_up_s=math.inf)
                               for t in tasks))

    async def _start_server(self) -> PeerServer:
        """The peer port's server (``edgewatch.agent.peerserver``: connection bounds, read deadline)
        with the exchange and the ops endpoints."""
        app = web.Application(client_max_size=self.config.wire.max_bytes + 1024)
        app.router.add_post(EXCHANGE_PATH, ExchangeServer(peers=self.peers).handle)
        self.ops.add_routes(app)
        server = PeerServer(app=app, config=self.config.server, host=self.config.listen_address, port=self.config.port,
                            known=KnownSources(membership=self.membership, extra=(self.config.listen_address,)),
                            metrics=self.metrics)
        await server.start()
        log.info("agent %s listening on %s:%d", self.config.node, self.config.listen_address, self.config.port)
        return server

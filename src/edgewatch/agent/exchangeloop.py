"""The agent's exchange loop: every period, the kubelet's health, one peer exchange, the verdicts
and this node's duties to the cloud.

What it is for
    Every ``period_s`` (1 s) :class:`ExchangeLoop` asks the local kubelet's /healthz, runs one
    period of the peer exchange (``edgewatch.agent.peers``: sign our heartbeat, exchange with the
    peers, decide), computes this node's duties (``edgewatch.core.duties``: whose Lease to carry,
    whose statements to put in our evidence) and exports the per-node metrics. It never waits on the
    cloud, so a slow or cut link never delays the edge's own judgement.

    It is where the duties live, so it is what the cloud-facing parts read them from: the carrier
    (:meth:`ExchangeLoop.carry_wanted`) and the evidence reporter (:meth:`ExchangeLoop.own_statement`,
    :meth:`ExchangeLoop.carried_statements`).

What it is handed
    The peer exchange it drives, the roster (:class:`RosterView`: the membership), this node's cloud
    link (:class:`edgewatch.agent.ports.CloudLinkView`), the pool coordinator's part in carrying
    (:class:`PoolCoverage`: the agent's ``CoordinatorRunner``), the metrics and the settings.

Source address
    Peer traffic leaves from the listen address, or — listening on a wildcard address (0.0.0.0, the
    DaemonSet's hostNetwork default) — from this node's InternalIP once its own Node is read (peers
    bind a sender to its InternalIP), if that address is local; otherwise the kernel picks the
    source. A change of the address replaces the client session.

Limits: the period's work is not bounded as a whole; each exchange is (``probe_timeout_s``), and the
kubelet probe (``kubelet_timeout_s``). No duties are computed until the roster is known: without it
our "group" is just us.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Mapping
from typing import Protocol

import aiohttp

from edgewatch.agent.metrics import AgentMetrics
from edgewatch.agent.peers import PeerExchange
from edgewatch.agent.ports import CloudLinkView
from edgewatch.agent.statementcadence import LivenessProofs
from edgewatch.core.detector import required_failures
from edgewatch.core.duties import Duties, assign_duties
from edgewatch.core.quorum import Decision
from edgewatch.core.types import Health, NodeName, Verdict
from edgewatch.core.wire import Heartbeat

log = logging.getLogger(__name__)

__all__ = ["ExchangeLoop", "PoolCoverage", "RosterView", "peer_session"]

_WILDCARDS = ("0.0.0.0", "::", "")


class RosterView(Protocol):
    """The group's roster as the exchange loop needs it (``edgewatch.agent.membership``)."""

    def roster_known(self) -> bool:
        """True once the roster is known (synced, or kept from before a restart)."""
        ...

    def address_of(self, node: NodeName) -> str | None:
        """The InternalIP of ``node`` (None: unknown)."""
        ...


class LivenessSender(LivenessProofs, Protocol):
    """Peer protocol v6's liveness datagrams (``edgewatch.agent.datagrams.LivenessEndpoint``): sent
    each period; each peer's latest proof of life feeds its detector (``edgewatch.agent.peers``)."""

    def send(self, peers: Mapping[NodeName, str], *, statement: int, kubelet_ok: bool, cloud_ok: bool) -> None:
        """Send each of ``peers`` (node -> address) this period's datagram."""
        ...

    def alive_within(self, seconds: float) -> frozenset[NodeName]:
        """The peers proven alive by datagram in the last ``seconds`` seconds."""
        ...

    def push_statement(self, peer: NodeName, statement: bytes, *, age_s: float) -> bool:
        """Send ``peer`` our statement in one datagram (False: it goes by HTTP)."""
        ...


class PoolCoverage(Protocol):
    """The pool coordinator's part in carrying heartbeats (``edgewatch.agent.coordinating``)."""

    def pool_leader(self) -> NodeName | None:
        """The pool leader while the coordinator carries heartbeats (the carrier a cut-off node
        names), else None."""
        ...

    def covers_delegation(self) -> bool:
        """True while the coordinator forwards delegated heartbeats (the peer path stands back)."""
        ...


class ExchangeLoop:
    """Runs the exchange periods and keeps this node's duties (see the module docstring).

    Args (keyword-only):
        node: this node.
        listen_address: the peer port's listen address (a wildcard: send from our InternalIP).
        kubelet_healthz_url: the local kubelet's health endpoint.
        period_s: the exchange period, seconds.
        peers: the peer exchange this loop drives.
        roster: the roster (:class:`RosterView`).
        link: this node's cloud link (no cloud duties while it is down).
        pool: the pool coordinator's part in carrying (:class:`PoolCoverage`).
        metrics: ``period_seconds``, ``carrying`` and the per-node ``verdict``/``peer_health``.
        liveness: v6 liveness datagrams sent each period to the peers of the exchange (None: none).
        kubelet_timeout_s: bound of one kubelet probe, seconds (default 0.5 s).
    """

    def __init__(self, *, node: NodeName, listen_address: str, kubelet_healthz_url: str, period_s: float,
                 peers: PeerExchange, roster: RosterView, link: CloudLinkView, pool: PoolCoverage,
                 metrics: AgentMetrics, liveness: LivenessSender | None = None,
                 kubelet_timeout_s: float = 0.5) -> None:
        self.node = node
        self.listen_address = listen_address
        self.kubelet_healthz_url = kubelet_healthz_url
        self.period_s = period_s
        self.kubelet_timeout_s = kubelet_timeout_s
        self.peers = peers
        self._roster = roster
        self._link = link
        self._pool = pool
        self._metrics = metrics
        self._liveness = liveness
        self.duties: Duties | None = None
        # The statements of the cut-off peers that named us go into our evidence whichever path
        # carries their Lease: the controller needs the node's own signed word either way.
        self.evidence_carry: frozenset[NodeName] = frozenset()
        self._exported: set[str] = set()  # nodes with per-node metric series

    # -- what the other parts read ---------------------------------------------------------------------

    def carry_wanted(self) -> frozenset[NodeName]:
        """The cut-off peers whose Lease this node renews now (the carrier's ``CarryWanted``): the
        duties' ``carry``, nothing while our own link is down or before the first duties."""
        duties = self.duties
        if duties is None or not self._link.up:
            return frozenset()
        return duties.carry

    def own_statement(self) -> Heartbeat | None:
        """This node's newest signed heartbeat (the reporter's ``Statements``)."""
        return self.peers.own

    def unconfirmed_dead(self) -> frozenset[NodeName]:
        """The neighbours this node votes dead without its host checks confirming it (the
        reporter's ``Statements``; ``edgewatch.agent.hostcheck``)."""
        return self.peers.unconfirmed_dead

    def suspected(self) -> frozenset[NodeName]:
        """The neighbours this node suspects dead, confirmed by its host checks (the reporter's
        ``Statements``; ``edgewatch.core.suspicion``)."""
        return self.peers.suspicions.current

    def sign_now(self) -> Heartbeat | None:
        """Sign this node's statement now with the newest beacon (the reporter's answer to a
        controller's challenge; the peer exchange's ``sign_own``, out of period); None before the
        first period."""
        if self.peers.own is None:
            return None
        return self.peers.sign_own(now_mono=time.monotonic(), leader=self._pool.pool_leader())

    def carried_statements(self) -> list[Heartbeat]:
        """The newest signed heartbeats of the cut-off peers whose statements we carry, by name."""
        out = []
        for node in sorted(self.evidence_carry):
            entry = self.peers.book.get(node)
            if entry is not None:
                out.append(entry.heartbeat)
        return out

    def source_address(self) -> str | None:
        """Where peer traffic should leave from: the listen address, or with a wildcard listen
        address this node's InternalIP (None while unknown: the kernel picks)."""
        if self.listen_address not in _WILDCARDS:
            return self.listen_address
        return self._roster.address_of(self.node)

    # -- the loop --------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Run a period every ``period_s`` until cancelled; both client sessions are closed on the
        way out."""
        source: str | None = None
        session: aiohttp.ClientSession | None = None
        async with aiohttp.ClientSession() as local:  # kubelet probe: loopback, no source binding
            try:
                while True:
                    started = time.monotonic()
                    wanted = self.source_address()
                    if session is None or wanted != source:
                        if session is not None:
                            await session.close()
                        source = wanted
                        session = peer_session(source)
                    self.peers.kubelet_ok = await self.kubelet_ok(local)
                    decisions = await self.peers.run_period(session, leader=self._pool.pool_leader(),
                                                            proofs=self._liveness, pusher=self._liveness)
                    self.send_liveness()
                    self.update_duties()
                    self.export(decisions)
                    self._metrics.period_seconds.set(time.monotonic() - started)
                    await asyncio.sleep(max(0.0, self.period_s - (time.monotonic() - started)))
            finally:
                if session is not None:
                    await session.close()

    async def kubelet_ok(self, session: aiohttp.ClientSession) -> bool:
        """The local kubelet answers 200 on its /healthz within ``kubelet_timeout_s``."""
        try:
            async with session.get(self.kubelet_healthz_url,
                                   timeout=aiohttp.ClientTimeout(total=self.kubelet_timeout_s)) as resp:
                return resp.status == 200
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            return False

    def send_liveness(self) -> None:
        """Send the peers of this period's exchange their liveness datagrams (v6) and
        export how many proved themselves alive by datagram in the last two periods."""
        if self._liveness is None:
            return
        peers = self.peers
        addresses = {p: a for p in peers.last_targets if (a := self._roster.address_of(p)) is not None}
        self._liveness.send(addresses, statement=peers.announced, kubelet_ok=peers.kubelet_ok, cloud_ok=self._link.up)
        self._metrics.liveness_peers_alive.set(len(self._liveness.alive_within(2 * self.period_s)))

    def update_duties(self) -> None:
        """Compute this node's duties from the period just ended (nothing before the roster is
        known: without it our "group" is just us)."""
        if not self._roster.roster_known():
            return
        carry_enabled = not self._pool.covers_delegation()
        now = time.monotonic()
        peers = self.peers
        self.duties = assign_duties(me=self.node, cloud_ok=self._link.up, reachable=peers.reachable(now=now),
                                    verdicts={n: d.verdict for n, d in peers.decisions.items()},
                                    reports=peers.reports(now=now), carry_enabled=carry_enabled)
        self.evidence_carry = self.duties.statements
        self._metrics.carrying.set(len(self.duties.carry))

    def export(self, decisions: dict[NodeName, Decision]) -> None:
        """Set the per-node verdict and peer-health series: this node and the peers it watches
        only (at most 2 * rings + contacts), never the whole group (a 1,000-node group would
        otherwise cost every agent 6,000 series); the series of nodes no longer watched go."""
        metrics = self._metrics
        verdicts = tuple(v.value for v in Verdict)
        healths = tuple(h.value for h in Health)
        now = time.monotonic()
        current = {self.node} | set(self.peers.detectors)
        for gone in self._exported - current:  # left the group or no longer watched: drop its series
            metrics.forget(gone, verdicts=verdicts, healths=healths)
        self._exported = current
        for node, decision in decisions.items():
            if node not in current:
                continue
            metrics.set_state(metrics.verdict, node=node, label="verdict", value=decision.verdict.value,
                              values=verdicts)
        for node, detector in self.peers.detectors.items():
            metrics.set_state(metrics.peer_health, node=node, label="health",
                              value=detector.state(now=now).value, values=healths)
            metrics.peer_dead_after.labels(node=node).set(
                required_failures(config=detector.config, repeat=detector.snapshot.repeat))


def _bindable(address: str) -> bool:
    """Whether this host can send from ``address`` (it is one of its own addresses)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((address, 0))
        return True
    except OSError:
        return False


def peer_session(source: str | None) -> aiohttp.ClientSession:
    """A client session for peer exchanges that sends from ``source`` (so peers can bind our
    messages to our InternalIP), or from whatever the kernel picks if ``source`` is None or not an
    address of this host (logged: peers then refuse our messages unless that is our InternalIP)."""
    if source is not None and not _bindable(source):
        log.warning("cannot send peer traffic from %s (not an address of this host); letting the kernel "
                    "choose — peers refuse our messages unless that is our InternalIP", source)
        source = None
    connector = aiohttp.TCPConnector(local_addr=(source, 0)) if source else None
    return aiohttp.ClientSession(connector=connector)

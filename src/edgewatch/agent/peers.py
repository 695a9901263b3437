"""Peer checks and statement exchange over the node network (port 51005): the I/O around
``edgewatch.core.detector``, ``edgewatch.core.wire`` and ``edgewatch.core.quorum``.

Every exchange period (1 s) each neighbour proves itself alive by a liveness datagram
(``agent.datagrams``); the signed statement — this node's kubelet and cloud link, and its vote:
which peers its failure detector sees alive and dead — travels only when due
(``edgewatch.core.cadence``): pushed in one datagram when it changed or for the slow refresh
(``edgewatch.core.statementdatagram``), else in an HTTP exchange (a pull, a beacon), and to a
neighbour whose datagram is missing in an HTTP exchange, as a TCP probe. A peer
without datagrams (an agent older than v6) gets the exchange every period. A target counts alive
only if it proves itself by datagram or answers with a valid, signed envelope whose own heartbeat
reports its kubelet healthy.

Targets: this node's neighbours in the group's monitoring topology (``edgewatch.core.topology``:
every peer in groups of up to ``2 * rings + 1``, at most ``2 * rings`` beyond); the verdict is
counted over who reaches whom (``edgewatch.core.reach``). A node that reaches fewer than two of its
neighbours also probes ``wire.fallback_probes`` random other members per period (SWIM's indirect
probing, simplified); such a contact counts only if both ends name each other alive. A dead vote on
a neighbour whose kubelet port answers a TCP connect (its agent is down, not its host), or never did
(the check cannot tell), is *unconfirmed* (``agent.hostcheck``); a neighbour failing two periods
whose port stopped answering is *suspected* (``edgewatch.core.suspicion``): the evidence Lease names
both, for the controller's challenges.

What it is handed: this node's signer, the group and its addresses (:class:`GroupView`), its cloud
link, the beacon holder, the metrics. What it offers: the newest heartbeats (the book), each peer's
last sign of life (:meth:`PeerExchange.life_sign`), the local verdicts (:meth:`PeerExchange.verdict_of`).

The server side of the exchange (answering a peer's POST) is ``edgewatch.agent.exchangeserver``; the
HTTP server around it — connection bounds per source and of strangers, the read deadline of a
whole request — is ``edgewatch.agent.peerserver``.

Clocks: none but this node's monotonic clock. Freshness of a peer's message is proven by the reply
binding (an answer carries the nonce of our request) or by its per-sender epoch and sequence number
(``edgewatch.core.wire.ReplayGuard``); votes expire ``vote_ttl_s`` after local receipt. The epoch
(``time.time_ns`` at start) is compared only with this agent's own earlier epochs.
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
import time
from collections.abc import Callable, Collection
from typing import Protocol

import aiohttp
from aiohttp import web

from edgewatch.agent.config import AgentConfig
from edgewatch.agent.hostcheck import HostChecks
from edgewatch.agent.httpbody import read_body
from edgewatch.agent.metrics import AgentMetrics
from edgewatch.agent.ports import CloudLinkView
from edgewatch.agent.suspecting import Suspicions
from edgewatch.agent.statementcadence import LivenessProofs, StatementCadence, StatementPusher
from edgewatch.core.cadence import ExchangeReason
from edgewatch.core.detector import DetectorConfig, PeerDetector
from edgewatch.core.duties import PeerReport, choose_carrier
from edgewatch.core.quorum import Decision
from edgewatch.core.reach import decide_reach
from edgewatch.core.beacon import BeaconHolder
from edgewatch.core.signing import Signer
from edgewatch.core.topology import neighbours
from edgewatch.core.types import Health, NodeName, Verdict
from edgewatch.core.versions import PeerVersions
from edgewatch.core.admission import ReportThrottle
from edgewatch.core.book import Freshness, HeartbeatBook, select_relays
from edgewatch.core.compactstatement import pack_statement, unpack_statement
from edgewatch.core.heartbeat import decode_heartbeat
from edgewatch.core.wire import (
    DecodedEnvelope,
    Heartbeat,
    Rejected,
    RejectReason,
    ReplayGuard,
    decode_envelope,
    encode_envelope,
    sign_heartbeat,
)

log = logging.getLogger(__name__)

EXCHANGE_PATH = "/v1/exchange"
REFUSED_HEADER = "X-Edgewatch-Refused"
"""Header of a 409 answer: why our request was refused (the body is still the peer's envelope)."""



class GroupView(Protocol):
    """The group as the peer exchange needs it (``edgewatch.agent.membership.Membership``; its
    optional ``grouping`` attribute gives the ConfigMap's ``monitoringRings``)."""

    def group_of(self, node: NodeName) -> frozenset[NodeName]:
        """The members of this agent's group, ``node`` (this agent's node) always included."""
        ...

    def address_of(self, node: NodeName) -> str | None:
        """The InternalIP of ``node`` (None: unknown, it cannot be probed)."""
        ...


class PeerExchange:
    """Failure detectors, the heartbeat book and the exchange protocol of one agent.

    Args (keyword-only):
        me: this node.
        config: agent settings.
        keyring: this node's signer (its own key; every published key to verify).
        membership: the group and the peers' addresses (:class:`GroupView`).
        metrics: where to count.
        link: this node's own cloud link (stated in every heartbeat).
        rng: randomness for target and relay choice (seedable in tests).
        beacon: the controller beacon this agent signs with and passes on (its own by default).
        news: set when the neighbours suspected change (the evidence reporter writes at once).
    """

    def __init__(self, *, me: NodeName, config: AgentConfig, keyring: Signer, membership: GroupView,
                 metrics: AgentMetrics, link: CloudLinkView, rng: random.Random | None = None,
                 beacon: BeaconHolder | None = None, news: asyncio.Event | None = None) -> None:
        self.me = me
        self.news = news
        self.config = config
        self._keyring = keyring
        self.membership = membership
        self.metrics = metrics
        self._link = link
        self.rng = rng or random.Random()
        self.beacon = beacon if beacon is not None else BeaconHolder()
        wire = config.wire
        self.book = HeartbeatBook(max_origins=wire.book_max_origins)
        self.guard = ReplayGuard(window=wire.replay_window, max_senders=wire.replay_max_senders,
                                 retired_epochs=wire.replay_retired_epochs)
        self.detectors: dict[NodeName, PeerDetector] = {}
        # Each watched peer's latest heartbeat received from the peer itself (never a relay, whose
        # age and choice another member states), and the peers seen with a new incarnation since
        # their last success: the failures before it were an outage (a restart), not loss.
        self._direct: dict[NodeName, Heartbeat] = {}
        self._restarted: set[NodeName] = set()
        # This run's epoch (envelopes) and incarnation (heartbeats): a unique, mostly increasing number;
        # peers compare it only with our own earlier ones, never with their clocks.
        self.incarnation = time.time_ns()
        # A random start: liveness datagrams name a statement by the low 16 bits of its seq only,
        # so a restarted agent must not likely reuse the numbers its last run's peers still hold.
        self.seq = secrets.randbelow(1 << 16)
        self._sent: dict[NodeName, int] = {}  # envelopes sent per receiver (their seq) in this epoch
        self.versions = PeerVersions(max_peers=wire.replay_max_senders)  # envelope version per peer
        self._signed_at = 0.0  # monotonic time our current heartbeat was signed
        self._own_content: tuple[object, ...] | None = None  # what our current heartbeat says
        self.cadence = StatementCadence(period_s=config.votes.exchange_period_s,
                                        refresh_s=config.wire.statement_refresh_s,
                                        anti_entropy_s=config.wire.anti_entropy_s)
        self.announced = self.seq  # our statement in which what we say last changed (datagrams name it)
        self.kubelet_ok = False
        self.own: Heartbeat | None = None
        self.decisions: dict[NodeName, Decision] = {}
        self.group: frozenset[NodeName] = frozenset({me})
        self.ring: dict[NodeName, frozenset[NodeName]] = {me: frozenset()}
        self.near: frozenset[NodeName] = frozenset()  # our neighbours in the topology
        self._rings = 0  # rings the topology was computed with
        self.hosts = HostChecks.of_agent(config, events=metrics)  # neighbours' kubelet ports
        self.suspicions = Suspicions(config=config.suspicion, hosts=self.hosts)
        self.unconfirmed_dead: frozenset[NodeName] = frozenset()  # dead votes the host checks do not confirm
        self.contacts: dict[NodeName, float] = {}  # fallback contacts: peer -> last direct evidence (monotonic s)
        self.carrier: NodeName | None = None
        self.periods = 0
        self.last_targets: tuple[NodeName, ...] = ()  # the peers of the last period's exchange
        self._refusals = ReportThrottle(interval_s=60.0, max_kinds=wire.replay_max_senders)  # refused pushes

    # -- evidence ----------------------------------------------------------------------------------

    def detector_config(self) -> DetectorConfig:
        """The detector settings: the same at every group size, since every piece of evidence is
        direct (a neighbour's own answer or request), never relayed."""
        return self.config.detector

    def rings(self) -> int:
        """Rings of the topology: the ``monitoringRings`` of the ConfigMap (via the membership's
        grouping config), else ``config.rings``."""
        grouping = getattr(self.membership, "grouping", None)
        return grouping.rings if grouping is not None else self.config.rings

    def watched(self) -> frozenset[NodeName]:
        """The peers this node keeps a detector for: its neighbours and its fallback contacts."""
        return self.near | frozenset(self.contacts)

    def _detector(self, peer: NodeName, now: float) -> PeerDetector:
        detector = self.detectors.get(peer)
        if detector is None:
            detector = self.detectors[peer] = PeerDetector(config=self.detector_config(), now=now)
        return detector

    def record(self, peer: NodeName, *, ok: bool, now: float, datagram: bool = False) -> None:
        """Feed one piece of direct evidence about a group peer into its detector (a success after
        the peer showed a new incarnation ends an outage, not loss: see ``absorb``). Evidence
        about a peer that is neither a neighbour nor a contact makes it a contact (a member probing
        us because it lost its neighbours), up to ``wire.max_contacts``. For a peer whose liveness
        datagrams speak for it (``cadence.by_datagram``) only their evidence (``datagram``) reaches the
        detector: one judgement a period, whatever statement exchanges happen."""
        if peer == self.me or peer not in self.group:
            return
        if peer not in self.near:
            if peer not in self.contacts:
                if not ok or len(self.contacts) >= self.config.wire.max_contacts:
                    return
                self.contacts[peer] = now
            elif ok:
                self.contacts[peer] = now
        if peer in self.cadence.by_datagram and not datagram:
            return
        self._detector(peer, now).record(ok, now=now, outage=ok and peer in self._restarted)
        if ok:
            self._restarted.discard(peer)

    def absorb(self, env: DecodedEnvelope, *, now_mono: float, direct: bool) -> None:
        """Offer an accepted envelope's heartbeats to the book (received now, with the ages they
        came with); count direct/relayed evidence."""
        own = env.own
        freshness = self.book.offer(own, now=now_mono, age_s=env.own_age_s)
        if direct:
            if freshness is Freshness.DUPLICATE:  # its own word, bound to this exchange: still its newest
                self.book.confirm(own.origin, statement=own.seq, now=now_mono)
            before = self._direct.get(own.origin)
            if before is not None and before.incarnation != own.incarnation:
                self._restarted.add(own.origin)  # until its next success (its first may say kubelet down)
            self._direct[own.origin] = own
            self.record(own.origin, ok=own.kubelet_ok, now=now_mono)
        for result in env.relayed:  # statements for the local count and for carrying; no detector evidence
            if result.heartbeat is None:
                self.metrics.relayed.labels(result=str(result.reason)).inc()
                continue
            freshness = self.book.offer(result.heartbeat, now=now_mono, age_s=result.age_s, relayed=True)
            self.metrics.relayed.labels(result=str(freshness)).inc()

    def statement_received(self, peer: NodeName, statement: bytes, *, age_s: float, epoch: int) -> None:
        """A statement ``peer`` pushed by datagram (``agent.datagrams``: authentic under its pair key
        and recent by its echo; ``edgewatch.core.compactstatement``'s form), ``age_s`` seconds old
        when sent, from its liveness ``epoch``: verified (the heartbeat's own signature, its origin
        the peer, its age within ``heartbeat_max_age_s``) and offered to the book. No detector evidence (its liveness
        datagrams give that) and no refresh of a statement already held. Counted in
        ``statement_datagrams``; a refusal is logged. Never raises."""
        try:
            if not age_s <= self.config.wire.heartbeat_max_age_s:
                raise Rejected(RejectReason.STALE, f"a statement {age_s:.1f} s old")
            heartbeat = decode_heartbeat(unpack_statement(statement), keyring=self._keyring)
            if heartbeat.origin != peer:
                raise Rejected(RejectReason.SENDER_MISMATCH, f"{peer} pushed {heartbeat.origin}'s statement")
        except Rejected as exc:
            self.metrics.statement_datagrams.labels(result=str(exc.reason)).inc()
            if (count := self._refusals.note(peer, now=time.monotonic())) is not None:  # a line a minute per peer
                log.warning("statement datagram from %s refused: %s (%d refused since the last line)", peer, exc,
                            count, extra={"kind": "rejected", "peer": peer, "reason": str(exc.reason)})
            return
        freshness = self.book.offer(heartbeat, now=time.monotonic(), age_s=age_s)
        self.metrics.statement_datagrams.labels(result=str(freshness)).inc()
        if freshness is Freshness.OLDER:
            return
        self.cadence.heard_statement(peer, epoch=epoch, incarnation=heartbeat.incarnation)
        direct = self._direct.get(peer)
        if direct is None or heartbeat.order > direct.order:
            self._direct[peer] = heartbeat

    def _push(self, due: dict[NodeName, ExchangeReason], *, missed: Collection[NodeName],
              pusher: StatementPusher | None, now: float) -> None:
        """Push our statement by datagram to the peers ``due`` a ``changed`` or ``refresh`` exchange
        whose datagrams speak for them and proved them alive this period; those leave ``due``. A
        lost push costs the peer's pull (its next datagram from us names a statement it lacks)."""
        if pusher is None or self.own is None:
            return
        body = b""
        for peer, reason in sorted(due.items()):
            if reason not in (ExchangeReason.CHANGED, ExchangeReason.REFRESH) or peer in missed \
                    or peer not in self.cadence.by_datagram \
                    or self.cadence.wants_exchange(peer, book=self.book, beacon=self.beacon.value):
                continue
            body = body or pack_statement(self.own)
            if pusher.push_statement(peer, body, age_s=max(0.0, now - self._signed_at)):
                self.cadence.pushed(peer, (self.incarnation, self.announced), now=now)
                del due[peer]

    # -- the period ----------------------------------------------------------------------------------

    def refresh_group(self, *, now: float) -> None:
        """Re-read the group (relabelling regroups here) and its topology; forget contacts silent
        for a vote TTL, and the detectors of peers we no longer watch."""
        group = self.membership.group_of(self.me)
        rings = self.rings()
        if group != self.group or self.me not in self.ring or self._rings != rings:
            self._rings = rings
            self.group = group
            self.ring = dict(neighbours(group, k=rings))
            self.near = self.ring.get(self.me, frozenset())
        ttl = self.config.votes.vote_ttl_s
        for peer, last in list(self.contacts.items()):
            if peer in self.near or peer not in self.group or now - last > ttl:
                del self.contacts[peer]
        cfg = self.detector_config()
        watched = self.watched()
        for peer in [p for p in self._direct if p not in watched]:
            del self._direct[peer]
            self._restarted.discard(peer)
        self.cadence.retain(watched)
        for peer, detector in list(self.detectors.items()):
            if peer not in watched:
                del self.detectors[peer]
            elif detector.config != cfg:
                detector.reconfigure(cfg)
        self.book.retain(self.group)

    def reachable(self, *, now: float) -> frozenset[NodeName]:
        """The watched peers whose detector says ALIVE at ``now`` (monotonic s)."""
        return frozenset(p for p, d in self.detectors.items() if d.state(now=now) is Health.ALIVE)

    def reports(self, *, now: float) -> dict[NodeName, PeerReport]:
        """Each member's newest heartbeat received at most a vote TTL ago, as a self-report."""
        ttl = self.config.votes.vote_ttl_s
        out = {}
        for entry in self.book.entries():
            if now - entry.voted_at <= ttl:
                hb = entry.heartbeat
                out[hb.origin] = PeerReport(cloud_ok=hb.cloud_ok, kubelet_ok=hb.kubelet_ok, carrier=hb.carrier)
        return out

    def sign_own(self, *, now_mono: float, leader: NodeName | None = None, every_period: bool = True) -> Heartbeat:
        """Sign this period's heartbeat and put it in the book (``now_mono``: monotonic s). With
        ``every_period`` False (no live peer of the exchange is older than v6) the current one is kept while
        what it says is unchanged and it is younger than ``wire.statement_refresh_s``.

        Its vote names this node and the peers it watches: neighbours alive or dead as their
        detectors say (suspect: neither), fallback contacts only when alive; the dead votes the host
        checks do not confirm (``self.hosts``) are kept in ``unconfirmed_dead``. With the cloud link
        down it names a carrier (:func:`edgewatch.core.duties.choose_carrier`): ``leader``, the pool
        leader while the pool coordinator carries heartbeats, if given."""
        alive, dead = [self.me] if self.kubelet_ok else [], [] if self.kubelet_ok else [self.me]
        for peer in self.watched():
            health = self._detector(peer, now_mono).state(now=now_mono)
            if health is Health.ALIVE:
                alive.append(peer)
            elif health is Health.DEAD and peer in self.near:
                dead.append(peer)
        self.unconfirmed_dead = self.hosts.unconfirmed(self.near.intersection(dead), now=now_mono)
        cloud_ok = self._link.up
        self.carrier = choose_carrier(me=self.me, cloud_ok=cloud_ok, reachable=self.reachable(now=now_mono),
                                      reports=self.reports(now=now_mono), leader=leader)
        # A new beacon alone changes a connected node's statement only at the refresh (core.cadence).
        content = (self.kubelet_ok, cloud_ok, frozenset(alive), frozenset(dead), self.carrier or "",
                   "" if cloud_ok else self.beacon.value)
        if (not every_period and self.own is not None and content == self._own_content
                and now_mono - self._signed_at < self.config.wire.statement_refresh_s):
            self.book.confirm(self.me, statement=self.own.seq, now=now_mono)
            return self.own
        self.seq += 1
        if content != self._own_content:
            self._own_content = content
            self.announced = self.seq
        self.own = sign_heartbeat(origin=self.me, incarnation=self.incarnation, seq=self.seq,
                                  kubelet_ok=self.kubelet_ok, cloud_ok=cloud_ok, alive=alive, dead=dead,
                                  keyring=self._keyring, beacon=self.beacon.value, carrier=self.carrier or "")
        self._signed_at = now_mono
        self.book.offer(self.own, now=now_mono)
        return self.own

    def targets(self, *, now: float) -> list[NodeName]:
        """The peers to exchange with this period: every neighbour and contact, plus
        ``wire.fallback_probes`` random other members while fewer than two neighbours are alive
        (``now``: monotonic s)."""
        targets = set(self.near) | set(self.contacts)
        alive_near = len(self.reachable(now=now) & self.near)
        room = self.config.wire.max_contacts - len(self.contacts)
        if alive_near < min(2, len(self.near)) and self.periods >= 2 and room > 0:  # neighbours get two periods first
            others = sorted(self.group - self.near - targets - {self.me})
            for peer in self.rng.sample(others, min(self.config.wire.fallback_probes, len(others), room)):
                self.contacts[peer] = self.contacts.get(peer, now)
                targets.add(peer)
        return sorted(targets)

    def envelope_for(self, peer: NodeName, *, now_mono: float, nonce: str, reply_to: str | None = None,
                     version: int | None = None) -> bytes:
        """Encode an envelope to ``peer``: our heartbeat first, then relays chosen for it, each with
        its age on our monotonic clock (``now_mono``, seconds). ``nonce``: fresh random 32 hex;
        ``reply_to``: the nonce of the request this answers (None for a request); ``version``: the
        protocol version to write (default: the one negotiated with ``peer``,
        :class:`edgewatch.core.versions.PeerVersions`)."""
        assert self.own is not None
        wire = self.config.wire
        relays = select_relays(self.book, for_peer=peer, now=now_mono, max_count=wire.max_relays,
                               max_age_s=wire.relay_max_age_s, rng=self.rng, exclude=(self.me,),
                               max_total_age_s=wire.heartbeat_max_age_s)
        aged = [(hb, entry.age_at(now_mono)) for hb in relays if (entry := self.book.get(hb.origin)) is not None]
        seq = self._sent.get(peer, 0) + 1
        self._sent[peer] = seq
        raw = encode_envelope(sender=self.me, receiver=peer, epoch=self.incarnation, seq=seq, nonce=nonce,
                              reply_to=reply_to, own=self.own, own_age_s=max(0.0, now_mono - self._signed_at),
                              relayed=aged, keyring=self._keyring, max_bytes=wire.max_bytes,
                              beacon=self.beacon_for(peer),
                              version=version if version is not None else self.versions.version_for(peer))
        self.book.mark_relayed(relays)
        return raw

    def beacon_for(self, peer: NodeName) -> str:
        """The controller's beacon token to put into an envelope to ``peer``: none when the latest
        heartbeat ``peer`` sent this agent itself names the beacon this agent holds (the peer adopted
        that token: it signs with its value), else this agent's token. A cut-off or restarted peer
        names an older beacon, or none, and gets the token; a connected one gets it only while it
        names none (it watches the beacon itself), instead of in every envelope (about 180 bytes)."""
        direct = self._direct.get(peer)  # what the peer itself signed, not what a relay says it did
        held = self.beacon.value
        if held and direct is not None and (direct.beacon == held or (direct.cloud_ok and direct.beacon)):
            return ""
        return self.beacon.token

    def decode(self, raw: bytes, *, sender_allowed: Callable[[NodeName], bool],
               reply_to: str | None = None) -> DecodedEnvelope:
        """Decode an inbound envelope addressed to us: a request (``reply_to`` None) or the answer to
        our request with nonce ``reply_to``. Raises ``Rejected``."""
        wire = self.config.wire
        env = decode_envelope(raw, keyring=self._keyring, receiver=self.me, max_bytes=wire.max_bytes,
                              guard=self.guard, reply_to=reply_to, heartbeat_max_age_s=wire.heartbeat_max_age_s,
                              sender_allowed=sender_allowed)
        self.versions.heard(env.sender, version=env.version, versions=env.versions)  # authenticated, accepted
        self.beacon.offer(env.beacon)  # adopted only if the controller's key signed it and it is newer
        return env

    async def exchange(self, session: aiohttp.ClientSession, peer: NodeName) -> bool:
        """One probe: POST our envelope to ``peer`` and absorb its answer. Returns success.

        Success needs an answer bound to this very request (its ``reply_to`` is our fresh nonce), so
        a replayed answer can never make a dead peer look alive. A 409 answer (the peer refused our
        request as replayed/unconfirmed, e.g. right after we restarted) still carries its envelope.
        """
        address = self.membership.address_of(peer)
        now_mono = time.monotonic()
        if address is None:
            self.record(peer, ok=False, now=now_mono)
            self.metrics.probes.labels(result="no_address").inc()
            return False
        version: int | None = self.versions.version_for(peer)
        while version is not None:
            outcome = await self._attempt(session, peer, address, version=version, now_mono=now_mono)
            if outcome != "refused":
                return outcome == "ok"
            # Refused without an authenticated answer (a 0.1.0 agent answers 400 to a v5 header):
            # the same probe again at N-1, at once (edgewatch.core.versions).
            version = self.versions.refused(peer, version)
            if version is not None:
                log.info("%s refused our envelope; speaking protocol v%d to it", peer, version,
                         extra={"kind": "version_fallback", "peer": peer, "version": version})
        self.metrics.probes.labels(result="rejected").inc()
        self.record(peer, ok=False, now=time.monotonic())
        return False

    async def _attempt(self, session: aiohttp.ClientSession, peer: NodeName, address: str, *, version: int,
                       now_mono: float) -> str:
        """One request of a probe at ``version``: ``ok``, ``failed`` (counted and recorded), or
        ``refused`` (HTTP 400 with no envelope: the caller may retry at a lower version)."""
        nonce = secrets.token_hex(16)
        try:
            body = self.envelope_for(peer, now_mono=now_mono, nonce=nonce, version=version)
        except ValueError as exc:  # over max_bytes (or unencodable): refuse this one, never stop the agent
            log.error("not probing %s: cannot encode our envelope: %s", peer, exc,
                      extra={"kind": "encode_failed", "peer": peer})
            self.metrics.probes.labels(result="unencodable").inc()
            self.record(peer, ok=False, now=now_mono)
            return "failed"
        url = f"http://{_host(address)}:{self.config.port}{EXCHANGE_PATH}"
        try:
            async with session.post(url, data=body, headers={"Content-Type": "application/octet-stream"},
                                    timeout=aiohttp.ClientTimeout(total=self.config.probe_timeout_s)) as resp:
                raw = await read_body(resp.content, self.config.wire.max_bytes)
                if resp.status == 400 and raw.startswith((b"rejected: malformed", b"rejected: version")):
                    log.debug("%s refused our v%d envelope: %r", peer, version, raw[:80])
                    return "refused"
                if resp.status not in (200, 409):
                    raise ConnectionError(f"HTTP {resp.status}: {raw[:200]!r}")
                refused = resp.headers.get(REFUSED_HEADER) if resp.status == 409 else None
            env = self.decode(raw, sender_allowed=lambda s: s == peer, reply_to=nonce)
        except Rejected as exc:
            log.warning("answer from %s rejected: %s", peer, exc, extra={"kind": "rejected", "peer": peer,
                                                                        "reason": str(exc.reason)})
            self.metrics.messages.labels(result=str(exc.reason)).inc()
            self.metrics.probes.labels(result="rejected").inc()
            self.record(peer, ok=False, now=time.monotonic())
            return "failed"
        except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError, OSError) as exc:
            log.debug("probe of %s failed: %s", peer, exc or type(exc).__name__)
            self.metrics.probes.labels(result="failed").inc()
            self.record(peer, ok=False, now=time.monotonic())
            return "failed"
        if refused:
            log.debug("%s refused our request (%s) but answered", peer, refused[:40])
        self.metrics.messages.labels(result="accepted").inc()
        self.metrics.probes.labels(result="ok").inc()
        self.absorb(env, now_mono=time.monotonic(), direct=True)
        self.cadence.told(peer, (self.incarnation, self.announced), beacon=self.beacon.value, now=time.monotonic(),
                          theirs=env.own.incarnation)
        return "ok"

    async def run_period(self, session: aiohttp.ClientSession, *, leader: NodeName | None = None,
                         proofs: LivenessProofs | None = None,
                         pusher: StatementPusher | None = None) -> dict[NodeName, Decision]:
        """One exchange period: choose the targets, judge the datagrams of those they speak for
        (``proofs``; None: v5 only), sign (naming ``leader`` as the carrier if this node is cut off),
        push our statement by datagram where a ``changed`` or ``refresh`` exchange is due
        (``pusher``; None: none), exchange statements where due otherwise
        (:mod:`edgewatch.core.cadence`; with each peer whose datagram proof is missing too, as a
        TCP probe) while checking the kubelet port of the neighbours due
        (``self.hosts.due``, ``self.suspicions.worth_checking``), record one piece of evidence per
        datagram peer, decide; suspicions are looked at three times (``agent.suspecting``)."""
        now_mono = time.monotonic()
        self.refresh_group(now=now_mono)
        targets = self.targets(now=now_mono)
        self.last_targets = tuple(targets)
        cadence = self.cadence
        cadence.start_period(targets, proofs, now=now_mono)
        judged = cadence.judgements(now=now_mono)
        self.sign_own(now_mono=now_mono, leader=leader,
                      every_period=cadence.v5_listening(self.near.intersection(targets), now=now_mono))
        due = cadence.due(targets, announced=(self.incarnation, self.announced), book=self.book,
                          beacon=self.beacon.value, now=now_mono)
        missed = {j.peer for j in judged if not j.ok}
        for peer in missed:
            due.setdefault(peer, ExchangeReason.FALLBACK)
        for reason in due.values():
            self.metrics.statement_exchanges.labels(reason=reason.value).inc()
        self._push(due, missed=missed, pusher=pusher, now=now_mono)
        peers = sorted(due)
        self._suspect(leader=leader, missing=missed)  # on the host checks of earlier periods
        failing = {p for p in missed if self.suspicions.worth_checking(self._detector(p, now_mono))}
        hosts = self.hosts.due({p: (a, p not in failing and self._detector(p, now_mono).state(now=now_mono)
                                    is Health.ALIVE)
                                for p in self.near if (a := self.membership.address_of(p)) is not None}, now=now_mono)

        async def check_hosts() -> None:  # then suspect at once: this period's fallbacks may still hang
            await self.hosts.check(hosts)
            self._suspect(leader=leader, missing=missed)

        *results, _ = await asyncio.gather(*(self.exchange(session, p) for p in peers), check_hosts())
        answered = dict(zip(peers, results, strict=True))
        for judgement in judged:
            peer = judgement.peer
            self.suspicions.heard(peer, at=judgement.at)  # a datagram, whatever its kubelet flag
            direct = self._direct.get(peer)
            fallback = answered.get(peer, False) and direct is not None and direct.kubelet_ok
            ok = judgement.ok or fallback
            result = "datagram_ok" if judgement.ok else "fallback_ok" if fallback else "datagram_missed"
            self.metrics.probes.labels(result=result).inc()
            self.record(peer, ok=ok, now=now_mono, datagram=True)
            if judgement.ok and cadence.holds_theirs(peer, self.book):
                self.book.confirm(peer, statement=judgement.statement, now=judgement.at)
        for peer in (p for p, ok in answered.items() if ok):
            self.suspicions.heard(peer, at=now_mono)
        self._suspect(leader=leader)
        return self.decide(now=time.monotonic())

    def _suspect(self, *, leader: NodeName | None, missing: Collection[NodeName] = ()) -> None:
        """Update the suspicions (``missing``: datagram missing this period); on a change sign again
        (the statement written with them must not name them alive) and tell the reporter."""
        now, before = time.monotonic(), self.suspicions.current
        if self.suspicions.update(self.detectors, self.near, now=now, missing=missing) != before:
            self.sign_own(now_mono=now, leader=leader, every_period=False)
            if self.news is not None:
                self.news.set()

    def decide(self, *, now: float) -> dict[NodeName, Decision]:
        """Count the local verdicts on this node and the peers it watches from the statements held
        (``now``: monotonic s) and end the period. In a full mesh every statement is held, so they
        equal the controller's; in a ring group they count only what the neighbours and relays told
        us (the controller's count over every statement is the one that acts)."""
        self.decisions = decide_reach(group=self.group, votes=self.book.votes(), now=now,
                                      vote_ttl_s=self.config.votes.vote_ttl_s, ring=self.ring,
                                      subjects=self.watched() | {self.me})
        self.periods += 1
        return self.decisions

    # -- what the other parts read -----------------------------------------------------------------

    def verdict_of(self, node: str) -> str:
        """This node's local verdict on ``node``: ``healthy``, ``unhealthy`` or ``unknown`` (not
        decided here; the pool coordinator never vouches for an ``unhealthy`` node)."""
        decision = self.decisions.get(NodeName(node))
        return decision.verdict.value if decision else Verdict.UNKNOWN.value

    def life_sign(self, node: NodeName) -> float | None:
        """Monotonic time (seconds) of ``node``'s last sign of life: its newest heartbeat's local
        receipt minus the age it arrived with, or the later datagram that said it still holds
        (``BookEntry.heard_at``); None if no heartbeat of it is held."""
        entry = self.book.get(node)
        return entry.heard_at if entry is not None else None

def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address

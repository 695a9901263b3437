"""The UDP side of the peer port: peer protocol v6's liveness datagrams (``docs/protocol-v6.md``),
sent to each neighbour every period, and its statement datagrams, pushed when a statement is due;
the HTTP side carries the statements otherwise (a pull, a fallback probe, a beacon, v5).

What it is for
    Each period the agent sends every peer it exchanges with one 36-byte datagram
    (:mod:`edgewatch.core.liveness`) MAC'd with the pair's directional key
    (:mod:`edgewatch.core.pairkey`: X25519 between the two nodes' published exchange keys), and
    judges the datagrams it receives with one :class:`~edgewatch.core.liveness.PeerSession` per
    peer: authentic, new, and proving the peer alive after this node's recent datagram (its echo).
    Each peer's latest proof (:meth:`LivenessEndpoint.last_proof`) is what its failure detector
    takes as evidence once it arrives (``edgewatch.agent.statementcadence``); a peer that sends no
    proof (an agent older than v6, its exchange key unknown) keeps the v5 exchange every period.

Who a datagram is from
    Its source address: the address in the roster (the InternalIP) of one of the peers this node
    sends to now, as the v5 server binds a sender to its InternalIP. Anything else, or any other
    size than 36 bytes, is counted (``unknown_source``, ``malformed``, ``oversized``) and dropped
    before a key is used. Where the roster gives two peers one address (a member that claims
    another's InternalIP), the datagram is tried under each one's key and the MAC says who sent it
    (``address_conflict`` is logged): a member cannot capture another's datagrams, or forge them by
    spoofing its address (it does not hold that pair's key).

Statement datagrams
    :meth:`LivenessEndpoint.push_statement` sends a peer this node's signed statement in one
    datagram (:mod:`edgewatch.core.statementdatagram`) MAC'd with the same pair key (another
    domain), echoing the peer's latest liveness seq; it needs a session that has heard the peer.
    A received one (any size but 36 bytes) is checked (source, MAC, then an echo of one of this
    node's last :data:`~edgewatch.core.statementdatagram.STATEMENT_ECHO_WINDOW` seqs, higher than
    the echo of the peer's last statement taken: at most one per datagram this node sent, so a
    member cannot make a neighbour verify signatures faster than it sends; ``stale_echo``
    otherwise), it must come from the peer's confirmed epoch (``unconfirmed`` otherwise), and is
    handed to the :class:`StatementSink` (the peer exchange decodes and verifies the statement).

Sessions
    Each new session with a peer starts with a new random epoch of this node (one per session, not
    one per process): a peer that left the exchange for a period and came back is then heard after
    one round trip, as a restart is, instead of its old seqs being taken for replays until this
    node's new ones passed them.

Cost
    Per peer per period one 36-byte datagram each way (64 bytes with UDP and IPv4 headers), one
    HMAC-SHA256 to send and one to check; the pair keys are derived once per peer (one X25519 and
    one HKDF) and again only when the peer's published exchange key changes. A peer silent for
    :data:`QUIET_AFTER_S` gets one every :data:`QUIET_EVERY_S` until it speaks again.

Limits
    Datagrams are sent to the peer port number on every peer (the DaemonSet's hostPort, the same on
    every node). Nothing is retransmitted: a lost datagram is one period's missing evidence. A peer
    whose exchange key is not known yet (its record unread, or an agent older than v6) gets no
    datagram and its datagrams are counted ``no_key``. Before the datagrams may decide (see
    docs/protocol-v6.md): one socket serves every peer and stranger, so a flood that fills its
    receive buffer makes the kernel drop peers' datagrams too (per-peer connected sockets would
    give each peer its own queue); with a wildcard listen address the kernel picks the source
    address, which on a host with several addresses may not be its InternalIP; a fallback contact
    is one-way (it does not send back to a prober it does not list). If the port cannot be bound,
    the endpoint logs it and tries again every :data:`BIND_RETRY_S` seconds; meanwhile no proof
    arrives and the peers get the v5 exchange every period.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

from edgewatch.agent.peerserver import canonical_address
from edgewatch.core.liveness import DATAGRAM_SIZE, Liveness, PeerSession, open_datagram, seal
from edgewatch.core.pairkey import ExchangeKey, PairKeys, derive_pair_keys
from edgewatch.core.rejection import Rejected, RejectReason
from edgewatch.core.statementdatagram import (
    MAX_SIZE,
    STATEMENT_ECHO_WINDOW,
    StatementDatagram,
    open_statement,
    seal_statement,
)
from edgewatch.core.types import NodeName

log = logging.getLogger(__name__)

_Fields = TypeVar("_Fields", Liveness, StatementDatagram)

__all__ = ["ExchangeKeyView", "LivenessEndpoint", "LivenessEvents", "Proof", "StatementSink"]

RECEIVE_RESULTS = ("alive", "new", "replayed", "unknown_source", "no_key", "bad_signature", "malformed",
                   "oversized", "version", "statement", "stale_echo", "unconfirmed")
"""Every ``result`` a received datagram is counted under (:meth:`LivenessEvents.datagram_received`)."""
BIND_RETRY_S = 10.0
"""Seconds between two attempts to bind the UDP port after a failure."""
QUIET_AFTER_S = 20.0
"""A peer from which nothing authentic arrived for this many seconds (dead, its agent gone, or
its datagrams filtered) gets a datagram every :data:`QUIET_EVERY_S` instead of every period: a
dead neighbour cost each of its neighbours 64 bytes a second. Any authentic datagram from it (a
restarted agent's new epoch) ends the quiet at once, and the next period's datagram to it is the
one it echoes: a revived peer proves itself alive one round trip after it speaks. (Its failure
detector is not involved: a peer whose datagrams are filtered but whose TCP exchanges succeed is
alive to us and quiet to UDP, which is all UDP can do for it.)"""
QUIET_EVERY_S = 5.0
"""Seconds between two datagrams to a quiet peer (see :data:`QUIET_AFTER_S`)."""


@dataclass(frozen=True)
class Proof:
    """A peer's latest datagram that proved it alive: when it arrived (this node's monotonic
    seconds), its epoch (new at each start of its agent and each new session with this node), and
    what it said (its kubelet's and cloud link's health, the low 16 bits of the number of the
    statement in which what it says last changed)."""

    at: float
    kubelet_ok: bool
    cloud_ok: bool
    statement: int
    epoch: int


class ExchangeKeyView(Protocol):
    """The peers' verified exchange keys (``edgewatch.agent.identity.IdentityKeeper``)."""

    def exchange_key_of(self, node: NodeName) -> bytes | None:
        """``node``'s raw X25519 public key, verified against its identity keys; None if unknown."""
        ...


class LivenessEvents(Protocol):
    """What the endpoint tells the agent (its metrics count it)."""

    def datagram_sent(self) -> None:
        """One liveness datagram was handed to the kernel."""
        ...

    def datagram_received(self, result: str) -> None:
        """One datagram arrived and was judged ``result`` (one of :data:`RECEIVE_RESULTS`;
        ``statement``: an authentic, recent statement datagram handed to the sink)."""
        ...

    def statement_datagram_sent(self) -> None:
        """One statement datagram was handed to the kernel."""
        ...


class StatementSink(Protocol):
    """Where authentic statement datagrams go (``edgewatch.agent.peers.PeerExchange``)."""

    def statement_received(self, peer: NodeName, statement: bytes, *, age_s: float, epoch: int) -> None:
        """``peer`` pushed ``statement`` (its signed heartbeat in ``edgewatch.core.compactstatement``'s
        form, not yet parsed or verified),
        ``age_s`` seconds old when sent, from its liveness epoch ``epoch``. Must not raise."""
        ...


class _Socket(asyncio.DatagramProtocol):
    """Passes each datagram to the endpoint; errors of the socket are logged, never raised."""

    def __init__(self, received: Callable[[bytes, str], None]) -> None:
        self._received = received

    def datagram_received(self, data: bytes, addr: tuple[str | object, ...]) -> None:
        self._received(data, canonical_address(str(addr[0])) if addr else "")

    def error_received(self, exc: Exception) -> None:
        log.debug("liveness socket: %s", exc)  # e.g. ICMP port unreachable from a peer without v6


class LivenessEndpoint:
    """Sends and judges liveness datagrams (see the module docstring).

    Args (keyword-only):
        me: this node.
        key: this node's exchange key (``ExchangeKey.derived_from`` its identity key).
        keys: the peers' verified exchange keys (:class:`ExchangeKeyView`).
        host: the listen address (the peer port's).
        port: the UDP port, the same number as the peer port's TCP one; also where peers listen.
        events: told of each datagram sent and received (:class:`LivenessEvents`).
        statements: where authentic statement datagrams go (None: counted and dropped).
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(self, *, me: NodeName, key: ExchangeKey, keys: ExchangeKeyView, host: str, port: int,
                 events: LivenessEvents, statements: StatementSink | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.me = me
        self._statements = statements
        self.host, self.port = host, port
        self._key = key
        self._keys = keys
        self._events = events
        self._clock = clock
        self._sessions: dict[NodeName, PeerSession] = {}
        self._pairs: dict[NodeName, tuple[bytes, PairKeys | None]] = {}  # peer -> (its key, the pair's keys)
        self._peers: dict[NodeName, str] = {}              # the peers of this period -> address
        self._by_address: dict[str, tuple[NodeName, ...]] = {}
        self._conflicts_logged: set[str] = set()
        self._proofs: dict[NodeName, Proof] = {}
        self._heard_at: dict[NodeName, float] = {}         # peer -> its last authentic new datagram
        self._quiet_sent_at: dict[NodeName, float] = {}    # quiet peer -> our last datagram to it
        self._statement_echo: dict[NodeName, int] = {}     # peer -> the echo of its last statement taken
        self._transport: asyncio.DatagramTransport | None = None

    async def start(self) -> None:
        """Bind the UDP socket. Raises OSError if the address cannot be bound."""
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(lambda: _Socket(self.received),
                                                           local_addr=(self.host or "0.0.0.0", self.port))
        self._transport = transport

    async def run(self) -> None:
        """Bind the socket (again every :data:`BIND_RETRY_S` seconds while the port is taken:
        logged, never fatal, v5 goes on) and hold it until cancelled; then close it."""
        try:
            while self._transport is None:
                try:
                    await self.start()
                except OSError as exc:
                    log.error("cannot bind the liveness datagram port %s/udp: %s; retrying in %g s (the v5 "
                              "exchange goes on)", self.port, exc, BIND_RETRY_S, extra={"kind": "liveness_bind"})
                    await asyncio.sleep(BIND_RETRY_S)
            await asyncio.Event().wait()
        finally:
            self.close()

    def close(self) -> None:
        """Close the socket (idempotent)."""
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    # -- keys and sessions ---------------------------------------------------------------------------

    def _pair(self, peer: NodeName) -> PairKeys | None:
        public = self._keys.exchange_key_of(peer)
        if public is None:
            return None
        held = self._pairs.get(peer)
        if held is not None and held[0] == public:
            return held[1]
        try:
            pair: PairKeys | None = derive_pair_keys(me=self.me, my_key=self._key, peer=peer, peer_public_raw=public)
        except ValueError as exc:  # refused when its record was read; kept (as None) so it costs once
            log.warning("no pair key with %s: %s", peer, exc, extra={"kind": "pair_key_refused", "node": peer})
            pair = None
        self._pairs[peer] = (public, pair)
        return pair

    def _session(self, peer: NodeName) -> PeerSession:
        session = self._sessions.get(peer)
        if session is None:  # a new epoch per session (module docstring)
            session = self._sessions[peer] = PeerSession(peer=peer, my_epoch=1 + secrets.randbelow(0xFFFFFFFF))
            self._statement_echo.pop(peer, None)  # echoes of the new epoch start again
        return session

    # -- one period ------------------------------------------------------------------------------------

    def send(self, peers: Mapping[NodeName, str], *, statement: int, kubelet_ok: bool, cloud_ok: bool) -> None:
        """Send each of ``peers`` (node -> its address) this period's datagram; from now on only
        datagrams from these addresses are read. State of peers no longer listed is dropped."""
        self._peers = {node: canonical_address(address) for node, address in peers.items() if node != self.me}
        by_address: dict[str, tuple[NodeName, ...]] = {}
        for node, address in sorted(self._peers.items()):
            by_address[address] = by_address.get(address, ()) + (node,)
        self._by_address = by_address
        self._conflicts_logged &= set(by_address)
        for table in (self._sessions, self._pairs, self._proofs, self._heard_at, self._quiet_sent_at,
                      self._statement_echo):
            for gone in [n for n in table if n not in self._peers]:
                del table[gone]
        transport = self._transport
        if transport is None:
            return
        now = self._clock()
        for peer, address in self._peers.items():
            pair = self._pair(peer)
            if pair is None or self._quiet(peer, now):
                continue
            session, fields = self._session(peer).next_datagram(statement=statement, kubelet_ok=kubelet_ok,
                                                                 cloud_ok=cloud_ok)
            self._sessions[peer] = session
            transport.sendto(seal(fields, key=pair.send), (address, self.port))
            self._events.datagram_sent()

    def push_statement(self, peer: NodeName, statement: bytes, *, age_s: float) -> bool:
        """Send ``peer`` this node's signed statement (``statement``: its heartbeat, compact form,
        ``age_s``: seconds since it was signed) in one statement datagram. False, and nothing sent,
        without a socket, a pair key, a session that has heard the peer, or room in one datagram
        (the caller exchanges over HTTP instead)."""
        transport = self._transport
        address = self._peers.get(peer)
        pair = self._pair(peer) if address is not None else None
        session = self._sessions.get(peer)
        if transport is None or pair is None or session is None or not session.high or address is None:
            return False
        try:
            fields = StatementDatagram(epoch=session.my_epoch, echo_epoch=session.their_epoch, echo=session.high,
                                       age_ms=min(0xFFFFFFFF, max(0, round(age_s * 1000))), statement=statement)
        except ValueError:
            return False
        transport.sendto(seal_statement(fields, key=pair.send), (address, self.port))
        self._events.statement_datagram_sent()
        return True

    def _quiet(self, peer: NodeName, now: float) -> bool:
        """Whether to skip ``peer`` this period: nothing authentic from it for :data:`QUIET_AFTER_S`
        (counted from our first datagram of the session) and our last one to it less than
        :data:`QUIET_EVERY_S` ago."""
        heard = self._heard_at.setdefault(peer, now)  # a new session: heard "now", not quiet yet
        if now - heard < QUIET_AFTER_S:
            self._quiet_sent_at.pop(peer, None)
            return False
        if now - self._quiet_sent_at.get(peer, -QUIET_EVERY_S) < QUIET_EVERY_S:
            return True
        self._quiet_sent_at[peer] = now
        return False

    def received(self, data: bytes, address: str) -> None:
        """Judge one datagram from ``address`` (never raises for any input)."""
        candidates = self._by_address.get(address)
        if candidates is None:
            self._events.datagram_received("unknown_source")
            return
        if len(data) != DATAGRAM_SIZE:  # told apart by size alone, before any key is used
            if len(data) > MAX_SIZE:
                self._events.datagram_received(RejectReason.OVERSIZED.value)
                return
            self._statement(candidates, data)
            return
        if len(candidates) > 1 and address not in self._conflicts_logged:
            self._conflicts_logged.add(address)
            log.warning("the roster gives %s one address, %s: their datagrams are told apart by their keys",
                        ", ".join(candidates), address, extra={"kind": "address_conflict", "remote": address})
        opened = self._authentic(candidates, data, lambda raw, key: open_datagram(raw, key=key))
        if opened is not None:
            self._admit(*opened)

    def _authentic(self, candidates: tuple[NodeName, ...], data: bytes,
                   opener: Callable[[bytes, bytes], _Fields]) -> tuple[NodeName, _Fields] | None:
        """The first of ``candidates`` under whose receive key ``opener`` accepts ``data``, with
        the fields; None (counted under the last refusal, or ``no_key``) if none does."""
        reason = "no_key"
        for peer in candidates:
            pair = self._pair(peer)
            if pair is None:
                continue
            try:
                return peer, opener(data, pair.receive)
            except Rejected as exc:
                reason = exc.reason.value
        self._events.datagram_received(reason)
        return None

    def _statement(self, candidates: tuple[NodeName, ...], data: bytes) -> None:
        opened = self._authentic(candidates, data, lambda raw, key: open_statement(raw, key=key))
        if opened is None:
            return
        peer, fields = opened
        session = self._sessions.get(peer)
        if session is None or not session.echoes_recent(echo_epoch=fields.echo_epoch, echo=fields.echo,
                                                        echo_window=STATEMENT_ECHO_WINDOW) \
                or fields.echo <= self._statement_echo.get(peer, 0):
            self._events.datagram_received("stale_echo")
            return
        if not (session.confirmed and fields.epoch == session.their_epoch):
            self._events.datagram_received("unconfirmed")
            return
        self._statement_echo[peer] = fields.echo
        self._events.datagram_received("statement")
        if self._statements is not None:
            self._statements.statement_received(peer, fields.statement, age_s=fields.age_s, epoch=fields.epoch)

    def _admit(self, peer: NodeName, fields: Liveness) -> None:
        self._heard_at[peer] = self._clock()  # authentic (perhaps a copy: it costs bytes only)
        session, admission = self._session(peer).admit(fields)
        self._sessions[peer] = session
        if admission.alive and session.high == fields.seq:  # the newest only: a late one says older things
            self._proofs[peer] = Proof(at=self._clock(), kubelet_ok=fields.kubelet_ok, cloud_ok=fields.cloud_ok,
                                       statement=fields.statement, epoch=fields.epoch)
        self._events.datagram_received("alive" if admission.alive else "new" if admission.new else "replayed")

    def alive_within(self, seconds: float) -> frozenset[NodeName]:
        """The peers whose datagram proved them alive in the last ``seconds`` seconds."""
        since = self._clock() - seconds
        return frozenset(n for n, proof in self._proofs.items() if proof.at >= since)

    def last_proof(self, peer: NodeName) -> Proof | None:
        """``peer``'s latest datagram that proved it alive in this session (None: none yet)."""
        return self._proofs.get(peer)

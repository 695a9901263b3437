"""Peer protocol v6's cadence in the agent: which neighbours' liveness datagrams speak for them,
each period's detector evidence from those datagrams, and when a statement exchange with each
neighbour is due (the rules are :mod:`edgewatch.core.cadence`; this keeps the per-peer state).

What it is for
    The peer exchange (``edgewatch.agent.peers``) asks it once a period, before it signs:
    :meth:`StatementCadence.start_period` settles which targets speak v6 (their datagram proved
    them alive within two statement refreshes), :meth:`StatementCadence.judgements` gives one
    success or failure per such target for its failure detector, and :meth:`StatementCadence.due`
    which targets get a statement exchange this period and why. :meth:`StatementCadence.told`
    records each successful exchange, either way.

Limits: per-peer state of the watched peers only (:meth:`StatementCadence.retain`); no I/O, no
clock of its own (monotonic seconds are passed in). The statement named by a datagram is its low
16 bits; the agent starts its heartbeat numbers at a random point so a restarted agent does not
likely reuse the numbers its peers still hold, and a statement exchange every refresh bounds what
a coincidence could cost.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Protocol

from edgewatch.core.book import BookEntry, HeartbeatBook, holds
from edgewatch.core.cadence import ExchangeReason, datagram_success, exchange_reason
from edgewatch.core.types import NodeName

__all__ = ["PROOF_WINDOW_PERIODS", "Judgement", "LivenessProofs", "Proof", "StatementCadence", "StatementPusher"]

PROOF_WINDOW_PERIODS = 1.5
"""A peer's datagram proof of life counts as a period's success for this many periods
(:func:`edgewatch.core.cadence.datagram_success`)."""


class Proof(Protocol):
    """A peer's latest datagram that proved it alive (``edgewatch.agent.datagrams.Proof``)."""

    @property
    def at(self) -> float:
        """When it arrived, monotonic seconds."""
        ...

    @property
    def kubelet_ok(self) -> bool:
        """Its kubelet flag."""
        ...

    @property
    def statement(self) -> int:
        """The low 16 bits of the number of the statement in which what the peer says last changed."""
        ...

    @property
    def epoch(self) -> int:
        """The peer's datagram epoch (new at each start of its agent)."""
        ...


class LivenessProofs(Protocol):
    """The peers' proofs of life by liveness datagram (``edgewatch.agent.datagrams.LivenessEndpoint``)."""

    def last_proof(self, peer: NodeName) -> Proof | None:
        """``peer``'s latest datagram that proved it alive (None: none yet)."""
        ...


class StatementPusher(Protocol):
    """Sends a peer our statement in one datagram (``edgewatch.agent.datagrams.LivenessEndpoint``)."""

    def push_statement(self, peer: NodeName, statement: bytes, *, age_s: float) -> bool:
        """Send ``statement`` (our signed heartbeat, compact form, ``age_s`` seconds old) to ``peer``;
        False if it cannot go by datagram (the caller exchanges over HTTP)."""
        ...


@dataclass(frozen=True)
class Judgement:
    """One period's detector evidence about ``peer`` from its datagrams: ``ok``, and the statement
    its proof named and when that proof arrived (``at``, monotonic seconds; meaningful if ``ok``)."""

    peer: NodeName
    ok: bool
    statement: int
    at: float


class StatementCadence:
    """Per-peer state of v6's cadence (see the module docstring).

    Args (keyword-only):
        period_s: the exchange period, seconds (the proof window is
            :data:`PROOF_WINDOW_PERIODS` of it).
        refresh_s: ``wire.statement_refresh_s``, seconds: a peer whose datagrams fell silent for
            twice this long gets v5 again.
        anti_entropy_s: ``wire.anti_entropy_s``, seconds: a statement exchange with each peer at
            least this often, even when nothing changed.
    """

    def __init__(self, *, period_s: float, refresh_s: float, anti_entropy_s: float) -> None:
        if not period_s > 0 or not refresh_s > 0 or not anti_entropy_s > 0:
            raise ValueError("period_s, refresh_s and anti_entropy_s must be > 0 seconds")
        self.window_s = PROOF_WINDOW_PERIODS * period_s
        self.refresh_s = refresh_s
        self.anti_entropy_s = anti_entropy_s
        self.by_datagram: frozenset[NodeName] = frozenset()
        self._proofs: dict[NodeName, Proof] = {}
        self._told: dict[NodeName, tuple[int, int]] = {}      # peer -> the order of ours it holds
        self._exchanged_at: dict[NodeName, float] = {}        # peer -> last successful exchange
        self._beacon_told: dict[NodeName, str] = {}           # peer -> our beacon at that exchange
        self._v5_heard_at: dict[NodeName, float] = {}         # peer -> last exchange while not by datagram
        self._epoch_told: dict[NodeName, int] = {}            # peer -> its datagram epoch at that exchange
        self._incarnation_told: dict[NodeName, int] = {}      # peer -> the incarnation it gave us then
        self._silent: frozenset[NodeName] = frozenset()      # targets whose datagrams fell silent
        self._v5_tried_at: dict[NodeName, float] = {}         # silent peer -> its last v5 probe

    def start_period(self, targets: Iterable[NodeName], proofs: LivenessProofs | None, *, now: float) -> None:
        """Settle this period's :attr:`by_datagram`: the targets whose datagram proved them alive at
        most ``2 * refresh_s`` seconds before ``now`` (``proofs`` None: none, v5 only). A target
        whose last proof is older fell silent (dead, gone back to an older agent, or its datagrams
        filtered): while its v5 exchanges fail too it gets one every ``refresh_s`` instead of every
        period; one that answers gets them every period again; it is back by datagram at its first
        proof."""
        self._proofs = {}
        silent = set()
        if proofs is not None:
            hold = 2 * self.refresh_s
            for peer in targets:
                proof = proofs.last_proof(peer)
                if proof is not None and now - proof.at <= hold:
                    self._proofs[peer] = proof
                elif proof is not None:
                    silent.add(peer)
        self.by_datagram = frozenset(self._proofs)
        self._silent = frozenset(silent)

    def judgements(self, *, now: float) -> list[Judgement]:
        """One :class:`Judgement` per peer of :attr:`by_datagram`, sorted by peer."""
        out = []
        for peer in sorted(self._proofs):
            proof = self._proofs[peer]
            ok = datagram_success(proof_age_s=max(0.0, now - proof.at), kubelet_ok=proof.kubelet_ok,
                                  window_s=self.window_s)
            out.append(Judgement(peer=peer, ok=ok, statement=proof.statement, at=proof.at))
        return out

    def holds_theirs(self, peer: NodeName, book: HeartbeatBook) -> bool:
        """Whether ``book`` holds what ``peer``'s latest proof says it says: a statement at least as
        new as the one it names (``edgewatch.core.book.holds``), fetched while its datagrams had
        that same epoch (16 bits say nothing across a restart of its agent; a new epoch needs one
        exchange first), of the incarnation the peer itself gave us then (a statement of another
        incarnation that a relay put in the book is not what its proofs name)."""
        proof = self._proofs.get(peer)
        held = book.get(peer)
        return (proof is not None and held is not None and self._epoch_told.get(peer) == proof.epoch
                and self._incarnation_told.get(peer) == held.heartbeat.incarnation
                and holds(held.heartbeat.seq, proof.statement))

    def wants_exchange(self, peer: NodeName, *, book: HeartbeatBook, beacon: str) -> bool:
        """Whether an exchange with ``peer`` would do more than hand it our statement: we lack what
        its proof names (a pull) or it wants our ``beacon``; a push alone would leave that undone."""
        held = book.get(peer)
        return not self.holds_theirs(peer, book) or self._beacon_wanted(peer, held, beacon)

    def _beacon_wanted(self, peer: NodeName, held: BookEntry | None, beacon: str) -> bool:
        return (bool(beacon) and held is not None and not held.heartbeat.cloud_ok
                and held.heartbeat.beacon != beacon and self._beacon_told.get(peer) != beacon)

    def due(self, targets: Iterable[NodeName], *, announced: tuple[int, int], book: HeartbeatBook, beacon: str,
            now: float) -> dict[NodeName, ExchangeReason]:
        """The targets due a statement exchange this period, with why
        (:func:`edgewatch.core.cadence.exchange_reason`); ``announced``: the ``(incarnation, seq)``
        of our statement in which what we say last changed, ``book``: the statements we hold,
        ``beacon``: the beacon value we hold ("" none)."""
        out = {}
        for peer in targets:
            proof = self._proofs.get(peer)
            held = book.get(peer)
            reason = exchange_reason(
                by_datagram=proof is not None,
                told_current=self._told.get(peer) == announced,
                hold_theirs=self.holds_theirs(peer, book),
                since_exchange_s=max(0.0, now - self._exchanged_at.get(peer, -math.inf)),
                refresh_s=self.anti_entropy_s,
                beacon_wanted=self._beacon_wanted(peer, held, beacon))
            if reason is ExchangeReason.V5 and peer in self._silent \
                    and now - self._v5_heard_at.get(peer, -math.inf) > 2 * self.refresh_s:
                if now - self._v5_tried_at.get(peer, -math.inf) < self.refresh_s:
                    continue
                self._v5_tried_at[peer] = now
            if reason is not None:
                out[peer] = reason
        return out

    def v5_listening(self, targets: Iterable[NodeName], *, now: float) -> bool:
        """Whether a target the datagrams do not speak for answered an exchange within two statement
        refreshes before ``now``: an agent older than v6 that needs a new statement every period
        (its vote TTL runs from each receipt). A dead target does not count."""
        hold = 2 * self.refresh_s
        return any(now - self._v5_heard_at.get(p, -math.inf) <= hold for p in targets if p not in self.by_datagram)

    def told(self, peer: NodeName, announced: tuple[int, int], *, beacon: str, now: float, theirs: int) -> None:
        """An exchange with ``peer`` succeeded at ``now``: it holds our statement ``announced``
        (``(incarnation, seq)``) or a later one of the same content, we hold its newest (of
        incarnation ``theirs``, the statement it gave in this exchange), it was offered our
        ``beacon``."""
        self._incarnation_told[peer] = theirs
        if peer not in self.by_datagram:
            self._v5_heard_at[peer] = now
        self._told[peer] = announced
        self._exchanged_at[peer] = now
        self._beacon_told[peer] = beacon
        proof = self._proofs.get(peer)
        if proof is not None:
            self._epoch_told[peer] = proof.epoch
        else:
            self._epoch_told.pop(peer, None)

    def pushed(self, peer: NodeName, announced: tuple[int, int], *, now: float) -> None:
        """Our statement ``announced`` (``(incarnation, seq)``) was pushed to ``peer`` by datagram at
        ``now``: one way only, so nothing is recorded of theirs or of our beacon. If the datagram
        is lost, the peer pulls it when our next liveness datagram names it."""
        self._told[peer] = announced
        self._exchanged_at[peer] = now

    def heard_statement(self, peer: NodeName, *, epoch: int, incarnation: int) -> None:
        """``peer`` pushed us its statement (of ``incarnation``) by datagram from its liveness
        ``epoch`` (the book took it, or held it): what its proofs of that epoch name is held as
        after an exchange."""
        self._epoch_told[peer] = epoch
        self._incarnation_told[peer] = incarnation

    def retain(self, peers: Collection[NodeName]) -> None:
        """Forget the peers not in ``peers`` (no longer watched)."""
        for table in (self._told, self._exchanged_at, self._proofs, self._beacon_told, self._v5_heard_at,
                      self._epoch_told, self._v5_tried_at, self._incarnation_told):
            for peer in [p for p in table if p not in peers]:
                del table[peer]

"""The book of the newest heartbeat per origin an agent holds, and the choice of heartbeats to relay.

What it is for: the local count (:mod:`edgewatch.core.reach`) reads the votes in the book, the
carrier reads a cut-off peer's newest heartbeat and its age, and every envelope relays a few
heartbeats chosen here (least relayed first). Times are this agent's monotonic seconds: a
heartbeat's age is the local receipt time plus the age it arrived with (OSPF's LS age), never a
remote timestamp.

Limits: pure, single-threaded, bounded (``max_origins``; the stalest entry is evicted first).
"""

from __future__ import annotations

import dataclasses
import enum
import math
import random
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from edgewatch.core.checks import bounded_age, finite_seconds, positive_int
from edgewatch.core.quorum import Vote
from edgewatch.core.types import NodeName
from edgewatch.core.wire import MAX_AGE_S, Heartbeat

__all__ = ["BookEntry", "Freshness", "HeartbeatBook", "holds", "select_relays"]





class Freshness(enum.StrEnum):
    """What :meth:`HeartbeatBook.offer` made of a heartbeat."""

    NEW = "new"
    """Newer than what the book had (or the first from its origin): stored;
    the detector may count it as a success for its origin."""
    DUPLICATE = "duplicate"
    """Same ``(incarnation, seq)`` as the stored one: ignored."""
    OLDER = "older"
    """Older than the stored one (a late relay): ignored."""


@dataclass(frozen=True, kw_only=True)
class BookEntry:
    """The newest heartbeat of one origin: when it arrived (``received_at``,
    local monotonic seconds), the age it arrived with (``age_s``, seconds)
    and how many times it has been relayed since."""

    heartbeat: Heartbeat
    received_at: float
    relay_count: int
    age_s: float = 0.0
    confirmed_at: float = -math.inf
    """When its origin last said, directly and authenticated, that this is still its newest
    statement (a peer protocol v6 liveness datagram naming its number; local monotonic seconds)."""

    @property
    def voted_at(self) -> float:
        """When its vote counts from (local seconds): its receipt, or its origin's later
        confirmation that it still holds (:meth:`HeartbeatBook.confirm`)."""
        return max(self.received_at, self.confirmed_at)

    @property
    def heard_at(self) -> float:
        """The later of :attr:`signed_at` and :attr:`confirmed_at`: the origin's last sign of life
        as seen from here, and the time its vote counts from."""
        return max(self.signed_at, self.confirmed_at)

    @property
    def signed_at(self) -> float:
        """Local-clock estimate of when its origin signed it (receipt minus
        reported age): the origin's last sign of life as seen from here."""
        return self.received_at - self.age_s

    def age_at(self, now: float) -> float:
        """Its age at local time ``now`` (seconds): the age it arrived with
        plus the time held here. What a relay of it reports."""
        return self.age_s + max(0.0, now - self.received_at)


class HeartbeatBook:
    """Newest heartbeat per origin.

    Within one incarnation of an origin, a larger ``seq`` is newer. Across
    incarnations (a restart) the numbers say nothing (an origin's clock may
    have gone back), so the heartbeat signed later by the local estimate
    (:attr:`BookEntry.signed_at`: local receipt time minus reported age)
    wins; ties go to the larger incarnation. Old or duplicate relays are
    harmless: only a NEW heartbeat replaces the entry and refreshes
    ``received_at``. Times are the caller's local clock (monotonic), the same
    clock later given to :func:`~edgewatch.core.quorum.decide` via
    :meth:`votes`; no cross-node clock comparison happens here. The agent
    offers its own heartbeats too, so its own vote is in :meth:`votes`.
    """

    __slots__ = ("_entries", "_max_origins")

    def __init__(self, *, max_origins: int = 5_000) -> None:
        """Raises ValueError if ``max_origins < 1``."""
        self._max_origins = positive_int("max_origins", max_origins)
        self._entries: dict[NodeName, BookEntry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, origin: object) -> bool:
        return origin in self._entries

    def get(self, origin: NodeName) -> BookEntry | None:
        """The entry of ``origin``, if any."""
        return self._entries.get(origin)

    def entries(self) -> tuple[BookEntry, ...]:
        """All entries, sorted by origin."""
        return tuple(self._entries[o] for o in sorted(self._entries))

    def offer(self, heartbeat: Heartbeat, *, now: float, age_s: float = 0.0, relayed: bool = False) -> Freshness:
        """Offer a verified heartbeat received at ``now`` (local seconds) with
        reported age ``age_s`` (seconds). ``relayed``: it came from another
        member than its origin, whose age claim alone would order it against
        a held heartbeat of another incarnation: such a heartbeat never
        replaces one held (OLDER), so only the origin itself moves its entry
        to another incarnation (a relay of a statement from before the
        origin's restart cannot take the place of its current one).

        When the book is full, a NEW origin evicts the least recently
        refreshed entry. Raises ValueError if ``now`` is not finite or
        ``age_s`` is out of ``[0, MAX_AGE_S]``.
        """
        t = finite_seconds("now", now)
        age = bounded_age("age_s", age_s, MAX_AGE_S)
        current = self._entries.get(heartbeat.origin)
        if current is not None:
            if heartbeat.order == current.heartbeat.order:
                return Freshness.DUPLICATE
            if relayed and heartbeat.incarnation != current.heartbeat.incarnation:
                return Freshness.OLDER
            if heartbeat.incarnation == current.heartbeat.incarnation:
                if heartbeat.seq < current.heartbeat.seq:
                    return Freshness.OLDER
            elif (t - age, heartbeat.incarnation) <= (current.signed_at, current.heartbeat.incarnation):
                return Freshness.OLDER
        elif len(self._entries) >= self._max_origins:
            stalest = min(self._entries.values(), key=lambda e: (e.received_at, e.heartbeat.origin))
            del self._entries[stalest.heartbeat.origin]
        self._entries[heartbeat.origin] = BookEntry(heartbeat=heartbeat, received_at=t, relay_count=0, age_s=age)
        return Freshness.NEW

    def confirm(self, origin: NodeName, *, statement: int, now: float) -> bool:
        """Record that ``origin`` said at ``now`` (local seconds) that what it says last changed in
        its statement number ``statement`` (the low 16 bits of a ``seq``, as a liveness datagram
        carries it). True if the statement held is that one or a later one (:func:`holds`): its
        vote then counts from ``now`` (:meth:`votes`). False (nothing changes) if it is older or
        none is held: the caller fetches it. The caller makes sure the held statement is of the
        origin's current incarnation (16 bits say nothing across a restart). Raises ValueError if
        ``now`` is not finite."""
        t = finite_seconds("now", now)
        entry = self._entries.get(origin)
        if entry is None or not holds(entry.heartbeat.seq, statement):
            return False
        if t > entry.confirmed_at:
            self._entries[origin] = dataclasses.replace(entry, confirmed_at=t)
        return True

    def retain(self, origins: Collection[NodeName]) -> None:
        """Drop every entry whose origin is not in ``origins`` (e.g. after a
        regrouping)."""
        for origin in [o for o in self._entries if o not in origins]:
            del self._entries[origin]

    def mark_relayed(self, heartbeats: Iterable[Heartbeat]) -> None:
        """Count one more relay for each heartbeat that is still its origin's
        current entry (call after sending what :func:`select_relays`
        chose)."""
        for hb in heartbeats:
            entry = self._entries.get(hb.origin)
            if entry is not None and entry.heartbeat.order == hb.order:
                self._entries[hb.origin] = dataclasses.replace(entry, relay_count=entry.relay_count + 1)

    def votes(self) -> dict[NodeName, Vote]:
        """Every origin's newest heartbeat as a vote observed at its local
        receipt time, or at its origin's later confirmation that it still
        holds (:meth:`confirm`) (feed to :func:`~edgewatch.core.quorum.decide`,
        which drops expired ones: the vote TTL runs on the receiver's clock)."""
        return {o: e.heartbeat.vote(observed_at=e.voted_at) for o, e in self._entries.items()}


def holds(held_seq: int, named: int) -> bool:
    """Whether a statement numbered ``held_seq`` is the statement a liveness datagram names by the
    low 16 bits ``named``, or a later one: serial number arithmetic on 16 bits (RFC 1982), so
    correct while the two are less than 32,768 statements apart."""
    return (held_seq - named) & 0xFFFF < 0x8000


def select_relays(
    book: HeartbeatBook,
    *,
    for_peer: NodeName,
    now: float,
    max_count: int,
    max_age_s: float,
    rng: random.Random,
    exclude: Collection[NodeName] = (),
    max_total_age_s: float | None = None,
) -> list[Heartbeat]:
    """Choose the heartbeats to piggyback on one envelope to ``for_peer``.

    Candidates: book entries received at most ``max_age_s`` seconds before
    ``now`` (local clock), whose total age (:meth:`BookEntry.age_at`) is at
    most ``max_total_age_s`` if given (older ones would be STALE at the
    receiver), whose origin is neither ``for_peer`` (it knows its own) nor
    in ``exclude`` (e.g. the sender itself, whose own heartbeat is always
    first anyway). Order: least relayed first (memberlist's transmit-limited
    queue: a NEW heartbeat has count 0, so the freshest news goes first and
    every entry gets its turn), then most recently received, then random
    (``rng``) to break ties. At most ``max_count`` are returned; send each
    with ``book.get(origin).age_at(now)`` and call
    :meth:`HeartbeatBook.mark_relayed` with what was actually sent.

    Cost model: each node sends ``fanout`` envelopes per period, each with
    1 + ``max_count`` heartbeats — O(fanout * max_count) heartbeats per node
    per period whatever the group size n (SuperEdge: n messages and O(n^2)
    bytes per node). A NEW heartbeat spreads epidemically and reaches all n
    nodes in O(log n) periods while fresh news exists. But the relay
    capacity per node per period is ``fanout * (1 + max_count)``: when n is
    larger than that, each node hears a given origin only about every
    ``n / (fanout * (1 + max_count))`` periods, and the vote TTL and the
    detector's timeouts must be at least that long.

    Raises:
        ValueError: ``max_count < 0``, ``max_age_s`` or ``max_total_age_s``
            negative or not finite, ``now`` not finite.
    """
    t = finite_seconds("now", now)
    limit = positive_int("max_count", max_count, 0)
    max_age = finite_seconds("max_age_s", max_age_s)
    if max_age < 0:
        raise ValueError("max_age_s must be >= 0")
    total = math.inf if max_total_age_s is None else finite_seconds("max_total_age_s", max_total_age_s)
    if total < 0:
        raise ValueError("max_total_age_s must be >= 0")
    candidates = [
        e
        for e in book.entries()
        if e.heartbeat.origin != for_peer and e.heartbeat.origin not in exclude and t - e.received_at <= max_age
        and e.age_at(t) <= total
    ]
    keyed = [(e.relay_count, -e.received_at, rng.random(), e.heartbeat.origin, e) for e in candidates]
    keyed.sort(key=lambda k: k[:4])
    return [k[4].heartbeat for k in keyed[:limit]]

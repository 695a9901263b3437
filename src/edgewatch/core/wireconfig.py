"""The settings of the agents' peer protocol (:mod:`edgewatch.core.wire`): the largest envelope,
how old a heartbeat may be, fallback probes and contacts, relays, the replay guard's and the
heartbeat book's bounds and the peer server's rate limit, checked once on construction.

The agent reads them from its configuration (``wire``, :mod:`edgewatch.agent.config`); the
simulator builds them directly. Limits: settings only; nothing here runs or decodes.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgewatch.core.checks import positive_int, positive_seconds
from edgewatch.core.protocol import MAX_AGE_S, MAX_HEARTBEATS_PER_ENVELOPE

__all__ = ["WireConfig"]


@dataclass(frozen=True, kw_only=True)
class WireConfig:
    """Limits and timings of the wire protocol. Durations in seconds.

    Cost model (per node, per exchange period): one request to each
    neighbour (at most ``2 * rings``, :mod:`edgewatch.core.topology`) and one
    answer to each neighbour's request, plus ``fallback_probes`` requests
    while isolated; each envelope at most ``1 + max_relays`` heartbeats of
    at most ``1 + 2 * rings + max_contacts`` names. Independent of group size.

    Raises:
        ValueError: on construction, if a value is out of range or the
            relations documented on the fields do not hold.
    """

    max_bytes: int = 65_536
    """Largest envelope accepted or produced, bytes. Default 64 KiB: 9
    heartbeats of 15 names of Kubernetes' longest (253 characters) take
    about 40 KiB; typical envelopes are 3-5 KiB. Bounds the memory and CPU an
    unauthenticated sender can make a receiver spend (one signature check
    over at most this many bytes; nothing is parsed before the signature
    matches). An envelope that would be larger is not sent (counted and
    logged); the agent goes on."""

    heartbeat_max_age_s: float = 30.0
    """A heartbeat (own or relayed) whose age — summed over its hops, each
    measured on that hop's monotonic clock — exceeds this is STALE. Default
    30 s: gossip delivers a heartbeat within a few periods; older ones carry
    votes that have expired anyway (vote TTL 5 s) and would only let a
    restarted receiver believe a dead node's last words."""

    fallback_probes: int = 2
    """Random non-neighbours an agent probes per period while it reaches
    fewer than two of its neighbours (SWIM's indirect probing, simplified:
    a node whose neighbours all sit across a partition still finds its own
    side). Default 2."""

    max_contacts: int = 8
    """Most fallback contacts (non-neighbours exchanging with us) watched at
    once; a contact is forgotten after a vote TTL without evidence. Default
    8: four periods of fallback probes."""

    max_relays: int = 0
    """Relayed heartbeats per envelope (:func:`select_relays`). Default 0:
    nothing decides on relayed heartbeats (detectors take direct evidence
    only, a carrier is a direct neighbour, the controller counts the
    statements uploaded to it), and each relay doubled an envelope's bytes
    and encode/decode work for redundancy only the local count of a lossy
    small group used (measured with the real encoder in the simulator, pool
    of 5: 733 KiB per node per minute with 2 relays, 367 with none). An
    agent still reads, books and counts relays from agents that send them.
    Each costs its signature check once (the verified-signature cache of
    :class:`edgewatch.core.identity.PublicKeys`) and about 400 bytes.
    ``1 + max_relays`` must be <= :data:`MAX_HEARTBEATS_PER_ENVELOPE`."""

    relay_max_age_s: float = 10.0
    """Heartbeats received (local clock) longer ago than this are not
    relayed. Default 10 s: a heartbeat not superseded for 10 periods belongs
    to a node that is gone or cut off; spreading it further only spreads a
    stale vote. Must be <= ``heartbeat_max_age_s``."""

    replay_window: int = 64
    """Sequence numbers below a sender's highest accepted one that may still
    arrive late (reordered) and be accepted once (:class:`ReplayGuard`).
    Default 64 (RFC 4303's default): a sender numbers its envelopes per
    receiver, and at most a request and an answer are in flight between two
    nodes, so reordering spans a handful of numbers."""

    replay_max_senders: int = 5_000
    """Senders whose replay state is kept (least recently accepted evicted
    first; an evicted sender is treated like one heard for the first time).
    Default 5,000: Kubernetes' largest supported cluster."""

    replay_retired_epochs: int = 8
    """Earlier epochs remembered per sender (a replay from one of them is
    REPLAYED even after the current epoch is confirmed). Default 8: more
    restarts than a crash-looping agent makes within a vote TTL."""

    book_max_origins: int = 5_000
    """Capacity of the :class:`HeartbeatBook` (one entry per origin).
    Default 5,000: Kubernetes' largest supported cluster."""

    rate_per_source_s: float = 20.0
    """Requests a second one source address may send to the peer server
    (:class:`edgewatch.core.ratelimit.RateLimiter`); more are refused with
    429 before the body is read or a signature checked. Default 20: a peer
    sends one request a period (1 s), a contact as many; 20 leaves room for retries and a burst of restarts."""

    rate_burst: float = 40.0
    """Requests one source may send at once before its rate applies."""

    statement_refresh_s: float = 10.0
    """Longest an agent keeps its signed statement unchanged (peer protocol v6,
    :mod:`edgewatch.core.cadence`); a statement whose votes, links or carrier change is signed and
    sent to the neighbours at once, one that only names a newer controller beacon is signed on this
    timer and not sent (the neighbours' datagrams confirm the one they hold). Default 10 s: the
    statement in this node's evidence then names a beacon at most 15 s old (with the controller's
    5 s beacon period), inside the controller's 30 s evidence TTL with a 10 s evidence write
    interval; a statement a neighbour fetches is at most about 10 s old, well inside
    ``heartbeat_max_age_s`` (it must be at most half of it). A neighbour whose datagrams fell silent
    for twice this long gets the v5 exchange every period again."""

    anti_entropy_s: float = 60.0
    """Longest between two statement exchanges with a neighbour whose datagrams speak for it, even
    when neither side's statement changed (memberlist's push-pull anti-entropy, 30 s there): repairs
    whatever a lost message left behind. Default 60 s: one statement datagram of about 210 bytes
    (with UDP and IPv4) to each neighbour a minute, 840 bytes per node per minute in a pool of 5
    (an HTTP exchange where a push cannot serve: ``edgewatch.core.statementdatagram``)."""

    def __post_init__(self) -> None:
        positive_int("max_bytes", self.max_bytes, 256)
        max_age = positive_seconds("heartbeat_max_age_s", self.heartbeat_max_age_s)
        positive_int("fallback_probes", self.fallback_probes, 0)
        positive_int("max_contacts", self.max_contacts, 0)
        positive_seconds("rate_per_source_s", self.rate_per_source_s)
        positive_seconds("rate_burst", self.rate_burst)
        positive_int("max_relays", self.max_relays, 0)
        relay_age = positive_seconds("relay_max_age_s", self.relay_max_age_s)
        positive_int("replay_window", self.replay_window)
        positive_int("replay_max_senders", self.replay_max_senders)
        positive_int("replay_retired_epochs", self.replay_retired_epochs, 0)
        positive_int("book_max_origins", self.book_max_origins)
        if max_age > MAX_AGE_S:
            raise ValueError(f"heartbeat_max_age_s must be <= {MAX_AGE_S}")
        if 1 + self.max_relays > MAX_HEARTBEATS_PER_ENVELOPE:
            raise ValueError(f"1 + max_relays must be <= {MAX_HEARTBEATS_PER_ENVELOPE}")
        refresh = positive_seconds("statement_refresh_s", self.statement_refresh_s)
        positive_seconds("anti_entropy_s", self.anti_entropy_s)
        if refresh > max_age / 2:
            raise ValueError("statement_refresh_s must be <= heartbeat_max_age_s / 2")
        if relay_age > max_age:
            raise ValueError("relay_max_age_s must be <= heartbeat_max_age_s")

"""The agent-to-agent wire format and its strict decoder, with clock-free
replay protection (:mod:`edgewatch.core.replay`). The book of newest
heartbeats and the choice of heartbeats to relay live in
:mod:`edgewatch.core.book`; the refusal reasons in
:mod:`edgewatch.core.rejection`.

Nothing here compares a timestamp written by another machine with a local
clock. Freshness comes from three things, each measured by one machine only:
per-sender sequence numbers (:class:`ReplayGuard`), the reply binding of
answers (``reply_to``), and ages that every hop measures on its own
monotonic clock and adds up (OSPF's LS-age idea).

Two layers:

``Heartbeat`` — one agent's observation (its vote), signed by its ORIGIN
    (canonical JSON, Ed25519 with the origin's own key, domain
    ``edgewatch/heartbeat/v4``; :mod:`edgewatch.core.identity`) and relayable
    unchanged by anyone::

        {"v": 4, "origin": "node-a", "incarnation": 1700000000123456789,
         "seq": 42, "kubelet_ok": true, "cloud_ok": false,
         "alive": ["node-a", "node-b"], "dead": ["node-c"],
         "carrier": "node-b", "beacon": "<32 hex, or empty>",
         "key_id": "<32 hex>", "mac": "<128 hex: Ed25519 signature>"}

    ``incarnation`` identifies one run of the origin's agent (its start time
    in ns: mostly increasing, but never trusted to be); ``seq`` grows by one
    per period within an incarnation; ``alive``/``dead`` are sorted,
    duplicate-free, disjoint lists of node names (members in neither are
    suspect); they name only the origin itself and its neighbours in the
    monitoring topology (:mod:`edgewatch.core.topology`: all peers in groups
    of up to 7, at most 6 beyond), so a heartbeat is O(1) bytes at any group
    size. ``carrier`` is the neighbour the origin chose to carry its Lease and
    statement to the cloud while its own cloud link is down ("" otherwise;
    never the origin). ``beacon`` is the newest beacon of the cloud controller the
    origin knew when it signed (:mod:`edgewatch.core.beacon`; empty: none
    yet): a random value the controller issued at a time *it* knows, so the
    controller can tell how fresh the statement is without any clock of the
    origin's, and a replayed old statement names an old beacon. No timestamp: how old a heartbeat is travels next to it, in
    the envelope's ``ages``.

``Envelope`` — one message from SENDER to RECEIVER, a frame of one ASCII
    header line and a canonical JSON body::

        edgewatch-envelope/v4 <key_id: 32 hex> <mac: 128 hex>\n
        {"v": 4, "sender": "node-a", "receiver": "node-b",
         "epoch": 1700000000123456789, "seq": 17,
         "nonce": "<32 hex = 16 random bytes>", "reply_to": null | "<32 hex>",
         "heartbeats": [<node-a's own heartbeat>, <relayed>, ...],
         "ages": [0.012, 3.5, ...]}

    The signature (the sender's own key, domain ``edgewatch/envelope/v4``)
    covers every body byte and is checked before the body is parsed; the
    key's owner must be the body's ``sender``. ``epoch`` identifies the sender's
    run (its agent's start time in ns; compared only with the same sender's
    earlier epochs), ``seq`` grows by one per envelope to this receiver
    within the epoch. ``nonce`` is fresh for every envelope; an answer
    carries the nonce of the request it answers in ``reply_to`` (requests:
    ``null``). ``ages[i]`` is how many seconds ago ``heartbeats[i]`` was
    signed, as far as the sender knows: the time since it received it (its
    own monotonic clock) plus the age it was received with. The first
    heartbeat must be the sender's own (``origin == sender``).

Freshness and replay protection (:func:`decode_envelope`)
    * An **answer** (``reply_to`` equals the nonce of the request we sent)
      is fresh by construction: nobody could have produced it before our
      random nonce existed. It is accepted whatever its epoch, and it
      *confirms* that epoch for the sender.
    * A **request** is checked by :class:`ReplayGuard`, per sender: the
      current epoch, whether it is confirmed, the highest ``seq`` accepted
      and a 64-wide window below it (RFC 4303's anti-replay window, so a
      request and an answer that cross on the wire are both accepted). A
      seq already seen, or below the window, is REPLAYED. A newer epoch (a
      restart) is accepted once, unconfirmed; further requests of an
      unconfirmed epoch are UNCONFIRMED until an answer confirms it (the
      receiver probes every peer each period, so within about a period).
      A retired (earlier) epoch is REPLAYED: a replay never rolls a sender
      back. A lower epoch that was never seen is REPLAYED too, until an
      answer proves it (a sender whose clock went back across a restart
      recovers within one probe; its own epoch is never believed from the
      number alone).
    * Trade-off: a receiver that restarts (or evicts a sender from its
      bounded table) has no history; the first request it gets from that
      sender is accepted unconfirmed, even if it is a replay of a recent
      one, and nothing more from that epoch until an answer confirms it.
      Its effect is bounded by the vote TTL, measured on the receiver's
      monotonic clock from receipt.
    * Ages: a heartbeat whose age exceeds ``heartbeat_max_age_s`` is STALE.
      Votes expire ``vote_ttl_s`` after local receipt
      (:meth:`HeartbeatBook.votes`), never by a sender's clock.

Decoding checks, in this order, and raises :class:`Rejected` with the first
failing reason: size (OVERSIZED), the frame (MALFORMED; UNSIGNED without a
signature), key known (UNKNOWN_KEY), signature over the body bytes (BAD_SIGNATURE), UTF-8
JSON without duplicate keys or non-finite numbers (MALFORMED), strict schema
(MALFORMED), sender binding: the key is the sender's own (SENDER_MISMATCH),
receiver (WRONG_RECEIVER), first heartbeat's origin and the optional
``sender_allowed`` hook (SENDER_MISMATCH), the reply
binding (REPLAYED), the sender's own heartbeat (its reason; STALE if too
old), and finally the :class:`ReplayGuard` (REPLAYED / UNCONFIRMED). Relayed
heartbeats are checked one by one and reported per heartbeat; a bad one never
drops the envelope. Hostile input never raises anything but
:class:`Rejected`.

Limits
    Pure: no sockets, no clocks, no randomness of its own (nonces, epochs
    and the relay RNG come from the caller). Ages ignore transit time (LAN:
    milliseconds) and clock-rate differences between hops. Every signature
    is checked against the key its owner published, and the owner must be
    the heartbeat's origin or the envelope's sender: a node can sign only as
    itself. A relaying node can still lie about a relayed heartbeat's *age*
    (never make it younger than its true freshness allows: the origin's
    seq orders it) and can withhold heartbeats. ``alive``/``dead`` list at
    most the origin and its neighbours (about 25 B each), so a heartbeat is
    under 1 KiB at any group size. Version 4 (neighbour lists, ``carrier``)
    is not compatible with version 3: agents of both versions do not hear
    each other (roll out while the cloud link is up, when the edge view does
    not decide anything).

Sources
    Seed 003; van Renesse, Minsky, Hayden 1998 (gossip-style failure
    detection: heartbeat counters spread by gossip, newest wins); SWIM /
    memberlist (piggybacked dissemination with a bounded number of
    broadcasts per message, least-transmitted first; incarnation numbers);
    RFC 4303 section 3.4.3 and RFC 6479 (sequence-number anti-replay
    window); OSPF (RFC 2328 section 12.1.1: LS age, incremented by each
    hop, never compared with a clock); SuperEdge edge-health (no nonce or
    timestamp: replayable; O(n^2) all-to-all exchange) as the
    counter-example.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator

from edgewatch.core.checks import bounded_age, positive_int, positive_seconds
from edgewatch.core.quorum import Vote
from edgewatch.core.rejection import Rejected, RejectReason
from edgewatch.core.replay import ReplayGuard, SenderState
from edgewatch.core.signing import Signer, Verification, Verifier, canonical_json
from edgewatch.core.types import DNS1123_SUBDOMAIN_PATTERN, NODE_NAME_MAX_LENGTH, NodeName, is_node_name

__all__ = [
    "ENVELOPE_DOMAIN",
    "ENVELOPE_MAGIC",
    "HEARTBEAT_DOMAIN",
    "MAX_AGE_S",
    "MAX_HEARTBEATS_PER_ENVELOPE",
    "MAX_NAMES_PER_LIST",
    "NONCE_HEX_LENGTH",
    "PROTOCOL_VERSION",
    "DecodedEnvelope",
    "Heartbeat",
    "HeartbeatResult",
    "RejectReason",
    "Rejected",
    "ReplayGuard",
    "SenderState",
    "WireConfig",
    "decode_envelope",
    "decode_heartbeat",
    "encode_envelope",
    "sign_heartbeat",
]

PROTOCOL_VERSION: Final = 4
"""Value of the ``v`` field; any other value is MALFORMED."""

HEARTBEAT_DOMAIN: Final = "edgewatch/heartbeat/v4"
"""Signature domain of heartbeats."""

ENVELOPE_DOMAIN: Final = "edgewatch/envelope/v4"
"""Signature domain of envelopes (over the body bytes)."""

ENVELOPE_MAGIC: Final = b"edgewatch-envelope/v4"
"""First word of an envelope's header line."""

MAX_NAMES_PER_LIST: Final = 5000
"""Schema bound on ``alive`` and ``dead`` (Kubernetes' largest supported
cluster is 5,000 nodes)."""

MAX_HEARTBEATS_PER_ENVELOPE: Final = 64
"""Schema bound on ``heartbeats`` (own + relayed)."""

MAX_AGE_S: Final = 86_400.0
"""Schema bound on an age, seconds (anything near it is STALE anyway)."""

NONCE_HEX_LENGTH: Final = 32
"""A nonce is 16 random bytes, lower-case hex."""

_MAX_COUNTER: Final = 2**63 - 1
_NONCE: Final = re.compile(r"[0-9a-f]{32}")
_HEADER_MAX: Final = 256  # magic + space + 32-hex key id + space + 128 hex, with room to spare


# --------------------------------------------------------------------------- config






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

    max_relays: int = 2
    """Relayed heartbeats per envelope (:func:`select_relays`). Default 2:
    nothing decides on relayed heartbeats any more (detectors take direct
    evidence only, a carrier is a direct neighbour); they give the local
    count of a small group some redundancy under loss. Each costs its
    signature check once (the verified-signature cache of
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
        if relay_age > max_age:
            raise ValueError("relay_max_age_s must be <= heartbeat_max_age_s")


_FROM_VERIFICATION: Final = {
    Verification.MALFORMED: RejectReason.MALFORMED,
    Verification.UNSIGNED: RejectReason.UNSIGNED,
    Verification.UNKNOWN_KEY: RejectReason.UNKNOWN_KEY,
    Verification.BAD_SIGNATURE: RejectReason.BAD_SIGNATURE,
}

_VERIFICATION_DETAIL: Final = {
    Verification.MALFORMED: "not an object with string key_id and mac",
    Verification.UNSIGNED: "no key_id or mac",
    Verification.UNKNOWN_KEY: "key id not published by any node",
    Verification.BAD_SIGNATURE: "signature does not match",
}


def _authenticate(obj: object, *, keyring: Verifier, domain: str, what: str) -> None:
    outcome = keyring.verify(obj, domain=domain)
    if outcome is not Verification.OK:
        raise Rejected(_FROM_VERIFICATION[outcome], f"{what}: {_VERIFICATION_DETAIL[outcome]}")


def _check_owner(keyring: Verifier, key_id: str, claimed: str, what: str) -> None:
    """The signing key must be one ``claimed`` published: no node signs as another."""
    owner = keyring.owner(key_id)
    if owner != claimed:
        raise Rejected(RejectReason.SENDER_MISMATCH,
                       f"{what} of {claimed!r:.260} is signed with the key of {owner!r:.260}")


def _schema_detail(what: str, exc: ValidationError) -> str:
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    if not errors:
        return f"{what}: schema violation"
    first = errors[0]
    loc = ".".join(str(p) for p in first.get("loc", ()))
    return f"{what}: {loc}: {first.get('msg', 'invalid')}"


# --------------------------------------------------------------------------- schema


_NodeNameStr = Annotated[
    str,
    StringConstraints(min_length=1, max_length=NODE_NAME_MAX_LENGTH, pattern=DNS1123_SUBDOMAIN_PATTERN),
]
_KeyIdStr = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]
_MacStr = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{128}$")]
_NonceStr = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]
_Version = Annotated[int, Field(ge=PROTOCOL_VERSION, le=PROTOCOL_VERSION)]
_Counter = Annotated[int, Field(ge=0, le=_MAX_COUNTER)]
_Names = Annotated[list[_NodeNameStr], Field(max_length=MAX_NAMES_PER_LIST)]

_STRICT: Final = ConfigDict(extra="forbid", strict=True, frozen=True, regex_engine="rust-regex")


class _HeartbeatModel(BaseModel):
    model_config = _STRICT

    v: _Version
    origin: _NodeNameStr
    incarnation: _Counter
    seq: _Counter
    kubelet_ok: bool
    cloud_ok: bool
    alive: _Names
    dead: _Names
    carrier: _NodeNameStr | Literal[""]
    beacon: Annotated[str, StringConstraints(pattern=r"^([0-9a-f]{32})?$")]
    key_id: _KeyIdStr
    mac: _MacStr

    @model_validator(mode="after")
    def _canonical_lists(self) -> _HeartbeatModel:
        for name, names in (("alive", self.alive), ("dead", self.dead)):
            if any(a >= b for a, b in zip(names, names[1:])):
                raise ValueError(f"{name} must be sorted and free of duplicates")
        if not set(self.alive).isdisjoint(self.dead):
            raise ValueError("a node cannot be both alive and dead")
        if self.carrier == self.origin:
            raise ValueError("a node cannot name itself its carrier")
        return self


class _EnvelopeModel(BaseModel):
    model_config = _STRICT

    v: _Version
    sender: _NodeNameStr
    receiver: _NodeNameStr
    epoch: _Counter
    seq: _Counter
    nonce: _NonceStr
    reply_to: _NonceStr | None
    # Items are checked one by one (decode_heartbeat), so that one bad relayed
    # heartbeat is reported, not fatal.
    heartbeats: Annotated[list[Any], Field(min_length=1, max_length=MAX_HEARTBEATS_PER_ENVELOPE)]
    ages: Annotated[list[Any], Field(min_length=1, max_length=MAX_HEARTBEATS_PER_ENVELOPE)]
    # The newest controller beacon token the sender holds ("" if none); checked by the receiver
    # against the controller's key (edgewatch.core.beacon), never trusted as is.
    beacon: Annotated[str, StringConstraints(max_length=200)]

    @model_validator(mode="after")
    def _ages_match(self) -> _EnvelopeModel:
        if len(self.ages) != len(self.heartbeats):
            raise ValueError("ages must have one entry per heartbeat")
        for age in self.ages:
            if isinstance(age, bool) or not isinstance(age, (int, float)) or not 0 <= age <= MAX_AGE_S:
                raise ValueError(f"every age must be a number of seconds in [0, {MAX_AGE_S}]")
        return self


# --------------------------------------------------------------------------- heartbeat


@dataclass(frozen=True, kw_only=True)
class Heartbeat:
    """A signed observation of one origin node (see the module docstring).

    Build with :func:`sign_heartbeat` (own) or :func:`decode_heartbeat`
    (received); :meth:`to_wire` reproduces exactly the signed object, so a
    relayed heartbeat still verifies. It holds no time: its age travels next
    to it in an envelope.
    """

    origin: NodeName
    incarnation: int
    seq: int
    kubelet_ok: bool
    cloud_ok: bool
    alive: tuple[NodeName, ...]
    dead: tuple[NodeName, ...]
    key_id: str
    mac: str
    beacon: str = ""
    carrier: str = ""
    """The neighbour chosen to carry this origin to the cloud ("": none)."""

    @property
    def order(self) -> tuple[int, int]:
        """``(incarnation, seq)``; within one incarnation a larger seq is
        newer (across incarnations see :meth:`HeartbeatBook.offer`)."""
        return (self.incarnation, self.seq)

    def to_wire(self) -> dict[str, object]:
        """The signed JSON object (as Python values)."""
        return {
            "v": PROTOCOL_VERSION,
            "origin": self.origin,
            "incarnation": self.incarnation,
            "seq": self.seq,
            "kubelet_ok": self.kubelet_ok,
            "cloud_ok": self.cloud_ok,
            "alive": list(self.alive),
            "dead": list(self.dead),
            "carrier": self.carrier,
            "beacon": self.beacon,
            "key_id": self.key_id,
            "mac": self.mac,
        }

    def vote(self, *, observed_at: float) -> Vote:
        """This heartbeat as a :class:`~edgewatch.core.quorum.Vote` observed at
        ``observed_at`` (seconds on the deciding clock: local receipt time)."""
        return Vote(
            observer=self.origin,
            observed_at=observed_at,
            alive=frozenset(self.alive),
            dead=frozenset(self.dead),
        )


def _from_model(m: _HeartbeatModel) -> Heartbeat:
    return Heartbeat(
        origin=NodeName(m.origin),
        incarnation=m.incarnation,
        seq=m.seq,
        kubelet_ok=m.kubelet_ok,
        cloud_ok=m.cloud_ok,
        alive=tuple(NodeName(n) for n in m.alive),
        dead=tuple(NodeName(n) for n in m.dead),
        key_id=m.key_id,
        mac=m.mac,
        beacon=m.beacon,
        carrier=m.carrier,
    )


def sign_heartbeat(
    *,
    origin: NodeName,
    incarnation: int,
    seq: int,
    kubelet_ok: bool,
    cloud_ok: bool,
    alive: Iterable[NodeName],
    dead: Iterable[NodeName],
    keyring: Signer,
    beacon: str = "",
    carrier: str = "",
) -> Heartbeat:
    """Build and sign this node's heartbeat with the keyring's primary key.

    ``alive`` and ``dead`` may be given in any order (duplicates are
    merged); ``incarnation`` and ``seq`` are ints in ``[0, 2**63)``;
    ``beacon`` is the newest controller beacon value known (32 hex) or "";
    ``carrier`` the neighbour chosen to carry this node while its cloud link is
    down, or "".

    Raises:
        ValueError: an invalid node name, a node both alive and dead, itself as
            carrier, a
            counter out of range, or a list longer than
            :data:`MAX_NAMES_PER_LIST`.
    """
    try:
        payload: dict[str, object] = {
            "v": PROTOCOL_VERSION,
            "origin": origin,
            "incarnation": incarnation,
            "seq": seq,
            "kubelet_ok": kubelet_ok,
            "cloud_ok": cloud_ok,
            "alive": sorted(set(alive)),
            "dead": sorted(set(dead)),
            "carrier": carrier,
            "beacon": beacon,
        }
        signed = keyring.sign(payload, domain=HEARTBEAT_DOMAIN)
        model = _HeartbeatModel.model_validate(signed)
    except ValidationError as exc:
        raise ValueError(_schema_detail("heartbeat", exc)) from None
    except TypeError as exc:
        raise ValueError(f"heartbeat: {exc}") from None
    return _from_model(model)


def decode_heartbeat(obj: object, *, keyring: Verifier) -> Heartbeat:
    """Verify and parse one heartbeat object (parsed JSON).

    Checks in order: signature (UNSIGNED / UNKNOWN_KEY / BAD_SIGNATURE /
    MALFORMED), then the strict schema (MALFORMED), then that the key is
    the origin's own (SENDER_MISMATCH). Freshness is not a
    property of the heartbeat but of the age it arrives with
    (:func:`decode_envelope`).

    Raises:
        Rejected: for any hostile ``obj``.
    """
    _authenticate(obj, keyring=keyring, domain=HEARTBEAT_DOMAIN, what="heartbeat")
    try:
        model = _HeartbeatModel.model_validate(obj)
    except ValidationError as exc:
        raise Rejected(RejectReason.MALFORMED, _schema_detail("heartbeat", exc)) from None
    _check_owner(keyring, model.key_id, model.origin, "heartbeat")
    return _from_model(model)


# --------------------------------------------------------------------------- envelope


@dataclass(frozen=True, kw_only=True)
class HeartbeatResult:
    """Outcome for one relayed heartbeat of an envelope: ``heartbeat`` and its
    ``age_s`` (seconds, as the sender reported it) if accepted, else
    ``reason`` and ``detail``. ``index`` is its position in the envelope's
    list (the sender's own heartbeat is index 0)."""

    index: int
    heartbeat: Heartbeat | None
    reason: RejectReason | None
    detail: str
    age_s: float = 0.0

    @property
    def accepted(self) -> bool:
        """True iff the heartbeat verified, parsed and was young enough."""
        return self.heartbeat is not None


@dataclass(frozen=True, kw_only=True)
class DecodedEnvelope:
    """An accepted envelope. ``own`` is the sender's own (verified)
    heartbeat, ``own_age_s`` its reported age in seconds; ``relayed`` has
    one result per further heartbeat. ``reply_to`` is the nonce of the
    request it answers (None for a request)."""

    sender: NodeName
    receiver: NodeName
    epoch: int
    seq: int
    nonce: str
    reply_to: str | None
    key_id: str
    own: Heartbeat
    own_age_s: float
    relayed: tuple[HeartbeatResult, ...]
    beacon: str = ""

    @property
    def heartbeats(self) -> tuple[Heartbeat, ...]:
        """The own heartbeat followed by every accepted relayed one."""
        return (self.own, *(r.heartbeat for r in self.relayed if r.heartbeat is not None))


def encode_envelope(
    *,
    sender: NodeName,
    receiver: NodeName,
    epoch: int,
    seq: int,
    nonce: str,
    reply_to: str | None = None,
    own: Heartbeat,
    own_age_s: float = 0.0,
    relayed: Sequence[tuple[Heartbeat, float]] = (),
    keyring: Signer,
    max_bytes: int | None = None,
    beacon: str = "",
) -> bytes:
    """Sign and encode one envelope: the header line, then canonical JSON.

    Args:
        sender, receiver: distinct valid node names.
        epoch: the sender's run (e.g. its agent's start time in ns), int in
            ``[0, 2**63)``; the same for every envelope of that run.
        seq: int in ``[0, 2**63)``, strictly increasing per receiver within
            the epoch.
        nonce: 16 random bytes as 32 lower-case hex characters (e.g.
            ``secrets.token_hex(16)``), fresh for every envelope.
        reply_to: the nonce of the request this envelope answers; None for
            a request.
        own: the sender's own heartbeat (``own.origin == sender``).
        own_age_s: seconds since ``own`` was signed (sender's monotonic clock).
        relayed: further heartbeats (:func:`select_relays`), unchanged, each
            with its age in seconds (age when received + time held).
        keyring: signs with its primary key.
        max_bytes: if given, refuse to produce a larger message.
        beacon: the newest controller beacon token the sender holds, passed on so that a peer
            cut off from the cloud can sign with a current beacon ("" if none).

    Raises:
        ValueError: any argument invalid, too many heartbeats, or the
            result longer than ``max_bytes``.
    """
    if not is_node_name(sender) or not is_node_name(receiver):
        raise ValueError("sender and receiver must be valid node names")
    if sender == receiver:
        raise ValueError("sender and receiver must differ")
    for name, counter in (("epoch", epoch), ("seq", seq)):
        if isinstance(counter, bool) or not isinstance(counter, int) or not 0 <= counter <= _MAX_COUNTER:
            raise ValueError(f"{name} must be an int in [0, 2**63), got {counter!r}")
    for name, value in (("nonce", nonce), ("reply_to", reply_to)):
        if value is None and name == "reply_to":
            continue
        if not isinstance(value, str) or not _NONCE.fullmatch(value):
            raise ValueError(f"{name} must be 32 lower-case hex characters (16 random bytes)")
    if own.origin != sender:
        raise ValueError(f"own heartbeat has origin {own.origin!r}, not the sender {sender!r}")
    beats = [(own, own_age_s), *relayed]
    if len(beats) > MAX_HEARTBEATS_PER_ENVELOPE:
        raise ValueError(f"at most {MAX_HEARTBEATS_PER_ENVELOPE} heartbeats per envelope")
    ages = [round(bounded_age("age", age, MAX_AGE_S), 3) for _hb, age in beats]
    body = canonical_json({
        "v": PROTOCOL_VERSION,
        "sender": sender,
        "receiver": receiver,
        "epoch": epoch,
        "seq": seq,
        "nonce": nonce,
        "reply_to": reply_to,
        "heartbeats": [hb.to_wire() for hb, _age_s in beats],
        "ages": ages,
        "beacon": beacon,
    })
    key_id, mac = keyring.sign_bytes(body, domain=ENVELOPE_DOMAIN)
    raw = b"%s %s %s\n%s" % (ENVELOPE_MAGIC, key_id.encode("ascii"), mac.encode("ascii"), body)
    if max_bytes is not None and len(raw) > max_bytes:
        raise ValueError(f"envelope is {len(raw)} bytes, more than max_bytes={max_bytes}")
    return raw


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r:.60}")
        result[key] = value
    return result


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name}")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("number out of float range")
    return value


def _parse_json(raw: bytes) -> object:
    try:
        text = raw.decode("utf-8")
        return json.loads(
            text,
            object_pairs_hook=_reject_duplicates,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
        )
    except (ValueError, RecursionError) as exc:
        raise Rejected(RejectReason.MALFORMED, f"not UTF-8 JSON: {type(exc).__name__}: {exc}") from None


def _authenticate_frame(raw: bytes, *, keyring: Signer) -> tuple[str, bytes]:
    """Split the frame and check the signature over the body bytes; returns
    ``(key_id, body)``. Nothing of the body is interpreted here."""
    newline = raw.find(b"\n", 0, _HEADER_MAX + 1)
    if newline < 0:
        hint = " (JSON without a header line: an edgewatch v1 agent?)" if raw[:1] == b"{" else ""
        raise Rejected(RejectReason.MALFORMED,
                       f"envelope: no '{ENVELOPE_MAGIC.decode()} KEY_ID MAC' header line{hint}")
    header, body = raw[:newline], raw[newline + 1:]
    words = header.split(b" ")
    if not words or words[0] != ENVELOPE_MAGIC:
        raise Rejected(RejectReason.MALFORMED, f"envelope: header does not start with {ENVELOPE_MAGIC.decode()}")
    if len(words) < 3:
        raise Rejected(RejectReason.UNSIGNED, "envelope: header has no key id and MAC")
    if len(words) > 3 or not header.isascii():
        raise Rejected(RejectReason.MALFORMED, "envelope: header must be 'MAGIC KEY_ID MAC' in ASCII")
    key_id, mac = words[1].decode("ascii"), words[2].decode("ascii")
    outcome = keyring.verify_bytes(key_id=key_id, mac=mac, data=body, domain=ENVELOPE_DOMAIN)
    if outcome is not Verification.OK:
        raise Rejected(_FROM_VERIFICATION[outcome], f"envelope: {_VERIFICATION_DETAIL[outcome]}")
    return key_id, body


def decode_envelope(
    raw: bytes,
    *,
    keyring: Signer,
    receiver: NodeName,
    max_bytes: int,
    guard: ReplayGuard,
    reply_to: str | None = None,
    heartbeat_max_age_s: float = 30.0,
    sender_allowed: Callable[[NodeName], bool] | None = None,
) -> DecodedEnvelope:
    """Authenticate, decode and check one envelope received from the network.

    Args:
        raw: the message bytes, untrusted.
        keyring: keys accepted for envelopes and heartbeats.
        receiver: this node's name; envelopes for others are WRONG_RECEIVER.
        max_bytes: larger messages are OVERSIZED before anything else.
        guard: this node's :class:`ReplayGuard`; updated only when the
            envelope is accepted.
        reply_to: None to decode a request (its ``reply_to`` must be null);
            the nonce of the request we sent to decode its answer (its
            ``reply_to`` must equal it, else REPLAYED). A matching answer is
            fresh by construction (``proven`` for the guard).
        heartbeat_max_age_s: heartbeats with a larger reported age (seconds)
            are STALE: the whole envelope if it is the sender's own, else
            that heartbeat only.
        sender_allowed: optional binding hook, called with the authenticated
            sender name after every cheaper check; False means
            SENDER_MISMATCH (e.g. the source address is not that node's
            InternalIP, or the sender is not in this node's group). Its own
            exceptions propagate.

    Returns:
        The accepted envelope, with per-heartbeat results for relayed ones.

    Raises:
        Rejected: for any refused ``raw`` (hostile input raises nothing else).
        TypeError: ``raw`` is not bytes-like (caller bug).
        ValueError: invalid limits or ``reply_to`` (caller bug).
    """
    if not isinstance(raw, (bytes, bytearray, memoryview)):
        raise TypeError(f"raw must be bytes, got {type(raw).__name__}")
    limit = positive_int("max_bytes", max_bytes)
    max_age = positive_seconds("heartbeat_max_age_s", heartbeat_max_age_s)
    if not is_node_name(receiver):
        raise ValueError("receiver must be a valid node name")
    if reply_to is not None and (not isinstance(reply_to, str) or not _NONCE.fullmatch(reply_to)):
        raise ValueError("reply_to must be None or the 32-hex nonce of our request")

    size = len(raw) if not isinstance(raw, memoryview) else raw.nbytes
    if size > limit:
        raise Rejected(RejectReason.OVERSIZED, f"{size} bytes > max_bytes={limit}")
    key_id, body = _authenticate_frame(bytes(raw), keyring=keyring)
    obj = _parse_json(body)
    if not isinstance(obj, dict):
        raise Rejected(RejectReason.MALFORMED, f"envelope: body is {type(obj).__name__}, not an object")
    try:
        env = _EnvelopeModel.model_validate(obj)
    except ValidationError as exc:
        raise Rejected(RejectReason.MALFORMED, _schema_detail("envelope", exc)) from None
    if env.sender == env.receiver:
        raise Rejected(RejectReason.MALFORMED, "envelope: sender equals receiver")
    _check_owner(keyring, key_id, env.sender, "envelope")
    if env.receiver != receiver:
        raise Rejected(RejectReason.WRONG_RECEIVER, f"envelope for {env.receiver}, this is {receiver}")
    sender = NodeName(env.sender)
    first = env.heartbeats[0]
    first_origin = first.get("origin") if isinstance(first, dict) else None
    if not isinstance(first_origin, str):
        raise Rejected(RejectReason.MALFORMED, "envelope: first heartbeat has no origin")
    if first_origin != sender:
        raise Rejected(
            RejectReason.SENDER_MISMATCH, f"first heartbeat is from {first_origin!r:.260}, sender is {sender}"
        )
    if sender_allowed is not None and not sender_allowed(sender):
        raise Rejected(RejectReason.SENDER_MISMATCH, f"sender {sender} is not allowed from here")
    if reply_to is None and env.reply_to is not None:
        raise Rejected(RejectReason.REPLAYED, f"an answer from {sender} (to {env.reply_to}) sent as a request")
    if reply_to is not None and env.reply_to != reply_to:
        raise Rejected(RejectReason.REPLAYED, f"from {sender}: not the answer to our request {reply_to}")
    try:
        own = decode_heartbeat(env.heartbeats[0], keyring=keyring)
    except Rejected as exc:
        raise Rejected(exc.reason, f"sender's own {exc.detail}") from None
    own_age = float(env.ages[0])
    if own_age > max_age:
        raise Rejected(RejectReason.STALE, f"sender's own heartbeat is {own_age:.3f} s old (> {max_age:g} s)")
    guard.admit(sender=sender, epoch=env.epoch, seq=env.seq, proven=reply_to is not None, nonce=env.nonce)
    results: list[HeartbeatResult] = []
    for index, (item, age) in enumerate(zip(env.heartbeats[1:], env.ages[1:]), start=1):
        try:
            hb = decode_heartbeat(item, keyring=keyring)
        except Rejected as exc:
            results.append(HeartbeatResult(index=index, heartbeat=None, reason=exc.reason, detail=exc.detail))
            continue
        if age > max_age:
            results.append(HeartbeatResult(index=index, heartbeat=None, reason=RejectReason.STALE,
                                           detail=f"heartbeat of {hb.origin} is {float(age):.3f} s old"))
        else:
            results.append(HeartbeatResult(index=index, heartbeat=hb, reason=None, detail="accepted",
                                           age_s=float(age)))
    return DecodedEnvelope(
        sender=sender,
        receiver=NodeName(env.receiver),
        epoch=env.epoch,
        seq=env.seq,
        nonce=env.nonce,
        reply_to=env.reply_to,
        key_id=key_id,
        own=own,
        own_age_s=own_age,
        relayed=tuple(results),
        beacon=env.beacon,
    )

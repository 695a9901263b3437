"""The agent-to-agent wire format, its strict decoder, replay protection, the
book of newest heartbeats and the choice of heartbeats to relay (gossip).

Two layers, both canonical JSON signed with :mod:`edgewatch.core.signing`:

``Heartbeat`` — one agent's observation (its vote), signed by its ORIGIN
    and relayable unchanged by anyone::

        {"v": 1, "origin": "node-a", "incarnation": 1700000000123456789,
         "seq": 42, "sent_at": 1700000042.5, "kubelet_ok": true,
         "cloud_ok": false, "alive": ["node-a", "node-b"], "dead": ["node-c"],
         "key_id": "k1", "mac": "<64 hex>"}

    ``incarnation`` is the agent's start time in ns (a restart starts a new,
    larger incarnation); ``seq`` grows by one per period; ``sent_at`` is the
    origin's wall clock in seconds (always a JSON float); ``alive``/``dead``
    are sorted, duplicate-free, disjoint lists of node names (members in
    neither are suspect). MAC domain ``edgewatch/heartbeat/v1``.

``Envelope`` — one message from SENDER to RECEIVER, signed by the sender::

        {"v": 1, "sender": "node-a", "receiver": "node-b",
         "nonce": "<32 hex = 16 random bytes>", "sent_at": 1700000042.5,
         "heartbeats": [<node-a's own heartbeat>, <relayed>, ...],
         "key_id": "k1", "mac": "<64 hex>"}

    The MAC (domain ``edgewatch/envelope/v1``) covers sender, receiver,
    nonce, time and every heartbeat byte, so an envelope cannot be
    redirected, replayed, or re-attributed. The first heartbeat must be the
    sender's own (``origin == sender``).

Decoding (:func:`decode_envelope`) checks, in this order, and raises
:class:`Rejected` with the first failing reason: size (OVERSIZED), UTF-8 JSON
without duplicate keys or non-finite numbers (MALFORMED), presence of
``key_id``/``mac`` (UNSIGNED), key known (UNKNOWN_KEY), MAC (BAD_SIGNATURE),
strict schema (MALFORMED), receiver (WRONG_RECEIVER), ``sent_at`` within
``±replay_window_s`` of ``now`` (STALE), sender binding: first heartbeat's
origin and the optional ``sender_allowed`` hook (SENDER_MISMATCH), the
sender's own heartbeat (its reason), and finally the nonce (REPLAYED). The
MAC is checked before the schema: unauthenticated input is never
interpreted beyond JSON parsing. Relayed heartbeats are checked one by one
and reported per heartbeat; a bad one never drops the envelope. Hostile
input never raises anything but :class:`Rejected`.

Limits
    Pure: no sockets, no clocks, no randomness of its own (nonces and the
    relay RNG come from the caller). The replay window is the only place
    where clocks of two nodes are compared; it must exceed their worst skew.
    With a cluster-wide HMAC key any key holder can forge any node's
    heartbeat (see :mod:`edgewatch.core.signing`); envelopes bind a sender
    only as far as the ``sender_allowed`` hook (e.g. source address ==
    node's InternalIP) does. ``alive``/``dead`` list whole groups, so a
    heartbeat is O(group size) bytes (about 25 B per member).

Sources
    Seed 003; van Renesse, Minsky, Hayden 1998 (gossip-style failure
    detection: heartbeat counters spread by gossip, newest wins); SWIM /
    memberlist (piggybacked dissemination with a bounded number of
    broadcasts per message, least-transmitted first; incarnation numbers);
    SuperEdge edge-health (no nonce or timestamp: replayable; O(n^2)
    all-to-all exchange) as the counter-example.
"""

from __future__ import annotations

import enum
import heapq
import json
import math
import random
import re
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Final

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, ValidationError, model_validator

from edgewatch.core.quorum import Vote
from edgewatch.core.signing import KEY_ID_PATTERN, Keyring, Verification, canonical_json
from edgewatch.core.types import DNS1123_SUBDOMAIN_PATTERN, NODE_NAME_MAX_LENGTH, NodeName, is_node_name

__all__ = [
    "ENVELOPE_DOMAIN",
    "HEARTBEAT_DOMAIN",
    "MAX_HEARTBEATS_PER_ENVELOPE",
    "MAX_NAMES_PER_LIST",
    "NONCE_HEX_LENGTH",
    "PROTOCOL_VERSION",
    "BookEntry",
    "DecodedEnvelope",
    "Freshness",
    "Heartbeat",
    "HeartbeatBook",
    "HeartbeatResult",
    "NonceCache",
    "RejectReason",
    "Rejected",
    "WireConfig",
    "decode_envelope",
    "decode_heartbeat",
    "encode_envelope",
    "select_relays",
    "sign_heartbeat",
]

PROTOCOL_VERSION: Final = 1
"""Value of the ``v`` field; any other value is MALFORMED."""

HEARTBEAT_DOMAIN: Final = "edgewatch/heartbeat/v1"
"""MAC domain of heartbeats."""

ENVELOPE_DOMAIN: Final = "edgewatch/envelope/v1"
"""MAC domain of envelopes."""

MAX_NAMES_PER_LIST: Final = 5000
"""Schema bound on ``alive`` and ``dead`` (Kubernetes' largest supported
cluster is 5,000 nodes)."""

MAX_HEARTBEATS_PER_ENVELOPE: Final = 64
"""Schema bound on ``heartbeats`` (own + relayed)."""

NONCE_HEX_LENGTH: Final = 32
"""A nonce is 16 random bytes, lower-case hex."""

_MAX_COUNTER: Final = 2**63 - 1
_NONCE: Final = re.compile(r"[0-9a-f]{32}")
_DETAIL_MAX: Final = 300


# --------------------------------------------------------------------------- config


def _positive_seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be finite and > 0 seconds, got {value!r}")
    return float(value)


def _finite(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number of seconds, got {value!r}")
    return float(value)


def _positive_int(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


@dataclass(frozen=True, kw_only=True)
class WireConfig:
    """Limits and timings of the wire protocol. Durations in seconds.

    Cost model (per node, per exchange period): ``fanout`` envelopes sent and,
    on average, ``fanout`` received; each at most ``max_bytes`` bytes and
    ``1 + max_relays`` heartbeats. Independent of group size, except that a
    heartbeat itself is O(group size) bytes.

    Raises:
        ValueError: on construction, if a value is out of range or the
            relations documented on the fields do not hold.
    """

    max_bytes: int = 262_144
    """Largest envelope accepted or produced, bytes. Default 256 KiB: fits 9
    heartbeats of a ~700-node group with 30-character names; bounds the
    memory and CPU an unauthenticated sender can make a receiver spend
    (parsing happens before the MAC check). Use a stream transport (TCP/HTTP)
    above 64 KiB."""

    replay_window_s: float = 30.0
    """An envelope is STALE unless ``|sent_at - now| <= replay_window_s``
    (wall clock). Default 30 s: comfortably above the skew of NTP-synced
    nodes plus transit delay; the nonce cache remembers each envelope for
    this long, so replays inside the window are REPLAYED."""

    heartbeat_max_age_s: float = 30.0
    """A heartbeat (own or relayed) is STALE if its ``sent_at`` is older than
    this, or newer than ``now + replay_window_s``. Default 30 s: gossip
    delivers a heartbeat within a few periods; older ones carry votes that
    have expired anyway (vote TTL 5 s) and would only let a restarted
    receiver believe a dead node's last words."""

    fanout: int = 3
    """Envelopes each agent sends per period, to random group peers.
    Default 3: push gossip reaches all n nodes in about log_3(n) + ln(n)
    periods (a few periods for 1,000 nodes) while costing 3 messages per
    node per period regardless of n."""

    max_relays: int = 8
    """Relayed heartbeats per envelope (:func:`select_relays`). Default 8:
    with ``fanout`` 3 each node forwards 24 heartbeat copies per period;
    bytes per message stay bounded. ``1 + max_relays`` must be <=
    :data:`MAX_HEARTBEATS_PER_ENVELOPE`."""

    relay_max_age_s: float = 10.0
    """Heartbeats received (local clock) longer ago than this are not
    relayed. Default 10 s: a heartbeat not superseded for 10 periods belongs
    to a node that is gone or cut off; spreading it further only spreads a
    stale vote. Must be <= ``heartbeat_max_age_s``."""

    nonce_cache_entries: int = 65_536
    """Capacity of the :class:`NonceCache`. Default 65,536: far above what
    one node accepts per 30 s window (about 90 envelopes at fanout 3 and 1 s
    periods; about 30 * (n - 1) if every peer of an n-node group sends to it
    every period), for a few MB of memory."""

    book_max_origins: int = 5_000
    """Capacity of the :class:`HeartbeatBook` (one entry per origin).
    Default 5,000: Kubernetes' largest supported cluster."""

    book_forget_after_s: float = 90.0
    """A book entry not refreshed for this long no longer blocks a heartbeat
    with a lower (incarnation, seq) — e.g. an origin whose clock went back
    before it restarted. Default 90 s. Must be >= ``heartbeat_max_age_s +
    replay_window_s``, so every heartbeat older than the forgotten one is
    already STALE at decode."""

    def __post_init__(self) -> None:
        _positive_int("max_bytes", self.max_bytes, 256)
        replay = _positive_seconds("replay_window_s", self.replay_window_s)
        max_age = _positive_seconds("heartbeat_max_age_s", self.heartbeat_max_age_s)
        _positive_int("fanout", self.fanout)
        _positive_int("max_relays", self.max_relays, 0)
        relay_age = _positive_seconds("relay_max_age_s", self.relay_max_age_s)
        _positive_int("nonce_cache_entries", self.nonce_cache_entries)
        _positive_int("book_max_origins", self.book_max_origins)
        forget = _positive_seconds("book_forget_after_s", self.book_forget_after_s)
        if 1 + self.max_relays > MAX_HEARTBEATS_PER_ENVELOPE:
            raise ValueError(f"1 + max_relays must be <= {MAX_HEARTBEATS_PER_ENVELOPE}")
        if relay_age > max_age:
            raise ValueError("relay_max_age_s must be <= heartbeat_max_age_s")
        if forget < max_age + replay:
            raise ValueError("book_forget_after_s must be >= heartbeat_max_age_s + replay_window_s")


# --------------------------------------------------------------------------- rejections


class RejectReason(enum.StrEnum):
    """Why a message (or one relayed heartbeat) was refused."""

    OVERSIZED = "oversized"
    MALFORMED = "malformed"
    UNSIGNED = "unsigned"
    UNKNOWN_KEY = "unknown_key"
    BAD_SIGNATURE = "bad_signature"
    WRONG_RECEIVER = "wrong_receiver"
    STALE = "stale"
    REPLAYED = "replayed"
    SENDER_MISMATCH = "sender_mismatch"


class Rejected(Exception):
    """A message was refused. ``reason`` is a :class:`RejectReason`, ``detail``
    a short human explanation (never more than a few hundred characters of
    the hostile input)."""

    def __init__(self, reason: RejectReason, detail: str) -> None:
        detail = detail[:_DETAIL_MAX]
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail


_FROM_VERIFICATION: Final = {
    Verification.MALFORMED: RejectReason.MALFORMED,
    Verification.UNSIGNED: RejectReason.UNSIGNED,
    Verification.UNKNOWN_KEY: RejectReason.UNKNOWN_KEY,
    Verification.BAD_SIGNATURE: RejectReason.BAD_SIGNATURE,
}


def _authenticate(obj: object, *, keyring: Keyring, domain: str, what: str) -> None:
    outcome = keyring.verify(obj, domain=domain)
    if outcome is not Verification.OK:
        detail = {
            Verification.MALFORMED: f"{what}: not an object with string key_id and mac",
            Verification.UNSIGNED: f"{what}: no key_id or mac",
            Verification.UNKNOWN_KEY: f"{what}: key id not in keyring",
            Verification.BAD_SIGNATURE: f"{what}: MAC does not match",
        }[outcome]
        raise Rejected(_FROM_VERIFICATION[outcome], detail)


def _schema_detail(what: str, exc: ValidationError) -> str:
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    if not errors:
        return f"{what}: schema violation"
    first = errors[0]
    loc = ".".join(str(p) for p in first.get("loc", ()))
    return f"{what}: {loc}: {first.get('msg', 'invalid')}"


# --------------------------------------------------------------------------- schema


def _require_float(value: object) -> object:
    if type(value) is not float:
        raise ValueError("must be a JSON number with a fraction or exponent (float)")
    return value


_NodeNameStr = Annotated[
    str,
    StringConstraints(min_length=1, max_length=NODE_NAME_MAX_LENGTH, pattern=DNS1123_SUBDOMAIN_PATTERN),
]
_KeyIdStr = Annotated[str, StringConstraints(pattern=KEY_ID_PATTERN)]
_MacStr = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
_NonceStr = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]
_Version = Annotated[int, Field(ge=PROTOCOL_VERSION, le=PROTOCOL_VERSION)]
_Counter = Annotated[int, Field(ge=0, le=_MAX_COUNTER)]
_WallSeconds = Annotated[float, BeforeValidator(_require_float), Field(ge=0, allow_inf_nan=False)]
_Names = Annotated[list[_NodeNameStr], Field(max_length=MAX_NAMES_PER_LIST)]

_STRICT: Final = ConfigDict(extra="forbid", strict=True, frozen=True, regex_engine="rust-regex")


class _HeartbeatModel(BaseModel):
    model_config = _STRICT

    v: _Version
    origin: _NodeNameStr
    incarnation: _Counter
    seq: _Counter
    sent_at: _WallSeconds
    kubelet_ok: bool
    cloud_ok: bool
    alive: _Names
    dead: _Names
    key_id: _KeyIdStr
    mac: _MacStr

    @model_validator(mode="after")
    def _canonical_lists(self) -> _HeartbeatModel:
        for name, names in (("alive", self.alive), ("dead", self.dead)):
            if any(a >= b for a, b in zip(names, names[1:])):
                raise ValueError(f"{name} must be sorted and free of duplicates")
        if not set(self.alive).isdisjoint(self.dead):
            raise ValueError("a node cannot be both alive and dead")
        return self


class _EnvelopeModel(BaseModel):
    model_config = _STRICT

    v: _Version
    sender: _NodeNameStr
    receiver: _NodeNameStr
    nonce: _NonceStr
    sent_at: _WallSeconds
    # Items are checked one by one (decode_heartbeat), so that one bad relayed
    # heartbeat is reported, not fatal.
    heartbeats: Annotated[list[Any], Field(min_length=1, max_length=MAX_HEARTBEATS_PER_ENVELOPE)]
    key_id: _KeyIdStr
    mac: _MacStr


# --------------------------------------------------------------------------- heartbeat


@dataclass(frozen=True, kw_only=True)
class Heartbeat:
    """A signed observation of one origin node (see the module docstring).

    Build with :func:`sign_heartbeat` (own) or :func:`decode_heartbeat`
    (received); :meth:`to_wire` reproduces exactly the signed object, so a
    relayed heartbeat still verifies. ``sent_at`` is the origin's wall clock,
    seconds.
    """

    origin: NodeName
    incarnation: int
    seq: int
    sent_at: float
    kubelet_ok: bool
    cloud_ok: bool
    alive: tuple[NodeName, ...]
    dead: tuple[NodeName, ...]
    key_id: str
    mac: str

    @property
    def order(self) -> tuple[int, int]:
        """``(incarnation, seq)``: larger is newer."""
        return (self.incarnation, self.seq)

    def to_wire(self) -> dict[str, object]:
        """The signed JSON object (as Python values)."""
        return {
            "v": PROTOCOL_VERSION,
            "origin": self.origin,
            "incarnation": self.incarnation,
            "seq": self.seq,
            "sent_at": self.sent_at,
            "kubelet_ok": self.kubelet_ok,
            "cloud_ok": self.cloud_ok,
            "alive": list(self.alive),
            "dead": list(self.dead),
            "key_id": self.key_id,
            "mac": self.mac,
        }

    def vote(self, *, observed_at: float) -> Vote:
        """This heartbeat as a :class:`~edgewatch.core.quorum.Vote` observed at
        ``observed_at`` (seconds on the deciding clock, normally local
        receipt time)."""
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
        sent_at=m.sent_at,
        kubelet_ok=m.kubelet_ok,
        cloud_ok=m.cloud_ok,
        alive=tuple(NodeName(n) for n in m.alive),
        dead=tuple(NodeName(n) for n in m.dead),
        key_id=m.key_id,
        mac=m.mac,
    )


def sign_heartbeat(
    *,
    origin: NodeName,
    incarnation: int,
    seq: int,
    sent_at: float,
    kubelet_ok: bool,
    cloud_ok: bool,
    alive: Iterable[NodeName],
    dead: Iterable[NodeName],
    keyring: Keyring,
) -> Heartbeat:
    """Build and sign this node's heartbeat with the keyring's primary key.

    ``alive`` and ``dead`` may be given in any order (duplicates are
    merged); ``sent_at`` is wall-clock seconds; ``incarnation`` and ``seq``
    are ints in ``[0, 2**63)``.

    Raises:
        ValueError: an invalid node name, a node both alive and dead, a
            counter out of range, a non-finite or negative ``sent_at``, or a
            list longer than :data:`MAX_NAMES_PER_LIST`.
    """
    if isinstance(sent_at, bool) or not isinstance(sent_at, (int, float)):
        raise ValueError(f"sent_at must be a number of seconds, got {type(sent_at).__name__}")
    try:
        payload: dict[str, object] = {
            "v": PROTOCOL_VERSION,
            "origin": origin,
            "incarnation": incarnation,
            "seq": seq,
            "sent_at": float(sent_at),
            "kubelet_ok": kubelet_ok,
            "cloud_ok": cloud_ok,
            "alive": sorted(set(alive)),
            "dead": sorted(set(dead)),
        }
        signed = keyring.sign(payload, domain=HEARTBEAT_DOMAIN)
        model = _HeartbeatModel.model_validate(signed)
    except ValidationError as exc:
        raise ValueError(_schema_detail("heartbeat", exc)) from None
    except TypeError as exc:
        raise ValueError(f"heartbeat: {exc}") from None
    return _from_model(model)


def decode_heartbeat(
    obj: object,
    *,
    keyring: Keyring,
    now: float,
    max_age_s: float,
    max_future_s: float,
) -> Heartbeat:
    """Verify and parse one heartbeat object (parsed JSON).

    Checks in order: signature (UNSIGNED / UNKNOWN_KEY / BAD_SIGNATURE /
    MALFORMED), strict schema (MALFORMED), then freshness of ``sent_at``
    against ``now`` (wall-clock seconds): STALE if older than ``max_age_s``
    or newer than ``now + max_future_s``.

    Raises:
        Rejected: for any hostile ``obj``.
        ValueError: ``now``/``max_age_s``/``max_future_s`` not finite (or
            negative limits) — caller bugs, not input problems.
    """
    t = _finite("now", now)
    max_age = _finite("max_age_s", max_age_s)
    max_future = _finite("max_future_s", max_future_s)
    if max_age < 0 or max_future < 0:
        raise ValueError("max_age_s and max_future_s must be >= 0")
    _authenticate(obj, keyring=keyring, domain=HEARTBEAT_DOMAIN, what="heartbeat")
    try:
        model = _HeartbeatModel.model_validate(obj)
    except ValidationError as exc:
        raise Rejected(RejectReason.MALFORMED, _schema_detail("heartbeat", exc)) from None
    if model.sent_at < t - max_age:
        raise Rejected(RejectReason.STALE, f"heartbeat of {model.origin}: sent {t - model.sent_at:.3f} s ago")
    if model.sent_at > t + max_future:
        raise Rejected(
            RejectReason.STALE, f"heartbeat of {model.origin}: sent {model.sent_at - t:.3f} s in the future"
        )
    return _from_model(model)


# --------------------------------------------------------------------------- nonce cache


class NonceCache:
    """Remembers ``(sender, nonce)`` of accepted envelopes until ``sent_at +
    window_s`` (wall-clock seconds), bounded to ``max_entries``.

    Together with the STALE check this refuses every replay: inside the
    window the nonce is remembered, outside it the envelope is stale. When
    full, the entry that expires first is evicted and its expiry becomes a
    *floor*: any later envelope expiring at or before the floor is refused
    (its nonce might have been evicted), so capacity pressure can make the
    cache refuse genuine old-ish messages but never accept a replay. Only
    authenticated envelopes are ever added, so an outsider cannot fill it.

    Pure given ``now``: no clock is read; mutated only by
    :meth:`check_and_remember`.
    """

    __slots__ = ("_entries", "_floor", "_heap", "_max_entries")

    def __init__(self, *, max_entries: int = 65_536) -> None:
        """Raises ValueError if ``max_entries < 1``."""
        self._max_entries = _positive_int("max_entries", max_entries)
        self._entries: dict[tuple[str, str], float] = {}
        self._heap: list[tuple[float, str, str]] = []
        self._floor = -math.inf

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def max_entries(self) -> int:
        """Capacity."""
        return self._max_entries

    @property
    def floor(self) -> float:
        """Expiry time (seconds) at or below which envelopes are refused
        because of evictions; ``-inf`` until the first eviction."""
        return self._floor

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def _purge(self, now: float) -> None:
        heap = self._heap
        while heap and heap[0][0] < now:
            expires, sender, nonce = heapq.heappop(heap)
            if self._entries.get((sender, nonce)) == expires:
                del self._entries[(sender, nonce)]

    def check_and_remember(self, *, sender: str, nonce: str, sent_at: float, window_s: float, now: float) -> bool:
        """Return True and remember the nonce if it is new; False if it was
        seen, if ``sent_at + window_s`` is already past ``now``, or if it is
        at or below the eviction floor.

        Raises ValueError if ``sent_at``, ``window_s`` or ``now`` is not
        finite or ``window_s <= 0``.
        """
        t = _finite("now", now)
        expires = _finite("sent_at", sent_at) + _positive_seconds("window_s", window_s)
        self._purge(t)
        key = (sender, nonce)
        if key in self._entries or expires < t or expires <= self._floor:
            return False
        if len(self._entries) >= self._max_entries:
            oldest = self._heap[0][0]
            if expires <= oldest:
                # The newcomer would be the first to go: refuse it instead.
                self._floor = max(self._floor, expires)
                return False
            while len(self._entries) >= self._max_entries:
                gone, s, n = heapq.heappop(self._heap)
                if self._entries.get((s, n)) == gone:
                    del self._entries[(s, n)]
                    self._floor = max(self._floor, gone)
        self._entries[key] = expires
        heapq.heappush(self._heap, (expires, sender, nonce))
        return True


# --------------------------------------------------------------------------- envelope


@dataclass(frozen=True, kw_only=True)
class HeartbeatResult:
    """Outcome for one relayed heartbeat of an envelope: ``heartbeat`` if
    accepted, else ``reason`` and ``detail``. ``index`` is its position in
    the envelope's list (the sender's own heartbeat is index 0)."""

    index: int
    heartbeat: Heartbeat | None
    reason: RejectReason | None
    detail: str

    @property
    def accepted(self) -> bool:
        """True iff the heartbeat verified and parsed."""
        return self.heartbeat is not None


@dataclass(frozen=True, kw_only=True)
class DecodedEnvelope:
    """An accepted envelope. ``own`` is the sender's own (verified)
    heartbeat; ``relayed`` has one result per further heartbeat."""

    sender: NodeName
    receiver: NodeName
    nonce: str
    sent_at: float
    key_id: str
    own: Heartbeat
    relayed: tuple[HeartbeatResult, ...]

    @property
    def heartbeats(self) -> tuple[Heartbeat, ...]:
        """The own heartbeat followed by every accepted relayed one."""
        return (self.own, *(r.heartbeat for r in self.relayed if r.heartbeat is not None))


def encode_envelope(
    *,
    sender: NodeName,
    receiver: NodeName,
    nonce: str,
    sent_at: float,
    own: Heartbeat,
    relayed: Sequence[Heartbeat] = (),
    keyring: Keyring,
    max_bytes: int | None = None,
) -> bytes:
    """Sign and encode one envelope as canonical JSON bytes.

    Args:
        sender, receiver: distinct valid node names.
        nonce: 16 random bytes as 32 lower-case hex characters (e.g.
            ``secrets.token_hex(16)``), fresh for every envelope.
        sent_at: wall-clock seconds.
        own: the sender's own heartbeat (``own.origin == sender``).
        relayed: further heartbeats (:func:`select_relays`), unchanged.
        keyring: signs with its primary key.
        max_bytes: if given, refuse to produce a larger message.

    Raises:
        ValueError: any argument invalid, too many heartbeats, or the
            result longer than ``max_bytes``.
    """
    if not is_node_name(sender) or not is_node_name(receiver):
        raise ValueError("sender and receiver must be valid node names")
    if sender == receiver:
        raise ValueError("sender and receiver must differ")
    if not isinstance(nonce, str) or not _NONCE.fullmatch(nonce):
        raise ValueError("nonce must be 32 lower-case hex characters (16 random bytes)")
    wall = _finite("sent_at", sent_at)
    if wall < 0:
        raise ValueError("sent_at must be >= 0")
    if own.origin != sender:
        raise ValueError(f"own heartbeat has origin {own.origin!r}, not the sender {sender!r}")
    beats = [own, *relayed]
    if len(beats) > MAX_HEARTBEATS_PER_ENVELOPE:
        raise ValueError(f"at most {MAX_HEARTBEATS_PER_ENVELOPE} heartbeats per envelope")
    payload: dict[str, object] = {
        "v": PROTOCOL_VERSION,
        "sender": sender,
        "receiver": receiver,
        "nonce": nonce,
        "sent_at": wall,
        "heartbeats": [hb.to_wire() for hb in beats],
    }
    raw = canonical_json(keyring.sign(payload, domain=ENVELOPE_DOMAIN))
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


def decode_envelope(
    raw: bytes,
    *,
    keyring: Keyring,
    receiver: NodeName,
    now: float,
    max_bytes: int,
    replay_window_s: float,
    nonce_cache: NonceCache,
    heartbeat_max_age_s: float | None = None,
    sender_allowed: Callable[[NodeName], bool] | None = None,
) -> DecodedEnvelope:
    """Decode, authenticate and check one envelope received from the network.

    Args:
        raw: the message bytes, untrusted.
        keyring: keys accepted for envelopes and heartbeats.
        receiver: this node's name; envelopes for others are WRONG_RECEIVER.
        now: wall-clock seconds (the clock ``sent_at`` is compared with).
        max_bytes: larger messages are OVERSIZED before being parsed.
        replay_window_s: STALE unless ``|sent_at - now| <= replay_window_s``;
            also how long nonces are remembered.
        nonce_cache: remembers accepted nonces; updated only when the
            envelope is accepted.
        heartbeat_max_age_s: heartbeats with ``sent_at`` older than this are
            STALE (default: ``replay_window_s``); from the future, more than
            ``replay_window_s`` ahead.
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
        ValueError: invalid limits or ``now`` (caller bug).
    """
    if not isinstance(raw, (bytes, bytearray, memoryview)):
        raise TypeError(f"raw must be bytes, got {type(raw).__name__}")
    t = _finite("now", now)
    limit = _positive_int("max_bytes", max_bytes)
    window = _positive_seconds("replay_window_s", replay_window_s)
    max_age = window if heartbeat_max_age_s is None else _positive_seconds("heartbeat_max_age_s", heartbeat_max_age_s)
    if not is_node_name(receiver):
        raise ValueError("receiver must be a valid node name")

    size = len(raw) if not isinstance(raw, memoryview) else raw.nbytes
    if size > limit:
        raise Rejected(RejectReason.OVERSIZED, f"{size} bytes > max_bytes={limit}")
    obj = _parse_json(bytes(raw))
    if not isinstance(obj, dict):
        raise Rejected(RejectReason.MALFORMED, f"envelope: top level is {type(obj).__name__}, not an object")
    _authenticate(obj, keyring=keyring, domain=ENVELOPE_DOMAIN, what="envelope")
    try:
        env = _EnvelopeModel.model_validate(obj)
    except ValidationError as exc:
        raise Rejected(RejectReason.MALFORMED, _schema_detail("envelope", exc)) from None
    if env.sender == env.receiver:
        raise Rejected(RejectReason.MALFORMED, "envelope: sender equals receiver")
    if env.receiver != receiver:
        raise Rejected(RejectReason.WRONG_RECEIVER, f"envelope for {env.receiver}, this is {receiver}")
    if abs(env.sent_at - t) > window:
        raise Rejected(RejectReason.STALE, f"envelope sent_at is {t - env.sent_at:+.3f} s from now")
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
    try:
        own = decode_heartbeat(
            env.heartbeats[0], keyring=keyring, now=t, max_age_s=max_age, max_future_s=window
        )
    except Rejected as exc:
        raise Rejected(exc.reason, f"sender's own {exc.detail}") from None
    if not nonce_cache.check_and_remember(sender=sender, nonce=env.nonce, sent_at=env.sent_at, window_s=window, now=t):
        raise Rejected(RejectReason.REPLAYED, f"nonce {env.nonce} from {sender} already seen (or below cache floor)")
    results: list[HeartbeatResult] = []
    for index, item in enumerate(env.heartbeats[1:], start=1):
        try:
            hb = decode_heartbeat(item, keyring=keyring, now=t, max_age_s=max_age, max_future_s=window)
        except Rejected as exc:
            results.append(HeartbeatResult(index=index, heartbeat=None, reason=exc.reason, detail=exc.detail))
        else:
            results.append(HeartbeatResult(index=index, heartbeat=hb, reason=None, detail="accepted"))
    return DecodedEnvelope(
        sender=sender,
        receiver=NodeName(env.receiver),
        nonce=env.nonce,
        sent_at=env.sent_at,
        key_id=env.key_id,
        own=own,
        relayed=tuple(results),
    )


# --------------------------------------------------------------------------- heartbeat book


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
    """The newest heartbeat of one origin, when it arrived (local clock,
    seconds) and how many times it has been relayed since."""

    heartbeat: Heartbeat
    received_at: float
    relay_count: int


class HeartbeatBook:
    """Newest heartbeat per origin, ordered by ``(incarnation, seq)``.

    Old or duplicate relays are harmless: only a NEW heartbeat replaces the
    entry and refreshes ``received_at``. Times are the caller's local clock
    (monotonic recommended), the same clock later given to
    :func:`~edgewatch.core.quorum.decide` via :meth:`votes`; no cross-node
    clock comparison happens here. The agent may offer its own heartbeats
    too, so its own vote is in :meth:`votes`.

    An entry not refreshed for ``forget_after_s`` seconds no longer blocks a
    lower ``(incarnation, seq)`` from its origin (an origin whose clock went
    back across a restart would otherwise be ignored forever); an identical
    ``(incarnation, seq)`` is still a DUPLICATE.
    """

    __slots__ = ("_entries", "_forget_after_s", "_max_origins")

    def __init__(self, *, max_origins: int = 5_000, forget_after_s: float = 90.0) -> None:
        """Raises ValueError if ``max_origins < 1`` or ``forget_after_s`` is
        not finite and > 0 seconds."""
        self._max_origins = _positive_int("max_origins", max_origins)
        self._forget_after_s = _positive_seconds("forget_after_s", forget_after_s)
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

    def offer(self, heartbeat: Heartbeat, *, now: float) -> Freshness:
        """Offer a verified heartbeat received at ``now`` (local seconds).

        When the book is full, a NEW origin evicts the least recently
        refreshed entry. Raises ValueError if ``now`` is not finite.
        """
        t = _finite("now", now)
        current = self._entries.get(heartbeat.origin)
        if current is not None:
            if heartbeat.order == current.heartbeat.order:
                return Freshness.DUPLICATE
            forgotten = t - current.received_at > self._forget_after_s
            if heartbeat.order < current.heartbeat.order and not forgotten:
                return Freshness.OLDER
        elif len(self._entries) >= self._max_origins:
            stalest = min(self._entries.values(), key=lambda e: (e.received_at, e.heartbeat.origin))
            del self._entries[stalest.heartbeat.origin]
        self._entries[heartbeat.origin] = BookEntry(heartbeat=heartbeat, received_at=t, relay_count=0)
        return Freshness.NEW

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
                self._entries[hb.origin] = BookEntry(
                    heartbeat=entry.heartbeat, received_at=entry.received_at, relay_count=entry.relay_count + 1
                )

    def votes(self) -> dict[NodeName, Vote]:
        """Every origin's newest heartbeat as a vote observed at its local
        receipt time (feed to :func:`~edgewatch.core.quorum.decide`, which
        drops expired ones)."""
        return {o: e.heartbeat.vote(observed_at=e.received_at) for o, e in self._entries.items()}


def select_relays(
    book: HeartbeatBook,
    *,
    for_peer: NodeName,
    now: float,
    max_count: int,
    max_age_s: float,
    rng: random.Random,
    exclude: Collection[NodeName] = (),
) -> list[Heartbeat]:
    """Choose the heartbeats to piggyback on one envelope to ``for_peer``.

    Candidates: book entries received at most ``max_age_s`` seconds before
    ``now`` (local clock), whose origin is neither ``for_peer`` (it knows its
    own) nor in ``exclude`` (e.g. the sender itself, whose own heartbeat is
    always first anyway). Order: least relayed first (memberlist's
    transmit-limited queue: a NEW heartbeat has count 0, so the freshest news
    goes first and every entry gets its turn), then most recently received,
    then random (``rng``) to break ties. At most ``max_count`` are returned;
    call :meth:`HeartbeatBook.mark_relayed` with what was actually sent.

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
        ValueError: ``max_count < 0``, ``max_age_s`` negative or not finite,
            ``now`` not finite.
    """
    t = _finite("now", now)
    limit = _positive_int("max_count", max_count, 0)
    max_age = _finite("max_age_s", max_age_s)
    if max_age < 0:
        raise ValueError("max_age_s must be >= 0")
    candidates = [
        e
        for e in book.entries()
        if e.heartbeat.origin != for_peer and e.heartbeat.origin not in exclude and t - e.received_at <= max_age
    ]
    keyed = [(e.relay_count, -e.received_at, rng.random(), e.heartbeat.origin, e) for e in candidates]
    keyed.sort(key=lambda k: k[:4])
    return [k[4].heartbeat for k in keyed[:limit]]

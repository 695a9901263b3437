"""The agent-to-agent wire format (peer protocol v5, and v4 of release 0.1.0) and its strict decoder:
the overview of the protocol, and its public face (every name in ``__all__``
is importable from here). Each part lives in a module of its own: the
heartbeat (schema, signing, decoding) in :mod:`edgewatch.core.heartbeat`, the
envelope (frame, encoding, decoding) in :mod:`edgewatch.core.envelope`, the
constants and limits in :mod:`edgewatch.core.protocol`, the settings
(:class:`WireConfig`) in :mod:`edgewatch.core.wireconfig`, what both strict
decoders share in :mod:`edgewatch.core.wireschema`, clock-free replay
protection in :mod:`edgewatch.core.replay`, the refusal reasons in
:mod:`edgewatch.core.rejection` and the argument checks in
:mod:`edgewatch.core.checks`. The book of newest heartbeats and the choice
of heartbeats to relay live in :mod:`edgewatch.core.book`.

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

        edgewatch-envelope/v5 <key_id: 32 hex> <mac: 128 hex>\n
        {"v": 5, "versions": [4, 5], "sender": "node-a", "receiver": "node-b",
         "epoch": 1700000000123456789, "seq": 17,
         "nonce": "<32 hex = 16 random bytes>", "reply_to": null | "<32 hex>",
         "heartbeats": [<node-a's own heartbeat>, <relayed>, ...],
         "ages": [0.012, 3.5, ...]}

    A v4 envelope (release 0.1.0) has the magic ``edgewatch-envelope/v4``, ``"v": 4``, no
    ``versions`` and the domain ``edgewatch/envelope/v4``; an agent writes each peer the version
    negotiated with it (:mod:`edgewatch.core.versions`) and reads both. Heartbeats keep ``"v": 4``
    in both, so any statement is relayed to and counted by any member (docs/versions.md).
    The signature (the sender's own key, domain ``edgewatch/envelope/v<N>``)
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
    under 1 KiB at any group size. Versions: N and N-1 (5 and 4) are spoken,
    anything else is refused (VERSION) before its signature is checked;
    version 3 agents and this one do not hear each other.

Sources
    TKE Edge; van Renesse, Minsky, Hayden 1998 (gossip-style failure
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

from edgewatch.core.envelope import (
    DecodedEnvelope,
    HeartbeatResult,
    decode_envelope,
    encode_envelope,
    parse_strict_json,
)
from edgewatch.core.heartbeat import Heartbeat, decode_heartbeat, sign_heartbeat
from edgewatch.core.protocol import (
    ENVELOPE_DOMAIN,
    ENVELOPE_MAGIC,
    HEARTBEAT_DOMAIN,
    MAX_AGE_S,
    MAX_HEARTBEATS_PER_ENVELOPE,
    MAX_NAMES_PER_LIST,
    MIN_PROTOCOL_VERSION,
    NONCE_HEX_LENGTH,
    PROTOCOL_VERSION,
    STATEMENT_VERSION,
)
from edgewatch.core.rejection import Rejected, RejectReason
from edgewatch.core.replay import ReplayGuard, SenderState
from edgewatch.core.wireconfig import WireConfig

__all__ = [
    "ENVELOPE_DOMAIN",
    "ENVELOPE_MAGIC",
    "HEARTBEAT_DOMAIN",
    "MAX_AGE_S",
    "MAX_HEARTBEATS_PER_ENVELOPE",
    "MAX_NAMES_PER_LIST",
    "MIN_PROTOCOL_VERSION",
    "NONCE_HEX_LENGTH",
    "PROTOCOL_VERSION",
    "STATEMENT_VERSION",
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
    "parse_strict_json",
    "sign_heartbeat",
]

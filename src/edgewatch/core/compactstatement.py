"""A signed statement (the heartbeat of :mod:`edgewatch.core.heartbeat`) in a compact binary
form for the statement datagram: MessagePack by msgspec, its fields in a fixed order, the hex
fields as raw bytes.

What it is for
    The heartbeat's JSON spells every key and writes its 64-byte Ed25519 signature and its two
    16-byte identifiers in hex: about 390 bytes in a pool of 5, of which the names and the
    booleans are a fifth. Laid out as a MessagePack array of typed fields (msgspec's
    ``array_like`` Struct), the same statement is about 145 bytes, so the statement datagram that
    carries it changes and refreshes in a third of the bytes.

What it is not
    A second signed form. The signature stays the one the origin made over the heartbeat's
    canonical JSON (``edgewatch.core.signing``): :func:`unpack_statement` turns the fields back into
    that JSON object, and the receiver verifies and parses it with
    :func:`edgewatch.core.heartbeat.decode_heartbeat`, the one decoder of every path. A field the
    compact form carried differently than the origin signed fails that signature; nothing here
    is trusted before it.

Layout (a MessagePack array, in this order)::

    v            int      the statement version
    origin       str      the origin node
    incarnation  int
    seq          int
    kubelet_ok   bool
    cloud_ok     bool
    alive        [str]    sorted
    dead         [str]    sorted
    carrier      str      "" for none
    beacon       bytes    0 or 16 bytes (the beacon value's hex, raw)
    key_id       bytes    16 bytes
    mac          bytes    64 bytes (the Ed25519 signature)

Limits: pure; sizes are bounded by the datagram (``edgewatch.core.statementdatagram.MAX_SIZE``),
not here. Source: the MessagePack specification (msgpack.org); msgspec's ``array_like`` Structs.
"""

from __future__ import annotations

import msgspec

from edgewatch.core.heartbeat import Heartbeat
from edgewatch.core.protocol import STATEMENT_VERSION
from edgewatch.core.rejection import Rejected, RejectReason

__all__ = ["pack_statement", "unpack_statement"]


class _Compact(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    v: int
    origin: str
    incarnation: int
    seq: int
    kubelet_ok: bool
    cloud_ok: bool
    alive: list[str]
    dead: list[str]
    carrier: str
    beacon: bytes
    key_id: bytes
    mac: bytes


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(_Compact)


def pack_statement(heartbeat: Heartbeat) -> bytes:
    """``heartbeat`` in the compact form (see the module docstring).

    Raises:
        ValueError: a hex field of the heartbeat is not hex (never for a signed heartbeat).
    """
    return _ENCODER.encode(_Compact(
        v=STATEMENT_VERSION, origin=heartbeat.origin, incarnation=heartbeat.incarnation, seq=heartbeat.seq,
        kubelet_ok=heartbeat.kubelet_ok, cloud_ok=heartbeat.cloud_ok,
        alive=list(heartbeat.alive), dead=list(heartbeat.dead), carrier=heartbeat.carrier,
        beacon=bytes.fromhex(heartbeat.beacon), key_id=bytes.fromhex(heartbeat.key_id),
        mac=bytes.fromhex(heartbeat.mac)))


def unpack_statement(raw: bytes) -> dict[str, object]:
    """The heartbeat's JSON object (as Python values) from its compact form, untrusted: the caller
    verifies and parses it with ``decode_heartbeat``.

    Raises:
        Rejected: ``malformed``: not the compact form (another type, field count or encoding).
    """
    try:
        c = _DECODER.decode(raw)
    except (msgspec.MsgspecError, ValueError) as exc:  # ValueError: UnicodeDecodeError of a str field
        raise Rejected(RejectReason.MALFORMED, f"not a compact statement: {exc}") from None
    return {"v": c.v, "origin": c.origin, "incarnation": c.incarnation, "seq": c.seq, "kubelet_ok": c.kubelet_ok,
            "cloud_ok": c.cloud_ok, "alive": c.alive, "dead": c.dead, "carrier": c.carrier,
            "beacon": c.beacon.hex(), "key_id": c.key_id.hex(), "mac": c.mac.hex()}

"""The statement datagram of peer protocol v6: a neighbour's signed statement pushed over UDP
when what it says changes, and as the slow anti-entropy refresh, instead of an HTTP exchange.

What it is for
    An HTTP exchange costs a TCP handshake, two sets of headers, an answer and a teardown (about
    2.5 KB on the wire for a statement of about 390 bytes of JSON, 145 compact, in a pool of 5).
    A statement travels one way: the sender knows what changed, and a receiver that missed the
    datagram asks for it over HTTP anyway (each liveness datagram names the sender's statement,
    :mod:`edgewatch.core.cadence`'s ``pull``). So the push is one datagram of about 180 bytes (210
    with UDP and IPv4), and loss costs one period and an exchange.

Layout (big-endian; a fixed 20-byte header, the statement, a 16-byte MAC)::

    offset size field
         0    1 version      6
         1    1 kind         0x80 (statement; the liveness datagram's byte 1 holds flags < 0x04)
         2    2 reserved     0
         4    4 epoch        the sender's liveness epoch towards the receiver (non-zero)
         8    4 echo_epoch   the receiver's liveness epoch the echo belongs to (non-zero)
        12    4 echo         the highest liveness seq the sender has received from the receiver
        16    4 age_ms       milliseconds since the sender signed the statement
        20    n statement    the signed heartbeat (``edgewatch.core.compactstatement``: MessagePack)
      20+n   16 mac          HMAC-SHA256(direction key, domain || 0x00 || bytes 0..19+n), first 16

Any size from :data:`MIN_SIZE` to :data:`MAX_SIZE` other than the liveness datagram's 36 bytes;
the receiver tells the two apart by size alone, before a key is used, and checks the MAC (its own
domain, so neither kind's MAC is valid for the other) before reading a field. The header is fixed
and packed with :mod:`struct`; the statement, in its compact MessagePack form, is parsed and
verified (Ed25519, over the heartbeat's JSON object rebuilt from it) only after the MAC matched, by
the same decoder as the HTTP exchange's.

Freshness
    The echo must name one of the receiver's last :data:`STATEMENT_ECHO_WINDOW` liveness seqs in
    its current epoch (:meth:`edgewatch.core.liveness.PeerSession.echoes_recent`): the datagram was
    made after the receiver sent that seq, so a recording is worthless seconds later. Within that
    window a copy is a duplicate of a statement the receiver holds (the heartbeat book ignores it;
    it does not keep the statement current, which only a liveness proof does).

Limits: pure. One statement per datagram; :data:`MAX_SIZE` (1,200 bytes) keeps it in one IPv4 or
IPv6 packet on any link of at least 1,280 bytes (RFC 8200's minimum); a larger statement (a
neighbour list longer than ~60 names) is not pushed and goes by HTTP. Sources: hashicorp/memberlist
(compact UDP messages, state pushed separately from probes); RFC 2104 / RFC 4868 (truncated HMAC).
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from dataclasses import dataclass
from typing import Final

from edgewatch.core.liveness import DATAGRAM_SIZE, LIVENESS_VERSION, MAC_SIZE
from edgewatch.core.rejection import Rejected, RejectReason
from edgewatch.core.signing import check_domain

__all__ = ["KIND_STATEMENT", "MAX_SIZE", "MIN_SIZE", "STATEMENT_DATAGRAM_DOMAIN", "STATEMENT_ECHO_WINDOW",
           "StatementDatagram", "open_statement", "seal_statement"]

STATEMENT_DATAGRAM_DOMAIN: Final = "edgewatch/statement-datagram/v6"
KIND_STATEMENT: Final = 0x80
_HEADER: Final = struct.Struct(">BBHIIII")
MIN_SIZE: Final = _HEADER.size + 2 + MAC_SIZE
"""38 bytes: the header, ``{}`` and the MAC."""
MAX_SIZE: Final = 1200
"""Bytes: one packet on any IPv6 link (1,280 bytes less the IPv6 and UDP headers, rounded down)."""
STATEMENT_ECHO_WINDOW: Final = 5
"""The echo must name one of the receiver's last 5 liveness seqs (five periods: a lost datagram or
two and a period of jitter on either side)."""
_MAX_U32: Final = 0xFFFFFFFF
_MAC_PREFIX: Final = check_domain(STATEMENT_DATAGRAM_DOMAIN)

if DATAGRAM_SIZE >= MIN_SIZE:  # the receiver tells the two kinds apart by size
    raise AssertionError("the liveness datagram must be shorter than any statement datagram")


@dataclass(frozen=True, kw_only=True)
class StatementDatagram:
    """One statement datagram's fields (see the module docstring's layout).

    Raises:
        ValueError: on construction, a field out of its unsigned 32-bit range, ``epoch``,
            ``echo_epoch`` or ``echo`` 0, or a statement that cannot fit :data:`MAX_SIZE`.
    """

    epoch: int
    echo_epoch: int
    echo: int
    age_ms: int
    statement: bytes

    def __post_init__(self) -> None:
        for name in ("epoch", "echo_epoch", "echo", "age_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_U32:
                raise ValueError(f"{name} must be an unsigned 32-bit int, got {value!r}")
        if 0 in (self.epoch, self.echo_epoch, self.echo):
            raise ValueError("epoch, echo_epoch and echo must be non-zero")
        if not 2 <= len(self.statement) <= MAX_SIZE - _HEADER.size - MAC_SIZE:
            raise ValueError(f"a statement of {len(self.statement)} bytes does not fit one datagram")

    @property
    def age_s(self) -> float:
        """The statement's age when sent, seconds."""
        return self.age_ms / 1000.0


def _mac(key: bytes, body: bytes) -> bytes:
    return hmac.new(key, _MAC_PREFIX + body, hashlib.sha256).digest()[:MAC_SIZE]


def seal_statement(fields: StatementDatagram, *, key: bytes) -> bytes:
    """The datagram of ``fields`` MAC'd with ``key`` (the sender's ``PairKeys.send``)."""
    body = _HEADER.pack(LIVENESS_VERSION, KIND_STATEMENT, 0, fields.epoch, fields.echo_epoch, fields.echo,
                        fields.age_ms) + fields.statement
    return body + _mac(key, body)


def open_statement(data: bytes, *, key: bytes) -> StatementDatagram:
    """The fields of an untrusted statement datagram, if ``key`` (the receiver's
    ``PairKeys.receive`` for the peer its source address belongs to) MAC'd it. The statement's
    bytes are returned unparsed: the caller decodes and verifies them.

    Raises:
        Rejected: ``oversized`` / ``malformed`` (size outside :data:`MIN_SIZE`..:data:`MAX_SIZE`),
            ``bad_signature`` (the MAC does not match; checked before any field is read),
            ``version`` (not 6), ``malformed`` (another kind, reserved bits set, or a zero epoch,
            echo epoch or echo).
    """
    if not MIN_SIZE <= len(data) <= MAX_SIZE:
        reason = RejectReason.OVERSIZED if len(data) > MAX_SIZE else RejectReason.MALFORMED
        raise Rejected(reason, f"a statement datagram is {MIN_SIZE}-{MAX_SIZE} bytes, got {len(data)}")
    body, mac = bytes(data[:-MAC_SIZE]), bytes(data[-MAC_SIZE:])
    if not hmac.compare_digest(mac, _mac(key, body)):
        raise Rejected(RejectReason.BAD_SIGNATURE, "statement datagram MAC does not match the pair key")
    version, kind, reserved, epoch, echo_epoch, echo, age_ms = _HEADER.unpack(body[:_HEADER.size])
    if version != LIVENESS_VERSION:
        raise Rejected(RejectReason.VERSION, f"statement datagram version {version}, this agent reads {LIVENESS_VERSION}")
    if kind != KIND_STATEMENT or reserved or 0 in (epoch, echo_epoch, echo):
        raise Rejected(RejectReason.MALFORMED, f"kind {kind:#04x}, reserved {reserved}, epoch {epoch}, "
                                               f"echo {echo_epoch}/{echo}")
    return StatementDatagram(epoch=epoch, echo_epoch=echo_epoch, echo=echo, age_ms=age_ms,
                             statement=body[_HEADER.size:])

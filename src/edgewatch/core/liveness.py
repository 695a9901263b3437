"""The liveness datagram of peer protocol v6: one fixed-size UDP payload per neighbour per period,
MAC'd with the pair's directional key (:mod:`edgewatch.core.pairkey`), and the per-peer session
that decides which datagrams are new and which prove the peer alive now.

Layout (36 bytes, big-endian, every field always present; with UDP and IPv4 headers 64 bytes on
the wire)::

    offset size field
         0    1 version      6
         1    1 flags        bit 0 kubelet_ok, bit 1 cloud_ok; the other bits must be 0
         2    2 statement    low 16 bits of the sequence of the sender's newest signed statement
                             (a receiver holding an older one asks for it)
         4    4 epoch        the sender's epoch: random, non-zero, new at every start of its agent
         8    4 seq          the sender's counter towards this receiver in this epoch, from 1
        12    4 echo_epoch   the receiver's epoch the echo belongs to (0 with echo 0)
        16    4 echo         the highest seq the sender has received from the receiver (0: none)
        20   16 mac          HMAC-SHA256(direction key, domain || 0x00 || bytes 0..19), first 16 bytes

A fixed layout packed with :mod:`struct` (no codec: nothing in it is variable, and a fixed size
lets a receiver refuse anything else before computing a MAC). The MAC is checked before any field
is read (:func:`open_datagram`).

Freshness without clocks (:class:`PeerSession`)
    * **New**: a datagram counts once. Per peer epoch, an RFC 4303 window over ``seq`` (64 below the
      highest; older or seen again: ``replayed``). A peer's epochs are random, not ordered. The
      epoch a session holds is *confirmed* once one of its datagrams proved liveness (below); an
      unconfirmed one (the first heard, which may be a recording of an old epoch replayed to a
      restarted receiver) gives way to any other authentic epoch, and a confirmed one only to a
      datagram that proves liveness itself. So a restarted peer is heard after one round trip,
      and a recorded datagram of an old epoch can neither count twice nor lock the session out
      of the peer's real epoch.
    * **Alive now** (the failure detector's success): new, and its echo names *this* node's current
      epoch and one of the last ``echo_window`` seqs this node sent (default 3: three periods). The
      peer cannot have seen that seq before this node sent it, so the datagram was made after
      that: SWIM's ping/ack nonce, carried by the periodic datagram both ways instead of a request
      and an answer. A datagram that is new but echoes something older still delivers its flags
      and statement number (they are authentic and newer than any before), but is no evidence of
      life: a delayed or recorded datagram cannot keep a dead node alive.

Limits: pure (no sockets, no clock); the agent's transport sends, receives and calls this. A
datagram of another size, version, non-zero reserved flag bits or a MAC that does not match is
refused with a :class:`~edgewatch.core.rejection.Rejected` reason (never another exception). One
lost datagram costs one period's evidence; the detector (:mod:`edgewatch.core.detector`) expects
that. Sources: SWIM (Das et al. 2002) and hashicorp/memberlist (ping/ack sequence numbers, compact
UDP messages); RFC 4303 section 3.4.3 (anti-replay window); RFC 2104 / RFC 4868 (truncated HMAC).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import struct
from dataclasses import dataclass
from typing import Final

from edgewatch.core.rejection import Rejected, RejectReason
from edgewatch.core.signing import check_domain
from edgewatch.core.types import NodeName

__all__ = [
    "DATAGRAM_SIZE",
    "ECHO_WINDOW",
    "LIVENESS_DOMAIN",
    "LIVENESS_VERSION",
    "Admission",
    "Liveness",
    "PeerSession",
    "open_datagram",
    "seal",
]

LIVENESS_VERSION: Final = 6
LIVENESS_DOMAIN: Final = "edgewatch/liveness/v6"
_HEADER: Final = struct.Struct(">BBHIIII")
MAC_SIZE: Final = 16
DATAGRAM_SIZE: Final = _HEADER.size + MAC_SIZE
"""36 bytes."""
ECHO_WINDOW: Final = 3
"""Default: an echo of one of this node's last 3 seqs proves the peer alive."""
REPLAY_WINDOW: Final = 64
_FLAG_KUBELET: Final = 0x01
_FLAG_CLOUD: Final = 0x02
_MAX_U32: Final = 0xFFFFFFFF
_MAC_PREFIX: Final = check_domain(LIVENESS_DOMAIN)


@dataclass(frozen=True, kw_only=True)
class Liveness:
    """One datagram's fields (see the module docstring's layout). Integers are unsigned 32-bit
    except ``statement`` (16-bit).

    Raises:
        ValueError: on construction, a field out of its range, or ``epoch`` 0.
    """

    epoch: int
    seq: int
    echo_epoch: int = 0
    echo: int = 0
    statement: int = 0
    kubelet_ok: bool = True
    cloud_ok: bool = True

    def __post_init__(self) -> None:
        for name in ("epoch", "seq", "echo_epoch", "echo"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_U32:
                raise ValueError(f"{name} must be an unsigned 32-bit int, got {value!r}")
        if isinstance(self.statement, bool) or not isinstance(self.statement, int) or not 0 <= self.statement <= 0xFFFF:
            raise ValueError(f"statement must be an unsigned 16-bit int, got {self.statement!r}")
        if self.epoch == 0 or self.seq == 0:
            raise ValueError("epoch 0 and seq 0 are reserved (none)")


def _mac(key: bytes, header: bytes) -> bytes:
    return hmac.new(key, _MAC_PREFIX + header, hashlib.sha256).digest()[:MAC_SIZE]


def seal(fields: Liveness, *, key: bytes) -> bytes:
    """The datagram of ``fields`` MAC'd with ``key`` (the sender's ``PairKeys.send``), 36 bytes."""
    flags = (_FLAG_KUBELET if fields.kubelet_ok else 0) | (_FLAG_CLOUD if fields.cloud_ok else 0)
    header = _HEADER.pack(LIVENESS_VERSION, flags, fields.statement, fields.epoch, fields.seq,
                          fields.echo_epoch, fields.echo)
    return header + _mac(key, header)


def open_datagram(data: bytes, *, key: bytes) -> Liveness:
    """The fields of an untrusted datagram, if ``key`` (the receiver's ``PairKeys.receive`` for
    the peer the datagram's source address belongs to) MAC'd it.

    Raises:
        Rejected: ``oversized`` / ``malformed`` (not 36 bytes), ``bad_signature`` (the MAC does not
            match; checked before any field is read), ``version`` (not 6), ``malformed`` (reserved
            flag bits set, epoch or seq 0, or an echo without its epoch).
    """
    if len(data) != DATAGRAM_SIZE:
        reason = RejectReason.OVERSIZED if len(data) > DATAGRAM_SIZE else RejectReason.MALFORMED
        raise Rejected(reason, f"a liveness datagram is {DATAGRAM_SIZE} bytes, got {len(data)}")
    header, mac = bytes(data[:_HEADER.size]), bytes(data[_HEADER.size:])
    if not hmac.compare_digest(mac, _mac(key, header)):
        raise Rejected(RejectReason.BAD_SIGNATURE, "liveness datagram MAC does not match the pair key")
    version, flags, statement, epoch, seq, echo_epoch, echo = _HEADER.unpack(header)
    if version != LIVENESS_VERSION:
        raise Rejected(RejectReason.VERSION, f"liveness datagram version {version}, this agent reads {LIVENESS_VERSION}")
    if flags & ~(_FLAG_KUBELET | _FLAG_CLOUD) or epoch == 0 or seq == 0 or (echo_epoch == 0) != (echo == 0):
        raise Rejected(RejectReason.MALFORMED, f"flags {flags:#04x}, epoch {epoch}, seq {seq}, echo {echo_epoch}/{echo}")
    return Liveness(epoch=epoch, seq=seq, echo_epoch=echo_epoch, echo=echo, statement=statement,
                    kubelet_ok=bool(flags & _FLAG_KUBELET), cloud_ok=bool(flags & _FLAG_CLOUD))


@dataclass(frozen=True)
class Admission:
    """What one authentic datagram is worth: ``new`` (never counted before: its flags and statement
    number may be taken), ``alive`` (it also proves the peer alive after this node's recent
    datagram: the failure detector's success)."""

    new: bool
    alive: bool


@dataclass(frozen=True, kw_only=True)
class PeerSession:
    """This node's state towards one peer (immutable; each method returns the next state).

    ``my_epoch`` / ``sent``: this node's epoch and the last seq it sent the peer; ``their_epoch``,
    ``high``, ``seen``: the peer's current epoch, highest seq accepted in it and the window bitmap
    (bit i: ``high - i`` accepted); ``echo`` is what this node echoes back (the peer's epoch and
    highest seq received).
    """

    peer: NodeName
    my_epoch: int
    sent: int = 0
    their_epoch: int = 0
    high: int = 0
    seen: int = 0
    confirmed: bool = False
    """A datagram of ``their_epoch`` has proved the peer alive (see the module docstring)."""

    def next_datagram(self, *, statement: int, kubelet_ok: bool, cloud_ok: bool) -> tuple[PeerSession, Liveness]:
        """The next datagram to send the peer and the session after sending it.

        Raises:
            ValueError: the seq space of this epoch is used up (2^32 - 1 datagrams: a new epoch is
                due, i.e. a restart, after 136 years at one a second).
        """
        seq = self.sent + 1
        if seq > _MAX_U32:
            raise ValueError("seq space of this epoch used up")
        fields = Liveness(epoch=self.my_epoch, seq=seq, echo_epoch=self.their_epoch if self.high else 0,
                          echo=self.high, statement=statement & 0xFFFF, kubelet_ok=kubelet_ok, cloud_ok=cloud_ok)
        return dataclasses.replace(self, sent=seq), fields

    def proves_alive(self, fields: Liveness, *, echo_window: int = ECHO_WINDOW) -> bool:
        """True iff ``fields`` echoes this node's current epoch and one of its last ``echo_window``
        sent seqs."""
        return self.echoes_recent(echo_epoch=fields.echo_epoch, echo=fields.echo, echo_window=echo_window)

    def echoes_recent(self, *, echo_epoch: int, echo: int, echo_window: int = ECHO_WINDOW) -> bool:
        """True iff ``(echo_epoch, echo)`` names this node's current epoch and one of its last
        ``echo_window`` sent seqs: whatever carries it was made after this node sent that seq."""
        return echo_epoch == self.my_epoch and echo != 0 and self.sent - echo_window < echo <= self.sent

    def admit(self, fields: Liveness, *, echo_window: int = ECHO_WINDOW) -> tuple[PeerSession, Admission]:
        """Judge an authentic datagram (see the module docstring's freshness rules) and return the
        session after it. Never raises for any field values."""
        alive = self.proves_alive(fields, echo_window=echo_window)
        confirmed = self.confirmed or alive
        if fields.epoch != self.their_epoch:
            if self.confirmed and not alive:
                return self, Admission(new=False, alive=False)  # another epoch must prove itself
            return dataclasses.replace(self, their_epoch=fields.epoch, high=fields.seq, seen=1, confirmed=alive), \
                Admission(new=True, alive=alive)
        if fields.seq > self.high:
            shift = fields.seq - self.high
            seen = ((self.seen << shift) | 1) & ((1 << REPLAY_WINDOW) - 1) if shift < REPLAY_WINDOW else 1
            return dataclasses.replace(self, high=fields.seq, seen=seen, confirmed=confirmed), \
                Admission(new=True, alive=alive)
        offset = self.high - fields.seq
        if offset >= REPLAY_WINDOW or self.seen >> offset & 1:
            return self, Admission(new=False, alive=False)  # too old, or seen already
        return dataclasses.replace(self, seen=self.seen | 1 << offset, confirmed=confirmed), \
            Admission(new=True, alive=alive)

"""Why an agent refused a message: the reasons every decoder of the wire reports
(:mod:`edgewatch.core.wire`, :mod:`edgewatch.core.replay`, :mod:`edgewatch.core.evidence`).

Shared by the decoders so that each can raise the same :class:`Rejected` without importing the
others. Limits: a detail is cut to a few hundred characters of the hostile input.
"""

from __future__ import annotations

import enum
from typing import Final

from edgewatch.core.types import NodeName

__all__ = ["RejectReason", "Rejected"]

_DETAIL_MAX: Final = 300


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
    UNCONFIRMED = "unconfirmed"
    """A further request from a sender epoch that no answer has confirmed
    yet (see :class:`ReplayGuard`); genuine right after a restart."""
    SENDER_MISMATCH = "sender_mismatch"
    VERSION = "version"
    """A protocol or evidence version this release does not speak (older than N-1 or newer than
    N, :data:`edgewatch.core.protocol.MIN_PROTOCOL_VERSION`)."""


class Rejected(Exception):
    """A message was refused. ``reason`` is a :class:`RejectReason`, ``detail``
    a short human explanation (never more than a few hundred characters of
    the hostile input).

    ``answer_to`` is ``(sender, nonce)`` when the envelope was authentic,
    bound to its sender and refused only by the :class:`ReplayGuard` (a
    request that may be genuine, e.g. right after the sender restarted): the
    receiver may still answer it, so the sender's probe succeeds, without
    absorbing anything from it. None otherwise. ``answer_version`` is then the protocol version
    of that envelope (answer in it: the sender just proved it reads it).
    """

    def __init__(self, reason: RejectReason, detail: str, *,
                 answer_to: tuple[NodeName, str] | None = None, answer_version: int | None = None) -> None:
        detail = detail[:_DETAIL_MAX]
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail
        self.answer_to = answer_to
        self.answer_version = answer_version

"""The constants of the agents' peer protocol v4 (:mod:`edgewatch.core.wire`): the version every
signed object carries, the signature domains, the first word of an envelope's header line and the
schema bounds.

Shared by the heartbeat (:mod:`edgewatch.core.heartbeat`), the envelope
(:mod:`edgewatch.core.envelope`) and the wire settings (:mod:`edgewatch.core.wireconfig`); a new
protocol version changes them here, together.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "ENVELOPE_DOMAIN",
    "ENVELOPE_MAGIC",
    "HEARTBEAT_DOMAIN",
    "MAX_AGE_S",
    "MAX_HEARTBEATS_PER_ENVELOPE",
    "MAX_NAMES_PER_LIST",
    "NONCE_HEX_LENGTH",
    "PROTOCOL_VERSION",
    "_MAX_COUNTER",
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

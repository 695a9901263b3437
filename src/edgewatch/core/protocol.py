"""The constants of the agents' peer protocol (:mod:`edgewatch.core.wire`): the versions spoken,
the signature domains, the first word of an envelope's header line and the schema bounds.

Version policy (docs/versions.md): a release speaks its own protocol version N
(:data:`PROTOCOL_VERSION`) and the previous release's, N-1 (:data:`MIN_PROTOCOL_VERSION`), on the
wire and in the evidence the controller reads; anything older or newer is refused with the reason
``version`` (:class:`edgewatch.core.rejection.RejectReason`), counted like every other refusal.
Envelopes are negotiated per peer (:class:`edgewatch.core.versions.PeerVersions`); the statements
they carry (heartbeats) keep one format across N-1 and N (:data:`STATEMENT_VERSION`), so every
member of a mixed group reads every statement and the vote is the same. Evidence is written at
:data:`EVIDENCE_WRITE_VERSION` (the version every supported controller reads) and read at N and
N-1.

v5 (this release) over v4 (release 0.1.0): an envelope advertises its sender's supported range
``"versions": [min, max]`` (magic ``edgewatch-envelope/v5``, domain ``edgewatch/envelope/v5``), so
a receiver learns from an authenticated message what each peer speaks; evidence may be an object
``{"v": 5, "versions": [min, max], "statements": [...]}`` (v4: the bare list of statements).

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
    "MAX_COUNTER",
    "MAX_HEARTBEATS_PER_ENVELOPE",
    "MAX_NAMES_PER_LIST",
    "MIN_PROTOCOL_VERSION",
    "NONCE_HEX_LENGTH",
    "PROTOCOL_VERSION",
    "STATEMENT_VERSION",
    "EVIDENCE_WRITE_VERSION",
    "SUPPORTED_VERSIONS",
    "envelope_domain",
    "envelope_magic",
]

PROTOCOL_VERSION: Final = 5
"""N: the newest protocol version this release speaks (envelopes, evidence)."""

MIN_PROTOCOL_VERSION: Final = 4
"""N-1: the oldest version this release still speaks (release 0.1.0's). Anything below it, or
above :data:`PROTOCOL_VERSION`, is refused with the reason ``version``."""

SUPPORTED_VERSIONS: Final = (MIN_PROTOCOL_VERSION, PROTOCOL_VERSION)
"""``[min, max]``: what a v5 envelope and v5 evidence advertise."""

STATEMENT_VERSION: Final = 4
"""``v`` of a heartbeat (a statement): unchanged from v4 in v5, so a statement signed by any
agent of N-1 or N is read, relayed and counted by every other one (a relay cannot re-sign another
origin's statement in another format). A statement of another ``v`` is refused (``version``)."""

EVIDENCE_WRITE_VERSION: Final = 4
"""The evidence format agents of this release write: N-1, which the controller of N-1 and of N
reads, so the agents and the controller can be rolled out (and back) in either order. The next
release, whose oldest controller peer is this one (it reads v5), writes v5."""

HEARTBEAT_DOMAIN: Final = "edgewatch/heartbeat/v4"
"""Signature domain of heartbeats (statement format 4)."""


def envelope_domain(version: int) -> str:
    """Signature domain of envelopes of ``version`` (over the body bytes)."""
    return f"edgewatch/envelope/v{version}"


def envelope_magic(version: int) -> bytes:
    """First word of the header line of an envelope of ``version``."""
    return b"edgewatch-envelope/v%d" % version


ENVELOPE_DOMAIN: Final = envelope_domain(PROTOCOL_VERSION)
"""Signature domain of envelopes of :data:`PROTOCOL_VERSION`."""

ENVELOPE_MAGIC: Final = envelope_magic(PROTOCOL_VERSION)
"""First word of the header line of an envelope of :data:`PROTOCOL_VERSION`."""

MAX_NAMES_PER_LIST: Final = 5000
"""Schema bound on ``alive`` and ``dead`` (Kubernetes' largest supported
cluster is 5,000 nodes)."""

MAX_HEARTBEATS_PER_ENVELOPE: Final = 64
"""Schema bound on ``heartbeats`` (own + relayed)."""

MAX_AGE_S: Final = 86_400.0
"""Schema bound on an age, seconds (anything near it is STALE anyway)."""

NONCE_HEX_LENGTH: Final = 32
"""A nonce is 16 random bytes, lower-case hex."""

MAX_COUNTER: Final = 2**63 - 1
"""Schema bound on the counters (envelope ``epoch``/``seq``, heartbeat ``incarnation``/``seq``): int64 max."""

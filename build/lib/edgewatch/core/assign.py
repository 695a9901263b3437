"""Deterministic choice of one node among candidates: who publishes a node's verdict, who carries
a cut-off node's heartbeat.

Rendezvous (highest-random-weight) hashing: every agent that sees the same candidate set picks the
same node without talking, and when the chosen node leaves the set only the subjects it had move
(to their second choice), so a takeover disturbs nothing else. Source: Thaler & Ravishankar,
"Using name-based mappings to increase hit rates", IEEE/ACM ToN 1998.

Limits: agents with different views of the candidates may briefly choose differently; callers make
the writes idempotent (a Lease renewal or a condition write done twice is harmless).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from edgewatch.core.types import NodeName


def weight(*, subject: str, candidate: str) -> int:
    """The rendezvous weight of ``candidate`` for ``subject`` (64-bit, from BLAKE2b)."""
    digest = hashlib.blake2b(f"{subject}\x00{candidate}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def choose(*, subject: str, candidates: Iterable[NodeName]) -> NodeName | None:
    """The candidate with the highest weight for ``subject``; None if there are no candidates.

    Ties (practically impossible with 64-bit weights) break by name, so the result is a pure
    function of the set.
    """
    best: tuple[int, str] | None = None
    for candidate in candidates:
        key = (weight(subject=subject, candidate=candidate), candidate)
        if best is None or key > best:
            best = key
    return NodeName(best[1]) if best is not None else None

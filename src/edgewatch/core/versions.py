"""Per-peer negotiation of the envelope version (docs/versions.md).

An agent speaks N (:data:`~edgewatch.core.protocol.PROTOCOL_VERSION`) and N-1
(:data:`~edgewatch.core.protocol.MIN_PROTOCOL_VERSION`). What it writes to a peer:

* a peer whose newest *authenticated* envelope was v5 and advertised ``versions`` up to at least 5:
  v5; one whose newest authenticated envelope was v4: v4 (a 0.1.0 agent, or one rolled back);
* an answer: the version of the request it answers (the requester just proved it reads it);
* an unknown peer (never heard from since this agent started): N, and when the peer refuses it
  without an authenticated answer (a 0.1.0 agent answers HTTP 400 ``malformed`` to a v5 header) the
  same probe is sent again at N-1 at once and the peer noted as N-1 (:meth:`refused`).

Why the *newest* version heard and not the highest ever: a peer rolled back from N to N-1 must be
written N-1 again at once, not after a failed probe per period. Why an unauthenticated refusal may
lower a peer to N-1: N-1 is a version this release accepts anyway (v5 adds no security property
over v4), so an attacker who forges refusals gains nothing it could not get by dropping packets;
only authenticated envelopes raise a peer to N. Why start at N toward unknown peers rather than
N-1: a v4 request carries no range, so two upgraded agents starting at N-1 would never learn that
both speak N; the one refused probe costs no verdict, since the retry at N-1 is in the same probe.

Pure: no clock, no I/O. Bounded: at most ``max_peers`` entries (the oldest noted dropped first).
"""

from __future__ import annotations

from collections import OrderedDict

from edgewatch.core.protocol import MIN_PROTOCOL_VERSION, PROTOCOL_VERSION
from edgewatch.core.types import NodeName

__all__ = ["PeerVersions", "negotiate"]


def negotiate(advertised: tuple[int, int], *, ours: tuple[int, int] = (MIN_PROTOCOL_VERSION, PROTOCOL_VERSION)
              ) -> int | None:
    """The highest version in both ranges ``(min, max)``; None if they do not overlap."""
    low, high = max(advertised[0], ours[0]), min(advertised[1], ours[1])
    return high if low <= high else None


class PeerVersions:
    """The envelope version to write to each peer, from what it last said (see the module)."""

    def __init__(self, *, max_peers: int = 10_000) -> None:
        if max_peers < 1:
            raise ValueError("max_peers must be at least 1")
        self._max = max_peers
        self._seen: OrderedDict[NodeName, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    def known(self, peer: NodeName) -> int | None:
        """The version noted for ``peer`` (None: never heard from)."""
        return self._seen.get(peer)

    def _note(self, peer: NodeName, version: int) -> None:
        self._seen[peer] = version
        self._seen.move_to_end(peer)
        while len(self._seen) > self._max:
            self._seen.popitem(last=False)

    def heard(self, peer: NodeName, *, version: int, versions: tuple[int, int]) -> int:
        """Note an *authenticated, accepted* envelope of ``peer`` at ``version`` advertising
        ``versions`` (a v4 envelope: ``(4, 4)``); returns the version now noted for it."""
        agreed = negotiate(versions) or version
        noted = max(MIN_PROTOCOL_VERSION, min(agreed, PROTOCOL_VERSION))
        self._note(peer, noted)
        return noted

    def refused(self, peer: NodeName, version: int) -> int | None:
        """``peer`` refused our envelope of ``version`` without an authenticated answer. Returns
        the version to retry the same probe at (N-1), or None if there is nothing lower to try."""
        if version <= MIN_PROTOCOL_VERSION:
            return None
        self._note(peer, MIN_PROTOCOL_VERSION)
        return MIN_PROTOCOL_VERSION

    def version_for(self, peer: NodeName) -> int:
        """The version of a request to ``peer``: the one noted, else N."""
        return self._seen.get(peer, PROTOCOL_VERSION)

    def forget(self, peer: NodeName) -> None:
        """Drop ``peer`` (it left the group)."""
        self._seen.pop(peer, None)

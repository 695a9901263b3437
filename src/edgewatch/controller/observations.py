"""What the controller has seen, and when: per key (a node's Lease renewal), the current value and
the controller's own time when that value first appeared.

This is how the controller judges freshness without trusting anyone's clock (docs/clock-skew.md):
a remote timestamp (a Lease's renewTime) is only an *identity*; when it changes, the controller
notes its own time, and freshness is the controller's now minus that note. kube-controller-manager's
node lifecycle controller does the same with its ``probeTimestamp``, and client-go's leader election
with its ``observedTime``.

After a start there is no history: the first value seen for a key is marked ``first`` and timed
"now" (a fresh grace for every node, as kube-controller-manager gives after a restart); the
decision core decides what a first sight may prove (``edgewatch.controller.views.cloud_view``).

Limits: memory only (one small entry per key); a value that changes and changes back between two
looks is seen as unchanged, which only makes a renewal look older, never fresher.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

__all__ = ["Observations", "Sighting"]


@dataclass(frozen=True)
class Sighting:
    """A value and when the controller first saw it (seconds, controller clock). ``first``: seen at
    the first look since the controller started, not a change it watched happen."""

    value: Hashable
    at: float
    first: bool


class Observations:
    """The controller's sightings, by ``(kind, name)`` key. Single-threaded (one event loop)."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], Sighting] = {}

    def see(self, *, kind: str, name: str, value: Hashable, now: float) -> Sighting:
        """Note that ``value`` is the current value of ``(kind, name)`` at ``now`` (controller clock);
        returns the sighting in force (the old one when the value did not change)."""
        key = (kind, name)
        old = self._seen.get(key)
        if old is not None and old.value == value:
            return old
        sighting = Sighting(value=value, at=now, first=old is None)
        self._seen[key] = sighting
        return sighting

    def get(self, *, kind: str, name: str) -> Sighting | None:
        """The sighting of ``(kind, name)``, or None if never seen (or forgotten)."""
        return self._seen.get((kind, name))

    def forget(self, *, name: str, kind: str | None = None) -> None:
        """Drop the sightings of ``name`` (of one ``kind``, or all): it was deleted."""
        for key in [k for k in self._seen if k[1] == name and (kind is None or k[0] == kind)]:
            del self._seen[key]

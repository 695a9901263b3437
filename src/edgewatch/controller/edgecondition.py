"""The ``EdgeHealthy`` Node condition: the controller's verified verdict shown for ``kubectl describe
node`` and ``edgewatch status``. Output only: the controller writes it and never reads it back
(its decision takes the verdict from ``edgewatch.controller.verified`` directly, docs/architecture.md).

When to write is decided from what this controller last wrote, kept in memory
(:class:`ShownConditions`), never from the Node:

* at once when nothing was written for this Node object (its ``uid``) since the controller started,
  or when the status or reason differs from the last write (the verdict changed);
* when only the message differs (the vote counts), at most every ``VERDICT_MESSAGE_REFRESH_S``. Every
  Node write is a watch event for every Node watcher, and in a group of 1,000 one node's death changes
  the counts of all 999 others: counts are shown, not streamed (docs/scaling.md).

The condition's times are on the controller's clock (``edgewatch.timefmt.MonotonicClock``):
``lastHeartbeatTime`` is the write, ``lastTransitionTime`` the verdict's ``since`` (when the
controller first counted the current verdict). After a controller start every node's condition is
written once more (the memory is empty; a new leader also judges every node Unknown until the
statements name its beacons, so the verdicts are rewritten then anyway).

Limits: a foreign edit of the condition (only an administrator can: the agents' admission policy
refuses it, docs/security.md) is not noticed; the next verdict change or controller start
overwrites it.

Pure: no clock (``now`` is passed in), no I/O. Times in seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from edgewatch.controller.verified import CountedVerdict
from edgewatch.core.types import Verdict
from edgewatch.names import EDGE_CONDITION_TYPE
from edgewatch.timefmt import format_rfc3339

__all__ = ["VERDICT_MESSAGE_REFRESH_S", "ShownConditions", "condition_of"]

VERDICT_MESSAGE_REFRESH_S = 600.0
"""Seconds between two writes of an ``EdgeHealthy`` condition whose status and reason are unchanged
but whose message (the vote counts) is not: ten minutes keeps ``kubectl describe node`` roughly
current at one Node write per node per ten minutes."""

_STATUS: Mapping[Verdict, str] = MappingProxyType(
    {Verdict.HEALTHY: "True", Verdict.UNHEALTHY: "False", Verdict.UNKNOWN: "Unknown"})
_REASON: Mapping[Verdict, str] = MappingProxyType(
    {Verdict.HEALTHY: "PeersSeeAlive", Verdict.UNHEALTHY: "PeersSeeDead", Verdict.UNKNOWN: "NoMajority"})


def _shown(counted: CountedVerdict) -> tuple[str, str, str]:
    verdict = counted.decision.verdict
    return (_STATUS[verdict], _REASON[verdict],
            f"{counted.decision.message} (signed statements checked by the controller)")


def condition_of(counted: CountedVerdict, *, now: float) -> dict[str, str]:
    """The ``EdgeHealthy`` condition (API JSON) showing ``counted`` at ``now`` (controller clock):
    status "True" / "False" / "Unknown", reason ``PeersSeeAlive`` / ``PeersSeeDead`` /
    ``NoMajority``, the message of the count, e.g. "healthy: 4 of 5 peers see it alive, ... (signed
    statements checked by the controller)"."""
    status, reason, message = _shown(counted)
    return {"type": EDGE_CONDITION_TYPE, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": format_rfc3339(now), "lastTransitionTime": format_rfc3339(counted.since)}


@dataclass(frozen=True)
class _Written:
    uid: str
    status: str
    reason: str
    message: str
    at: float  # controller clock
    source: CountedVerdict | None = None  # the count written (the same object: nothing new to show)


class ShownConditions:
    """What this controller last wrote to each node's ``EdgeHealthy`` (see the module docstring).

    Args:
        refresh_s: seconds between two writes that change only the message (default
            ``VERDICT_MESSAGE_REFRESH_S``).
    """

    def __init__(self, *, refresh_s: float = VERDICT_MESSAGE_REFRESH_S) -> None:
        self.refresh_s = refresh_s
        self._written: dict[str, _Written] = {}

    def due(self, *, name: str, uid: str, counted: CountedVerdict, now: float) -> dict[str, str] | None:
        """The condition to write to Node ``name`` (object ``uid``) at ``now`` to show ``counted``,
        or None: what was last written shows it well enough."""
        last = self._written.get(name)
        if last is not None and last.uid == uid:
            if last.source is counted:
                return None
            status, reason, message = _shown(counted)
            if (last.status, last.reason) == (status, reason) and (
                    last.message == message or now - last.at < self.refresh_s):
                return None
        return condition_of(counted, now=now)

    def wrote(self, *, name: str, uid: str, condition: Mapping[str, str], now: float,
              counted: CountedVerdict | None = None) -> None:
        """``condition`` (from :meth:`due`, showing ``counted``) was written to Node ``name`` (object
        ``uid``) at ``now``."""
        self._written[name] = _Written(uid=uid, status=condition["status"], reason=condition["reason"],
                                       message=condition["message"], at=now, source=counted)

    def forget(self, name: str) -> None:
        """Node ``name`` is gone."""
        self._written.pop(name, None)

"""Per-node cut-off time for the cloud side's alerts (``edgewatch_controller_node_cut_off_seconds``).

A node is *cut off* while the controller's enforced state for it is ``disconnected`` or ``unknown``
(the cloud cannot hear it). For each such node the gauge (labels ``node``, ``pool``) reads the
seconds since the controller first judged it cut off, computed at scrape time from the controller's
clock; a switch between the two cut-off states keeps the start. A node judged ``normal`` or
``failed``, released (uncovered) or deleted loses its series, so the cardinality stays bounded by
the nodes cut off now. A replica counts from its own first judgment (a new leader from its first
look). Single-threaded (the reconciler's event loop); no I/O.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import Gauge

from edgewatch.controller.model import NodeState

__all__ = ["CUT_OFF_STATES", "CutOffTracker"]

#: The enforced states in which the cloud cannot hear a node.
CUT_OFF_STATES = frozenset({NodeState.DISCONNECTED, NodeState.UNKNOWN})


class CutOffTracker:
    """Keeps ``gauge`` (labels node, pool) to one series per node cut off now, reading seconds since.

    Args:
        gauge: the controller's ``node_cut_off`` gauge.
        clock: the controller's clock, seconds.
    """

    def __init__(self, gauge: Gauge, clock: Callable[[], float]) -> None:
        self._gauge = gauge
        self._clock = clock
        self._since: dict[str, tuple[str, float]] = {}  # node -> (pool label value, cut off since)

    def judged(self, node: str, *, pool: str | None, state: NodeState, now: float) -> None:
        """The controller now enforces ``state`` on ``node`` (``now``: its clock, seconds)."""
        if state not in CUT_OFF_STATES:
            self.forget(node)
            return
        pool_value = pool or ""
        known = self._since.get(node)
        if known is not None and known[0] == pool_value:
            return  # still cut off: the start stands
        if known is not None:
            self.forget(node)  # moved to another pool: a new label set, the same start
        since = now if known is None else known[1]
        self._since[node] = (pool_value, since)
        clock = self._clock
        self._gauge.labels(node=node, pool=pool_value).set_function(lambda: max(0.0, clock() - since))

    def forget(self, node: str) -> None:
        """``node`` is no longer cut off (healthy, failed, uncovered or deleted): drop its series."""
        known = self._since.pop(node, None)
        if known is not None:
            self._gauge.remove(node, known[0])

    def __len__(self) -> int:
        """Nodes cut off now (series exported)."""
        return len(self._since)

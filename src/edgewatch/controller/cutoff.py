"""Per-node "seconds since" series for the cloud side's alerts: how long the controller has judged
a node cut off (``edgewatch_controller_node_cut_off_seconds``), and how long a connected node's
agent has been silent (``edgewatch_controller_agent_silent_seconds``).

A node is *cut off* while the controller's enforced state for it is ``disconnected`` or ``unknown``
(the cloud cannot hear it). Its agent is *silent* while its kubelet renews its Lease itself (the
cloud view ``ok``: the node is up and connected) but the controller has no fresh signed statement
of the node's own (:meth:`edgewatch.controller.verified.VerifiedEdge.own_life`): the agent is not
running, not ready, or cannot reach the API. A cut-off agent cannot be scraped, so these series are
the controller's.

For each node in the condition the gauge (labels ``node``, ``pool``) reads the seconds since the
controller first judged it so, computed at scrape time from the controller's clock; a node that
leaves the condition, is released (uncovered) or deleted loses its series, so the cardinality stays
bounded by the nodes in the condition now. A replica counts from its own first judgment (a new
leader from its first look). Single-threaded (the reconciler's event loop); no I/O.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import Gauge

from edgewatch.controller.model import CloudView, NodeState

__all__ = ["CUT_OFF_STATES", "CutOffTracker", "SinceTracker", "agent_silent"]

#: The enforced states in which the cloud cannot hear a node.
CUT_OFF_STATES = frozenset({NodeState.DISCONNECTED, NodeState.UNKNOWN})


def agent_silent(*, cloud: CloudView, own_statement: bool) -> bool:
    """Whether a node's agent is silent: the node renews its own Lease (``cloud`` is ``ok``) and the
    controller holds no fresh signed statement of its own (``own_statement`` False)."""
    return cloud is CloudView.OK and not own_statement


class SinceTracker:
    """Keeps ``gauge`` (labels node, pool) to one series per node in a condition now, reading the
    seconds since it entered it.

    Args:
        gauge: a Gauge with the labels ``node`` and ``pool``.
        clock: the controller's clock, seconds.
    """

    def __init__(self, gauge: Gauge, clock: Callable[[], float]) -> None:
        self._gauge = gauge
        self._clock = clock
        self._since: dict[str, tuple[str, float]] = {}  # node -> (pool label value, in the condition since)

    def set(self, node: str, *, pool: str | None, active: bool, now: float) -> None:
        """``node`` is (``active``) or is not in the condition at ``now`` (the controller's clock,
        seconds); a move to another pool keeps the start under the new label."""
        if not active:
            self.forget(node)
            return
        pool_value = pool or ""
        known = self._since.get(node)
        if known is not None and known[0] == pool_value:
            return  # still in it: the start stands
        if known is not None:
            self.forget(node)  # moved to another pool: a new label set, the same start
        since = now if known is None else known[1]
        self._since[node] = (pool_value, since)
        clock = self._clock
        self._gauge.labels(node=node, pool=pool_value).set_function(lambda: max(0.0, clock() - since))

    def forget(self, node: str) -> None:
        """``node`` left the condition (or was uncovered or deleted): drop its series."""
        known = self._since.pop(node, None)
        if known is not None:
            self._gauge.remove(node, known[0])

    def __len__(self) -> int:
        """Nodes in the condition now (series exported)."""
        return len(self._since)


class CutOffTracker(SinceTracker):
    """The ``node_cut_off`` series: a node is in it while its enforced state is cut off."""

    def judged(self, node: str, *, pool: str | None, state: NodeState, now: float) -> None:
        """The controller now enforces ``state`` on ``node`` (``now``: its clock, seconds)."""
        self.set(node, pool=pool, active=state in CUT_OFF_STATES, now=now)

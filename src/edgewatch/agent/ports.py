"""The interfaces several parts of the agent share: what one part reads of another, named.

What it is for
    The agent (``edgewatch.agent.agent``) is a composition root: it builds its parts in dependency
    order and hands each one the objects it needs, typed by the small Protocols below (or by a
    Protocol in the consuming module, when only that module needs it). No part reaches back into
    the agent, and data flows one way: a part reads a producer's current state through its
    interface, or a producer tells its subscribers of a change (``CloudLinkListener``).

    Shared here:

    - :class:`CloudLinkView` — this node's own link to the cloud, ``up`` (the link monitor,
      ``edgewatch.agent.cloudlink``). Read by the peer exchange, the duties, the evidence
      reporter, the pool coordinator, the role publisher, the own-mark cleaner and the pool cache;
    - :class:`CloudLinkListener` — told when the link flips (the metrics; the pool coordinator);
    - :class:`WatchEvents` — a watch event arrived (the per-agent API load metric), the base of
      each watching part's own events protocol (``MembershipEvents``, ``IdentityEvents``,
      ``ReporterEvents``);
    - :class:`Unobserved` — every event protocol's do-nothing implementation, the default of each
      part built without observers (tests, the simulator).

    ``edgewatch.agent.metrics.AgentMetrics`` implements every event protocol: what the agent counts
    is what its parts tell.

Limits
    Protocols are checked statically (mypy), not at run time: a wrong object fails when first used.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["CloudLinkListener", "CloudLinkView", "Unobserved", "WatchEvents"]


class CloudLinkView(Protocol):
    """This node's own link to the cloud (kube-apiserver), as the link monitor judges it now."""

    @property
    def up(self) -> bool:
        """True while the link is considered up (cheap: no I/O)."""
        ...


class CloudLinkListener(Protocol):
    """Told the moment this node's cloud link flips (``edgewatch.agent.cloudlink``)."""

    def cloud_link_changed(self, up: bool) -> None:
        """The link is now ``up`` (True) or down (False). Must not block or raise."""
        ...


class WatchEvents(Protocol):
    """Told of every API watch event a part receives (the cloud API load per agent, docs/scaling.md)."""

    def watch_event_received(self, resource: str) -> None:
        """One watch event on ``resource`` (``node``, ``config``, ``roster``, ``beacon``, ``keys``)."""
        ...


class Unobserved:
    """Events nobody observes: every part's event protocol, doing nothing."""

    def watch_event_received(self, resource: str) -> None:
        """Ignored."""

    def config_refused(self, reason: str) -> None:
        """Ignored."""

    def state_not_saved(self, reason: str) -> None:
        """Ignored."""

    def key_record_refused(self, reason: str) -> None:
        """Ignored."""

    def evidence_written(self, result: str) -> None:
        """Ignored."""

    def cloud_link_changed(self, up: bool) -> None:
        """Ignored."""

"""This node's pool-coordinator role on its own Node: the ``EdgePoolCoordinator`` condition.

What it is for
    ``kubectl describe node`` and ``edgewatch status`` show each node's role in its pool (leader,
    follower, pending), the leader it sees and whether the coordinator is healthy and Ready. Every
    ``every_s`` (1 s) while this node's cloud link is up, :class:`RolePublisher` compares the
    running coordinator's state with the last one written and writes the condition on change, else
    every ``ROLE_REFRESH_S`` (ten minutes). Every Node write is a watch event for every Node
    watcher (agents once watched every Node: a per-minute refresh cost a 1,000-node pool
    1,000 x 1,000 events a minute; docs/scaling.md).

What it is handed
    The running coordinator (:class:`RoleSource`: the agent's ``CoordinatorRunner``), this node's
    cloud link (:class:`edgewatch.agent.ports.CloudLinkView`), the API client and this node's name.

Errors: each write is bounded by ``timeout_s``; an API error is logged and the write tried again on
the next tick. Nothing here ends the agent. Without a running coordinator nothing is written (the
last condition stays as written).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from typing import TYPE_CHECKING, Protocol

from edgewatch.agent.ports import CloudLinkView
from edgewatch.core.types import NodeName
from edgewatch.kube.api import AsyncClient, Node
from edgewatch.kube.errors import API_ERRORS
from edgewatch.names import ROLE_CONDITION_TYPE

if TYPE_CHECKING:
    from edgewatch.agent.coordinator.pool import PoolCoordinator

log = logging.getLogger(__name__)

__all__ = ["ROLE_REFRESH_S", "RolePublisher", "RoleSource"]

ROLE_REFRESH_S = 600.0
"""Seconds between two writes of an unchanged ``EdgePoolCoordinator`` condition (ten minutes)."""


class RoleSource(Protocol):
    """The pool coordinator running now (``edgewatch.agent.coordinating.CoordinatorRunner``)."""

    def current_coordinator(self) -> PoolCoordinator | None:
        """The running coordinator, or None."""
        ...


class RolePublisher:
    """Writes this node's ``EdgePoolCoordinator`` condition (see the module docstring).

    Args (keyword-only):
        client: the agent's API client.
        node: this node (its own Node is the only one written).
        coordinators: the running coordinator (:class:`RoleSource`).
        link: this node's cloud link (nothing is written while it is down).
        timeout_s: bound of one write, seconds.
        every_s: how often the role is compared with the one written, seconds (default 1 s).
    """

    def __init__(self, *, client: AsyncClient, node: NodeName, coordinators: RoleSource, link: CloudLinkView,
                 timeout_s: float, every_s: float = 1.0) -> None:
        self._client = client
        self._node = node
        self._coordinators = coordinators
        self._link = link
        self.timeout_s = timeout_s
        self.every_s = every_s
        self._written: tuple[tuple[object, ...], float] | None = None  # (value, monotonic time)

    async def run(self) -> None:
        """Publish every ``every_s`` while the link is up, until cancelled."""
        while True:
            await asyncio.sleep(self.every_s)
            if self._link.up:
                await self.publish()

    async def publish(self) -> None:
        """Write the condition if the role changed or ``ROLE_REFRESH_S`` passed (bounded; errors
        logged, never raised)."""
        coordinator = self._coordinators.current_coordinator()
        if coordinator is None:
            return
        role = str(coordinator.role)
        value = (role, coordinator.healthy, coordinator.ready, coordinator.leader)
        now = time.monotonic()
        if self._written is not None and self._written[0] == value and now - self._written[1] < ROLE_REFRESH_S:
            return
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        state = "ready" if coordinator.ready else ("healthy" if coordinator.healthy else "unreachable")
        body = {"status": {"conditions": [{
            "type": ROLE_CONDITION_TYPE, "status": "True" if coordinator.healthy else "False",
            "reason": role.capitalize(), "lastHeartbeatTime": stamp, "lastTransitionTime": stamp,
            "message": f"pool {coordinator.pool}: {role}; leader {coordinator.leader or 'none'}; coordinator {state}",
        }]}}
        try:
            async with asyncio.timeout(self.timeout_s):
                await self._client.patch(Node.Status, self._node, body)
            self._written = (value, now)
        except API_ERRORS as exc:
            log.info("writing %s failed: %s", ROLE_CONDITION_TYPE, exc or type(exc).__name__)

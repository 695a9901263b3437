"""The controller's roster publisher: one ConfigMap per group naming its members and their
InternalIPs (:mod:`edgewatch.core.roster`), so agents need not watch every Node.

How: the controller's one Node informer (:mod:`edgewatch.controller.nodeinformer`, shared with the
reconciler) tells it every Node change, and it keeps every Node's labels and InternalIP. Only a
change of a roster (a node joins, leaves, changes address, or is relabelled into another group:
:func:`~edgewatch.core.roster.roster_name`) or of the grouping in force
(:meth:`RosterPublisher.touch`) marks the rosters dirty; a kubelet's status report, a taint or any
other label (kube-controller-manager adds ``beta.kubernetes.io/os`` to every new Node) does not.
After ``settle_s`` (so a burst of joins is one write per group) the rosters the node list calls for
are compared with the ones in the API and only the differing ones are written: created, replaced
with their resourceVersion as precondition (a 409 leaves the roster dirty and it is retried), or
deleted when their group is gone. Nothing is published before the informer's first complete Node
list (:meth:`RosterPublisher.nodes_listed` sets ``synced``): a roster written from half a list would
shrink every group, and its majority with it. Beside the rosters it keeps the group index
(``edgewatch-groups``: node -> roster name), the parameter of the admission policy that lets an
agent carry only its own group's Leases (``deploy/15-policy-agent.yaml``).

Each roster is written by its own task (one slow write never holds back another group); every
call has ``api_timeout_s``. Errors are logged, counted (``edgewatch_controller_roster_writes``) and
retried after ``retry_s``; nothing here ends the controller. Only the leader runs it (it runs
inside the reconciler, beside the shared Node informer).

Limits: a group too large for one ConfigMap (:data:`edgewatch.core.roster.MAX_ROSTER_BYTES`) is
not published (log line, ``result="too_big"``); its agents keep the last roster they read.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from edgewatch.core.grouping import GroupingConfig
from edgewatch.core.roster import (
    GROUP_INDEX_NAME,
    ROSTER_LABEL,
    RosterError,
    build_rosters,
    encode_group_index,
    encode_roster,
    roster_name,
)
from edgewatch.core.types import NodeName
from edgewatch.kube.api import ApiError, AsyncClient, ConfigMap, Node, ObjectMeta
from edgewatch.kube.errors import API_ERRORS, is_conflict, is_not_found

__all__ = ["RosterPublisher", "internal_ip"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")


def internal_ip(node: Node) -> str | None:
    """The Node's first ``InternalIP`` address, or None."""
    for addr in (node.status.addresses or []) if node.status else []:
        if addr.type == "InternalIP":
            return addr.address
    return None


class RosterPublisher:
    """Publishes every group's roster; see the module docstring. A subscriber of the shared Node
    informer (:class:`edgewatch.controller.nodeinformer.NodeSubscriber`), which must run beside it.

    Args:
        client: API client with the controller's RBAC (list, create, update and delete ConfigMaps
            in ``namespace``).
        namespace: where the rosters live (the edgewatch namespace, beside ``edgewatch-config``).
        grouping: the grouping in force, read at each publication (the reconciler's ConfigMap copy).
        api_timeout_s: limit of every API call, seconds (default 10 s).
        settle_s: wait after a change before publishing, seconds (default 1 s).
        retry_s: pause after a failed LIST or write before the next attempt, seconds (default 2 s).
        on_write: called with each write's result (``created``, ``updated``, ``deleted``,
            ``conflict``, ``error``, ``too_big``), for the metric.
    """

    def __init__(self, *, client: AsyncClient, namespace: str, grouping: Callable[[], GroupingConfig],
                 api_timeout_s: float = 10.0, settle_s: float = 1.0,
                 retry_s: float = 2.0, on_write: Callable[[str], None] | None = None) -> None:
        self.client = client
        self.namespace = namespace
        self.grouping = grouping
        self.api_timeout_s = api_timeout_s
        self.settle_s = settle_s
        self.retry_s = retry_s
        self.labels: dict[NodeName, dict[str, str]] = {}
        self.addresses: dict[NodeName, str | None] = {}
        self.synced = asyncio.Event()
        self.published = 0  # publications done (each compares every roster once)
        self._on_write = on_write or (lambda result: None)
        self._dirty = asyncio.Event()

    def touch(self) -> None:
        """Publish again (soon): call when the grouping in force changed."""
        self._dirty.set()

    async def _call(self, call: Awaitable[_T]) -> _T:
        async with asyncio.timeout(self.api_timeout_s):
            return await call

    # -- the shared Node informer's events (edgewatch.controller.nodeinformer.NodeSubscriber) --------

    def nodes_relisting(self) -> None:
        """A list's changes come next: nothing to drop (they are exact, deletions included)."""

    def nodes_listed(self) -> None:
        """Every Node is known: publishing may start (``synced``)."""
        self.synced.set()

    def on_node(self, op: str, node: Node) -> None:
        """A Node changed: mark the rosters dirty if a roster changes (see the module docstring)."""
        name = NodeName(node.metadata.name)
        if op == "DELETED":
            if name in self.labels:
                self.labels.pop(name)
                self.addresses.pop(name, None)
                self._dirty.set()
            return
        labels, address = dict(node.metadata.labels or {}), internal_ip(node)
        old = self.labels.get(name)
        known = name in self.addresses and self.addresses[name] == address
        if old == labels and known:
            return
        self.labels[name] = labels  # all of them: the grouping in force may change (touch)
        self.addresses[name] = address
        grouping = self.grouping()
        if old is None or not known or roster_name(grouping, old) != roster_name(grouping, labels):
            self._dirty.set()

    # -- publishing ----------------------------------------------------------------------------------

    async def run(self) -> None:
        """Publish on change, from the shared informer's first complete Node list on, until
        cancelled."""
        await self.synced.wait()
        while True:
            await self._dirty.wait()
            await asyncio.sleep(self.settle_s)
            self._dirty.clear()
            try:
                ok = await self.publish()
            except API_ERRORS as exc:
                log.info("cannot list the rosters: %s; retrying", exc or type(exc).__name__)
                ok = False
            if not ok:
                self._dirty.set()
                await asyncio.sleep(self.retry_s)

    async def publish(self) -> bool:
        """Bring the rosters in the API to what the node list calls for; True if every write
        succeeded. Raises the API error of the LIST of existing rosters."""
        wanted: dict[str, dict[str, str] | None] = {}
        rosters = build_rosters(self.grouping(), node_labels=self.labels, addresses=self.addresses)
        for name, roster in rosters.items():
            try:
                wanted[name] = encode_roster(roster)
            except RosterError as exc:
                log.error("not publishing %s: %s", name, exc, extra={"kind": "roster_too_big"})
                self._on_write("too_big")
        try:
            wanted[GROUP_INDEX_NAME] = encode_group_index(rosters)
        except RosterError as exc:
            log.error("not publishing %s: %s", GROUP_INDEX_NAME, exc, extra={"kind": "roster_too_big"})
            self._on_write("too_big")
        async with asyncio.timeout(self.api_timeout_s):
            existing = {cm.metadata.name: cm async for cm in self.client.list(
                ConfigMap, namespace=self.namespace, labels={ROSTER_LABEL: "true"})}
        for name in existing:
            if name not in rosters and name != GROUP_INDEX_NAME:
                wanted[name] = None  # the group is gone
        changes = {name: data for name, data in wanted.items()
                   if data != (dict(existing[name].data or {}) if name in existing else None)}
        if not changes:
            self.published += 1
            return True
        sizes = {name: len(roster.members) for name, roster in rosters.items()}
        sizes[GROUP_INDEX_NAME] = len(wanted.get(GROUP_INDEX_NAME) or {})
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(self._write(name, data, existing.get(name), members=sizes.get(name, 0)))
                     for name, data in changes.items()]
        self.published += 1
        return all(t.result() for t in tasks)

    async def _write(self, name: str, data: Mapping[str, str] | None, current: ConfigMap | None, *,
                     members: int) -> bool:
        try:
            if data is None:
                await self._call(self.client.delete(ConfigMap, name, namespace=self.namespace))
                result = "deleted"
            elif current is None:
                await self._call(self.client.create(ConfigMap(
                    metadata=ObjectMeta(name=name, namespace=self.namespace, labels={ROSTER_LABEL: "true"}),
                    data=dict(data))))
                result = "created"
            else:
                await self._call(self.client.replace(ConfigMap(
                    metadata=ObjectMeta(name=name, namespace=self.namespace, labels={ROSTER_LABEL: "true"},
                                        resourceVersion=current.metadata.resourceVersion,
                                        # kept: the group index's carry deadline (controller.carrywindow)
                                        annotations=current.metadata.annotations),
                    data=dict(data))))
                result = "updated"
        except ApiError as exc:
            if data is None and is_not_found(exc):
                return True  # already gone
            result = "conflict" if is_not_found(exc) or is_conflict(exc) else "error"
            log.info("roster %s not written (%s): %s; retrying", name, result, exc)
            self._on_write(result)
            return False
        except API_ERRORS as exc:
            log.info("roster %s not written: %s; retrying", name, exc or type(exc).__name__)
            self._on_write("error")
            return False
        log.info("roster %s %s (%d members)", name, result, members, extra={"kind": "roster", "roster": name})
        self._on_write(result)
        return True

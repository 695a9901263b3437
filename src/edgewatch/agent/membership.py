"""Who is in my group? The agent's cached copy of the cloud's node list and of the grouping switches.

The agent watches Nodes (name, InternalIP, labels) and the ``edgewatch-config`` ConfigMap
(``grouping``, ``groupLabel``; see ``edgewatch.core.grouping``). Relabelling a node or editing the
ConfigMap regroups on the next period with no restart (seed 003: "regrouping needs no redeploy").

While the cloud is unreachable the last copy stays in use (the group's size must not shrink just
because the cloud is away), and with ``state_dir`` set it is also kept on disk so an agent restarted
during a cut still knows its group.

Untrusted input: a ConfigMap with an unknown key or a bad value is refused with a log line and a
metric, and the last valid configuration stays (never silently ignored — a SuperEdge bug). Nodes
without an InternalIP are members that cannot be probed (they count in the group's size).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx2 as httpx
from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import ConfigMap, Node

from edgewatch.core.grouping import GroupingConfig, parse_grouping_config
from edgewatch.core.types import NodeName
from edgewatch.names import EDGE_CONDITION_TYPE

log = logging.getLogger(__name__)

CONFIGMAP_NAME = "edgewatch-config"


@dataclass(frozen=True)
class NodeInfo:
    """What the agent needs of a Node: its name, InternalIP (or None), labels, and the current
    EdgeHealthy condition as (status, lastTransitionTime) or None."""

    name: NodeName
    address: str | None
    labels: dict[str, str]
    edge_condition: tuple[str, str | None] | None = None


def node_info(node: Node) -> NodeInfo:
    """Extract ``NodeInfo`` from a Node object."""
    address = None
    for addr in (node.status.addresses or []) if node.status else []:
        if addr.type == "InternalIP":
            address = addr.address
            break
    edge = None
    for cond in (node.status.conditions or []) if node.status else []:
        if cond.type == EDGE_CONDITION_TYPE:
            moved = cond.lastTransitionTime
            edge = (cond.status, moved.strftime("%Y-%m-%dT%H:%M:%SZ") if moved is not None else None)
    return NodeInfo(name=NodeName(node.metadata.name), address=address, labels=dict(node.metadata.labels or {}),
                    edge_condition=edge)


class Membership:
    """Cached node list and grouping configuration, kept current by watches.

    Args:
        client: API client.
        namespace: where the ``edgewatch-config`` ConfigMap lives.
        state_dir: folder to persist the node list in (None = memory only).
        retry_s: pause before re-establishing a broken watch, in seconds.
        on_reject: called with a reason when the ConfigMap is refused (for the metric).
    """

    def __init__(self, *, client: AsyncClient, namespace: str, state_dir: Path | None = None,
                 retry_s: float = 2.0, on_reject: Callable[[str], None] | None = None) -> None:
        self.client = client
        self.namespace = namespace
        self.state_dir = state_dir
        self.retry_s = retry_s
        self.nodes: dict[NodeName, NodeInfo] = {}
        self.grouping = GroupingConfig()
        self.synced = asyncio.Event()
        self._on_reject = on_reject or (lambda reason: None)
        self._load()

    # -- queries ---------------------------------------------------------------------------------

    def group_of(self, node: NodeName) -> frozenset[NodeName]:
        """The members of ``node``'s group (always including ``node``)."""
        labels = {name: info.labels for name, info in self.nodes.items()}
        labels.setdefault(node, {})
        return self.grouping.group_of(node, node_labels=labels)

    def address_of(self, node: NodeName) -> str | None:
        """InternalIP of ``node`` (None if unknown)."""
        info = self.nodes.get(node)
        return info.address if info else None

    def node_by_address(self, address: str) -> NodeName | None:
        """The node whose InternalIP is ``address`` (to bind a peer message to its source)."""
        for info in self.nodes.values():
            if info.address == address:
                return info.name
        return None

    # -- loops -----------------------------------------------------------------------------------

    async def run(self) -> None:
        """Watch Nodes and the ConfigMap until cancelled."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._watch_nodes())
            tg.create_task(self._watch_config())

    async def _watch_nodes(self) -> None:
        while True:
            try:
                fresh: dict[NodeName, NodeInfo] = {}
                async for node in self.client.list(Node):
                    info = node_info(node)
                    fresh[info.name] = info
                self.nodes = fresh
                self._save()
                self.synced.set()
                async for op, node in self.client.watch(Node, server_timeout=120):
                    info = node_info(node)
                    if op == "DELETED":
                        self.nodes.pop(info.name, None)
                    else:
                        self.nodes[info.name] = info
                    self._save()
            except (ApiError, httpx.HTTPError, OSError) as exc:
                log.info("node watch interrupted: %s", exc or type(exc).__name__)
            await asyncio.sleep(self.retry_s)

    async def _watch_config(self) -> None:
        while True:
            try:
                async for op, cm in self.client.watch(
                    ConfigMap, namespace=self.namespace, fields={"metadata.name": CONFIGMAP_NAME},
                    server_timeout=120,
                ):
                    self.apply_config(None if op == "DELETED" else (cm.data or {}))
            except (ApiError, httpx.HTTPError, OSError) as exc:
                log.info("config watch interrupted: %s", exc or type(exc).__name__)
            await asyncio.sleep(self.retry_s)

    def apply_config(self, data: dict[str, str] | None) -> bool:
        """Adopt the ConfigMap's grouping switches (None = deleted: defaults).

        Returns False (and keeps the previous configuration) if the data is invalid.
        """
        try:
            config = parse_grouping_config(data or {})
        except ValueError as exc:
            log.error("refusing %s: %s; keeping the previous configuration", CONFIGMAP_NAME, exc,
                      extra={"kind": "config_rejected"})
            self._on_reject("invalid_config")
            return False
        if config != self.grouping:
            log.info("grouping %s (label %s)", "on" if config.enabled else "off", config.label_key,
                     extra={"kind": "regrouped"})
        self.grouping = config
        return True

    # -- persistence -------------------------------------------------------------------------------

    def _path(self) -> Path | None:
        return self.state_dir / "nodes.json" if self.state_dir else None

    def _save(self) -> None:
        path = self._path()
        if path is None:
            return
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps([{"name": i.name, "address": i.address, "labels": i.labels}
                                   for i in self.nodes.values()]))
        os.replace(tmp, path)

    def _load(self) -> None:
        path = self._path()
        if path is None or not path.exists():
            return
        try:
            items = json.loads(path.read_text())
            self.nodes = {NodeName(i["name"]): NodeInfo(name=NodeName(i["name"]), address=i.get("address"),
                                                        labels=dict(i.get("labels") or {}))
                          for i in items}
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring unreadable node cache %s: %s", path, exc)

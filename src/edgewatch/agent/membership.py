"""Who is in my group? The agent's cached copy of the cloud's node list and of the ``edgewatch-config``
ConfigMap.

The agent lists, then watches (from the list's resourceVersion), Nodes (name, InternalIP, labels)
and the ``edgewatch-config`` ConfigMap (``grouping``, ``groupLabel``, ``coverLabel``, see
``edgewatch.core.grouping``; ``poolCoordinators``, see ``edgewatch.core.poolconfig``;
``poolScopeResources``, see ``edgewatch.poolcache.resources``). Relabelling
a node or editing the ConfigMap regroups on the next period with no restart (seed 003: "regrouping
needs no redeploy"). A watch that stays silent longer than the server's own timeout is re-established
(a cut link drops packets without a reset, so the connection would hang for ever).

While the cloud is unreachable the last copy stays in use (the group's size must not shrink just
because the cloud is away), and with ``state_dir`` set it is also kept on disk so an agent restarted
during a cut still knows its group. The state folder is best effort: if it cannot be created or
written (a hostPath the kubelet made as root 0755 while the agent runs as uid 65532), the failure
is logged once per distinct error and counted (``edgewatch_agent_state_save_failures_total``), and
the watches go on — a failed save never turns into a Node LIST every few seconds. The file is
rewritten only when a persisted field (address, labels) changes or a node comes or goes.

Untrusted input: a ConfigMap with an unknown key or a bad value is refused with a log line and a
metric, and the last valid configuration stays (never silently ignored — a SuperEdge bug). Nodes
without an InternalIP are members that cannot be probed (they count in the group's size).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import httpx2 as httpx
from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import ConfigMap, Node

from edgewatch.core.grouping import (CONFIG_KEY_POOL_COORDINATORS, CONFIG_KEY_POOL_SCOPE_RESOURCES, GroupingConfig,
                                     parse_grouping_config)
from edgewatch.poolcache.resources import DEFAULT_RESOURCES, PoolResource, PoolResourcesError, parse_pool_resources
from edgewatch.core.poolconfig import PoolCoordinators, parse_pool_coordinators
from edgewatch.agent.watching import bounded_events, list_version
from edgewatch.core.types import NodeName
from edgewatch.names import EDGE_CONDITION_TYPE
from edgewatch.statefile import replace_file

log = logging.getLogger(__name__)

T = TypeVar("T")

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
    """Cached node list and edgewatch configuration, kept current by watches.

    Args:
        client: API client.
        namespace: where the ``edgewatch-config`` ConfigMap lives.
        state_dir: folder to persist the node list in (None = memory only). It need not exist or be
            writable: a failed save is logged once per distinct error and counted
            (``on_save_error``), and the agent keeps working from memory.
        retry_s: pause before re-establishing a broken watch, in seconds.
        idle_timeout_s: a watch that delivers nothing (not even the server's close after its
            ``server_timeout``) for this long is treated as dead and re-established, seconds: a
            silently dropped connection (a cut uplink drops packets, it sends no reset) would
            otherwise hang for ever.
        on_reject: called with a reason when the ConfigMap is refused (for the metric).
        on_save_error: called with a short reason each time saving the node list fails.
    """

    WATCH_SERVER_TIMEOUT_S = 120

    def __init__(self, *, client: AsyncClient, namespace: str, state_dir: Path | None = None,
                 retry_s: float = 2.0, idle_timeout_s: float = 150.0,
                 on_reject: Callable[[str], None] | None = None,
                 on_save_error: Callable[[str], None] | None = None) -> None:
        self.client = client
        self.namespace = namespace
        self.state_dir = state_dir
        self.retry_s = retry_s
        self.idle_timeout_s = idle_timeout_s
        self.nodes: dict[NodeName, NodeInfo] = {}
        self.grouping = GroupingConfig()
        self.pool_coordinators = PoolCoordinators()
        self.pool_resources: tuple[PoolResource, ...] = DEFAULT_RESOURCES
        self.synced = asyncio.Event()
        self.config_synced = asyncio.Event()
        self.node_lists = 0  # full Node LISTs done (a healthy agent does one per broken watch)
        self._on_reject = on_reject or (lambda reason: None)
        self._on_save_error = on_save_error or (lambda reason: None)
        self._save_error: str | None = None
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

    def _events(self, watch: AsyncIterator[T]) -> AsyncIterator[T]:
        """Yield a watch's events; end it when nothing arrives for ``idle_timeout_s``."""
        return bounded_events(watch, idle_timeout_s=self.idle_timeout_s)

    async def _watch_nodes(self) -> None:
        while True:
            try:
                fresh: dict[NodeName, NodeInfo] = {}
                listing = self.client.list(Node)
                async for node in listing:
                    info = node_info(node)
                    fresh[info.name] = info
                self.node_lists += 1
                self.nodes = fresh
                self._save()
                self.synced.set()
                version = _list_version(listing)
                async for op, node in self._events(self.client.watch(Node, resource_version=version,
                                                                     server_timeout=self.WATCH_SERVER_TIMEOUT_S)):
                    info = node_info(node)
                    before = self.nodes.get(info.name)
                    if op == "DELETED":
                        self.nodes.pop(info.name, None)
                    else:
                        self.nodes[info.name] = info
                    if op == "DELETED" or before is None or _persisted(before) != _persisted(info):
                        self._save()  # only what is persisted changed (status updates come every 10 s)
            except (ApiError, httpx.HTTPError, OSError) as exc:
                log.info("node watch interrupted: %s", exc or type(exc).__name__)
            await asyncio.sleep(self.retry_s)

    async def _watch_config(self) -> None:
        while True:
            try:
                listing = self.client.list(ConfigMap, namespace=self.namespace,
                                           fields={"metadata.name": CONFIGMAP_NAME})
                items = [cm async for cm in listing]
                self.apply_config((items[0].data or {}) if items else None)
                self.config_synced.set()
                async for op, cm in self._events(self.client.watch(
                    ConfigMap, namespace=self.namespace, fields={"metadata.name": CONFIGMAP_NAME},
                    resource_version=_list_version(listing), server_timeout=self.WATCH_SERVER_TIMEOUT_S,
                )):
                    self.apply_config(None if op == "DELETED" else (cm.data or {}))
            except (ApiError, httpx.HTTPError, OSError) as exc:
                log.info("config watch interrupted: %s", exc or type(exc).__name__)
            await asyncio.sleep(self.retry_s)

    def apply_config(self, data: Mapping[str, str] | None) -> bool:
        """Adopt the ConfigMap (None = deleted: defaults): the grouping switches and
        ``poolCoordinators``.

        Returns False if the grouping switches are invalid: they are refused and the previous ones
        stay (log line, ``on_reject("invalid_config")``). ``poolCoordinators`` is judged on its own:
        a value that is not a YAML mapping keeps the previous mapping
        (``on_reject("invalid_pool_coordinators")``); an entry with a bad URL keeps that pool's
        previous URL, if it had one (log line, ``on_reject("invalid_pool_coordinator")``), and the
        other entries apply.
        """
        values = dict(data or {})
        self._apply_pool_coordinators(values.get(CONFIG_KEY_POOL_COORDINATORS))
        self._apply_pool_resources(values.get(CONFIG_KEY_POOL_SCOPE_RESOURCES))
        try:
            config = parse_grouping_config(values)
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

    def _apply_pool_resources(self, text: str | None) -> None:
        """``poolScopeResources``: a bad value keeps the previous list (log line,
        ``on_reject("invalid_pool_scope_resources")``)."""
        try:
            parsed = parse_pool_resources(text)
        except PoolResourcesError as exc:
            log.error("refusing %s of %s: %s; keeping %s", CONFIG_KEY_POOL_SCOPE_RESOURCES, CONFIGMAP_NAME, exc,
                      [r.name for r in self.pool_resources], extra={"kind": "config_rejected"})
            self._on_reject("invalid_pool_scope_resources")
            return
        if parsed != self.pool_resources:
            log.info("pool-scope resources: %s", [r.name for r in parsed] or "none (pool cache off)",
                     extra={"kind": "pool_scope_resources"})
        self.pool_resources = parsed

    def _apply_pool_coordinators(self, text: str | None) -> None:
        try:
            parsed = parse_pool_coordinators(text)
        except ValueError as exc:
            log.error("refusing %s of %s: %s; keeping the previous mapping", CONFIG_KEY_POOL_COORDINATORS,
                      CONFIGMAP_NAME, exc, extra={"kind": "config_rejected"})
            self._on_reject("invalid_pool_coordinators")
            return
        previous = self.pool_coordinators
        kept = {pool: previous.urls[pool] for pool in parsed.invalid if pool in previous.urls}
        merged = PoolCoordinators(urls={**parsed.urls, **kept}, problems=parsed.problems, invalid=parsed.invalid)
        if parsed.problems != previous.problems:
            for problem in parsed.problems:
                log.error("ignoring an entry of %s in %s: %s", CONFIG_KEY_POOL_COORDINATORS, CONFIGMAP_NAME,
                          problem, extra={"kind": "config_rejected"})
                self._on_reject("invalid_pool_coordinator")
            for pool, url in sorted(kept.items()):
                log.warning("pool %s keeps its previous coordinator %s", pool, url, extra={"kind": "config_rejected"})
        if merged.urls != previous.urls:
            log.info("pool coordinators: %s", dict(sorted(merged.urls.items())) or "none",
                     extra={"kind": "pool_coordinators"})
        self.pool_coordinators = merged

    # -- persistence -------------------------------------------------------------------------------

    def _path(self) -> Path | None:
        return self.state_dir / "nodes.json" if self.state_dir else None

    def _save(self) -> None:
        """Persist the node list; never raises. A failure is logged once per distinct error (and
        again once it is fixed) and counted every time."""
        path = self._path()
        if path is None:
            return
        try:
            replace_file(path, json.dumps([{"name": i.name, "address": i.address, "labels": i.labels}
                                           for i in self.nodes.values()]))
        except OSError as exc:
            error = f"{type(exc).__name__}: {exc.strerror or exc}"
            self._on_save_error(type(exc).__name__)
            if error != self._save_error:
                log.error("cannot save the node list to %s (%s); going on from memory only: an agent restarted "
                          "during a cloud cut will not know its group. Make the folder writable for this user "
                          "(uid %d)", path, error, os.getuid(), extra={"kind": "state_save_failed"})
                self._save_error = error
            return
        if self._save_error is not None:
            log.info("node list saved to %s again", path, extra={"kind": "state_saved"})
            self._save_error = None

    def _load(self) -> None:
        path = self._path()
        if path is None:
            return
        try:
            items = json.loads(path.read_text())
            self.nodes = {NodeName(i["name"]): NodeInfo(name=NodeName(i["name"]), address=i.get("address"),
                                                        labels=dict(i.get("labels") or {}))
                          for i in items}
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("ignoring unreadable node cache %s: %s", path, exc)


def _persisted(info: NodeInfo) -> tuple[object, ...]:
    return (info.address, tuple(sorted(info.labels.items())))


def _list_version(listing: object) -> str | None:
    """The resourceVersion of a finished lightkube list (None if it has none)."""
    return list_version(listing)

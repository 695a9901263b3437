"""Who is in my group? The agent's cached copy of its own Node, of its group's roster and of the
``edgewatch-config`` ConfigMap.

The agent lists, then watches (from the list's resourceVersion), three things, each O(1) in the
group's size in watch events (docs/scaling.md, "Cloud API load"):

* its own Node (field selector ``metadata.name``): its labels (pool, group, cover label) and
  InternalIP;
* the ``edgewatch-config`` ConfigMap (``grouping``, ``groupLabel``, ``coverLabel``,
  ``monitoringRings``, see ``edgewatch.core.grouping``; ``poolCoordinators``, see
  ``edgewatch.core.poolconfig``; ``poolScopeResources``, see ``edgewatch.poolcache.resources``);
* its group's roster (``edgewatch.core.roster``): the members and their InternalIPs, published by
  the controller and written only when membership changes. Its name follows from the own labels
  and the ConfigMap, so a relabel or a ConfigMap edit switches to the new group's roster with no
  restart (as in TKE Edge's multi-region grouping: "regrouping needs no redeploy").

Watching every Node instead, as before, made every kubelet status report an event for every agent:
an O(n²) fan-out on the cloud apiserver (docs/scaling.md). Each of the three is the cloud door's informer
(``edgewatch.agent.watching.follow``): a watch silent for ``idle_timeout_s`` is re-opened (a cut
link drops packets without a reset, so the connection would hang for ever), errors back off up to
``edgewatch.agent.watching.AGENT_BACKOFF_MAX_S``, and a re-list hands over exact changes (an object
deleted while the watch was down arrives as a deletion).

While the cloud is unreachable the last copy stays in use (the group's size must not shrink just
because the cloud is away), and with ``state_dir`` set it is also kept on disk so an agent restarted
during a cut still knows its group. The state folder is best effort: if it cannot be created or
written (a hostPath the kubelet made as root 0755 while the agent runs as uid 65532), the failure
is logged once per distinct error and counted (``edgewatch_agent_state_save_failures_total``), and
the watches go on — a failed save never turns into a LIST every few seconds. The file is rewritten
only when a persisted field (own address or labels, the roster) changes.

Untrusted input: a ConfigMap with an unknown key or a bad value, or a malformed roster, is refused
with a log line and a metric, and the last valid copy stays (never silently ignored — a SuperEdge
bug). Members without an InternalIP cannot be probed (they count in the group's size). Until the
controller has published the roster (first install), the group is not known and the agent is not
ready.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from edgewatch.core.grouping import (CONFIG_KEY_POOL_COORDINATORS, CONFIG_KEY_POOL_SCOPE_RESOURCES, GroupingConfig,
                                     parse_grouping_config)
from edgewatch.poolcache.resources import DEFAULT_RESOURCES, PoolResource, PoolResourcesError, parse_pool_resources
from edgewatch.core.poolconfig import PoolCoordinators, check_coordinator_url, parse_pool_coordinators
from edgewatch.core.types import is_dns1123_label
from edgewatch.names import POOL_COORDINATORS_CONFIGMAP
from edgewatch.core.roster import Roster, RosterError, decode_roster, roster_name
from edgewatch.agent.ports import Unobserved, WatchEvents
from edgewatch.agent.watching import follow, informer_config
from edgewatch.core.types import NodeName
from edgewatch.kube.api import AsyncClient, ConfigMap, Node
from edgewatch.statefile import replace_file
from edgewatch.kube.resources import CONFIGMAPS, NODES, ApiResource

log = logging.getLogger(__name__)

CONFIGMAP_NAME = "edgewatch-config"


class MembershipEvents(WatchEvents, Protocol):
    """What :class:`Membership` tells the agent (its metrics count it): each watch event received
    (``watch_event_received`` with ``node``, ``config`` or ``roster``), each refused ConfigMap or
    roster, each failed save of the state folder."""

    def config_refused(self, reason: str) -> None:
        """The ConfigMap or the roster was refused (``invalid_config``, ``invalid_roster``,
        ``invalid_pool_coordinators``, ``invalid_pool_coordinator``,
        ``invalid_pool_scope_resources``); the last valid copy stays."""
        ...

    def state_not_saved(self, reason: str) -> None:
        """Saving the state folder failed; ``reason``: the exception class (e.g.
        ``PermissionError``)."""
        ...


@dataclass(frozen=True)
class NodeInfo:
    """What the agent needs of a Node: its name, InternalIP (or None) and labels."""

    name: NodeName
    address: str | None
    labels: dict[str, str]


def node_info(node: Node) -> NodeInfo:
    """Extract ``NodeInfo`` from a Node object."""
    address = None
    for addr in (node.status.addresses or []) if node.status else []:
        if addr.type == "InternalIP":
            address = addr.address
            break
    return NodeInfo(name=NodeName(node.metadata.name), address=address, labels=dict(node.metadata.labels or {}))


class Membership:
    """Cached own Node, group roster and edgewatch configuration, kept current by watches.

    Args:
        client: API client.
        node: this agent's node.
        namespace: where the ``edgewatch-config`` ConfigMap and the rosters live.
        state_dir: folder to persist the own Node and the roster in (None = memory only). It need
            not exist or be writable: a failed save is logged once per distinct error and counted
            (``on_save_error``), and the agent keeps working from memory.
        retry_s: first pause after a failed list or watch, seconds; later ones double up to
            ``edgewatch.agent.watching.AGENT_BACKOFF_MAX_S`` (with jitter).
        idle_timeout_s: a watch that delivers nothing (not even the apiserver's bookmark, about
            one a minute) for this long is treated as dead and re-opened, seconds: a silently
            dropped connection (a cut uplink drops packets, it sends no reset) would otherwise hang
            for ever.
        api_timeout_s: bound of one list page or of opening a watch, seconds (default 10 s, the
            informer's: a page over a thin uplink).
        events: told of each watch event received (``node``, ``config``, ``roster``: the API
            load per agent), each refused ConfigMap or roster and each failed save
            (:class:`MembershipEvents`; default: nobody).
    """

    def __init__(self, *, client: AsyncClient, node: NodeName, namespace: str, state_dir: Path | None = None,
                 retry_s: float = 2.0, idle_timeout_s: float = 150.0, api_timeout_s: float = 10.0,
                 events: MembershipEvents | None = None) -> None:
        self.client = client
        self.node = node
        self.namespace = namespace
        self.state_dir = state_dir
        self.retry_s = retry_s
        self.idle_timeout_s = idle_timeout_s
        self.api_timeout_s = api_timeout_s
        self.own: NodeInfo | None = None
        self.roster: Roster | None = None
        self.roster_name: str | None = None  # the roster ``roster`` was read from
        self.grouping = GroupingConfig()
        self.pool_coordinators = PoolCoordinators()
        self.discovered_coordinators: dict[str, str] = {}  # auto pool -> where its coordinator runs now
        self.pool_resources: tuple[PoolResource, ...] = DEFAULT_RESOURCES
        self.synced = asyncio.Event()
        self.config_synced = asyncio.Event()
        self.node_lists = 0  # own-Node LISTs done (one; again only after a 410: the watch's version expired)
        self._observer: MembershipEvents = events if events is not None else Unobserved()
        self._save_error: str | None = None
        self._retarget = asyncio.Event()
        self._load()

    # -- queries ---------------------------------------------------------------------------------

    @property
    def nodes(self) -> dict[NodeName, NodeInfo]:
        """What is known of the group: the roster's members (name and address, no labels) and the
        own Node (with its labels)."""
        out = {name: NodeInfo(name=name, address=address, labels={})
               for name, address in (self.roster.members.items() if self.roster else ())}
        if self.own is not None:
            out[self.node] = self.own
        return out

    def target(self) -> str | None:
        """The roster this node's group has now (None: a group of one, or the own Node not known)."""
        if self.own is None:
            return None
        return roster_name(self.grouping, self.own.labels)

    def group_of(self, node: NodeName) -> frozenset[NodeName]:
        """The members of this agent's group (always including ``node``, this agent's node): the
        roster's members when the node has a group, else just the node."""
        if self.roster is None or self.target() is None:
            return frozenset({node})
        return frozenset(self.roster.members) | {node}

    def address_of(self, node: NodeName) -> str | None:
        """InternalIP of ``node`` (the own Node or a roster member; None if unknown)."""
        if node == self.node and self.own is not None and self.own.address:
            return self.own.address
        return self.roster.members.get(node) if self.roster is not None else None

    def roster_known(self) -> bool:
        """True once the group's roster is known: synced, or a copy kept from before (the state
        folder). Until then the group is just this node, and nothing is decided on that basis."""
        return self.synced.is_set() or self.roster is not None

    def known_pool_resources(self) -> tuple[PoolResource, ...] | None:
        """The pool-scope resources the ConfigMap names (``poolScopeResources``), or None until the
        ConfigMap has been read."""
        return self.pool_resources if self.config_synced.is_set() else None

    def node_by_address(self, address: str) -> NodeName | None:
        """The member whose InternalIP is ``address`` (to bind a peer message to its source)."""
        if self.roster is not None:
            for name, member_address in self.roster.members.items():
                if member_address == address:
                    return name
        return None

    # -- loops -----------------------------------------------------------------------------------

    async def run(self) -> None:
        """Watch the own Node, the ConfigMap and the group's roster until cancelled."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._watch_own_node())
            tg.create_task(self._watch_config())
            tg.create_task(self._follow_roster())
            tg.create_task(self._watch_discovery())

    async def _follow(self, resource: ApiResource, model: Any, name: str, on_event: Callable[[str, Any], None], *,
                      field_selector: str, namespace: str | None = None,
                      on_list: Callable[[list[Any]], None] | None = None) -> None:
        """One informer of this membership (``edgewatch.agent.watching.follow``), until cancelled."""
        await follow(self.client, resource, model=model, name=name, on_event=on_event, events=self._observer,
                     namespace=namespace, field_selector=field_selector, on_list=on_list,
                     config=informer_config(request_timeout_s=self.api_timeout_s, idle_timeout_s=self.idle_timeout_s,
                                            retry_s=self.retry_s))

    def _set_own(self, info: NodeInfo | None) -> None:
        before, self.own = self.own, info
        if before is None or info is None or _persisted(before) != _persisted(info):
            self._save()  # only what is persisted changed (status updates come every 10 s)
            self._retarget.set()
        self._mark_synced()

    def _mark_synced(self) -> None:
        if self.own is not None and (self.target() is None or self.roster_name == self.target()):
            self.synced.set()

    async def _watch_own_node(self) -> None:
        """The own Node (field selector ``metadata.name``): its labels and InternalIP. A deleted
        Node keeps its last copy (it is being re-registered); ``node_lists`` counts the lists."""
        def on_node(op: str, node: Node) -> None:
            if op != "DELETED":
                self._set_own(node_info(node))

        def listed(_nodes: list[Node]) -> None:
            self.node_lists += 1

        await self._follow(NODES, Node, "node", on_node, field_selector=f"metadata.name={self.node}", on_list=listed)

    async def _watch_config(self) -> None:
        """The ``edgewatch-config`` ConfigMap: adopted on every change; deleted or absent at a list:
        the defaults. ``config_synced`` is set after the first list."""
        def on_config(op: str, cm: ConfigMap) -> None:
            self._config_changed(self.apply_config(None if op == "DELETED" else (cm.data or {})))

        def listed(found: list[ConfigMap]) -> None:
            if not found:
                self._config_changed(self.apply_config(None))
            self.config_synced.set()

        await self._follow(CONFIGMAPS, ConfigMap, "config", on_config, namespace=self.namespace,
                           field_selector=f"metadata.name={CONFIGMAP_NAME}", on_list=listed)

    async def _watch_discovery(self) -> None:
        """The ConfigMap ``edgewatch-pool-coordinators`` (written by the controller): where each
        ``auto`` pool's coordinator runs now. Absent or deleted: none runs."""
        def on_discovery(op: str, cm: ConfigMap) -> None:
            self._apply_discovery(None if op == "DELETED" else (cm.data or {}))

        def listed(found: list[ConfigMap]) -> None:
            if not found:
                self._apply_discovery(None)

        await self._follow(CONFIGMAPS, ConfigMap, "discovery", on_discovery, namespace=self.namespace,
                           field_selector=f"metadata.name={POOL_COORDINATORS_CONFIGMAP}", on_list=listed)

    def _apply_discovery(self, data: Mapping[str, str] | None) -> None:
        """Adopt the discovered coordinators: entries ``<pool>: https://HOST:PORT`` (an ``auto``
        coordinator always speaks TLS: an ``http://`` entry is refused, never a downgrade); a bad
        entry is dropped, logged and counted (``invalid_discovered_coordinator``)."""
        found: dict[str, str] = {}
        for pool, url in (data or {}).items():
            try:
                if not is_dns1123_label(pool):
                    raise ValueError(f"pool name {str(pool)[:80]!r} is not a DNS-1123 label")
                checked = check_coordinator_url(url)
                if not checked.startswith("https://"):
                    raise ValueError("an auto coordinator must be https://")
                found[pool] = checked
            except ValueError as exc:
                log.error("ignoring an entry of %s: %s", POOL_COORDINATORS_CONFIGMAP, exc,
                          extra={"kind": "config_rejected"})
                self._observer.config_refused("invalid_discovered_coordinator")
        if found != self.discovered_coordinators:
            log.info("discovered pool coordinators: %s", dict(sorted(found.items())) or "none",
                     extra={"kind": "pool_coordinators"})
        self.discovered_coordinators = found

    def _config_changed(self, _applied: bool) -> None:
        self._retarget.set()
        self._mark_synced()

    async def _follow_roster(self) -> None:
        """Watch the roster :meth:`target` names; switch when it changes (relabel, ConfigMap)."""
        while True:
            self._retarget.clear()
            target = self.target()
            if target != self.roster_name and self.roster_name is not None and self.own is not None:
                log.info("group roster now %s (was %s)", target or "none: a group of one", self.roster_name,
                         extra={"kind": "regrouped"})
                self.roster, self.roster_name = None, None
                self._save()
            self._mark_synced()
            if target is None:
                await self._retarget.wait()
                continue
            watch = asyncio.create_task(self._watch_roster(target))
            switch = asyncio.create_task(self._retarget_to_other(target))
            try:
                await asyncio.wait({watch, switch}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (watch, switch):
                    task.cancel()
                await asyncio.gather(watch, switch, return_exceptions=True)

    async def _retarget_to_other(self, target: str) -> None:
        while True:
            await self._retarget.wait()
            self._retarget.clear()
            if self.target() != target:
                return

    async def _watch_roster(self, name: str) -> None:
        """The roster ``name``: adopted on every change. Deleted: the group is going away; the copy
        stays until :meth:`_follow_roster` retargets."""
        def on_roster(op: str, cm: ConfigMap) -> None:
            if op != "DELETED":
                self._apply_roster(name, cm.data)

        def listed(found: list[ConfigMap]) -> None:
            if not found:
                log.info("group roster %s not published yet (is the controller running?)", name)

        await self._follow(CONFIGMAPS, ConfigMap, "roster", on_roster, namespace=self.namespace,
                           field_selector=f"metadata.name={name}", on_list=listed)

    def _apply_roster(self, name: str, data: Mapping[str, str] | None) -> None:
        try:
            roster = decode_roster(data)
        except RosterError as exc:
            log.error("refusing roster %s: %s; keeping the previous copy", name, exc,
                      extra={"kind": "config_rejected"})
            self._observer.config_refused("invalid_roster")
            return
        if roster != self.roster or name != self.roster_name:
            if self.roster is None or set(roster.members) != set(self.roster.members):
                log.info("group roster %s: %d members", name, len(roster.members), extra={"kind": "roster"})
            self.roster, self.roster_name = roster, name
            self._save()
        self._mark_synced()

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
            self._observer.config_refused("invalid_config")
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
            self._observer.config_refused("invalid_pool_scope_resources")
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
            self._observer.config_refused("invalid_pool_coordinators")
            return
        previous = self.pool_coordinators
        kept = {pool: previous.urls[pool] for pool in parsed.invalid if pool in previous.urls}
        merged = PoolCoordinators(urls={**parsed.urls, **kept}, problems=parsed.problems, invalid=parsed.invalid,
                                  auto=parsed.auto)
        if parsed.problems != previous.problems:
            for problem in parsed.problems:
                log.error("ignoring an entry of %s in %s: %s", CONFIG_KEY_POOL_COORDINATORS, CONFIGMAP_NAME,
                          problem, extra={"kind": "config_rejected"})
                self._observer.config_refused("invalid_pool_coordinator")
            for pool, url in sorted(kept.items()):
                log.warning("pool %s keeps its previous coordinator %s", pool, url, extra={"kind": "config_rejected"})
        if merged.urls != previous.urls or merged.auto != previous.auto:
            log.info("pool coordinators: %s; run by edgewatch: %s", dict(sorted(merged.urls.items())) or "none",
                     sorted(merged.auto) or "none", extra={"kind": "pool_coordinators"})
        self.pool_coordinators = merged

    # -- persistence -------------------------------------------------------------------------------

    def _path(self) -> Path | None:
        return self.state_dir / "membership.json" if self.state_dir else None

    def _save(self) -> None:
        """Persist the own Node and the roster; never raises. A failure is logged once per
        distinct error (and again once it is fixed) and counted every time."""
        path = self._path()
        if path is None:
            return
        own = None if self.own is None else {"address": self.own.address, "labels": self.own.labels}
        roster = None if self.roster is None else {"name": self.roster_name, "group": self.roster.group,
                                                   "members": dict(self.roster.members)}
        try:
            replace_file(path, json.dumps({"node": self.node, "own": own, "roster": roster}))
        except OSError as exc:
            error = f"{type(exc).__name__}: {exc.strerror or exc}"
            self._observer.state_not_saved(type(exc).__name__)
            if error != self._save_error:
                log.error("cannot save the group roster to %s (%s); going on from memory only: an agent restarted "
                          "during a cloud cut will not know its group. Make the folder writable for this user "
                          "(uid %d)", path, error, os.getuid(), extra={"kind": "state_save_failed"})
                self._save_error = error
            return
        if self._save_error is not None:
            log.info("group roster saved to %s again", path, extra={"kind": "state_saved"})
            self._save_error = None

    def _load(self) -> None:
        path = self._path()
        if path is None:
            return
        try:
            saved = json.loads(path.read_text())
            if saved.get("node") != self.node:
                return  # another node's file (a reused folder): nothing of it applies
            if saved.get("own") is not None:
                own = saved["own"]
                self.own = NodeInfo(name=self.node, address=own.get("address"), labels=dict(own.get("labels") or {}))
            if saved.get("roster") is not None:
                raw = saved["roster"]
                members = {k: v or "" for k, v in dict(raw["members"]).items()}
                self.roster = decode_roster({"group": raw.get("group", ""), "members": json.dumps(members)})
                self.roster_name = raw["name"]
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("ignoring unreadable state file %s: %s", path, exc)


def _persisted(info: NodeInfo) -> tuple[object, ...]:
    return (info.address, tuple(sorted(info.labels.items())))

"""Groups (multi-region): which nodes check and vote on each other.

What it is for
    Nodes at one site reach each other over a LAN; nodes at different sites
    may not reach each other at all. Agents therefore check, and vote on,
    only the members of their own group, and a node is judged by a majority
    of its group (:mod:`edgewatch.core.quorum`). The rules (TKE Edge's multi-region grouping):

    * grouping **off**: every node is in one group holding all nodes, even
      if nodes carry the label;
    * grouping **on**: nodes with the same non-empty value of the label
      ``label_key`` (default ``edgewatch.io/topology-zone``) form a group; a
      node without the label, or with an empty value, is a group of just
      itself (it only checks itself).

    A node is always a member of its own group, membership is symmetric, and
    the groups partition the node set. Regrouping needs no redeploy: the
    groups are recomputed from the current node list and ConfigMap.

Limits
    Pure functions of the node list the caller passes in; a node missing from
    that list has no group (ValueError), because giving it one would break
    symmetry. Label values are compared exactly (Kubernetes label values are
    case-sensitive). Group size is not bounded here; large groups are the
    business of the monitoring topology (:mod:`edgewatch.core.topology`).

Sources
    TKE Edge (multi-region: ``tencent.tkeedgehealth/topology-zone``
    label; without the label a node only checks itself; with the feature off
    all nodes check each other). SuperEdge edge-health silently ignored
    unknown or mistyped flags; :func:`parse_grouping_config` refuses them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from edgewatch.core.types import NodeName, is_dns1123_subdomain

__all__ = [
    "CONFIG_KEY_COVER_LABEL",
    "CONFIG_KEY_GROUPING",
    "CONFIG_KEY_GROUP_LABEL",
    "CONFIG_KEY_POOL_COORDINATORS",
    "CONFIG_KEY_RINGS",
    "MAX_RINGS",
    "CONFIG_KEY_POOL_SCOPE_RESOURCES",
    "CONFIG_KEY_OUT_OF_SERVICE_POOLS",
    "DEFAULT_LABEL_KEY",
    "GroupingConfig",
    "group_of",
    "groups",
    "is_label_key",
    "parse_grouping_config",
]

DEFAULT_LABEL_KEY: Final = "edgewatch.io/topology-zone"
"""Node label that names a node's group when grouping is on."""

CONFIG_KEY_GROUPING: Final = "grouping"
"""ConfigMap key turning grouping on or off."""

CONFIG_KEY_GROUP_LABEL: Final = "groupLabel"
"""ConfigMap key naming the grouping label."""

CONFIG_KEY_COVER_LABEL: Final = "coverLabel"
"""ConfigMap key: only nodes with this label key are covered (see :attr:`GroupingConfig.cover_label`)."""

CONFIG_KEY_RINGS: Final = "monitoringRings"
"""ConfigMap key: rings of the monitoring topology (see :attr:`GroupingConfig.rings`)."""

CONFIG_KEY_POOL_COORDINATORS: Final = "poolCoordinators"
"""ConfigMap key of the per-pool coordinator URLs. Known here (so the
grouping parser accepts a ConfigMap that has it) but parsed on its own by
:func:`edgewatch.core.poolconfig.parse_pool_coordinators`: a bad entry there
never makes the grouping switches refused."""

CONFIG_KEY_POOL_SCOPE_RESOURCES: Final = "poolScopeResources"
"""ConfigMap key of the pool cache's resources; parsed on its own by
:func:`edgewatch.poolcache.resources.parse_pool_resources`."""

CONFIG_KEY_OUT_OF_SERVICE_POOLS: Final = "outOfServicePools"
"""ConfigMap key of the pools whose failed nodes get Kubernetes' out-of-service taint (controller
only; parsed by ``edgewatch.controller.coverage``, docs/out-of-service.md). Known here so the agents
accept a ConfigMap that has it."""

_KNOWN_KEYS: Final = (CONFIG_KEY_GROUPING, CONFIG_KEY_GROUP_LABEL, CONFIG_KEY_COVER_LABEL, CONFIG_KEY_RINGS,
                      CONFIG_KEY_POOL_COORDINATORS, CONFIG_KEY_POOL_SCOPE_RESOURCES,
                      CONFIG_KEY_OUT_OF_SERVICE_POOLS)
MAX_RINGS: Final = 8
"""Most rings accepted: 16 neighbours, 32 messages per node per period."""
_TRUE: Final = frozenset({"on", "true"})
_FALSE: Final = frozenset({"off", "false"})

_LABEL_NAME: Final = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


def is_label_key(key: object) -> bool:
    """Whether ``key`` is a valid Kubernetes label key: an optional DNS-1123
    subdomain prefix (<= 253 chars) and ``/``, then a name of 1-63
    alphanumerics, ``-``, ``_`` or ``.``, starting and ending alphanumeric.
    Never raises."""
    if not isinstance(key, str) or not key.isascii():
        return False
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not is_dns1123_subdomain(prefix):
            return False
    return 0 < len(name) <= 63 and _LABEL_NAME.fullmatch(name) is not None


def _check_args(*, enabled: object, label_key: object) -> None:
    if not isinstance(enabled, bool):
        raise ValueError(f"enabled must be a bool, got {type(enabled).__name__}")
    if not is_label_key(label_key):
        raise ValueError(f"label_key is not a valid Kubernetes label key: {label_key!r:.300}")


@dataclass(frozen=True, kw_only=True)
class GroupingConfig:
    """How nodes are grouped. Usually parsed from the edgewatch ConfigMap
    with :func:`parse_grouping_config`.

    Raises:
        ValueError: on construction, if ``enabled`` is not a bool or
            ``label_key`` is not a valid Kubernetes label key.
    """

    enabled: bool = False
    """Group by label (``True``) or put all nodes in one group (``False``).
    Default off, as in TKE Edge: one group is the right answer for a single
    site, and turning grouping on with unlabelled nodes would make every
    node a group of one that no peer can vouch for."""

    label_key: str = DEFAULT_LABEL_KEY
    """Node label whose value names the group when ``enabled``. Default
    ``edgewatch.io/topology-zone`` (TKE's ``tencent.tkeedgehealth/
    topology-zone`` under our own domain). Must be a valid label key."""

    cover_label: str = ""
    """Only nodes that carry this label key (any value) are covered by
    edgewatch: members of groups, checked and voted on. Default empty: every
    node. Set it to the label the agent DaemonSet's nodeSelector uses, so
    cloud nodes without an agent never count in an edge group's size (they
    would always look dead and could deny every majority)."""

    rings: int = 3
    """Rings of the monitoring topology (:mod:`edgewatch.core.topology`): every agent probes at most
    ``2 * rings`` neighbours, groups of up to ``2 * rings + 1`` are a full mesh. Default 3 (12
    messages per node per period; docs/scaling.md). Read from the ConfigMap by the agents and the
    controller alike, since the controller counts the verdicts over the same graph. 1 to
    :data:`MAX_RINGS`."""

    def __post_init__(self) -> None:
        _check_args(enabled=self.enabled, label_key=self.label_key)
        if isinstance(self.rings, bool) or not isinstance(self.rings, int) or not 1 <= self.rings <= MAX_RINGS:
            raise ValueError(f"rings must be an int from 1 to {MAX_RINGS}, got {self.rings!r}")
        if self.cover_label and not is_label_key(self.cover_label):
            raise ValueError(f"cover_label is not a valid Kubernetes label key: {self.cover_label!r:.300}")

    def covered(self, node_labels: Mapping[NodeName, Mapping[str, str]]) -> dict[NodeName, Mapping[str, str]]:
        """The nodes edgewatch covers (all of them when ``cover_label`` is empty)."""
        if not self.cover_label:
            return dict(node_labels)
        return {n: labels for n, labels in node_labels.items() if self.cover_label in labels}

    def group_of(self, node: NodeName, *, node_labels: Mapping[NodeName, Mapping[str, str]]) -> frozenset[NodeName]:
        """:func:`group_of` with this configuration, over the covered nodes; an uncovered ``node`` is
        a group of one."""
        covered = self.covered(node_labels)
        if self.cover_label and node not in covered:
            return frozenset({node})  # not covered: nobody checks it, it checks nobody
        return group_of(node, node_labels=covered, enabled=self.enabled, label_key=self.label_key)

    def groups(self, *, node_labels: Mapping[NodeName, Mapping[str, str]]) -> dict[NodeName, frozenset[NodeName]]:
        """:func:`groups` with this configuration, over the covered nodes."""
        return groups(node_labels=self.covered(node_labels), enabled=self.enabled, label_key=self.label_key)


def parse_grouping_config(data: Mapping[str, str]) -> GroupingConfig:
    """Parse the ``data`` of the edgewatch ConfigMap into a
    :class:`GroupingConfig`.

    Keys (all optional; a missing key keeps the default):
        ``grouping``: ``on`` / ``true`` or ``off`` / ``false``
            (case-insensitive, surrounding whitespace ignored).
        ``groupLabel``: the label key to group by.
        ``coverLabel``: only nodes with this label key are covered (empty: all).
        ``monitoringRings``: rings of the monitoring topology, 1 to :data:`MAX_RINGS` (default 3).
        ``poolCoordinators``, ``poolScopeResources``, ``outOfServicePools``: accepted and not
            interpreted here (see :data:`CONFIG_KEY_POOL_COORDINATORS`,
            :data:`CONFIG_KEY_POOL_SCOPE_RESOURCES`, :data:`CONFIG_KEY_OUT_OF_SERVICE_POOLS`).

    Raises:
        ValueError: an unknown key (a misspelt flag is never silently
            ignored), a value that is not a string, or a bad value; the
            message names the offending key.
    """
    unknown = sorted(str(k) for k in data if k not in _KNOWN_KEYS)
    if unknown:
        raise ValueError(
            f"unknown grouping config key(s) {unknown!r:.300}; known keys: {list(_KNOWN_KEYS)}"
        )
    enabled = GroupingConfig.enabled
    label_key = GroupingConfig.label_key
    if CONFIG_KEY_GROUPING in data:
        raw = data[CONFIG_KEY_GROUPING]
        if not isinstance(raw, str):
            raise ValueError(f"config key {CONFIG_KEY_GROUPING!r} must be a string, got {type(raw).__name__}")
        value = raw.strip().lower()
        if value in _TRUE:
            enabled = True
        elif value in _FALSE:
            enabled = False
        else:
            raise ValueError(
                f"config key {CONFIG_KEY_GROUPING!r} must be one of on/off/true/false, got {raw!r:.100}"
            )
    if CONFIG_KEY_GROUP_LABEL in data:
        raw = data[CONFIG_KEY_GROUP_LABEL]
        if not isinstance(raw, str):
            raise ValueError(
                f"config key {CONFIG_KEY_GROUP_LABEL!r} must be a string, got {type(raw).__name__}"
            )
        label_key = raw.strip()
        if not is_label_key(label_key):
            raise ValueError(
                f"config key {CONFIG_KEY_GROUP_LABEL!r} is not a valid Kubernetes label key: {raw!r:.300}"
            )
    cover_label = ""
    if CONFIG_KEY_COVER_LABEL in data:
        raw = data[CONFIG_KEY_COVER_LABEL]
        if not isinstance(raw, str):
            raise ValueError(f"config key {CONFIG_KEY_COVER_LABEL!r} must be a string, got {type(raw).__name__}")
        cover_label = raw.strip()
        if cover_label and not is_label_key(cover_label):
            raise ValueError(
                f"config key {CONFIG_KEY_COVER_LABEL!r} is not a valid Kubernetes label key: {raw!r:.300}"
            )
    rings = GroupingConfig.rings
    if CONFIG_KEY_RINGS in data:
        raw = data[CONFIG_KEY_RINGS]
        if not isinstance(raw, str) or not raw.strip().isdigit() or not 1 <= int(raw.strip()) <= MAX_RINGS:
            raise ValueError(f"config key {CONFIG_KEY_RINGS!r} must be a whole number from 1 to {MAX_RINGS}, "
                             f"got {raw!r:.100}")
        rings = int(raw.strip())
    return GroupingConfig(enabled=enabled, label_key=label_key, cover_label=cover_label, rings=rings)


def _zone(node: NodeName, labels: Mapping[str, str], label_key: str) -> str | None:
    value = labels.get(label_key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"label {label_key!r} of node {node!r} must be a string, got {type(value).__name__}")
    return value or None


def groups(
    *,
    node_labels: Mapping[NodeName, Mapping[str, str]],
    enabled: bool,
    label_key: str = DEFAULT_LABEL_KEY,
) -> dict[NodeName, frozenset[NodeName]]:
    """Every node's group, in O(number of nodes).

    Args:
        node_labels: node name -> that node's labels, from the cloud's node
            list.
        enabled: grouping on (group by label) or off (one group).
        label_key: the label naming the group when ``enabled``.

    Returns:
        node -> its group. Members of one group share one frozenset.

    Raises:
        ValueError: ``enabled`` is not a bool, ``label_key`` is not a valid
            label key, or a label value is not a string.
    """
    _check_args(enabled=enabled, label_key=label_key)
    if not enabled:
        everyone = frozenset(node_labels)
        return {node: everyone for node in node_labels}
    members: dict[str, set[NodeName]] = {}
    zone_of: dict[NodeName, str | None] = {}
    for node, labels in node_labels.items():
        zone = _zone(node, labels, label_key)
        zone_of[node] = zone
        if zone is not None:
            members.setdefault(zone, set()).add(node)
    frozen = {zone: frozenset(nodes) for zone, nodes in members.items()}
    return {
        node: frozenset({node}) if zone is None else frozen[zone]
        for node, zone in zone_of.items()
    }


def group_of(
    node: NodeName,
    *,
    node_labels: Mapping[NodeName, Mapping[str, str]],
    enabled: bool,
    label_key: str = DEFAULT_LABEL_KEY,
) -> frozenset[NodeName]:
    """The group of ``node`` (always contains ``node``).

    Same arguments as :func:`groups`.

    Raises:
        ValueError: ``node`` is not in ``node_labels``, or any reason of
            :func:`groups`.
    """
    _check_args(enabled=enabled, label_key=label_key)
    if node not in node_labels:
        raise ValueError(f"node {node!r:.300} is not in the node list")
    if not enabled:
        return frozenset(node_labels)
    zone = _zone(node, node_labels[node], label_key)
    if zone is None:
        return frozenset({node})
    return frozenset(n for n, labels in node_labels.items() if _zone(n, labels, label_key) == zone)

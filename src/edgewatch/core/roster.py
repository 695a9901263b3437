"""Group rosters: the member list of one group, published by the controller for the agents.

What it is for
    An agent needs its group's members and their InternalIPs, nothing else of the other Nodes.
    Watching every Node for that is an O(n²) fan-out on the cloud apiserver: every kubelet status
    report, every taint, every condition write is a watch event for all n agents (≈ 200 events
    per agent per minute at 1,000 nodes from the kubelets' 5-minute status reports alone). So the
    controller, which watches every Node anyway, publishes one ConfigMap per group, the *roster*,
    written only when a member joins, leaves or changes address. An agent watches its own Node and
    its own group's roster: O(1) events per agent per minute at any size (docs/scaling.md).

Names
    The roster of a group is ``edgewatch-roster-<slug>-<hash>`` in the edgewatch namespace, where
    ``<slug>`` is the group label's value made a DNS label (lower case, other characters ``-``, at
    most 30) and ``<hash>`` the first 10 hex digits of its SHA-256 (two values with the same slug
    never share a roster). With grouping off, the one group's roster is ``edgewatch-roster``. A node
    in a group of one (uncovered, or grouping on and no label) has no roster. Both sides derive the
    name with :func:`roster_name` from the node's labels and the ConfigMap, so an agent never needs
    to list rosters.

Format
    ``data["members"]``: a JSON object, member name -> InternalIP (or ``""`` for none), keys sorted,
    so an unchanged group encodes to the same bytes and is never rewritten. ``data["group"]``: the
    label value, ``""`` with grouping off (for ``kubectl``). Label ``edgewatch.io/roster: "true"``.

Trust
    Only the controller can write ConfigMaps in the edgewatch namespace (agents read them); the
    agents' evidence lives in ``edgewatch-nodes``. A roster is still parsed as untrusted input:
    :func:`decode_roster` refuses a malformed or oversized one (:class:`RosterError`), and the agent
    keeps its previous copy.

The group index
    ``edgewatch-groups`` (same label, same namespace): ``data[<node>]`` = the name of that node's
    roster, for every member of every published roster (:func:`encode_group_index`). Nobody in
    edgewatch reads it: the apiserver does, as the parameter of the admission policy
    ``edgewatch-agent-carry`` (``deploy/15-policy-agent.yaml``), which lets an agent renew a node's
    Lease only for a covered node of its own group. One key per node, so the policy looks a node
    up without parsing JSON (CEL cannot); written, like the rosters, only when membership changes.

Limits
    A ConfigMap holds at most 1 MiB: about 15,000 members with 40-character names. The controller
    refuses to publish a bigger roster (:class:`RosterError`) rather than truncate it.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from edgewatch.core.grouping import GroupingConfig
from edgewatch.core.types import NodeName, is_dns1123_subdomain

__all__ = [
    "MAX_ROSTER_BYTES",
    "ROSTER_LABEL",
    "GROUP_INDEX_NAME",
    "ROSTER_PREFIX",
    "Roster",
    "RosterError",
    "build_rosters",
    "decode_roster",
    "encode_group_index",
    "encode_roster",
    "roster_name",
]

ROSTER_PREFIX: Final = "edgewatch-roster"
"""Name of the roster with grouping off; the prefix of every other roster's name."""

ROSTER_LABEL: Final = "edgewatch.io/roster"
"""Label (value ``"true"``) on every roster ConfigMap, to list them."""

GROUP_INDEX_NAME: Final = "edgewatch-groups"
"""The group index ConfigMap (see the module docstring); never a roster's name (those start with
:data:`ROSTER_PREFIX`)."""

MAX_ROSTER_BYTES: Final = 1_000_000
"""Largest ``members`` value accepted or written, bytes (a ConfigMap's limit is 1 MiB in all)."""

_SLUG_BAD = re.compile(r"[^a-z0-9-]+")


class RosterError(ValueError):
    """A roster that cannot be read or written: malformed, oversized, or naming a bad member."""


@dataclass(frozen=True)
class Roster:
    """One group's members: ``group`` is the group label's value (``""`` with grouping off);
    ``members`` maps each member to its InternalIP, or None when it has none (a member that counts
    in the group's size but cannot be probed)."""

    group: str
    members: Mapping[NodeName, str | None]


def roster_name(config: GroupingConfig, labels: Mapping[str, str]) -> str | None:
    """The name of the roster of the group a node with ``labels`` belongs to, or None when that
    node is a group of one (not covered, or grouping on and no non-empty group label).

    Same rules as :meth:`GroupingConfig.group_of` (TKE Edge's multi-region grouping).
    """
    if config.cover_label and config.cover_label not in labels:
        return None
    if not config.enabled:
        return ROSTER_PREFIX
    value = labels.get(config.label_key)
    if not isinstance(value, str) or not value:
        return None
    slug = _SLUG_BAD.sub("-", value.lower()).strip("-")[:30].strip("-")
    digest = hashlib.sha256(value.encode()).hexdigest()[:10]
    return f"{ROSTER_PREFIX}-{slug}-{digest}" if slug else f"{ROSTER_PREFIX}-{digest}"


def build_rosters(config: GroupingConfig, *, node_labels: Mapping[NodeName, Mapping[str, str]],
                  addresses: Mapping[NodeName, str | None]) -> dict[str, Roster]:
    """Every roster the cloud's node list calls for: roster name -> :class:`Roster`.

    Args:
        config: the grouping in force (from the ConfigMap).
        node_labels: every Node's labels, by name.
        addresses: InternalIP by node name (missing or None: none).
    """
    out: dict[str, tuple[str, dict[NodeName, str | None]]] = {}
    for node, labels in node_labels.items():
        name = roster_name(config, labels)
        if name is None:
            continue
        group = labels.get(config.label_key, "") if config.enabled else ""
        out.setdefault(name, (group, {}))[1][node] = addresses.get(node)
    return {name: Roster(group=group, members=members) for name, (group, members) in out.items()}


def encode_roster(roster: Roster) -> dict[str, str]:
    """The ConfigMap ``data`` of ``roster`` (deterministic: members sorted).

    Raises:
        RosterError: the members value would exceed :data:`MAX_ROSTER_BYTES`.
    """
    members = json.dumps({n: roster.members[n] or "" for n in sorted(roster.members)}, separators=(",", ":"))
    if len(members) > MAX_ROSTER_BYTES:
        raise RosterError(f"roster of group {roster.group!r:.100} has {len(roster.members)} members, "
                          f"{len(members)} bytes: over the {MAX_ROSTER_BYTES}-byte limit of a ConfigMap")
    return {"group": roster.group, "members": members}


def encode_group_index(rosters: Mapping[str, Roster]) -> dict[str, str]:
    """The group index's ConfigMap ``data``: every member of every roster -> that roster's name
    (roster name -> :class:`Roster`, as :func:`build_rosters` gives). Deterministic (keys sorted).

    Raises:
        RosterError: the index would exceed :data:`MAX_ROSTER_BYTES` (the ConfigMap limit).
    """
    index = {str(node): name for name, roster in rosters.items() for node in roster.members}
    size = sum(len(k) + len(v) + 6 for k, v in index.items())
    if size > MAX_ROSTER_BYTES:
        raise RosterError(f"group index of {len(index)} nodes, about {size} bytes: over the "
                          f"{MAX_ROSTER_BYTES}-byte limit of a ConfigMap")
    return dict(sorted(index.items()))


def decode_roster(data: Mapping[str, str] | None) -> Roster:
    """Parse a roster ConfigMap's ``data``.

    Raises:
        RosterError: no ``members``, not a JSON object of node name -> IP address or ``""``, a bad
            node name or address, or more than :data:`MAX_ROSTER_BYTES`.
    """
    if not data or not isinstance(data.get("members"), str):
        raise RosterError("roster has no members value")
    text = data["members"]
    if len(text) > MAX_ROSTER_BYTES:
        raise RosterError(f"roster members value of {len(text)} bytes is over {MAX_ROSTER_BYTES}")
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise RosterError(f"roster members value is not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise RosterError(f"roster members value must be a JSON object, got {type(raw).__name__}")
    members: dict[NodeName, str | None] = {}
    for name, address in raw.items():
        if not is_dns1123_subdomain(name):
            raise RosterError(f"roster names a member that is not a valid node name: {name!r:.100}")
        if not isinstance(address, str):
            raise RosterError(f"address of member {name!r} must be a string, got {type(address).__name__}")
        if address:
            try:
                ipaddress.ip_address(address)
            except ValueError:
                raise RosterError(f"address of member {name!r} is not an IP address: {address!r:.100}") from None
        members[NodeName(name)] = address or None
    group = data.get("group", "")
    return Roster(group=group if isinstance(group, str) else "", members=members)

"""Which nodes the controller covers: those with the label key ``coverLabel`` of the
``edgewatch-config`` ConfigMap (every node when it is empty), the same rule the agents use
(``edgewatch.core.grouping.GroupingConfig.cover_label``).

An uncovered node gets stock Kubernetes behaviour: no plan, no autonomy hold, no taint, no eviction,
no state annotation; what edgewatch left on it while it was covered is removed once (see the
reconciler). The shipped ConfigMap sets ``coverLabel: edgewatch.io/pool``, the label the agent
DaemonSet requires, so a node is covered exactly when it runs an agent.

Untrusted input: a ConfigMap with an unknown key or a bad value is refused (``parse_grouping_config``
raises) and the previous configuration stays, as in the agents; a deleted ConfigMap means the
defaults (every node covered).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from edgewatch.core.grouping import CONFIG_KEY_OUT_OF_SERVICE_POOLS, GroupingConfig, parse_grouping_config
from edgewatch.names import POOL_LABEL

__all__ = ["CONFIGMAP_NAME", "Coverage", "is_covered", "parse_out_of_service_pools", "pool_out_of_service"]

_LABEL_VALUE = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]")
#: ``outOfServicePools`` entry meaning every covered node.
ALL_POOLS = "*"


def parse_out_of_service_pools(data: Mapping[str, str]) -> frozenset[str]:
    """The ConfigMap's ``outOfServicePools``: a comma-separated list of pool names (values of the
    ``edgewatch.io/pool`` label), or ``*`` for every covered node; missing or empty = none (the
    default: off). Raises ValueError on a value that is not a label value (the whole ConfigMap is then
    refused and the previous configuration stays, as for every other key)."""
    raw = data.get(CONFIG_KEY_OUT_OF_SERVICE_POOLS, "")
    if not isinstance(raw, str):
        raise ValueError(f"config key {CONFIG_KEY_OUT_OF_SERVICE_POOLS!r} must be a string")
    pools = frozenset(p.strip() for p in raw.split(",") if p.strip())
    bad = sorted(p for p in pools if p != ALL_POOLS and not _LABEL_VALUE.fullmatch(p))
    if bad:
        raise ValueError(f"config key {CONFIG_KEY_OUT_OF_SERVICE_POOLS!r}: not pool names: {bad!r:.300}")
    return pools


def pool_out_of_service(*, labels: Mapping[str, str], pools: frozenset[str]) -> bool:
    """True iff a (covered) node with ``labels`` is in one of ``pools`` (``*``: every node)."""
    return ALL_POOLS in pools or labels.get(POOL_LABEL, "") in pools - {""}

#: The ConfigMap holding ``grouping``, ``groupLabel`` and ``coverLabel``.
CONFIGMAP_NAME = "edgewatch-config"


def is_covered(*, labels: Mapping[str, str], cover_label: str) -> bool:
    """True iff a node with ``labels`` is covered: ``cover_label`` is empty or one of its label keys."""
    return not cover_label or cover_label in labels


class Coverage:
    """The cover label in force, following the ConfigMap (starts with the defaults: every node)."""

    def __init__(self) -> None:
        self.config = GroupingConfig()
        self.out_of_service_pools: frozenset[str] = frozenset()  # outOfServicePools (default: none)

    @property
    def cover_label(self) -> str:
        """The label key a node needs to be covered ("" = every node)."""
        return self.config.cover_label

    @property
    def group_label(self) -> str:
        """The label key naming a node's group while grouping by label is on, else ""."""
        return self.config.label_key if self.config.enabled else ""

    def covers(self, labels: Mapping[str, str]) -> bool:
        """:func:`is_covered` with the cover label in force."""
        return is_covered(labels=labels, cover_label=self.config.cover_label)

    def apply(self, data: Mapping[str, str] | None) -> bool:
        """Adopt the ConfigMap's ``data`` (None: deleted, the defaults).

        Returns True iff the cover label or ``outOfServicePools`` changed (every node must be planned
        again). Raises ValueError (keeping the previous configuration) if ``data`` is invalid.
        """
        config = parse_grouping_config(dict(data or {}))
        pools = parse_out_of_service_pools(dict(data or {}))
        changed = config.cover_label != self.config.cover_label or pools != self.out_of_service_pools
        self.config = config
        self.out_of_service_pools = pools
        return changed

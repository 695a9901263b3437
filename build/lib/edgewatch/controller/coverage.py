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

from collections.abc import Mapping

from edgewatch.core.grouping import GroupingConfig, parse_grouping_config

__all__ = ["CONFIGMAP_NAME", "Coverage", "is_covered"]

#: The ConfigMap holding ``grouping``, ``groupLabel`` and ``coverLabel``.
CONFIGMAP_NAME = "edgewatch-config"


def is_covered(*, labels: Mapping[str, str], cover_label: str) -> bool:
    """True iff a node with ``labels`` is covered: ``cover_label`` is empty or one of its label keys."""
    return not cover_label or cover_label in labels


class Coverage:
    """The cover label in force, following the ConfigMap (starts with the defaults: every node)."""

    def __init__(self) -> None:
        self.config = GroupingConfig()

    @property
    def cover_label(self) -> str:
        """The label key a node needs to be covered ("" = every node)."""
        return self.config.cover_label

    def covers(self, labels: Mapping[str, str]) -> bool:
        """:func:`is_covered` with the cover label in force."""
        return is_covered(labels=labels, cover_label=self.config.cover_label)

    def apply(self, data: Mapping[str, str] | None) -> bool:
        """Adopt the ConfigMap's ``data`` (None: deleted, the defaults).

        Returns True iff the cover label changed (every node must be planned again). Raises
        ValueError (keeping the previous configuration) if ``data`` is invalid.
        """
        config = parse_grouping_config(dict(data or {}))
        changed = config.cover_label != self.config.cover_label
        self.config = config
        return changed

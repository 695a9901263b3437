"""Nodes that move to another node pool or group: noticed, counted and told (``LabelMoves``).

Why: a node's pool (``edgewatch.io/pool``) and group label are on its Node object, which its own
kubelet may relabel (NodeRestriction lets a kubelet change its own labels outside the
``node-restriction.kubernetes.io/`` prefix). Root on a node holds that credential, so a compromised
node can move itself into another pool (its coordinator's etcd then makes it a member) or group (it
then votes and carries there). edgewatch follows the move, as it follows an operator's, but never
silently: every change of a known node's pool or group label is a Warning Event ``NodeMovedPool``
on the Node, a log line and ``edgewatch_controller_node_moves_total``, so an unexpected move is
seen and alerted on. A node seen for the first time (a new node, a controller start) is no move.

Pure: no I/O, no clock. One entry per Node; forgotten when the Node is deleted.
"""

from __future__ import annotations

from collections.abc import Mapping

from edgewatch.names import POOL_LABEL

__all__ = ["LabelMoves"]


class LabelMoves:
    """The pool and group label of every Node seen, and the moves not yet told."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[str | None, str | None]] = {}
        self._untold: dict[str, str] = {}

    def note(self, name: str, labels: Mapping[str, str], *, group_label: str) -> str | None:
        """Record node ``name``'s labels; a message if its pool or group (the value of
        ``group_label``; "" = grouping by label is off) changed since it was last seen, else None."""
        now = (labels.get(POOL_LABEL), labels.get(group_label) if group_label else None)
        before = self._seen.get(name)
        self._seen[name] = now
        if before is None or before == now:
            return None
        parts = []
        if before[0] != now[0]:
            parts.append(f"pool {before[0] or '(none)'} -> {now[0] or '(none)'}")
        if before[1] != now[1]:
            parts.append(f"group ({group_label}) {before[1] or '(none)'} -> {now[1] or '(none)'}")
        message = (f"node {name} moved: {', '.join(parts)}. Its kubelet may set these labels itself: if no "
                   "operator moved it, treat the node as compromised")
        self._untold[name] = message
        return message

    def take(self, name: str) -> str | None:
        """The move of ``name`` not told yet (then forgotten), or None."""
        return self._untold.pop(name, None)

    def forget(self, name: str) -> None:
        """The Node was deleted."""
        self._seen.pop(name, None)
        self._untold.pop(name, None)

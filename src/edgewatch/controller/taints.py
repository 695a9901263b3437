"""Taints, tolerations and annotations as the controller applies a plan: Kubernetes' toleration rules,
when a pod on a failed node is due for eviction, and merging our taints and annotations into a node's
own without touching anyone else's.

Pure functions; times in seconds since the epoch (controller clock). Sources: Kubernetes
``Toleration.ToleratesTaint``; the stock taint manager's ``getMinTolerationTime``
(pkg/controller/tainteviction); "Taints and Tolerations" in the Kubernetes docs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from edgewatch.controller.model import (
    FAILED_TAINT,
    NodePlan,
    NodeSnapshot,
    Taint,
    TaintEffect,
    Toleration,
    TolerationOperator,
    is_managed_taint,
)

__all__ = ["annotation_patch", "apply_plan", "merge_taints", "pod_eviction_due", "tolerates"]


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """Kubernetes ``Toleration.ToleratesTaint``, exactly.

    A non-empty effect must equal the taint's; a non-empty key must equal the taint's; then operator
    ``Exists`` matches any value, ``Equal`` or "" requires equal values, any other operator never
    matches. (So an empty key with ``Exists`` tolerates everything.)
    """
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator in ("", TolerationOperator.EQUAL):
        return toleration.value == taint.value
    return toleration.operator == TolerationOperator.EXISTS


def pod_eviction_due(
    *,
    tolerations: Iterable[Toleration],
    taint_added_at: float,
    now: float,
    taint: Taint = FAILED_TAINT,
) -> float | None:
    """When a pod on a node with ``taint`` (default: the failed taint) is due for eviction.

    Returns ``now`` to evict now, a later time (seconds since the epoch) when the pod's matching
    toleration runs out (``taint_added_at + tolerationSeconds``), or None for never (a matching
    toleration without ``tolerationSeconds``, or a taint that is not NoExecute). As in the stock taint
    manager, the smallest ``tolerationSeconds`` among matching tolerations counts, tolerations without it
    are ignored unless all lack it, and values <= 0 mean now. The result is never earlier than ``now``.
    """
    if taint.effect != TaintEffect.NO_EXECUTE:
        return None
    matching = [t for t in tolerations if tolerates(t, taint)]
    if not matching:
        return now
    seconds = [t.toleration_seconds for t in matching if t.toleration_seconds is not None]
    if not seconds:
        return None
    shortest = min(seconds)
    if shortest <= 0:
        return now
    return max(taint_added_at + shortest, now)


def merge_taints(*, current: Sequence[Taint], managed: Iterable[Taint]) -> tuple[Taint, ...]:
    """The node's full taint list after making our taints equal ``managed``.

    Taints that are not ours (``is_managed_taint``: ``(key, effect)`` not in :data:`~edgewatch.controller.model.MANAGED_TAINT_IDS`,
    or an out-of-service taint with another value, an operator's) are kept as they are, in order.
    Our taints that are still wanted stay in place; missing ones are appended in ``managed`` order,
    except where someone else's taint holds the same ``(key, effect)`` (the API allows one).
    Raises ValueError if ``managed`` holds a taint that is not ours.
    """
    wanted = list(managed)
    for taint in wanted:
        if not is_managed_taint(taint):
            raise ValueError(f"not an edgewatch taint: {taint}")
    result: list[Taint] = []
    placed: set[tuple[str, str]] = set()
    for taint in current:
        if not is_managed_taint(taint):
            result.append(taint)
            placed.add(taint.ident)
        elif taint in wanted and taint.ident not in placed:
            result.append(taint)
            placed.add(taint.ident)
    result.extend(t for t in wanted if t.ident not in placed)
    return tuple(result)


def annotation_patch(*, current: Mapping[str, str], desired: Mapping[str, str | None]) -> dict[str, str | None]:
    """The JSON-merge-patch ``metadata.annotations`` body (None = delete) that turns ``current`` into
    ``desired`` for the keys of ``desired``; empty when nothing needs writing."""
    return {key: value for key, value in desired.items() if current.get(key) != value}


def apply_plan(*, node: NodeSnapshot, plan: NodePlan) -> NodeSnapshot:
    """The node snapshot as it is once the reconciler has made the API match ``plan``."""
    annotations = dict(node.annotations)
    for key, value in plan.annotations.items():
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
    return replace(node, taints=merge_taints(current=node.taints, managed=plan.taints), annotations=annotations)

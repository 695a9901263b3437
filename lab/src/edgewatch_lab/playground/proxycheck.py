"""Did a node's kube-proxy follow the Service? The pool-cache checks of a playground report.

What it is for
    In the ``pool-cache`` scenario a real kube-proxy runs on some edge nodes, reading Services and
    EndpointSlices from the agent's pool cache (edgewatch runs) or from the cloud (baseline). The
    report records, as change lists ``[[t, [ip:port, ...]], ...]``, what the cloud shows as the
    sample Service's ready endpoints (``service_endpoints``) and what each kube-proxy programmed
    (``nodes[<n>].kube_proxy``). :func:`follow_lags` measures, for every ``scale`` step, how long
    after the cloud settled on its new endpoint set the node's kube-proxy had the same set.

Limits
    Pure. Only the sample Service; ``t`` in scenario seconds; a window is the time from a ``scale``
    step to the next fault (or the end): the cloud's set at the window's end is the target.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["first_time_equal", "follow_lags", "set_at"]

Changes = Sequence[Sequence[Any]]  # [[t, [members...]], ...] in time order


def set_at(changes: Changes, t: float) -> frozenset[str] | None:
    """The set recorded last at or before ``t`` (None: nothing recorded yet)."""
    current: frozenset[str] | None = None
    for when, members in changes:
        if float(when) > t:
            break
        current = frozenset(members)
    return current


def first_time_equal(changes: Changes, target: frozenset[str], *, start: float, end: float) -> float | None:
    """The first time in ``[start, end]`` at which the recorded set equals ``target`` (it may
    already equal it at ``start``), or None."""
    if set_at(changes, start) == target:
        return start
    for when, members in changes:
        if start < float(when) <= end and frozenset(members) == target:
            return float(when)
    return None


def follow_lags(*, cloud: Changes, proxy: Changes, scale_times: Sequence[float], next_times: Sequence[float]
                ) -> list[dict[str, Any]]:
    """For each scale step: ``{"t", "target" (endpoint count), "cloud_at", "proxy_at", "lag_s"}``;
    ``lag_s`` is ``proxy_at - cloud_at`` (0 if the proxy was there first), ``inf`` when the proxy
    never matched in the window, None when the cloud itself never settled in it.

    Args:
        cloud: the Service's ready endpoints as the cloud showed them.
        proxy: the node's kube-proxy backends.
        scale_times: when each scale step was done.
        next_times: for each, when its window ends (next fault or the run's end).
    """
    out = []
    for t, end in zip(scale_times, next_times, strict=True):
        target = set_at(cloud, end)
        if target is None:
            out.append({"t": t, "target": None, "cloud_at": None, "proxy_at": None, "lag_s": None})
            continue
        cloud_at = first_time_equal(cloud, target, start=t, end=end)
        proxy_at = first_time_equal(proxy, target, start=t, end=end)
        if cloud_at is None:
            lag: float | None = None
        elif proxy_at is None:
            lag = math.inf
        else:
            lag = max(0.0, proxy_at - cloud_at)
        out.append({"t": t, "target": len(target), "cloud_at": cloud_at, "proxy_at": proxy_at, "lag_s": lag})
    return out

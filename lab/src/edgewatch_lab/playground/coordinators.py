"""What the playground records of a pool's coordinator, and how a report measures its recovery
after a ``kill-coordinator`` (docs/lab.md: the coordinator rescheduled, the pool led, the cache back).

The runner's :class:`edgewatch_lab.playground.coordinatorwatch.CoordinatorWatch` fills, per pool
with a coordinator, a :class:`CoordinatorSeries` from what edgewatch publishes (never from the
coordinator's etcd, which admits only the pool's nodes):

* ``pods``: ``[t, node | None, ready]`` each time the coordinator pod's placement changed (the
  newest pod not being deleted, from the API: labels ``app.kubernetes.io/component=coordinator``,
  ``edgewatch.io/pool=<pool>``; node None = none bound);
* ``urls``: ``[t, url | None]`` each time the discovery ConfigMap ``edgewatch-pool-coordinators``
  named another URL for the pool;
* ``leader``: ``[t, node | None]`` each time the pool's leader as its live agents publish it (their
  ``EdgePoolCoordinator`` Node condition, :func:`leader_from_conditions`) changed;
* ``cache``: ``[t, served, live]`` each time the number of live nodes of the pool whose pool cache
  reads from the coordinator (their metric ``edgewatch_poolcache_source{source="coordinator"}``)
  changed.

:func:`coordinator_recoveries` turns them and the run's faults into one record per kill.

Limits: pure data in, data out; times are the observer's (resolution: its poll period plus one API
or metrics round trip).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "CoordinatorSeries",
    "cache_source_is_coordinator",
    "coordinator_recoveries",
    "leader_from_conditions",
    "newest_placement",
]

_LEADER_IN_MESSAGE: Final = re.compile(r";\s*leader\s+(\S+?);")


@dataclass
class CoordinatorSeries:
    """One pool's coordinator over a run (see the module docstring); each append only on change."""

    pods: list[list[Any]] = field(default_factory=list)
    urls: list[list[Any]] = field(default_factory=list)
    leader: list[list[Any]] = field(default_factory=list)
    cache: list[list[Any]] = field(default_factory=list)

    def note(self, series: str, t: float, *value: Any) -> None:
        """Append ``[t, *value]`` to ``series`` unless its last value is the same."""
        rows: list[list[Any]] = getattr(self, series)
        if not rows or rows[-1][1:] != list(value):
            rows.append([t, *value])


def newest_placement(pods: Iterable[Mapping[str, Any]]) -> tuple[str | None, bool]:
    """``(node, ready)`` of the newest coordinator pod not being deleted (JSON mappings as the API
    returns them; creationTimestamp, then name); ``(None, False)`` without one."""
    live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    if not live:
        return None, False
    pod = max(live, key=lambda p: (str((p.get("metadata") or {}).get("creationTimestamp") or ""),
                                   str((p.get("metadata") or {}).get("name") or "")))
    node = (pod.get("spec") or {}).get("nodeName") or None
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in ((pod.get("status") or {}).get("conditions") or []))
    return node, bool(node) and ready


def leader_from_conditions(messages: Mapping[str, str | None], *, alive: Iterable[str]) -> str | None:
    """The pool's leader as its live agents publish it: ``messages`` maps a node to the message of
    its ``EdgePoolCoordinator`` condition (``pool P: <role>; leader <node>|none; coordinator ...``)
    or None. Only live nodes vote (a dead node's condition is stale) and only for a live node; the
    node named most often wins (ties: the smallest name). None when no live node names one."""
    alive = set(alive)
    votes: Counter[str] = Counter()
    for node, message in messages.items():
        if node not in alive or not message:
            continue
        m = _LEADER_IN_MESSAGE.search(message)
        if m and m.group(1) != "none" and m.group(1) in alive:
            votes[m.group(1)] += 1
    if not votes:
        return None
    best = max(votes.values())
    return min(n for n, v in votes.items() if v == best)


def cache_source_is_coordinator(metrics_text: str) -> bool:
    """Whether an agent's ``/metrics`` text says its pool cache reads from the coordinator
    (``edgewatch_poolcache_source{source="coordinator"} 1``)."""
    for line in metrics_text.splitlines():
        if line.startswith("edgewatch_poolcache_source{") and 'source="coordinator"' in line:
            try:
                return float(line.rsplit(None, 1)[1]) == 1.0
            except (IndexError, ValueError):
                return False
    return False


def _first(rows: list[list[Any]], since: float, until: float, ok: Any) -> list[Any] | None:
    return next((r for r in rows if since <= float(r[0]) < until and ok(r)), None)


def _at(rows: list[list[Any]], t: float) -> list[Any] | None:
    before = [r for r in rows if float(r[0]) <= t]
    return before[-1] if before else None


def coordinator_recoveries(series: Mapping[str, list[list[Any]]], faults: list[Mapping[str, Any]], *, pool: str,
                           end: float) -> list[dict[str, Any]]:
    """One record per ``kill-coordinator`` of ``pool`` in ``faults`` (time-sorted or not), measured
    until the next one or ``end``: ``t``, ``node`` (the node killed with it, pods mode; else None),
    ``moved_to`` and ``ready_s`` (the first Ready pod on another node), ``url_s`` (the discovery
    ConfigMap names a URL other than the one at the kill), ``back_s`` (the coordinator is back:
    ``ready_s``, else the pool's ``revive-coordinator`` after the kill), ``led_s`` (a leader is
    published at or after ``back_s``), ``cache_s`` (every live node serves its cache from the
    coordinator at or after ``back_s``). Seconds from the kill, rounded to 0.1; None: never."""
    kills = sorted(float(f["t"]) for f in faults if f.get("action") == "kill-coordinator" and f.get("pool") == pool)
    revives = sorted(float(f["t"]) for f in faults
                     if f.get("action") == "revive-coordinator" and f.get("pool") == pool)
    nodes = {float(f["t"]): f.get("node") for f in faults if f.get("action") == "kill-coordinator"
             and f.get("pool") == pool}
    pods, urls = list(series.get("pods", [])), list(series.get("urls", []))
    leader, cache = list(series.get("leader", [])), list(series.get("cache", []))

    def since(k: float, row: list[Any] | None) -> float | None:
        return None if row is None else round(float(row[0]) - k, 1)

    out: list[dict[str, Any]] = []
    for i, k in enumerate(kills):
        until = kills[i + 1] if i + 1 < len(kills) else end
        killed = nodes.get(k)
        moved = _first(pods, k, until, lambda r: r[1] is not None and r[2] and r[1] != killed) if killed else None
        url_at_kill = (_at(urls, k) or [k, None])[1]
        url = _first(urls, k, until, lambda r: r[1] is not None and r[1] != url_at_kill)
        revive = next((r for r in revives if k <= r < until), None)
        back = float(moved[0]) if moved is not None else revive
        rec: dict[str, Any] = {"t": k, "node": killed, "moved_to": moved[1] if moved else None,
                               "ready_s": since(k, moved), "url_s": since(k, url),
                               "back_s": None if back is None else round(back - k, 1), "led_s": None, "cache_s": None}
        if back is not None:
            rec["led_s"] = since(k, _holds_from(leader, back, until, lambda r: r[1] is not None and r[1] != killed))
            rec["cache_s"] = since(k, _holds_from(cache, back, until, lambda r: r[2] > 0 and r[1] == r[2]))
        out.append(rec)
    return out


def _holds_from(rows: list[list[Any]], back: float, until: float, ok: Any) -> list[Any] | None:
    """The first time at or after ``back`` (before ``until``) at which ``ok`` holds of the row in
    force: ``back`` itself if the row in force then already satisfies it."""
    row = _at(rows, back)
    if row is not None and ok(row):
        return [back, *row[1:]]
    return _first(rows, back, until, ok)

"""What the playground records of a scenario's StatefulSets (``statefulsets``: one replica each,
preferring a named node), and how a report judges where their pod went (docs/out-of-service.md: the
out-of-service taint lets a dead node's StatefulSet pod be recreated elsewhere).

The observer fills, per declared StatefulSet, a :class:`StatefulSetSeries`: ``pods``, one entry
``{"t", "pod", "uid", "node", "ready", "deleting", "gone"}`` each time one of its pods (told apart
by uid: a StatefulSet's replacement keeps the name) changed its node, its Ready condition or got a
deletionTimestamp (``deleting``), and one with ``gone: true`` when it left the API.

:func:`statefulset_outcome` turns a series and the kills of the node its pod started on into:

* ``start``: the pod seen first (``{"t", "pod", "uid", "node"}``; None: no pod was ever seen);
* ``killed_at``: the first kill of the start node (None: never killed); ``on_node_at_kill``: the
  start pod was still there, not being deleted, at that kill (None: never killed; false: it had
  been deleted before, e.g. evicted by stock Kubernetes while its node was cut off);
* ``deleted_at``: when the start pod first had a deletionTimestamp or was gone (None: never);
  ``gone_at``: when it left the API (None: never; a dead node's pod leaves only when force-deleted);
* ``moved_at`` / ``moved_to`` / ``moved_s``: the first time another pod (uid) of the StatefulSet was
  Ready, not being deleted, on another node than the start node, at or after the kill (t=0 if the
  start node was never killed or the start pod was gone from it before the kill); ``moved_s`` is
  seconds from that kill (or from t=0). None: never;
* ``at_end``: the pods still in the API at the end (their last entry each, oldest first);
* ``stays``: the start pod was never deleted and is still there at the end.

Limits: pure data in, data out (the observer turns API objects into entries); times are the
observer's, so every figure's resolution is its poll period plus one API round trip.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["POD_FIELDS", "StatefulSetSeries", "record_pods", "statefulset_outcome"]

#: What each entry says of a pod, besides ``t`` and ``gone``.
POD_FIELDS = ("pod", "uid", "node", "ready", "deleting")


@dataclass
class StatefulSetSeries:
    """One declared StatefulSet over a run: the node it prefers and its pods' changes."""

    #: The node the scenario pins it to (preferred node affinity).
    node: str
    #: ``{"t", "pod", "uid", "node", "ready", "deleting", "gone"}`` per change of one of its pods.
    pods: list[dict[str, Any]] = field(default_factory=list)


def _last_by_uid(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    last: dict[str, dict[str, Any]] = {}
    for e in sorted(entries, key=lambda e: float(e["t"])):
        last[e["uid"]] = e
    return last


def record_pods(series: StatefulSetSeries, t: float, pods: list[dict[str, Any]]) -> None:
    """Append what changed: ``pods`` is every pod of the StatefulSet the API lists now, each
    ``{"pod", "uid", "node", "ready", "deleting"}`` (node "" when unbound). A pod seen before and
    absent now gets one ``gone`` entry."""
    last = _last_by_uid(series.pods)
    now = {p["uid"]: p for p in pods}
    for uid, seen in last.items():  # first: a pod gone makes room for its replacement
        if uid not in now and not seen["gone"]:
            series.pods.append({**seen, "t": t, "ready": False, "gone": True})
    for uid, p in now.items():
        seen = last.get(uid)
        view = {k: p[k] for k in POD_FIELDS}
        if seen is None or seen["gone"] or any(seen[k] != view[k] for k in POD_FIELDS):
            series.pods.append({"t": t, **view, "gone": False})


def statefulset_outcome(series: StatefulSetSeries | dict[str, Any], *,
                        kills: Mapping[str, list[float]]) -> dict[str, Any]:
    """Where the StatefulSet's pod went (see the module docstring); ``kills``: node -> the times it
    was killed (a node missing: never)."""
    node = series.node if isinstance(series, StatefulSetSeries) else series["node"]
    entries = sorted((dict(e) for e in (series.pods if isinstance(series, StatefulSetSeries) else series["pods"])),
                     key=lambda e: float(e["t"]))
    out: dict[str, Any] = {"node": node, "start": None, "killed_at": None, "on_node_at_kill": None,
                           "deleted_at": None, "gone_at": None,
                           "moved_at": None, "moved_to": None, "moved_s": None, "at_end": [], "stays": False}
    if not entries:
        return out
    first_t = float(entries[0]["t"])
    firsts = [e for e in entries if float(e["t"]) == first_t and not e["gone"]] or entries[:1]
    first = next((e for e in firsts if not e["deleting"]), firsts[0])
    start = {"t": first["t"], "pod": first["pod"], "uid": first["uid"], "node": first["node"]}
    out["start"] = start
    node_kills = kills.get(start["node"], [])
    out["killed_at"] = min(node_kills) if node_kills else None
    out["deleted_at"] = next((e["t"] for e in entries if e["uid"] == start["uid"] and (e["deleting"] or e["gone"])),
                             None)
    out["gone_at"] = next((e["t"] for e in entries if e["uid"] == start["uid"] and e["gone"]), None)
    if out["killed_at"] is not None:
        out["on_node_at_kill"] = out["deleted_at"] is None or float(out["deleted_at"]) >= float(out["killed_at"])
    since = float(out["killed_at"]) if out["on_node_at_kill"] else 0.0
    moved = next((e for e in entries
                  if e["uid"] != start["uid"] and e["ready"] and not e["deleting"] and not e["gone"]
                  and e["node"] and e["node"] != start["node"] and float(e["t"]) >= since), None)
    if moved is not None:
        out["moved_at"], out["moved_to"] = moved["t"], moved["node"]
        out["moved_s"] = round(float(moved["t"]) - since, 3)
    last = _last_by_uid(entries)
    out["at_end"] = [{k: e[k] for k in POD_FIELDS} for e in last.values() if not e["gone"]]
    out["stays"] = out["deleted_at"] is None and start["uid"] in {e["uid"] for e in out["at_end"]}
    return out

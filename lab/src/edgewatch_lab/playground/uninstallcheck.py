"""Judging a run's ``uninstall`` step: the expectation keys ``clean_at_end`` and
``evicted_after_uninstall_within_s`` (``edgewatch_lab.playground.scenario`` documents them).

Pure: reads the report (``report["uninstall"]``, each node's ``marks`` and ``evictions``) and
returns ``(description, passed, detail)``, the fields of ``checks.ExpectationResult`` in order.
"""

from __future__ import annotations

from typing import Any


def _fmt(x: float) -> str:
    return f"{x:.1f}"


def check_clean(report: dict[str, Any], targets: list[str], label: str, value: bool) -> tuple[str, bool, str]:
    """``clean_at_end``: no mark on the targets at the end, nothing of edgewatch left in the cluster,
    and ``edgewatch uninstall`` exited 0 (true), or something left (false)."""
    desc = f"{label}: {'nothing of edgewatch left' if value else 'something of edgewatch left'} at the end"
    record = report.get("uninstall")
    if record is None:
        return desc, False, "no uninstall step ran (edgewatch runs only)"
    nodes = report["nodes"]
    left: list[str] = []
    for name in targets:
        series = nodes.get(name, {}).get("marks")
        if not series:
            left.append(f"{name}: never observed")
            continue
        t, marks = series[-1]
        if marks:
            left.append(f"{name} since {_fmt(float(t))} s: {', '.join(marks)}")
    found = record.get("left") or {}
    if found.get("objects"):
        left.append("objects: " + ", ".join(found["objects"]))
    if found.get("errors"):
        left.append("could not look: " + "; ".join(found["errors"]))
    if record.get("cleanup_exit") != 0:
        left.append(f"edgewatch uninstall exited {record.get('cleanup_exit')}: {record.get('cleanup', '')}")
    clean = not left
    terminating = found.get("terminating_pods") or []
    after = f" (pods waiting for their node: {', '.join(terminating)})" if terminating else ""
    detail = ("nothing left" + after) if clean else "left: " + "; ".join(left)
    return desc, clean == value, detail


def check_evicted_after(report: dict[str, Any], targets: list[str], label: str,
                        limit_s: float) -> tuple[str, bool, str]:
    """``evicted_after_uninstall_within_s``: no target's pod evicted before the uninstall step, and
    each target's first eviction at most ``limit_s`` seconds after it."""
    desc = f"{label}: kept until the uninstall, evicted within {_fmt(limit_s)} s after it"
    record = report.get("uninstall")
    if record is None:
        return desc, False, "no uninstall step ran (edgewatch runs only)"
    at = float(record["t"])
    nodes = report["nodes"]
    bad: list[str] = []
    seen: list[str] = []
    for name in targets:
        times = sorted(float(e["t"]) for e in nodes.get(name, {}).get("evictions", []))
        before = [t for t in times if t < at]
        after = [t for t in times if t >= at]
        if before:
            bad.append(f"{name} evicted at {_fmt(before[0])} s, before the uninstall at {_fmt(at)} s")
        elif not after:
            bad.append(f"{name} never evicted after the uninstall at {_fmt(at)} s")
        elif after[0] - at > limit_s:
            bad.append(f"{name} evicted {_fmt(after[0] - at)} s after the uninstall")
        else:
            seen.append(f"{name} {_fmt(after[0] - at)} s")
    if bad:
        return desc, False, "; ".join(bad)
    return desc, True, "evicted after the uninstall: " + ", ".join(seen)

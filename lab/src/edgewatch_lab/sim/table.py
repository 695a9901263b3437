"""The table ``edgewatch sim`` prints (and docs/scaling.md shows): one row per group size, with the
targets for groups of 1,000 next to the figures.

:func:`measure` runs every measurement of :mod:`edgewatch_lab.sim.report` for each size and returns a
plain, JSON-serialisable dict; :func:`markdown` renders it. Both are deterministic for a seed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from edgewatch_lab.sim import report

__all__ = ["DEFAULT_SIZES", "SPLITS", "TARGETS", "markdown", "measure"]

DEFAULT_SIZES = (5, 50, 200, 1000)
SPLITS: dict[str, tuple[float, ...]] = {"60/40": (0.6, 0.4), "50/50": (0.5, 0.5), "40/30/30": (0.4, 0.3, 0.3)}
TARGETS = {
    "detection_s": {50: 10.0, 1000: 15.0},
    "messages_per_period": 12,
    "false_unhealthy": 0,
}
"""The targets for groups of 1,000 (docs/scaling.md): detection <= 10 s at n = 50 and <= 15 s at
1,000; <= 12 messages per node per period at any n; 0 false unhealthy verdicts at 30 % loss."""


def measure(*, sizes: Sequence[int] = DEFAULT_SIZES, seed: int = 1, kills: int = 10, node_hours: float = 20.0,
            losses: Sequence[float] = (0.1, 0.3), cost_sizes: Sequence[int] | None = None,
            progress: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """Every figure for every size. ``node_hours``: per size and loss level; ``cost_sizes``: the
    sizes measured with real envelopes (default: all)."""
    rows = []
    for n in sizes:
        det = report.detection(n, kills=kills, seed=seed, progress=progress)
        falses = [report.false_verdicts(n, loss=loss, node_hours=node_hours, seed=seed, progress=progress)
                  for loss in losses]
        c = report.cost(n, seed=seed, progress=progress) if cost_sizes is None or n in cost_sizes else None
        splits = {name: [side.label() for side in report.split(n, fr, seed=seed, progress=progress)]
                  for name, fr in SPLITS.items() if n >= 2 * len(fr)}
        rows.append({
            "n": n,
            "detection_median_s": round(det.median_s, 2),
            "detection_p99_s": round(det.p99_s, 2),
            "kills": len(det.times_s) + det.missed,
            "missed": det.missed,
            "false": [{"loss": f.loss, "node_hours": round(f.node_hours, 1), "unhealthy": f.unhealthy,
                       "unknown": f.unknown, "writes_per_node_min": round(f.writes_per_node_min, 1)}
                      for f in falses],
            "messages_per_period": None if c is None else round(c.messages_per_period, 2),
            "max_messages_per_period": None if c is None else round(c.max_messages_per_period, 2),
            "bytes_per_message": None if c is None else round(c.bytes_per_message),
            "splits": splits,
        })
    return {"seed": seed, "rows": rows}


def markdown(result: dict[str, Any]) -> str:
    """The result as two Markdown tables (figures; split outcomes)."""
    lines = [
        "| nodes | kill → unhealthy, median / p99 (s) | false unhealthy (unknown) at 10 % loss | at 30 % loss "
        "| messages per node per period (max) | bytes per message | cloud writes per node per min at 30 % loss |",
        "|---:|---|---|---|---|---:|---:|",
    ]
    for row in result["rows"]:
        falses = {f["loss"]: f for f in row["false"]}

        def fv(loss: float, falses: dict[float, Any] = falses) -> str:
            f = falses.get(loss)
            if f is None:
                return "–"
            return f"{f['unhealthy']} ({f['unknown']}) in {f['node_hours']:g} node-h"

        msgs = "–" if row["messages_per_period"] is None else \
            f"{row['messages_per_period']:.1f} ({row['max_messages_per_period']:.0f})"
        size = "–" if row["bytes_per_message"] is None else f"{row['bytes_per_message']:,}"
        writes = f"{falses[0.3]['writes_per_node_min']:.1f}" if 0.3 in falses else "–"
        missed = f", {row['missed']} missed" if row["missed"] else ""
        lines.append(f"| {row['n']:,} | {row['detection_median_s']:.1f} / {row['detection_p99_s']:.1f} "
                     f"({row['kills']} kills{missed}) | {fv(0.1)} | {fv(0.3)} | {msgs} | {size} "
                     f"| {writes} |")
    lines += ["", "| nodes | " + " | ".join(f"split {name}" for name in SPLITS) + " |",
              "|---:|" + "---|" * len(SPLITS)]
    for row in result["rows"]:
        cells = [" · ".join(row["splits"][name]) if name in row["splits"] else "–" for name in SPLITS]
        lines.append(f"| {row['n']:,} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Split cells: side size: verdicts (H healthy, U unhealthy, ? unknown), 40 s after the split, "
                 "every side's cloud link up.")
    return "\n".join(lines)

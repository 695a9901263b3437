"""Timeline plot of playground runs: one panel per run, one lane per node.

In each lane: coloured bars for the node's state over time (normal green, disconnected yellow, unknown
purple, failed red, SuperEdge's unhealthy dark red, not_ready orange), a hatched overlay while the Node's Ready condition was not True,
small triangles where taints were added (up) or removed (down), and ``x`` where pods were evicted.
The scenario's faults are shaded behind the lanes they hit (cut from cut-cloud to restore-cloud / heal /
end, split and loss until heal / end, kill until revive / end, coordinator down until revive-coordinator
/ end) and labelled; cluster-wide steps (restart-controller, heal, a kill-leader whose node is not
known) are dashed vertical lines.

matplotlib is an optional dependency (``pip install edgewatch[plot]``). This module uses the
object-oriented API with the Agg canvas (no pyplot, no global backend switch); the only global it
touches is a temporary ``rc_context`` so SVG text stays text (searchable, and node names can be found).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgewatch_lab.playground.comparison import SYSTEMS, run_label, system_of
from edgewatch_lab.playground.report import report_end

__all__ = ["FAULT_COLOURS", "STATE_COLOURS", "fault_spans", "plot_runs"]

STATE_COLOURS = {
    "normal": "#2ca02c",
    "disconnected": "#f2c80f",
    "unknown": "#9467bd",
    "failed": "#d62728",
    "unhealthy": "#8c1d1d",
    "not_ready": "#ff7f0e",
}
_OTHER_STATE = "#7f7f7f"

FAULT_COLOURS = {
    "cut-cloud": "#1f77b4",
    "split": "#8c564b",
    "loss": "#17becf",
    "kill": "#000000",
    "coordinator down": "#e377c2",
}


def _node_key(name: str) -> tuple:
    pool, _, n = name.rpartition("-")
    return (pool, int(n)) if n.isdigit() else (name, -1)


def _fault_nodes(fault: dict[str, Any], nodes: dict[str, Any]) -> list[str]:
    out: list[str] = []
    if fault.get("nodes"):
        out += list(fault["nodes"])
    if fault.get("node"):
        out.append(fault["node"])
    if fault.get("sides"):
        out += [n for side in fault["sides"] for n in side]
    if not out and fault.get("pool") is not None:
        out = [n for n, rec in nodes.items() if rec.get("pool") == fault["pool"]]
    return out


def fault_spans(report: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The report's faults as ``spans`` [{kind, label, start, end, nodes}] and ``marks`` [{t, label}].

    Pure (no matplotlib), so the interval logic is testable on its own.
    """
    nodes = report["nodes"]
    end = report_end(report)
    open_: dict[tuple[str, str], tuple[float, str]] = {}  # (kind, node or pool) -> (start, label)
    spans: list[dict[str, Any]] = []
    marks: list[dict[str, Any]] = []

    def close(kind: str, key: str, t: float) -> None:
        if (kind, key) in open_:
            start, label = open_.pop((kind, key))
            if t > start:
                spans.append({"kind": kind, "label": label, "start": start, "end": t, "key": key})

    def close_kinds(kinds: tuple[str, ...], t: float) -> None:
        for kind, key in list(open_):
            if kind in kinds:
                close(kind, key, t)

    for f in sorted(report.get("faults", []), key=lambda f: float(f["t"])):
        t, action = float(f["t"]), f.get("action", "")
        targets = _fault_nodes(f, nodes)
        if action == "cut-cloud":
            for n in targets:
                open_.setdefault(("cut-cloud", n), (t, "cut"))
        elif action == "restore-cloud":
            for n in targets:
                close("cut-cloud", n, t)
        elif action == "split":
            label = "split " + " | ".join(",".join(s) for s in f.get("sides") or [])
            for n in targets:
                close("split", n, t)
                open_[("split", n)] = (t, label)
        elif action == "loss":
            pct = f.get("percent", 0)
            for n in targets:
                close("loss", n, t)
                if pct:
                    open_[("loss", n)] = (t, f"loss {pct}%")
        elif action in ("kill", "kill-leader") and f.get("node"):
            open_.setdefault(("kill", f["node"]), (t, action))
        elif action == "revive":
            for n in targets:
                close("kill", n, t)
        elif action == "kill-coordinator":
            for n in targets:
                open_.setdefault(("coordinator down", n), (t, "coordinator down"))
        elif action == "revive-coordinator":
            for n in targets:
                close("coordinator down", n, t)
        elif action == "heal":
            close_kinds(("cut-cloud", "split", "loss"), t)
            marks.append({"t": t, "label": "heal"})
        elif action == "end":
            pass
        else:  # restart-controller, kill-leader without a known node, anything new
            marks.append({"t": t, "label": action})
    for kind, key in list(open_):
        close(kind, key, end)

    # one span per (kind, label, start, end) with all its nodes
    grouped: dict[tuple, list[str]] = {}
    for s in spans:
        grouped.setdefault((s["kind"], s["label"], s["start"], s["end"]), []).append(s["key"])
    merged = [{"kind": k, "label": lbl, "start": a, "end": b, "nodes": sorted(ns, key=_node_key)}
              for (k, lbl, a, b), ns in grouped.items()]
    merged.sort(key=lambda s: (s["start"], s["kind"]))
    return merged, marks


def _title(report: dict[str, Any]) -> str:
    return f"{report.get('scenario', '?')}: {run_label(system_of(report))}"


def _draw_run(ax: Any, report: dict[str, Any], x_end: float) -> None:
    from matplotlib.patches import Rectangle

    nodes = report["nodes"]
    names = sorted(nodes, key=_node_key)
    lane = {n: i for i, n in enumerate(names)}
    end = report_end(report)

    spans, marks = fault_spans(report)
    # rough width of a label in data units (6.5 pt font, ~10 inch wide axes), to keep labels apart
    per_char = x_end / 10.0 * (6.5 * 0.6 / 72.0)
    taken: dict[int, list[tuple[float, float]]] = {}
    for s in spans:
        colour = FAULT_COLOURS.get(s["kind"], "#7f7f7f")
        for n in s["nodes"]:
            if n in lane:
                ax.add_patch(Rectangle((s["start"], lane[n] - 0.45), s["end"] - s["start"], 0.9,
                                       facecolor=colour, alpha=0.13, edgecolor="none", zorder=0))
        top = min((lane[n] for n in s["nodes"] if n in lane), default=None)
        if top is not None:
            x = s["start"]
            width = (len(s["label"]) + 1) * per_char
            for a, b in sorted(taken.get(top, [])):
                if x < b and a < x + width:
                    x = b
            taken.setdefault(top, []).append((x, x + width))
            ax.text(x, top - 0.47, s["label"], fontsize=6.5, color=colour, va="bottom",
                    ha="left", zorder=5, clip_on=False)
    for m in marks:
        ax.axvline(m["t"], color="#555555", linestyle="--", linewidth=0.8, zorder=1)
        ax.text(m["t"], -0.6, m["label"], fontsize=6.5, color="#333333", rotation=0, va="bottom",
                ha="left", zorder=5, clip_on=False)

    for n in names:
        y = lane[n]
        rec = nodes[n]
        states = rec.get("states", [])
        for i, (t, state) in enumerate(states):
            stop = states[i + 1][0] if i + 1 < len(states) else end
            if stop > t:
                ax.add_patch(Rectangle((t, y - 0.25), stop - t, 0.5,
                                       facecolor=STATE_COLOURS.get(state, _OTHER_STATE),
                                       edgecolor="none", zorder=2))
        for start, stop in rec.get("not_ready", []):
            stop = end if stop is None else stop
            if stop > start:
                ax.add_patch(Rectangle((start, y - 0.25), stop - start, 0.5, facecolor="none",
                                       edgecolor="#222222", hatch="////", linewidth=0, zorder=3))
        added = [t for t, _, c in rec.get("taints", []) if c == "added"]
        removed = [t for t, _, c in rec.get("taints", []) if c == "removed"]
        if added:
            ax.plot(added, [y + 0.34] * len(added), linestyle="none", marker="^", markersize=4,
                    color="#444444", zorder=4)
        if removed:
            ax.plot(removed, [y + 0.34] * len(removed), linestyle="none", marker="v", markersize=4,
                    color="#aaaaaa", markeredgecolor="#444444", markeredgewidth=0.5, zorder=4)
        evs = [e["t"] for e in rec.get("evictions", [])]
        if evs:
            ax.plot(evs, [y] * len(evs), linestyle="none", marker="x", markersize=6, color="#000000",
                    markeredgewidth=1.3, zorder=4)

    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(names)
    ax.set_ylim(len(names) - 0.4, -0.75)
    ax.set_xlim(0, x_end)
    ax.set_title(_title(report), loc="left", fontsize=10, pad=14)
    ax.grid(axis="x", color="#dddddd", linewidth=0.5, zorder=0)
    ax.set_axisbelow(True)


def _legend_handles() -> list[Any]:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Any] = [Patch(facecolor=c, label=s) for s, c in STATE_COLOURS.items()]
    handles.append(Patch(facecolor="white", edgecolor="#222222", hatch="////", label="NotReady"))
    handles.append(Line2D([], [], linestyle="none", marker="^", color="#444444", label="taint added"))
    handles.append(Line2D([], [], linestyle="none", marker="v", color="#aaaaaa", markeredgecolor="#444444",
                          label="taint removed"))
    handles.append(Line2D([], [], linestyle="none", marker="x", color="#000000", label="eviction"))
    handles += [Patch(facecolor=c, alpha=0.25, label=f"fault: {k}") for k, c in FAULT_COLOURS.items()]
    return handles


def plot_runs(reports: list[dict[str, Any]], path: Path | str) -> Path:
    """Plot the runs (edgewatch above, baseline below) to ``path``; SVG or PNG by its suffix."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in ("svg", "png"):
        raise ValueError(f"plot file must end in .svg or .png, got {path.name!r}")
    if not reports:
        raise ValueError("nothing to plot: no reports")
    runs = sorted(reports, key=lambda r: SYSTEMS.index(system_of(r)))  # stable: edgewatch, superedge, stock
    x_end = max(report_end(r) for r in runs)
    heights = [max(1, len(r["nodes"])) * 0.42 + 1.0 for r in runs]

    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "edgewatch"}):
        fig = Figure(figsize=(12, sum(heights) + 0.8), layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(len(runs), 1, sharex=True, squeeze=False,
                            gridspec_kw={"height_ratios": heights})[:, 0]
        for ax, report in zip(axes, runs):
            _draw_run(ax, report, x_end)
        axes[-1].set_xlabel("seconds from start")
        fig.legend(handles=_legend_handles(), loc="outside right center", fontsize=7, frameon=False)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format=fmt, dpi=120 if fmt == "png" else None,
                    metadata={"Date": None} if fmt == "svg" else None)
    return path

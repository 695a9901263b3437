"""The side-by-side summary of playground runs: the report's summary (``report.build_report``) of
an edgewatch run and of a baseline run (stock Kubernetes), row by row, as a ``rich`` table or
Markdown (for docs/lab.md and the README's key results); ``edgewatch_lab.playground.comparison``
uses the same rows for more systems.

Limits: pure; a missing run or a row a report lacks shows ``-``.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["SUMMARY_ROWS", "format_summary_table", "summary_markdown", "summary_rows"]

#: (row label, summary key) in display order.
SUMMARY_ROWS = (
    ("evictions on live nodes", "evictions_on_live_nodes"),
    ("endpoint removals on live nodes", "endpoint_removals_on_live_nodes"),
    ("killed nodes not evicted", "killed_nodes_not_evicted"),
    ("max detection s", "max_detection_s"),
    ("max eviction s", "max_eviction_s"),
    ("uncovered node: kill -> NotReady s", "max_not_ready_after_kill_s"),
    ("cloud watch bytes, EndpointSlices+Services", "pool_scope_cloud_bytes"),
    ("cloud watches open on them at the end", "pool_scope_open_watches"),
    ("StatefulSet pod of a dead node: kill -> Ready elsewhere s", "max_statefulset_move_s"),
    ("live nodes that went NotReady", "live_nodes_not_ready"),
    ("false verdicts on live nodes (failed / unhealthy)", "false_verdicts_on_live_nodes"),
    ("agent CPU per node, % of a core (median)", "agent_cpu_pct"),
    ("agent RSS per node, MiB (median)", "agent_rss_mib"),
    ("sent to peers per node per minute: packets", "peer_packets_per_min"),
    ("sent to peers per node per minute: TCP connections", "peer_connections_per_min"),
    ("sent to peers per node per minute: KiB", "peer_kib_per_min"),
    ("sent to the cloud per node per minute: packets", "cloud_packets_per_min"),
    ("sent to the cloud per node per minute: KiB", "cloud_kib_per_min"),
)
#: Rows shown only when one of the runs measured them (reports older than a row lack its key).
_OPTIONAL_ROWS = ("pool_scope_cloud_bytes", "pool_scope_open_watches", "max_statefulset_move_s",
                  "live_nodes_not_ready", "false_verdicts_on_live_nodes", "agent_cpu_pct", "agent_rss_mib",
                  "peer_packets_per_min", "peer_connections_per_min", "peer_kib_per_min",
                  "cloud_packets_per_min", "cloud_kib_per_min")


def _cell(summary: dict[str, Any] | None, key: str) -> str:
    if summary is None:
        return "-"
    v = summary.get(key)
    if key == "killed_nodes_not_evicted":
        v = v or []
        return f"{len(v)} ({', '.join(v)})" if v else "0"
    if key == "max_statefulset_move_s" and summary.get("statefulsets_not_moved"):
        return f"never ({', '.join(summary['statefulsets_not_moved'])})"
    if key in ("max_detection_s", "max_eviction_s", "max_not_ready_after_kill_s", "max_statefulset_move_s"):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "-"
        text = f"{v:.1f}"
        if key == "max_detection_s" and summary.get("undetected"):
            text += f" (undetected: {', '.join(summary['undetected'])})"
        return text
    if v is None:
        return "-"
    if key == "pool_scope_cloud_bytes":
        return f"{v / 1024:.0f} KiB"
    return str(v)


def summary_rows(edgewatch_report: dict[str, Any] | None,
                 baseline_report: dict[str, Any] | None) -> list[tuple[str, str, str]]:
    """``(label, edgewatch cell, stock Kubernetes cell)`` per summary row; a missing run shows ``-``."""
    ew = edgewatch_report["summary"] if edgewatch_report else None
    base = baseline_report["summary"] if baseline_report else None
    rows = [(label, _cell(ew, key), _cell(base, key)) for label, key in SUMMARY_ROWS]
    optional = {label for label, key in SUMMARY_ROWS if key in _OPTIONAL_ROWS}
    return [r for r in rows if r[0] not in optional or r[1:] != ("-", "-")]  # shown when measured


def _scenario_name(*reports: dict[str, Any] | None) -> str:
    names = {r["scenario"] for r in reports if r}
    return ", ".join(sorted(names))


def format_summary_table(edgewatch_report: dict[str, Any] | None,
                         baseline_report: dict[str, Any] | None):
    """A ``rich.table.Table``: the summary rows, edgewatch | stock Kubernetes."""
    from rich.table import Table

    name = _scenario_name(edgewatch_report, baseline_report)
    table = Table(title=f"scenario {name}" if name else None, header_style="bold")
    table.add_column("")
    table.add_column("edgewatch", justify="right")
    table.add_column("stock Kubernetes", justify="right")
    for row in summary_rows(edgewatch_report, baseline_report):
        table.add_row(*row)
    return table


def summary_markdown(edgewatch_report: dict[str, Any] | None,
                     baseline_report: dict[str, Any] | None) -> str:
    """The same table in Markdown (for docs/lab.md and the README's key results)."""
    lines = ["| | edgewatch | stock Kubernetes |", "|---|---:|---:|"]
    for label, a, b in summary_rows(edgewatch_report, baseline_report):
        lines.append(f"| {label} | {a} | {b} |")
    return "\n".join(lines) + "\n"

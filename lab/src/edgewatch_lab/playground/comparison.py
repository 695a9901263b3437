"""One scenario on several systems side by side (``edgewatch playground compare --systems``): the
summary rows of each run's report in one column per system, for the console and for docs/lab.md.

Pure: reads reports (``edgewatch_lab.playground.report.build_report``), never the API. The rows
are the report's summary rows (``summarytable.SUMMARY_ROWS``), so every cell is a figure the report
itself carries and can be reproduced with ``edgewatch playground run SCENARIO --system S``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from edgewatch_lab.playground.summarytable import SUMMARY_ROWS, summary_rows

#: The systems a scenario runs on, in the order they are shown: edgewatch, SuperEdge's
#: edge-health, stock Kubernetes (the baseline).
SYSTEMS = ("edgewatch", "superedge", "stock")
#: How each system is named (column titles, console lines, timeline titles).
TITLES = {"edgewatch": "edgewatch", "superedge": "SuperEdge edge-health", "stock": "stock Kubernetes"}
#: Report file suffix per system (``<scenario><suffix>.json``; edgewatch and stock as before).
SUFFIXES = {"edgewatch": "", "superedge": "-superedge", "stock": "-baseline"}


def system_of(report: dict[str, Any]) -> str:
    """The system a report is of (reports written before the ``system`` field: from ``baseline``)."""
    return str(report.get("system") or ("stock" if report.get("baseline") else "edgewatch"))


def run_label(system: str) -> str:
    """A run's name on the live table and its timeline: the system's title, ``(baseline)`` for stock."""
    return TITLES.get(system, system) + (" (baseline)" if system == "stock" else "")


def rows(reports: dict[str, dict[str, Any]]) -> list[list[str]]:
    """``[label, cell per system...]`` per summary row, systems in ``reports``' order; a row no run
    measured is left out (as ``summary_rows`` does for two)."""
    columns = [summary_rows(report, None) for report in reports.values()]
    labels = [label for label, _key in SUMMARY_ROWS]
    cells: dict[str, list[str]] = {label: [] for label in labels}
    for column in columns:
        seen = {label: cell for label, cell, _other in column}
        for label in labels:
            cells[label].append(seen.get(label, "-"))
    return [[label, *values] for label, values in cells.items() if any(v != "-" for v in values)]


def table(reports: dict[str, dict[str, Any]]):  # type: ignore[no-untyped-def]
    """A ``rich.table.Table`` of ``rows`` with one column per system."""
    from rich.table import Table

    names = sorted({r["scenario"] for r in reports.values()})
    out = Table(title=f"scenario {', '.join(names)}" if names else None, header_style="bold")
    out.add_column("")
    for system in reports:
        out.add_column(TITLES.get(system, system), justify="right")
    for row in rows(reports):
        out.add_row(*row)
    return out


def markdown(reports: dict[str, dict[str, Any]]) -> str:
    """The same table in Markdown."""
    head = "| | " + " | ".join(TITLES.get(s, s) for s in reports) + " |"
    rule = "|---|" + "---:|" * len(reports)
    return "\n".join([head, rule, *("| " + " | ".join(row) + " |" for row in rows(reports))]) + "\n"


def load_reports(report_dir: Path, scenario: str, systems: tuple[str, ...] = SYSTEMS) -> dict[str, dict[str, Any]]:
    """``{system: report}`` of ``scenario`` read from ``report_dir`` (``<scenario><suffix>.json``),
    systems in ``systems``' order; a system with no report is left out.

    Raises:
        ValueError: a report file is not JSON, or is another system's or scenario's.
    """
    out: dict[str, dict[str, Any]] = {}
    for system in systems:
        path = report_dir / f"{scenario}{SUFFIXES[system]}.json"
        if not path.exists():
            continue
        try:
            report = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not a JSON report ({exc})") from exc
        if system_of(report) != system or report.get("scenario") != scenario:
            raise ValueError(f"{path}: a {system_of(report)} report of {report.get('scenario')!r}, "
                             f"expected {system} of {scenario!r}")
        out[system] = report
    return out


def scenarios_markdown(by_scenario: dict[str, dict[str, dict[str, Any]]], *, systems: tuple[str, ...] = SYSTEMS) -> str:
    """One Markdown table for several scenarios: ``| scenario | figure | <system>... |``, the rows of
    :func:`rows` per scenario (a system without a report there shows ``-``)."""
    head = "| scenario | figure | " + " | ".join(TITLES.get(s, s) for s in systems) + " |"
    lines = [head, "|---|---|" + "---:|" * len(systems)]
    for scenario, reports in by_scenario.items():
        full = {s: reports[s] for s in systems if s in reports}
        present = list(full)
        for label, *cells in rows(full):
            by_system = dict(zip(present, cells))
            lines.append(f"| {scenario} | {label} | " + " | ".join(by_system.get(s, "-") for s in systems) + " |")
    return "\n".join(lines) + "\n"

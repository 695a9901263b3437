"""One scenario on several systems side by side (edgewatch_lab.playground.comparison, pure)."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console
from rich.table import Table

from edgewatch_lab.playground import comparison
from edgewatch_lab.playground.comparison import SUFFIXES, TITLES, markdown, rows, system_of, table
from edgewatch_lab.playground.report import Recording, build_report
from edgewatch_lab.playground.summarytable import SUMMARY_ROWS

LABELS = {key: label for label, key in SUMMARY_ROWS}


# --------------------------------------------------------------------------------------------------
# reports


def recorded(system: str, *, state: str, detected_at: float, evicted_at: float | None) -> dict[str, Any]:
    """A run of scenario ``s`` on ``system``: edge-1 killed at 10 s, judged ``state`` at ``detected_at``,
    its pod evicted at ``evicted_at`` (None: never), the run ending at 400 s."""
    rec = Recording(scenario="s", baseline=system == "stock", system=system, ended_at=400.0)
    node = rec.add_node("edge-1", "edge")
    node.observe_state(0.0, "normal")
    node.record_kill(10.0, pods=1)
    node.observe_state(detected_at, state)
    if evicted_at is not None:
        node.record_eviction(evicted_at, "web-0")
    rec.add_node("edge-2", "edge").observe_state(0.0, "normal")
    return build_report(rec)


@pytest.fixture
def reports() -> dict[str, dict[str, Any]]:
    return {
        "edgewatch": recorded("edgewatch", state="failed", detected_at=14.0, evicted_at=20.0),
        "superedge": recorded("superedge", state="unhealthy", detected_at=80.0, evicted_at=None),
        "stock": recorded("stock", state="not_ready", detected_at=50.0, evicted_at=340.0),
    }


def hand_made(scenario: str = "s", **summary: Any) -> dict[str, Any]:
    base = {"evictions_on_live_nodes": 0, "endpoint_removals_on_live_nodes": 0, "killed_nodes_not_evicted": [],
            "max_detection_s": None, "max_eviction_s": None, "undetected": [], "max_not_ready_after_kill_s": None,
            "pool_scope_cloud_bytes": None, "pool_scope_open_watches": None, "max_statefulset_move_s": None,
            "statefulsets_not_moved": []}
    return {"scenario": scenario, "summary": {**base, **summary}}


def by_label(table_rows: list[list[str]]) -> dict[str, list[str]]:
    return {row[0]: row[1:] for row in table_rows}


# --------------------------------------------------------------------------------------------------
# system_of


@pytest.mark.parametrize(("report", "expected"), [
    ({"system": "superedge", "baseline": False}, "superedge"),
    ({"system": "superedge", "baseline": True}, "superedge"),  # the field wins over baseline
    ({"system": "edgewatch", "baseline": True}, "edgewatch"),
    ({"system": "stock", "baseline": False}, "stock"),
    ({"baseline": True}, "stock"),
    ({"baseline": False}, "edgewatch"),
    ({}, "edgewatch"),
    ({"system": None, "baseline": True}, "stock"),
])
def test_system_of(report: dict[str, Any], expected: str) -> None:
    assert system_of(report) == expected


def test_system_of_built_reports(reports: dict[str, dict[str, Any]]) -> None:
    assert [system_of(r) for r in reports.values()] == ["edgewatch", "superedge", "stock"]
    old = build_report(Recording(scenario="s", baseline=True))
    del old["system"]  # a report written before the field
    assert system_of(old) == "stock"


# --------------------------------------------------------------------------------------------------
# rows


def test_rows_one_column_per_system_in_order(reports: dict[str, dict[str, Any]]) -> None:
    out = rows(reports)
    assert all(len(row) == 1 + len(reports) for row in out)
    cells = by_label(out)
    assert cells[LABELS["max_detection_s"]] == ["4.0", "70.0", "40.0"]
    assert cells[LABELS["max_eviction_s"]] == ["10.0", "-", "330.0"]
    assert cells[LABELS["killed_nodes_not_evicted"]] == ["0", "1 (edge-1)", "0"]
    assert cells[LABELS["evictions_on_live_nodes"]] == ["0", "0", "0"]
    # the order follows the dict, not the names
    reordered = {k: reports[k] for k in ("stock", "edgewatch", "superedge")}
    assert by_label(rows(reordered))[LABELS["max_detection_s"]] == ["40.0", "4.0", "70.0"]


def test_rows_keep_summary_order_and_drop_rows_no_system_measured(reports: dict[str, dict[str, Any]]) -> None:
    labels = [row[0] for row in rows(reports)]
    order = [label for label, _key in SUMMARY_ROWS]
    assert labels == [label for label in order if label in labels]
    # nobody measured these: no uncovered node, no Prometheus scrape of the cloud, no StatefulSet
    for key in ("max_not_ready_after_kill_s", "pool_scope_cloud_bytes", "pool_scope_open_watches",
                "max_statefulset_move_s"):
        assert LABELS[key] not in labels, key
    assert LABELS["max_detection_s"] in labels


def test_rows_a_row_one_system_measured_shows_dash_for_the_others() -> None:
    reps = {
        "edgewatch": hand_made(pool_scope_cloud_bytes=4096, max_statefulset_move_s=12.5),
        "superedge": hand_made(),
        "stock": hand_made(max_statefulset_move_s=None, statefulsets_not_moved=["db"]),
    }
    cells = by_label(rows(reps))
    assert cells[LABELS["pool_scope_cloud_bytes"]] == ["4 KiB", "-", "-"]
    assert cells[LABELS["max_statefulset_move_s"]] == ["12.5", "-", "never (db)"]
    assert LABELS["pool_scope_open_watches"] not in cells
    # a mandatory row nobody measured is dropped too
    assert LABELS["max_detection_s"] not in cells
    assert cells[LABELS["killed_nodes_not_evicted"]] == ["0", "0", "0"]


def test_rows_undetected_and_single_system() -> None:
    reps = {"superedge": hand_made(max_detection_s=300.0, undetected=["edge-3"])}
    cells = by_label(rows(reps))
    assert cells[LABELS["max_detection_s"]] == ["300.0 (undetected: edge-3)"]
    assert all(len(v) == 1 for v in cells.values())


def test_rows_of_no_report() -> None:
    assert rows({}) == []


# --------------------------------------------------------------------------------------------------
# markdown and table


def test_markdown(reports: dict[str, dict[str, Any]]) -> None:
    text = markdown(reports)
    assert text.endswith("\n")
    lines = text.splitlines()
    assert lines[0] == "| | edgewatch | SuperEdge edge-health | stock Kubernetes |"
    assert lines[1] == "|---|---:|---:|---:|"
    out = rows(reports)
    assert len(lines) == 2 + len(out)
    assert lines[2:] == ["| " + " | ".join(row) + " |" for row in out]
    assert f"| {LABELS['max_detection_s']} | 4.0 | 70.0 | 40.0 |" in lines
    # every line has as many cells as the header
    assert {line.count("|") for line in lines} == {len(reports) + 2}


def test_markdown_follows_the_dict_order_and_unknown_systems_by_name() -> None:
    reps = {"stock": hand_made(), "other": hand_made(), "edgewatch": hand_made()}
    head = markdown(reps).splitlines()[0]
    assert head == "| | stock Kubernetes | other | edgewatch |"


def test_table(reports: dict[str, dict[str, Any]]) -> None:
    t = table(reports)
    assert isinstance(t, Table)
    assert len(t.columns) == len(reports) + 1
    assert [c.header for c in t.columns] == ["", *(TITLES[s] for s in reports)]
    assert t.row_count == len(rows(reports))
    assert t.title == "scenario s"
    console = Console(width=200, record=True)
    console.print(t)
    shown = console.export_text()
    assert "SuperEdge edge-health" in shown and "70.0" in shown and "330.0" in shown


def test_table_title_lists_every_scenario() -> None:
    t = table({"edgewatch": hand_made("b"), "stock": hand_made("a")})
    assert t.title == "scenario a, b"
    assert len(t.columns) == 3


# --------------------------------------------------------------------------------------------------
# names


def test_suffixes_keep_the_old_report_names() -> None:
    assert SUFFIXES["edgewatch"] == ""
    assert SUFFIXES["stock"] == "-baseline"
    assert SUFFIXES["superedge"] not in ("", "-baseline")
    assert set(SUFFIXES) == set(TITLES) == {"edgewatch", "superedge", "stock"}


def test_titles() -> None:
    assert comparison.TITLES["stock"] == "stock Kubernetes"
    assert comparison.TITLES["edgewatch"] == "edgewatch"


# --------------------------------------------------------------------------------------------------
# docs/lab.md's table: several scenarios from a report folder


def write(tmp_path, report: dict[str, Any], system: str, scenario: str = "s") -> None:
    import json

    (tmp_path / f"{scenario}{SUFFIXES[system]}.json").write_text(json.dumps(report))


def test_load_reports_reads_each_system_in_order_and_skips_missing(tmp_path, reports) -> None:
    write(tmp_path, reports["stock"], "stock")
    write(tmp_path, reports["edgewatch"], "edgewatch")
    loaded = comparison.load_reports(tmp_path, "s")
    assert list(loaded) == ["edgewatch", "stock"]
    assert loaded["stock"]["summary"] == reports["stock"]["summary"]


def test_load_reports_refuses_a_report_of_another_system_or_scenario(tmp_path, reports) -> None:
    write(tmp_path, reports["stock"], "superedge")  # stock's report under SuperEdge's name
    with pytest.raises(ValueError, match="a stock report"):
        comparison.load_reports(tmp_path, "s")
    (tmp_path / "s-superedge.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a JSON report"):
        comparison.load_reports(tmp_path, "s")
    write(tmp_path, reports["superedge"], "superedge", scenario="t")  # scenario s's report named t
    with pytest.raises(ValueError, match="expected superedge of 't'"):
        comparison.load_reports(tmp_path, "t")


def test_scenarios_markdown_one_row_per_scenario_and_figure(reports) -> None:
    md = comparison.scenarios_markdown({"s": reports, "t": {"edgewatch": hand_made("t", max_detection_s=7.25)}})
    lines = md.splitlines()
    assert lines[0] == "| scenario | figure | edgewatch | SuperEdge edge-health | stock Kubernetes |"
    assert f"| s | {LABELS['max_detection_s']} | 4.0 | 70.0 | 40.0 |" in lines
    assert f"| t | {LABELS['max_detection_s']} | 7.2 | - | - |" in lines  # no SuperEdge, no stock run of t
    assert all(line.count("|") == 6 for line in lines)


def test_table_command_prints_the_markdown_and_refuses_what_it_cannot_read(tmp_path, reports) -> None:
    from click.testing import CliRunner

    from edgewatch_lab.cli import playground

    for system in ("edgewatch", "superedge", "stock"):
        write(tmp_path, reports[system], system)
    ok = CliRunner().invoke(playground, ["table", "s", "--report-dir", str(tmp_path)])
    assert ok.exit_code == 0, ok.output
    assert ok.output == comparison.scenarios_markdown({"s": reports})
    missing = CliRunner().invoke(playground, ["table", "s", "nope", "--report-dir", str(tmp_path)])
    assert missing.exit_code == 1 and "no report in" in missing.output and "nope" in missing.output
    bad = CliRunner().invoke(playground, ["table", "s", "--report-dir", str(tmp_path), "--systems", "openyurt"])
    assert bad.exit_code == 2 and "unknown system(s) openyurt" in bad.output

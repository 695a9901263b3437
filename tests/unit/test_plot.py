"""Playground plot: two synthetic runs to SVG and PNG; the fault spans behind the shading."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import matplotlib
import pytest

from edgewatch_lab.playground.plot import fault_spans, plot_runs
from edgewatch_lab.playground.report import Recording, build_report

NODES = ["a-1", "a-2", "a-3", "a-4", "a-5"]


def run(baseline: bool) -> dict[str, Any]:
    r = Recording(scenario="cut-and-kill", baseline=baseline, timings={}, ended_at=215)
    r.add_fault(10, "cut-cloud", pool="a")
    r.add_fault(130, "restore-cloud", pool="a")
    r.add_fault(140, "restart-controller")
    r.add_fault(160, "kill", node="a-5")
    r.add_fault(215, "end")
    for n in NODES:
        rec = r.add_node(n, "a")
        rec.observe_state(0, "normal")
        rec.observe_ready(0, True)
    if baseline:
        for n in NODES[:4]:
            rec = r.nodes[n]
            rec.observe_state(32, "not_ready")
            rec.observe_ready(32, False)
            rec.record_taint(32, "node.kubernetes.io/unreachable:NoExecute", "added")
            rec.record_eviction(62, f"web-{n}")
            rec.observe_state(135, "normal")
            rec.observe_ready(135, True)
            rec.record_taint(135, "node.kubernetes.io/unreachable:NoExecute", "removed")
        r.nodes["a-5"].record_kill(160, pods=1)
        r.nodes["a-5"].observe_ready(182, False)
        r.nodes["a-5"].observe_state(182, "not_ready")
    else:
        for n in NODES:
            r.nodes[n].observe_state(35, "unknown")
            r.nodes[n].observe_state(133, "normal")
        a5 = r.nodes["a-5"]
        a5.record_kill(160, pods=1)
        a5.observe_state(166, "failed")
        a5.record_taint(166, "edgewatch.io/failed:NoExecute", "added")
        a5.record_eviction(168, "web-x")
        a5.observe_ready(182, False)
        r.nodes["a-2"].observe_state(150, "disconnected")
    return build_report(r)


def test_svg(tmp_path: Path):
    fonttype = matplotlib.rcParams["svg.fonttype"]
    out = plot_runs([run(True), run(False)], tmp_path / "runs.svg")
    assert out == tmp_path / "runs.svg"
    assert out.stat().st_size > 10_000
    root = ET.parse(out).getroot()
    assert root.tag.endswith("svg")
    text = " ".join("".join(el.itertext()) for el in root.iter() if el.tag.endswith("text"))
    for name in NODES:
        assert name in text
    assert "cut-and-kill: edgewatch" in text
    assert "cut-and-kill: stock Kubernetes (baseline)" in text
    assert "seconds from start" in text
    assert "restart-controller" in text and "eviction" in text
    # edgewatch above baseline even though the baseline report came first
    ys = {}
    for el in root.iter():
        if el.tag.endswith("text") and "cut-and-kill:" in "".join(el.itertext()):
            ys["".join(el.itertext())] = _y(el)
    assert ys["cut-and-kill: edgewatch"] < ys["cut-and-kill: stock Kubernetes (baseline)"]
    assert matplotlib.rcParams["svg.fonttype"] == fonttype  # the temporary rc_context is gone


def _y(el: ET.Element) -> float:
    if el.get("y") is not None:
        return float(el.get("y"))
    transform = el.get("transform") or ""
    inner = transform.split("translate(")[1].split(")")[0]
    return float(inner.replace(",", " ").split()[1])


def test_png(tmp_path: Path):
    out = plot_runs([run(False), run(True)], tmp_path / "sub" / "runs.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 20_000


def test_single_run_and_bad_arguments(tmp_path: Path):
    assert plot_runs([run(False)], tmp_path / "one.svg").stat().st_size > 5_000
    with pytest.raises(ValueError, match=".svg or .png"):
        plot_runs([run(False)], tmp_path / "x.pdf")
    with pytest.raises(ValueError, match="no reports"):
        plot_runs([], tmp_path / "x.svg")


def test_fault_spans():
    rep = {"nodes": {n: {"pool": "a"} for n in NODES} | {"b-1": {"pool": "b"}},
           "faults": [
               {"t": 5, "action": "cut-cloud", "nodes": ["a-4", "a-5"]},
               {"t": 5, "action": "split", "pool": "a", "sides": [["a-1", "a-2", "a-3"], ["a-4", "a-5"]]},
               {"t": 10, "action": "loss", "nodes": ["a-1"], "percent": 30},
               {"t": 20, "action": "loss", "nodes": ["a-1"], "percent": 0},
               {"t": 25, "action": "kill", "node": "a-3"},
               {"t": 30, "action": "kill-leader", "pool": "a"},                 # node unknown: a mark
               {"t": 35, "action": "kill-leader", "pool": "a", "node": "a-2"},
               {"t": 40, "action": "revive", "node": "a-3"},
               {"t": 45, "action": "kill-coordinator", "pool": "b"},
               {"t": 50, "action": "heal"},
               {"t": 60, "action": "cut-cloud", "pool": "b"},
               {"t": 90, "action": "end"},
           ]}
    spans, marks = fault_spans(rep)
    got = {(s["kind"], s["start"], s["end"], tuple(s["nodes"])) for s in spans}
    assert got == {
        ("cut-cloud", 5, 50, ("a-4", "a-5")),
        ("split", 5, 50, ("a-1", "a-2", "a-3", "a-4", "a-5")),
        ("loss", 10, 20, ("a-1",)),
        ("kill", 25, 40, ("a-3",)),
        ("kill", 35, 90, ("a-2",)),
        ("coordinator down", 45, 90, ("b-1",)),
        ("cut-cloud", 60, 90, ("b-1",)),
    }
    assert [(m["t"], m["label"]) for m in marks] == [(30, "kill-leader"), (50, "heal")]
    labels = {s["kind"]: s["label"] for s in spans}
    assert labels["split"] == "split a-1,a-2,a-3 | a-4,a-5"
    assert labels["loss"] == "loss 30%"

"""Kill -> failed over many kills at random phases of the kubelet's Lease renewal, as shipped.

Why: how long the controller takes to fail a dead node depends on when, within the kubelet's 10 s
renew interval, the node died (the controller's cloud view goes overdue 12 s after the last own
renewal it saw), so one kill says little; the honest figure is a percentile over kills whose phase
is spread over the interval. Each kill's phase (seconds since the node's last own renewal the
lab saw before the kill, ``last_renewal`` in the playground's report) is printed beside its
detection and eviction times.

The scenario: one pool of ``--nodes`` edge nodes (the agents as shipped, kustomize install), ``--kills``
kills one after the other, each of the next node in turn, revived ``REVIVE_AFTER_S`` later, the
next kill ``--gap`` seconds after that plus a random offset of up to one renew interval (seeded),
so kills fall at every phase. The playground's own report gives each kill's detection (first
transition to ``failed``) and eviction; nothing is timed here.

Usage: .venv/bin/python bench/detection_phases.py [--kills 20] [--nodes 6] [--seed 1] [--json FILE]
(root; about one minute per kill). ``make bench-detection`` runs the default and writes
reports/detection-phases.json.

Limits: the lab's nodes are network namespaces on one 2-core machine; the times include the way
to the lab's observer (the controller's watch, its write, the observer's 0.25 s polls).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import math
import random
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from edgewatch_lab.playground.report import detection, evictions_after, round_s
from edgewatch_lab.playground.runner import run_scenario
from edgewatch_lab.playground.scenario import parse_scenario

REVIVE_AFTER_S = 30.0
"""A killed node stays dead this long: past the 15 s detection bound and the eviction."""
RENEW_INTERVAL_S = 10.0
"""The kubelet's Lease renew interval (a quarter of its 40 s duration): the span the phases cover."""
START_S = 20.0
"""The first kill: every agent has seen its peers and every statement is uploaded."""


def scenario(*, kills: int, nodes: int, gap_s: float, seed: int) -> dict[str, Any]:
    """The scenario as the playground reads it (a dict of its YAML)."""
    rng = random.Random(seed)
    steps: list[dict[str, Any]] = []
    t = START_S
    for i in range(kills):
        node = f"a-{i % nodes + 1}"
        steps.append({"at": round(t, 2), "action": "kill", "node": node})
        steps.append({"at": round(t + REVIVE_AFTER_S, 2), "action": "revive", "node": node})
        t += REVIVE_AFTER_S + gap_s + rng.uniform(0.0, RENEW_INTERVAL_S)
    steps.append({"at": round(t, 2), "action": "end"})
    return {
        "name": f"detection-phases-{kills}",
        "description": f"{kills} kills at random phases of the kubelet's renewal, one pool of {nodes}.",
        "topology": {"pools": [{"name": "a", "nodes": nodes, "coordinator": False}], "grouping": False},
        "timings": {"node_monitor_grace_s": 20, "toleration_s": 30, "autonomy_s": 300},
        "steps": steps,
        "expect": [{"pool": "a", "evictions": ">0"}],
    }


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile ``q`` (0-100); None if empty (with under 100 values p99 is the max;
    a kill never detected is counted as ``REVIVE_AFTER_S``, so a percentile that reaches it is a
    lower bound)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100.0 * len(ordered))) - 1]


def kills_of(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Every kill in ``report``: node, time, phase, detection and eviction seconds (None: not seen)."""
    end = max(float(f["t"]) for f in report["faults"])
    out = []
    for name, node in report["nodes"].items():
        for kill in node["kills"]:
            secs, detected = detection(node, kill, "failed", end)
            evs = evictions_after(node, kill)
            last = kill.get("last_renewal")
            out.append({"node": name, "t": kill["t"],
                        "phase_s": None if last is None else round_s(kill["t"] - last),
                        "detected_s": secs if detected else None,
                        "evicted_s": round_s(max(e["t"] for e in evs) - kill["t"]) if evs else None})
    return sorted(out, key=lambda k: k["t"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=6)
    parser.add_argument("--gap", type=float, default=20.0, help="seconds from a revive to the next kill (before the offset)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    started = time.monotonic()
    result = run_scenario(parse_scenario(scenario(kills=args.kills, nodes=args.nodes, gap_s=args.gap, seed=args.seed)),
                          baseline=False, console=Console(file=io.StringIO()), live=False)
    kills = kills_of(result.report)
    # a kill not detected before its revive counts as the whole time it was dead (a lower bound:
    # the percentiles are then at least that, never flattered by leaving it out)
    detected = [REVIVE_AFTER_S if k["detected_s"] is None else k["detected_s"] for k in kills]
    evicted = [REVIVE_AFTER_S if k["evicted_s"] is None else k["evicted_s"] for k in kills]
    summary = {"kills": len(kills), "undetected": sum(1 for k in kills if k["detected_s"] is None),
               "not_evicted": sum(1 for k in kills if k["evicted_s"] is None),
               "detection_p50_s": percentile(detected, 50), "detection_p99_s": percentile(detected, 99),
               "detection_max_s": max(detected, default=None),
               "eviction_p50_s": percentile(evicted, 50), "eviction_p99_s": percentile(evicted, 99),
               "phases_s": sorted(k["phase_s"] for k in kills if k["phase_s"] is not None),
               "live_evictions": result.report["summary"].get("evictions_on_live_nodes"),
               "wall_s": round(time.monotonic() - started, 1)}
    print("| kill at (s) | node | phase: since its last renewal (s) | kill → failed (s) | kill → evicted (s) |")
    print("|---:|---|---:|---:|---:|")
    for k in kills:
        print(f"| {k['t']:.1f} | {k['node']} | {k['phase_s']} | {k['detected_s']} | {k['evicted_s']} |")
    print()
    print(json.dumps(summary))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"summary": summary, "kills": kills}, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    main()

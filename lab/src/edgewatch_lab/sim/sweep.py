"""The false-verdict sweep behind ``edgewatch sim-sweep``: many seeds, group sizes drawn over a wide
range, every node losing a share of its packets, and a count of the live nodes the controller's
count judged UNHEALTHY, with the node-hours observed.

Why a sweep, not one long run: a false verdict needs an unlucky arrangement of losses around one
node *and* its neighbours' detectors, and the arrangements differ with the group's shape (size,
ring neighbours, phases), so the rate is measured over many independent groups. Each run is one
:class:`~edgewatch_lab.sim.engine.Simulation` (model fidelity: the agents' real detectors,
topology, reach count and duties): a 20 s warm-up without loss, then ``seconds`` at the given loss.
At the end of each run one node is killed, still at that loss, and the time until the count
judges it UNHEALTHY is recorded (at most ``KILL_LIMIT_S``): what the rule's care costs in
detection. The size of run ``i`` is drawn log-uniformly from ``[min_size, max_size]`` by its seed, so small
groups (where one node is a large share of its neighbours' evidence) and large ones are both
covered. Runs go to a process pool (one per core); the result is a pure function of the
arguments.

``rules`` compares failure-detector settings side by side on the same seeds: ``loss-aware`` (the
agent's default, :class:`edgewatch.core.detector.DetectorConfig`) and ``fixed`` (the same with
``max_false_dead=None``: DEAD after a fixed number of failures, the rule before loss awareness).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from edgewatch.core.detector import DetectorConfig
from edgewatch.core.types import Verdict
from edgewatch_lab.sim.engine import SimConfig, Simulation

__all__ = ["RULES", "Run", "markdown", "run_one", "size_for", "summary", "sweep"]

WARMUP_S = 20.0
"""Simulated seconds without loss before the loss starts."""
ONSET_S = 60.0
"""False verdicts within this many seconds of the loss's start are also counted apart: every
detector starts the loss with a clean link's estimate (the transient), the rest is steady state."""
KILL_LIMIT_S = 60.0
"""A kill not judged within this many simulated seconds counts as not detected."""

RULES: dict[str, DetectorConfig] = {
    "loss-aware": DetectorConfig(),
    "fixed": dataclasses.replace(DetectorConfig(), max_false_dead=None),
}
"""The detector settings a sweep can compare, by name."""


@dataclass(frozen=True)
class Run:
    """One group's outcome: ``false_unhealthy`` transitions of live nodes to UNHEALTHY (and the
    distinct ``nodes`` they hit) during ``node_hours`` at ``loss``; ``detection_s``: kill ->
    UNHEALTHY of the node killed at the end (None: not within :data:`KILL_LIMIT_S`)."""

    rule: str
    seed: int
    n: int
    loss: float
    node_hours: float
    false_unhealthy: int
    nodes: tuple[str, ...]
    detection_s: float | None = None
    at_onset: int = 0
    """Of ``false_unhealthy``, those within :data:`ONSET_S` of the loss's start."""


def size_for(seed: int, *, min_size: int, max_size: int) -> int:
    """The group size of a run: log-uniform over ``[min_size, max_size]``, drawn from ``seed``."""
    lo, hi = math.log(min_size), math.log(max_size)
    return max(min_size, min(max_size, round(math.exp(random.Random(seed).uniform(lo, hi)))))


def run_one(rule: str, seed: int, n: int, loss: float, seconds: float) -> Run:
    """Run one group of ``n`` live nodes at ``loss`` for ``seconds`` after the warm-up (seconds)."""
    sim = Simulation(SimConfig(n=n, seed=seed, detector=RULES[rule]))
    sim.run_until(WARMUP_S)
    sim.net.set_loss(dict.fromkeys(sim.names, loss))
    start = len(sim.transitions)
    sim.run_until(WARMUP_S + seconds)
    bad = [t for t in sim.transitions[start:] if t.verdict is Verdict.UNHEALTHY]
    victim, killed_at = sim.rng.choice(sim.names), sim.now
    sim.kill(victim)
    sim.run_until(killed_at + KILL_LIMIT_S)
    judged = next((t.at for t in sim.transitions if t.node == victim and t.at >= killed_at
                   and t.verdict is Verdict.UNHEALTHY), None)
    return Run(rule=rule, seed=seed, n=n, loss=loss, node_hours=n * seconds / 3600.0,
               false_unhealthy=len(bad), nodes=tuple(sorted({t.node for t in bad})),
               detection_s=None if judged is None else round(judged - killed_at, 2),
               at_onset=sum(1 for t in bad if t.at < WARMUP_S + ONSET_S))


def sweep(*, seeds: int, first_seed: int = 1, min_size: int = 8, max_size: int = 1000,
          losses: Sequence[float] = (0.1, 0.3), seconds: float = 120.0, rules: Sequence[str] = ("loss-aware",),
          workers: int | None = None, progress: Callable[[str], None] = lambda _m: None) -> list[Run]:
    """Every (rule, loss, seed) run, seeds ``first_seed .. first_seed + seeds - 1``.

    Raises:
        ValueError: an unknown rule name, or sizes outside ``1 <= min_size <= max_size``.
    """
    unknown = [r for r in rules if r not in RULES]
    if unknown:
        raise ValueError(f"unknown detector rule(s) {unknown}; known: {sorted(RULES)}")
    if not 1 <= min_size <= max_size:
        raise ValueError(f"need 1 <= min_size <= max_size, got {min_size}, {max_size}")
    jobs = [(rule, seed, size_for(seed, min_size=min_size, max_size=max_size), loss, seconds)
            for rule in rules for loss in losses for seed in range(first_seed, first_seed + seeds)]
    jobs.sort(key=lambda job: -job[2])  # the biggest groups first: the pool ends together
    runs: list[Run] = []
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for i, run in enumerate(pool.map(run_one, *zip(*jobs, strict=True), chunksize=1), start=1):
            runs.append(run)
            if run.false_unhealthy or i % 20 == 0 or i == len(jobs):
                progress(f"{i}/{len(jobs)} runs; {run.rule} n={run.n} seed={run.seed} loss={run.loss:.0%}: "
                         f"{run.false_unhealthy} false unhealthy")
    return sorted(runs, key=lambda r: (r.rule, r.loss, r.seed))


def summary(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """Per (rule, loss): runs, node-hours, false UNHEALTHY verdicts, runs with one, and the rate per
    1,000 node-hours; plain JSON-serialisable rows."""
    rows = []
    for key in sorted({(r.rule, r.loss) for r in runs}):
        group = [r for r in runs if (r.rule, r.loss) == key]
        hours = sum(r.node_hours for r in group)
        falses = sum(r.false_unhealthy for r in group)
        detected = sorted(r.detection_s for r in group if r.detection_s is not None)
        rows.append({"rule": key[0], "loss": key[1], "runs": len(group),
                     "sizes": [min(r.n for r in group), max(r.n for r in group)],
                     "node_hours": round(hours, 1), "false_unhealthy": falses,
                     "runs_with_false": sum(1 for r in group if r.false_unhealthy),
                     "at_onset": sum(r.at_onset for r in group),
                     "per_1000_node_hours": round(1000.0 * falses / hours, 3) if hours else None,
                     "kills": len(group), "undetected": len(group) - len(detected),
                     "detection_median_s": detected[len(detected) // 2] if detected else None,
                     "detection_p99_s": detected[max(0, math.ceil(0.99 * len(detected)) - 1)] if detected else None,
                     "examples": [{"n": r.n, "seed": r.seed, "nodes": list(r.nodes)}
                                  for r in group if r.false_unhealthy][:5]})
    return rows


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    """The summary as a Markdown table."""
    lines = ["| detector rule | loss per node | runs (sizes) | node-hours | false unhealthy (in the first minute) "
             "| runs with one "
             "| per 1,000 node-hours | kill → unhealthy at that loss, median / p99 (s) |",
             "|---|---:|---|---:|---:|---:|---:|---|"]
    for row in rows:
        missed = f", {row['undetected']} not within {KILL_LIMIT_S:g} s" if row["undetected"] else ""
        lines.append(f"| {row['rule']} | {row['loss']:.0%} | {row['runs']} ({row['sizes'][0]}–{row['sizes'][1]}) "
                     f"| {row['node_hours']:,.1f} | {row['false_unhealthy']} ({row['at_onset']}) | {row['runs_with_false']} "
                     f"| {row['per_1000_node_hours']} | {row['detection_median_s']} / {row['detection_p99_s']}"
                     f"{missed} |")
    return "\n".join(lines)

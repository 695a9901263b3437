"""The measurements ``edgewatch sim`` prints: detection time, false verdicts under loss, messages and
bytes per node, and the outcome of splits, for each group size (docs/scaling.md's table).

Every function runs fresh seeded :class:`~edgewatch_lab.sim.engine.Simulation` objects and returns plain
numbers; the same seed gives the same figures on any machine. Times are simulated seconds.

* :func:`detection` — kill one node after a warm-up, report the time until the controller's count
  judges it UNHEALTHY (``kills`` kills per size, spread over seeds; p99 is the nearest-rank
  99th percentile, so with fewer than 100 kills it is the maximum).
* :func:`false_verdicts` — every node loses ``loss`` of its packets (in and out); count the
  controller's UNHEALTHY (and UNKNOWN) transitions of live nodes over the given node-hours.
* :func:`cost` — real envelopes (wire fidelity): messages sent per node per period (requests and
  answers) and bytes per message.
* :func:`split` — partition into sides of the given fractions; report each side's verdicts 40 s later.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from edgewatch.core.types import NodeName, Verdict
from edgewatch_lab.sim.engine import SimConfig, Simulation

__all__ = ["Cost", "Detection", "FalseVerdicts", "SideOutcome", "cost", "detection", "false_verdicts",
           "percentile", "split"]

WARMUP_S = 20.0
"""Simulated seconds before any fault: every detector has seen its neighbours, every statement is
uploaded."""

Progress = Callable[[str], None]


def _quiet(_msg: str) -> None:
    return None


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0-100) of ``values`` (NaN if empty)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Detection:
    """Kill -> UNHEALTHY at the controller, seconds (None: not within the limit)."""

    n: int
    times_s: tuple[float, ...]
    missed: int

    @property
    def median_s(self) -> float:
        """Median seconds."""
        return statistics.median(self.times_s) if self.times_s else math.nan

    @property
    def p99_s(self) -> float:
        """99th percentile seconds (nearest rank)."""
        return percentile(self.times_s, 99)


def detection(n: int, *, kills: int, seed: int, limit_s: float = 60.0, progress: Progress = _quiet) -> Detection:
    """Kill nodes one at a time (20 s apart in one group while n >= 20; else one kill per seed) and
    time each until the controller's verdict on it is UNHEALTHY (a kill not judged within
    ``limit_s`` seconds is ``missed``)."""
    times: list[float] = []
    missed = 0
    per_run = kills if n >= 20 else 1
    runs = math.ceil(kills / per_run)
    for run in range(runs):
        sim = Simulation(SimConfig(n=n, seed=seed * 1000 + run))
        sim.run_until(WARMUP_S)
        victims = sim.rng.sample(sim.names, min(per_run, kills - len(times) - missed))
        killed: list[tuple[NodeName, float]] = []
        for victim in victims:
            killed.append((victim, sim.now))
            sim.kill(victim)
            sim.run_until(sim.now + 20.0)
        sim.run_until(killed[-1][1] + limit_s)
        for victim, killed_at in killed:
            at = next((t.at for t in sim.transitions
                       if t.node == victim and t.at >= killed_at and t.verdict is Verdict.UNHEALTHY), None)
            if at is None or at - killed_at > limit_s:
                missed += 1
            else:
                times.append(at - killed_at)
        progress(f"n={n}: detection run {run + 1}/{runs}")
    return Detection(n=n, times_s=tuple(times), missed=missed)


@dataclass(frozen=True)
class FalseVerdicts:
    """Verdict changes of live nodes under loss."""

    n: int
    loss: float
    node_hours: float
    unhealthy: int
    unknown: int
    writes_per_node_min: float
    """Statements uploaded to the cloud (evidence Lease writes) per node per minute."""

    @property
    def per_node_hour(self) -> float:
        """False UNHEALTHY verdicts per node-hour."""
        return self.unhealthy / self.node_hours if self.node_hours else math.nan


def false_verdicts(n: int, *, loss: float, node_hours: float, seed: int, progress: Progress = _quiet) -> FalseVerdicts:
    """Run a group of ``n`` live nodes at ``loss`` per node for ``node_hours`` (after the warm-up
    without loss) and count the controller's transitions to UNHEALTHY and to UNKNOWN."""
    sim = Simulation(SimConfig(n=n, seed=seed))
    sim.run_until(WARMUP_S)
    sim.net.set_loss(dict.fromkeys(sim.names, loss))
    start, uploads = len(sim.transitions), sim.uploads
    duration = node_hours * 3600.0 / n
    step = max(60.0, duration / 5)
    t = WARMUP_S
    while t < WARMUP_S + duration:
        t = min(t + step, WARMUP_S + duration)
        sim.run_until(t)
        progress(f"n={n} loss={loss:.0%}: {(t - WARMUP_S) * n / 3600:.1f} of {node_hours:g} node-hours")
    changes = sim.transitions[start:]
    return FalseVerdicts(n=n, loss=loss, node_hours=duration * n / 3600.0,
                         unhealthy=sum(1 for c in changes if c.verdict is Verdict.UNHEALTHY),
                         unknown=sum(1 for c in changes if c.verdict is Verdict.UNKNOWN),
                         writes_per_node_min=(sim.uploads - uploads) / n / (duration / 60.0))


@dataclass(frozen=True)
class Cost:
    """Steady-state cost per node, real envelopes."""

    n: int
    messages_per_period: float
    bytes_per_message: float
    max_messages_per_period: float

    @property
    def bytes_per_period(self) -> float:
        """Bytes sent per node per period."""
        return self.messages_per_period * self.bytes_per_message


def cost(n: int, *, seed: int, seconds: float = 5.0, progress: Progress = _quiet) -> Cost:
    """Messages and bytes per node per period with the real codec and signatures (wire fidelity),
    measured over ``seconds`` after a 5 s warm-up."""
    sim = Simulation(SimConfig(n=n, seed=seed, wire=True))
    sim.run_until(5.0)
    sent0, bytes0 = dict(sim.net.sent), dict(sim.net.bytes_sent)
    sim.run_until(5.0 + seconds)
    sent = {m: sim.net.sent.get(m, 0) - sent0.get(m, 0) for m in sim.names}
    total_bytes = sum(sim.net.bytes_sent.get(m, 0) - bytes0.get(m, 0) for m in sim.names)
    total = sum(sent.values())
    periods = seconds / sim.config.period_s
    progress(f"n={n}: cost measured")
    return Cost(n=n, messages_per_period=total / n / periods, bytes_per_message=total_bytes / max(1, total),
                max_messages_per_period=max(sent.values()) / periods)


@dataclass(frozen=True)
class SideOutcome:
    """One side of a split: its size and how many of its nodes got each verdict."""

    size: int
    healthy: int
    unhealthy: int
    unknown: int

    def label(self) -> str:
        """E.g. ``"600: 600 H"`` or ``"500: 497 ?, 3 U"``."""
        parts = [f"{c} {s}" for c, s in ((self.healthy, "H"), (self.unhealthy, "U"), (self.unknown, "?")) if c]
        return f"{self.size}: " + ", ".join(parts)


def split(n: int, fractions: Sequence[float], *, seed: int, observe_s: float = 40.0,
          progress: Progress = _quiet) -> list[SideOutcome]:
    """Partition ``n`` nodes at random into sides of the given fractions (every side's cloud link
    stays up) and report each side's controller verdicts ``observe_s`` seconds later."""
    sim = Simulation(SimConfig(n=n, seed=seed))
    sim.run_until(WARMUP_S)
    order = list(sim.names)
    sim.rng.shuffle(order)
    sides: list[list[NodeName]] = []
    start = 0
    for i, f in enumerate(fractions):
        end = n if i == len(fractions) - 1 else start + round(f * n)
        sides.append(order[start:end])
        start = end
    sim.net.split(sides)
    sim.run_until(WARMUP_S + observe_s)
    progress(f"n={n}: split {'/'.join(f'{f:.0%}' for f in fractions)} done")
    return [SideOutcome(size=len(side),
                        healthy=sum(1 for m in side if sim.verdicts[m] is Verdict.HEALTHY),
                        unhealthy=sum(1 for m in side if sim.verdicts[m] is Verdict.UNHEALTHY),
                        unknown=sum(1 for m in side if sim.verdicts[m] is Verdict.UNKNOWN)) for side in sides]

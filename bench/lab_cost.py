"""What a playground pool costs on this machine, as shipped: a scenario with one pool of N edge
nodes (each a network namespace with a kubelet simulator and the agent pod from the DaemonSet),
played end to end while /proc is sampled every 2 s.

Per kind of process (agent containers, kubelet simulators, the controller container, the control
plane binaries) it reports the mean and largest RSS per process (MiB) and the CPU used per process
over the played part (% of one core), plus the whole machine's load. The scenario (bench/pool.yaml
with the node count replaced) kills one node so the run also shows that detection still holds at
that size.

Usage: .venv/bin/python bench/lab_cost.py 25 [--nodes-list 10,25,40]   (root; prints one JSON line per N)

Limits: CPU figures include start-up only from the scenario's t=0 on (sampling starts when the
workload serves); a 2-core machine is shared by everything, so the figures are what fits, not what
a node alone would use.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import threading
import time
from pathlib import Path

import yaml
from rich.console import Console

from edgewatch_lab.playground.runner import run_scenario
from edgewatch_lab.playground.scenario import parse_scenario

KINDS = {  # needles in /proc/<pid>/cmdline (NUL-separated argv)
    "agent": (b"-m\0edgewatch\0agent",),
    "controller": (b"-m\0edgewatch\0controller",),
    "kubelet-sim": (b"kubeletsim",),
    "kube-apiserver": (b"kube-apiserver\0",),
    "etcd": (b"/etcd\0",),
}
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def _kind(cmdline: bytes) -> str | None:
    for kind, needles in KINDS.items():
        if all(n in cmdline for n in needles):
            return kind
    return None


def sample() -> dict[int, tuple[str, float, float]]:
    """pid -> (kind, CPU seconds so far, RSS MiB) for the processes of interest."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            kind = _kind((entry / "cmdline").read_bytes())
            if kind is None:
                continue
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cpu = (int(stat[11]) + int(stat[12])) / TICK
            rss = int((entry / "statm").read_text().split()[1]) * PAGE / 2**20
        except (OSError, IndexError, ValueError):
            continue
        out[int(entry.name)] = (kind, cpu, rss)
    return out


class Sampler(threading.Thread):
    """Samples /proc every ``interval_s`` seconds until stopped."""

    def __init__(self, interval_s: float = 2.0) -> None:
        super().__init__(daemon=True)
        self.interval_s = interval_s
        self.samples: list[tuple[float, dict[int, tuple[str, float, float]]]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.samples.append((time.monotonic(), sample()))
            self.stop.wait(self.interval_s)


def summarize(samples: list[tuple[float, dict[int, tuple[str, float, float]]]]) -> dict[str, dict[str, float]]:
    """Per kind: processes, mean/max RSS MiB, CPU % of a core per process between first and last sample."""
    (t0, first), (t1, last) = samples[0], samples[-1]
    out: dict[str, dict[str, float]] = {}
    for kind in KINDS:
        pids = [p for p, v in last.items() if v[0] == kind and p in first]
        if not pids:
            continue
        cpu = [(last[p][1] - first[p][1]) / (t1 - t0) * 100 for p in pids]
        rss = [v[2] for _t, s in samples for p, v in s.items() if v[0] == kind]
        out[kind] = {"processes": len(pids), "cpu_pct_per_process": round(sum(cpu) / len(cpu), 2),
                     "cpu_pct_total": round(sum(cpu), 1), "rss_mib_mean": round(sum(rss) / len(rss), 1),
                     "rss_mib_max": round(max(rss), 1)}
    return out


def run(nodes: int) -> dict:
    data = yaml.safe_load((Path(__file__).parent / "pool.yaml").read_text())
    data["name"] = f"pool-{nodes}"
    data["topology"]["pools"][0]["nodes"] = nodes
    scenario = parse_scenario(data)
    sampler = Sampler()
    started = time.monotonic()
    sampler.start()
    result = run_scenario(scenario, baseline=False, console=Console(file=io.StringIO()), live=False)
    sampler.stop.set()
    sampler.join()
    # Keep the played part only: from the time every agent process existed.
    full = [s for s in sampler.samples if sum(1 for v in s[1].values() if v[0] == "agent") >= nodes]
    load = os.getloadavg()
    return {"nodes": nodes, "passed": result.passed, "summary": result.report["summary"],
            "wall_s": round(time.monotonic() - started, 1), "loadavg_1m": load[0],
            "processes": summarize(full) if len(full) >= 2 else {},
            "failed": [e.detail for e in result.expectations if not e.passed]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("nodes", type=int, nargs="+")
    args = parser.parse_args()
    for n in args.nodes:
        print(json.dumps(run(n)), flush=True)


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    main()

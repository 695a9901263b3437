"""What a real lab node costs on this machine, and how many fit: a pool of N real nodes (a real
kubelet v1.36, containerd, runc, kube-proxy; edgewatch's agent and two sample pods as real
containers), played for 90 s without faults after everything serves.

Per N it prints one JSON line: per real node the CPU over the played part (% of one core, from the
node's cgroups: kubelet, containerd, shims, kube-proxy and its containers), its RSS at the end
(MiB, summed over its processes), the seconds from its start to Node Ready and to its agent pod
Ready (medians and largest), and the whole machine's CPU over the played part (% of all cores).

Usage: .venv/bin/python bench/real_nodes.py 1 4 8   (root; builds the node binaries and images)

Limits: start-up figures are with all N nodes starting at once on 2 cores; RSS sums resident
pages per process (shared library pages count once per process).
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import time

from rich.console import Console

from edgewatch_lab.playground.runner import run_scenario
from edgewatch_lab.playground.scenario import parse_scenario


def _cpu_total() -> tuple[float, float]:
    fields = [float(x) for x in open("/proc/stat").readline().split()[1:]]
    return sum(fields), fields[3] + fields[4]  # all, idle + iowait


def run(n: int) -> dict[str, object]:
    """Play the idle pool of ``n`` real nodes; return the figures (see the module docstring)."""
    scenario = parse_scenario({
        "name": f"real-nodes-cost-{n}",
        "topology": {"pools": [{"name": "a", "nodes": n, "coordinator": True, "real_nodes": n}]},
        "steps": [{"at": 90, "action": "end"}],
        "expect": [{"pool": "a", "evictions": 0, "never_not_ready": True}],
    })
    total0, idle0 = _cpu_total()
    started = time.monotonic()
    result = run_scenario(scenario, baseline=False, console=Console(file=io.StringIO()), live=False)
    total1, idle1 = _cpu_total()
    costs = [c for c in result.report["node_costs"].values() if c["kind"] == "real"]

    def stats(key: str) -> dict[str, float]:
        values = [float(c[key]) for c in costs if key in c]
        return {"median": round(statistics.median(values), 2), "max": round(max(values), 2)} if values else {}

    return {
        "real_nodes": n,
        "passed": all(e.passed for e in result.expectations),
        "node_cpu_pct_of_one_core": stats("cpu_pct"),
        "node_rss_mib": stats("rss_mib"),
        "node_ready_s": stats("ready_s"),
        "agent_ready_s": stats("agent_ready_s"),
        "machine_cpu_pct_of_all_cores_whole_run": round(100 * (1 - (idle1 - idle0) / max(total1 - total0, 1)), 1),
        "run_s": round(time.monotonic() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("counts", type=int, nargs="+", help="pool sizes (all real nodes)")
    for n in parser.parse_args().counts:
        print(json.dumps(run(n)), flush=True)


if __name__ == "__main__":
    main()

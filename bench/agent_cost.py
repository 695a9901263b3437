"""Memory and CPU of the agent for a group of N nodes, on the real control plane.

All N agents (and N simulated kubelets) share this one process, each on its own loopback address
(127.0.1.<i>), exchanging real signed messages over TCP every second with their ring neighbours
(all peers up to 7 nodes, at most 6 beyond; ``bench/agent_process.py`` measures one agent process). The kubelets run alone first, so their share can be subtracted:

    agent CPU   = (CPU seconds with agents - CPU seconds without) / N / window      [cores per agent]
    agent RSS   = (RSS with agents - RSS without) / N                               [MiB per agent]
    CPU/period  = agent CPU seconds / exchange periods completed                    [ms per agent period]

When one process cannot keep N agents on their 1 s period (it is CPU-bound: N * min(N-1, 6) exchanges a
second, each a TLS-free HTTP round trip, an HMAC and a schema check on both ends), the achieved
period stretches; "CPU/period" is then the figure that carries over to one agent per node.

Usage: .venv/bin/python bench/agent_cost.py 5 50 [--window 60]   (prints one JSON line per N)

Limits: one Python process, so per-agent memory excludes the interpreter and libraries a
separate agent process would load once (about 60 MiB, measured separately below with N=1 process
figures from the playground); CPU includes the API writes of the group's publishers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import tempfile
import time
from pathlib import Path

from edgewatch.agent.agent import Agent
from edgewatch.agent.config import AgentConfig
from edgewatch.core.topology import DEFAULT_RINGS
from edgewatch.core.types import NodeName
from edgewatch.names import IDENTITY_NAMESPACE
from edgewatch_lab.testing.controlplane import ControlPlane
from edgewatch_lab.testing.kubeletsim import KubeletFleet, KubeletSimConfig, SimNode, make_client
from lightkube.resources.core_v1 import Node


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


async def measure(cp: ControlPlane, n: int, window_s: float, workdir: Path) -> dict[str, float]:
    client = make_client(str(cp.kubeconfig), timeout_s=10)
    nodes = [SimNode(name=f"b{n}-{i}", address=f"127.0.1.{i}", index=i) for i in range(1, n + 1)]
    fleet = KubeletFleet(client=client, nodes=nodes, config=KubeletSimConfig(healthz_port=10248))
    async with asyncio.TaskGroup() as tg:
        fleet_task = tg.create_task(fleet.run())
        await fleet.registered.wait()
        await asyncio.sleep(10)
        rss0, cpu0, t0 = rss_mib(), cpu_s(), time.monotonic()
        await asyncio.sleep(window_s / 2)
        kubelet_cpu_rate = (cpu_s() - cpu0) / (time.monotonic() - t0)
        agents = [Agent(config=AgentConfig(node=NodeName(s.name), identity_file=workdir / f"{s.name}.key", listen_address=s.address,
                                           kubelet_healthz_url=f"http://{s.address}:10248/healthz",
                                           namespace="default"), client=client) for s in nodes]
        tasks = [tg.create_task(a.run()) for a in agents]
        await asyncio.sleep(15)  # warm-up: every agent has a full view
        healthy = sum(1 for a in agents if len([v for v in a.snapshot().verdicts.values() if v.value == "healthy"]) == n)
        cpu1, t1, periods1 = cpu_s(), time.monotonic(), sum(a.peers.periods for a in agents)
        await asyncio.sleep(window_s)
        elapsed = time.monotonic() - t1
        agents_cpu_rate = (cpu_s() - cpu1) / elapsed - kubelet_cpu_rate
        periods = sum(a.peers.periods for a in agents) - periods1
        rss1 = rss_mib()
        for t in [*tasks, fleet_task]:
            t.cancel()
    for s in nodes:  # leave the shared control plane clean for the next size
        await client.delete(Node, s.name)
    await client.close()
    period_s = elapsed * n / max(periods, 1)
    return {"agents": n, "agents_with_full_healthy_view": healthy,
            "cpu_cores_per_agent": round(agents_cpu_rate / n, 4),
            "cpu_ms_per_agent_period": round(1000 * agents_cpu_rate * elapsed / max(periods, 1), 2),
            "achieved_period_s": round(period_s, 2),
            "rss_mib_per_agent": round((rss1 - rss0) / n, 2), "process_rss_mib": round(rss1, 1),
            "exchanges_per_agent_per_period": min(n - 1, 2 * DEFAULT_RINGS)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", type=int, nargs="+")
    parser.add_argument("--window", type=float, default=60.0, help="measurement window, seconds")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp())  # one identity key file per simulated node
    with ControlPlane() as cp:
        cp.kubectl("create", "namespace", IDENTITY_NAMESPACE)
        for n in args.sizes:
            print(json.dumps(asyncio.run(measure(cp, n, args.window, workdir))), flush=True)


if __name__ == "__main__":
    main()

"""CPU and memory of ONE real agent process in a group of N, on the real control plane (issue 11).

How: the group is N Node objects in a real kube-apiserver (InternalIPs on loopback, 127.1.x.y).
The measured node M and its ring neighbours (edgewatch.core.topology: at most 6, whatever N is) run
as real ``edgewatch agent`` processes; the other members are Node objects without an agent (dead to
the group). With the ring protocol an agent exchanges only with its neighbours, so M does exactly
the work it would do in a group of N live agents: 6 probes and 6 answers a period, real Ed25519
envelopes, its roster holding all N members, the topology of N members. A tiny HTTP server plays
every node's kubelet /healthz.

Measured from /proc/<pid>/stat and /proc/<pid>/status of M's process after a warm-up:

    cpu     = (utime + stime) delta / window          [fraction of one core]
    rss     = VmRSS at the end                        [MiB]
    start   = seconds from exec to /readyz 200

Usage: .venv/bin/python bench/agent_process.py 50 1000 [--window 60]   (one JSON line per N)

Limits: the agents use the admin kubeconfig (a benchmark, not a deployment); no controller runs
(the bench writes the group's roster itself), so no beacon is issued and agents write no evidence (one write per 10 s in a real cluster); the
neighbours' own other neighbours are absent, so they probe a few fallback contacts (M's cost does
not include theirs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from _measure import address, healthz_server, proc_cpu_s, proc_rss_mib, stop_processes

from edgewatch.core.roster import ROSTER_PREFIX, Roster, encode_roster
from edgewatch.core.topology import neighbours
from edgewatch.core.types import NodeName
from edgewatch.names import IDENTITY_NAMESPACE
from edgewatch_lab.testing.controlplane import ControlPlane
from edgewatch_lab.testing.kubeletsim import make_client
from lightkube import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Node

def ready(addr: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{addr}:51005/readyz", timeout=1) as resp:
            return resp.status == 200
    except OSError:
        return False


async def create_nodes(kubeconfig: str, names: list[str]) -> None:
    """The N Node objects, and their group's roster as the controller would publish it (no
    controller runs here)."""
    client = make_client(kubeconfig, timeout_s=30)
    sem = asyncio.Semaphore(16)
    data = encode_roster(Roster(group="", members={NodeName(n): address(i) for i, n in enumerate(names)}))
    try:
        await client.replace(ConfigMap(metadata=ObjectMeta(name=ROSTER_PREFIX, namespace="default"), data=data))
    except ApiError:
        await client.create(ConfigMap(metadata=ObjectMeta(name=ROSTER_PREFIX, namespace="default"), data=data))

    async def one(i: int, name: str) -> None:
        async with sem:
            await client.create(Node.from_dict({
                "metadata": {"name": name},
                "status": {"addresses": [{"type": "InternalIP", "address": address(i)}]}}))
            await client.patch(Node.Status, name, {"status": {"addresses": [
                {"type": "InternalIP", "address": address(i)}]}})

    await asyncio.gather(*(one(i, n) for i, n in enumerate(names)))
    await client.close()


async def delete_nodes(kubeconfig: str, names: list[str]) -> None:
    client = make_client(kubeconfig, timeout_s=30)
    sem = asyncio.Semaphore(16)

    async def one(name: str) -> None:
        async with sem:
            await client.delete(Node, name)

    await asyncio.gather(*(one(n) for n in names))
    await client.close()


async def measure(cp: ControlPlane, n: int, window_s: float, workdir: Path) -> dict[str, object]:
    names = [f"g{n}-{i:04d}" for i in range(n)]
    t0 = time.monotonic()
    await create_nodes(str(cp.kubeconfig), names)
    created_s = time.monotonic() - t0
    ring = neighbours([NodeName(x) for x in names])
    me = names[0]
    run = [me, *sorted(ring[NodeName(me)])]
    index = {name: i for i, name in enumerate(names)}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    started: dict[str, float] = {}
    healthz = await healthz_server()
    try:
        for name in run:
            state = workdir / name
            state.mkdir(parents=True, exist_ok=True)
            started[name] = time.monotonic()
            procs[name] = subprocess.Popen(
                [str(Path(sys.executable).parent / "edgewatch"), "agent", "--node", name, "--identity-file", str(state / "id.key"),
                 "--kubeconfig", str(cp.kubeconfig), "--listen-address", address(index[name]),
                 "--namespace", "default", "--state-dir", str(state), "--pool-cache-port", "0",
                 "--log-level", "WARNING"],
                stdout=subprocess.DEVNULL, stderr=open(state / "agent.log", "wb"))
        start_s = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if ready(address(index[me])):
                start_s = time.monotonic() - started[me]
                break
            await asyncio.sleep(0.2)
        await asyncio.sleep(30)  # warm-up: every detector has seen its neighbours
        pid = procs[me].pid
        cpu0, t1 = proc_cpu_s(pid), time.monotonic()
        helpers0 = {x: proc_cpu_s(p.pid) for x, p in procs.items() if x != me}
        await asyncio.sleep(window_s)
        elapsed = time.monotonic() - t1
        cpu = (proc_cpu_s(pid) - cpu0) / elapsed
        helpers = [(proc_cpu_s(procs[x].pid) - c) / elapsed for x, c in helpers0.items()]
        with urllib.request.urlopen(f"http://{address(index[me])}:51005/metrics", timeout=5) as resp:
            metrics = resp.read().decode()
        probes_ok = sum(float(line.split()[-1]) for line in metrics.splitlines()
                        if line.startswith('edgewatch_agent_probes_total{result="ok"}'))
        return {"group": n, "agent_processes": len(run), "neighbours": len(run) - 1,
                "cpu_fraction_of_core": round(cpu, 4), "rss_mib": round(proc_rss_mib(pid), 1),
                "start_to_ready_s": None if start_s is None else round(start_s, 1),
                "probes_ok_total": probes_ok, "neighbour_cpu_fraction_mean": round(sum(helpers) / len(helpers), 4),
                "nodes_created_s": round(created_s, 1), "window_s": window_s}
    finally:
        stop_processes(procs.values())
        await healthz.cleanup()
        await delete_nodes(str(cp.kubeconfig), names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", type=int, nargs="+")
    parser.add_argument("--window", type=float, default=60.0, help="measurement window, seconds")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="ew-agent-process-"))
    with ControlPlane() as cp:
        cp.kubectl("create", "namespace", IDENTITY_NAMESPACE)
        for n in args.sizes:
            print(json.dumps(asyncio.run(measure(cp, n, args.window, workdir))), flush=True)


if __name__ == "__main__":
    main()

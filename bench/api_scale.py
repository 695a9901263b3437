"""The cloud API load edgewatch adds at 1,000 nodes, on the real control plane (docs/scaling.md).

How: a fresh control plane (kube-apiserver with an audit log, etcd, kube-controller-manager,
kube-scheduler) per size N. N simulated kubelets in this process (``KubeletFleet``: Node
registration, a Lease renewal every 10 s, the NodeStatus check every 10 s and re-post every 5 min,
as a kubelet does) make the nodes; the shipped ``edgewatch-config`` covers them (label
``edgewatch.io/pool``). The real ``edgewatch controller`` runs as a process (it publishes the group
roster, issues beacons, counts evidence), and so do real ``edgewatch agent`` processes for one node
M and its ring neighbours (at most 7 processes whatever N is). An agent's API traffic does not
depend on how many other agents run: it watches its own Node, the ConfigMap, its group's roster,
the beacon and the key records, and writes its own evidence Lease. So the per-agent figures
measured on those 7 are what each of N agents adds; the controller's are measured whole and
divided by N.

Measured over a window after a settle time:

* requests by verb and resource, per agent per minute and the controller's per node per minute,
  from the apiserver's audit log (edgewatch's requests carry the User-Agent ``edgewatch-agent/…``
  or ``edgewatch-controller/…``, ``edgewatch.kube.client.user_agent``);
* watch events each agent received, by resource (``edgewatch_agent_watch_events_total``);
* the Node updates in the cluster per minute (audit log, every user): what each agent received
  when it watched every Node (before this change) — the O(n²) term that is gone;
* watch events the apiserver sent, by kind, all watchers (``apiserver_watch_events_total``);
* the controller process's CPU (fraction of one core) and RSS.

Usage: .venv/bin/python bench/api_scale.py 50 1000 [--window 120] [--settle 90]   (root; one JSON line per N)

Limits: the processes use the admin kubeconfig (the RBAC and admission policies are tested in
tests/integration; the User-Agent tells the callers apart); nodes without an agent publish no
evidence, so the controller holds most nodes at EdgeHealthy Unknown (steady state: no writes); the
kubelets are simulated (their API traffic is the yardstick, not the subject).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

from _measure import address, audit_requests, healthz_server, proc_cpu_s, proc_rss_mib, stop_processes, watch_events
from lightkube.resources.core_v1 import ConfigMap

from edgewatch.core.roster import ROSTER_PREFIX, decode_roster
from edgewatch.core.topology import neighbours
from edgewatch.core.types import NodeName
from edgewatch.names import POOL_LABEL
from edgewatch_lab.testing.controlplane import ControlPlane
from edgewatch_lab.testing.kubeletsim import KubeletFleet, KubeletSimConfig, SimNode, make_client

REPO = Path(__file__).resolve().parents[1]
_AGENT_EVENTS = re.compile(r'^edgewatch_agent_watch_events_total\{resource="(?P<r>[^"]+)"\} (?P<v>\S+)$', re.M)
WRITES = ("create", "update", "patch", "delete")


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.read().decode()


def agent_events(addr: str) -> Counter[str]:
    return Counter({m.group("r"): float(m.group("v"))
                    for m in _AGENT_EVENTS.finditer(get(f"http://{addr}:51005/metrics"))})


def caller(event: dict) -> str:  # type: ignore[type-arg]
    """``agent``, ``controller`` (by edgewatch's User-Agent) or ``other:<client>``."""
    agent = event.get("userAgent", "")
    if agent.startswith("edgewatch-agent/"):
        return "agent"
    if agent.startswith("edgewatch-controller/"):
        return "controller"
    return "other:" + agent.split("/")[0][:40]


def audit(path: Path, offset: int) -> tuple[Counter[tuple[str, str, str]], int]:
    return audit_requests(path, offset, caller=caller, with_namespace=True)


async def wait_for(predicate, timeout_s: float, what: str) -> float:  # type: ignore[no-untyped-def]
    start = time.monotonic()
    while not await predicate():
        if time.monotonic() - start > timeout_s:
            raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(1)
    return time.monotonic() - start


async def measure(cp: ControlPlane, n: int, *, window_s: float, settle_s: float, workdir: Path) -> dict[str, object]:
    assert cp.kubeconfig is not None and cp.audit_log is not None
    kubeconfig = str(cp.kubeconfig)
    for ns in ("edgewatch", "edgewatch-nodes"):
        cp.kubectl("create", "namespace", ns)
    cp.kubectl("apply", "-f", str(REPO / "deploy" / "20-config.yaml"))
    names = [f"n{n}-{i:04d}" for i in range(n)]
    nodes = [SimNode(name=x, address=address(i), index=i % 256, labels={POOL_LABEL: "a"}) for i, x in enumerate(names)]
    client = make_client(kubeconfig, timeout_s=10)
    fleet = KubeletFleet(client=client, nodes=nodes, config=KubeletSimConfig(healthz_port=None))
    procs: dict[str, subprocess.Popen[bytes]] = {}
    healthz = await healthz_server()
    fleet_task = asyncio.create_task(fleet.run())
    try:
        t0 = time.monotonic()
        await asyncio.wait_for(fleet.registered.wait(), timeout=600)
        registered_s = time.monotonic() - t0
        logs = workdir / f"n{n}"
        logs.mkdir(parents=True, exist_ok=True)
        exe = str(Path(sys.executable).parent / "edgewatch")
        procs["controller"] = subprocess.Popen(
            [exe, "controller", "--kubeconfig", kubeconfig, "--metrics-address", "127.0.0.1",
             "--metrics-port", "18080", "--log-level", "WARNING"],
            stdout=subprocess.DEVNULL, stderr=open(logs / "controller.log", "wb"))

        async def roster_complete() -> bool:
            try:
                cm = await client.get(ConfigMap, ROSTER_PREFIX, namespace="edgewatch")
            except Exception:  # noqa: BLE001 - not published yet
                return False
            return len(decode_roster(cm.data).members) == n

        roster_s = await wait_for(roster_complete, 300, f"the controller's roster of {n} members")
        ring = neighbours([NodeName(x) for x in names])
        run = [names[0], *sorted(ring[NodeName(names[0])])]
        index = {x: i for i, x in enumerate(names)}
        for x in run:
            state = logs / x
            state.mkdir(exist_ok=True)
            procs[x] = subprocess.Popen(
                [exe, "agent", "--node", x, "--identity-file", str(state / "id.key"), "--kubeconfig", kubeconfig,
                 "--listen-address", address(index[x]), "--state-dir", str(state), "--pool-cache-port", "0",
                 "--log-level", "WARNING"],
                stdout=subprocess.DEVNULL, stderr=open(state / "agent.log", "wb"))
        await asyncio.sleep(settle_s)
        _, offset = audit(cp.audit_log, 0)
        events0, agents0 = watch_events(cp.kubectl("get", "--raw", "/metrics")), {x: agent_events(address(index[x])) for x in run}
        ctl = procs["controller"].pid
        cpu0, w0 = proc_cpu_s(ctl), time.monotonic()
        await asyncio.sleep(window_s)
        elapsed = time.monotonic() - w0
        ctl_cpu = (proc_cpu_s(ctl) - cpu0) / elapsed
        counts, _ = audit(cp.audit_log, offset)
        events1, agents1 = watch_events(cp.kubectl("get", "--raw", "/metrics")), {x: agent_events(address(index[x])) for x in run}
        ctl_rss = proc_rss_mib(ctl)
        ctl_metrics = {line.split()[0]: float(line.split()[1]) for line in get("http://127.0.0.1:18080/metrics").splitlines()
                       if line.startswith(("edgewatch_controller_api_reads_total", "edgewatch_controller_reconciles_total",
                                           "edgewatch_controller_roster_writes_total"))}
    finally:
        stop_processes(procs.values())
        fleet_task.cancel()
        await asyncio.gather(fleet_task, return_exceptions=True)
        await healthz.cleanup()
        await client.close()
    per_min = 60.0 / elapsed
    agents = len(run)

    def table(who: str, divide: float, writes: bool) -> dict[str, float]:
        return {f"{verb} {res}": round(c * per_min / divide, 3) for (w, verb, res), c in sorted(counts.items())
                if w == who and (verb in WRITES) == writes}

    agent_writes = table("agent", agents, True)
    ctl_writes = table("controller", n, True)
    node_updates = sum(c for (w, verb, res), c in counts.items() if verb in ("update", "patch")
                       and res.split("@")[0] in ("nodes", "nodes/status")) * per_min
    lease_renewals = sum(c for (w, verb, res), c in counts.items() if w.startswith("other") and verb in ("update", "patch")
                         and res == "leases@kube-node-lease") * per_min / n
    received: Counter[str] = Counter()
    for x in run:
        received.update({r: agents1[x][r] - agents0[x].get(r, 0) for r in agents1[x]})
    per_agent_events = {r: round(v * per_min / agents, 2) for r, v in sorted(received.items())}
    return {
        "nodes": n, "agent_processes": agents, "window_s": round(elapsed), "registered_s": round(registered_s, 1),
        "roster_published_s": round(roster_s, 1),
        "agent_writes_per_agent_per_min": agent_writes,
        "agent_writes_total_per_agent_per_min": round(sum(agent_writes.values()), 2),
        "agent_reads_per_agent_per_min": table("agent", agents, False),
        "agent_watch_events_per_agent_per_min": per_agent_events,
        "agent_watch_events_total_per_agent_per_min": round(sum(per_agent_events.values()), 2),
        "controller_writes_per_node_per_min": ctl_writes,
        "controller_writes_total_per_node_per_min": round(sum(ctl_writes.values()), 3),
        "controller_reads_per_node_per_min": table("controller", n, False),
        "node_updates_per_min_all_callers": round(node_updates, 1),
        "node_updates_per_min_by_caller": {f"{w} {verb} {res}": round(c * per_min, 1)
                                           for (w, verb, res), c in sorted(counts.items())
                                           if verb in ("update", "patch") and res.split("@")[0] in ("nodes", "nodes/status")},
        "before_node_watch_events_per_agent_per_min": round(node_updates, 1),
        "kubelet_lease_renewals_per_node_per_min": round(lease_renewals, 2),
        "apiserver_watch_events_per_node_per_min_by_kind": {
            k: round((events1[k] - events0.get(k, 0)) * per_min / n, 2) for k in sorted(events1)
            if events1[k] - events0.get(k, 0) > 0},
        "controller_cpu_fraction_of_core": round(ctl_cpu, 3), "controller_rss_mib": round(ctl_rss, 1),
        "controller_counters_at_end": ctl_metrics,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", type=int, nargs="+")
    parser.add_argument("--window", type=float, default=120.0, help="measurement window, seconds")
    parser.add_argument("--settle", type=float, default=90.0, help="seconds from the agents' start to the window")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="ew-api-scale-"))
    for n in args.sizes:
        with ControlPlane(audit=True) as cp:
            result = asyncio.run(measure(cp, n, window_s=args.window, settle_s=args.settle, workdir=workdir))
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

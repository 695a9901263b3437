"""CPU and memory of ONE real agent process in a group of N, on the real control plane (docs/scaling.md).

How: the group is N Node objects in a real kube-apiserver (InternalIPs on loopback, 127.1.x.y).
The measured node M and its ring neighbours (edgewatch.core.topology: at most 6, whatever N is) run
as real ``edgewatch agent`` processes; the other members are Node objects without an agent (dead to
the group). With the ring protocol an agent exchanges only with its neighbours, so M does exactly
the work it would do in a group of N live agents: 6 probes and 6 answers a period, real Ed25519
envelopes, its roster holding all N members, the topology of N members. A tiny HTTP server plays
every node's kubelet /healthz.

Measured from /proc/<pid>/stat, /proc/<pid>/status and /proc/<pid>/smaps_rollup of M's process
after a warm-up:

    cpu       = (utime + stime) delta / window        [fraction of one core]
    rss_mib   = Rss at the end                        [MiB]
    anon_mib  = Anonymous (heap, arenas, stacks)      [MiB]  the process's own memory
    file_mib  = Rss - Anonymous                       [MiB]  shared libraries, extension modules
                                                             (shared with other processes mapping them)
    pss_mib   = Pss (shared pages divided among the processes sharing them)
    threads   = Threads at the end
    memory_map = heap / anonymous mmaps (pymalloc arenas) / stack / libraries' anonymous and file
                pages, and the largest files by Rss (/proc/<pid>/smaps, see _measure.proc_memory_map_mib)
    start     = seconds from exec to /readyz 200

What runs (default: as docs/scaling.md's figures were measured, comparable with them):

    (default)        --pool-cache-port 0 (the node side of the pool cache off), no coordinator
    --pool-cache     the pool cache as shipped: port 51007 (the default), each agent on its own
                     loopback address (--pool-cache-address 127.1.x.y: the seven agents share one
                     machine); the default pool-scope resources (EndpointSlices, Services) cached.
                     Checked before the window: the port answers HTTPS (401/403 to a request
                     without credentials) and edgewatch_poolcache_synced is 1 for every resource.
    --coordinator    a real etcd (edgewatch_lab.testing.etcd.EtcdServer) as the pool coordinator,
                     named in the edgewatch-config ConfigMap (poolCoordinators: "bench: URL"), every
                     Node labelled edgewatch.io/pool=bench: the agents find it as deployed agents
                     do (no --coordinator flag). M runs session, election and, as leader, the
                     forwarding loop and the pool cache's leader (cloud -> etcd). Checked before
                     the window: edgewatch_coordinator_healthy 1, _ready 1, and M's role is the
                     one asked (--role: M is started first and leads, or started last and follows).

Usage: .venv/bin/python bench/agent_process.py 50 1000 [--window 60] [--pool-cache] [--coordinator]
       [--role leader|follower] [--agent-env KEY=VALUE ...] [--python-flag FLAG ...]
(one JSON line per N). --agent-env and --python-flag (e.g. PYTHONMALLOC=malloc, MALLOC_ARENA_MAX=2,
-OO, -Xno_debug_ranges: one argument each) apply to every agent process, to try process-level
settings; they are echoed in the JSON line.

Limits: the agents use the admin kubeconfig (a benchmark, not a deployment); no controller runs
(the bench writes the group's roster itself), so no beacon is issued and agents write no evidence (one write per 10 s in a real cluster); the
neighbours' own other neighbours are absent, so they probe a few fallback contacts (M's cost does
not include theirs). With --coordinator every cloud link is up, so no heartbeat is delegated: the
leader's forwarding loop runs but carries nothing, and the pool holds only the 7 running agents.
The pool cache serves no client during the window (kube-proxy and CoreDNS would hold watches on
it); the cluster holds few EndpointSlices and Services (an empty control plane's), so the caches are
small. RSS includes shared library pages (file_mib): several agents on one machine share them,
one agent per node does not.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from _measure import (address, healthz_server, proc_cpu_s, proc_memory_map_mib, proc_memory_mib, proc_threads,
                      stop_processes)

from edgewatch.agent.membership import CONFIGMAP_NAME
from edgewatch.core.grouping import CONFIG_KEY_POOL_COORDINATORS
from edgewatch.core.roster import ROSTER_PREFIX, Roster, encode_roster
from edgewatch.core.topology import neighbours
from edgewatch.core.types import NodeName
from edgewatch.names import DEFAULT_POOL_CACHE_PORT, IDENTITY_NAMESPACE, POOL_LABEL
from edgewatch_lab.testing.controlplane import ControlPlane
from edgewatch_lab.testing.etcd import EtcdServer
from edgewatch_lab.testing.kubeletsim import make_client
from lightkube import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Node

POOL = "bench"


def ready(addr: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{addr}:51005/readyz", timeout=1) as resp:
            return resp.status == 200
    except OSError:
        return False


def metrics_of(addr: str, token: str) -> dict[str, float]:
    """The agent's /metrics as ``{'name{labels}': value}`` ({} when it does not answer), read with
    ``token`` (one that may ``get /metrics``: the shipped scraper ServiceAccount's)."""
    try:
        req = urllib.request.Request(f"http://{addr}:51005/metrics", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            try:
                out[key] = float(value)
            except ValueError:
                pass
    return out


def role_of(metrics: dict[str, float]) -> str | None:
    """The coordinator role the agent reports (edgewatch_coordinator_role{role=...} 1), or None."""
    for role in ("leader", "follower", "pending"):
        if metrics.get(f'edgewatch_coordinator_role{{role="{role}"}}') == 1:
            return role
    return None


def pool_cache_answers(addr: str) -> int | None:
    """HTTP status of a request without credentials to the pool cache's HTTPS port (401/403
    expected: it answers, and refuses strangers), or None when nothing answers."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # its self-signed certificate
    try:
        with urllib.request.urlopen(f"https://{addr}:{DEFAULT_POOL_CACHE_PORT}/apis/discovery.k8s.io/v1/endpointslices",
                                    timeout=5, context=ctx) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def check_running(metrics: dict[str, float], addr: str, *, pool_cache: bool, coordinator: bool,
                  role: str) -> dict[str, object]:
    """Assert that M runs what the options ask for (so the figure cannot measure something else);
    returns what was seen."""
    seen: dict[str, object] = {}
    if pool_cache:
        synced = {k: v for k, v in metrics.items() if k.startswith("edgewatch_poolcache_synced{")}
        source = [k.split('"')[1] for k, v in metrics.items() if k.startswith("edgewatch_poolcache_source{") and v == 1]
        status = pool_cache_answers(addr)
        assert synced and all(v == 1 for v in synced.values()), f"pool cache not synced: {synced}"
        assert status in (401, 403), f"pool cache port {DEFAULT_POOL_CACHE_PORT} on {addr}: {status}"
        seen.update(pool_cache_resources=len(synced), pool_cache_source=source[0] if source else None,
                    pool_cache_http=status)
    else:
        assert not any(k.startswith("edgewatch_poolcache_synced{") for k in metrics), "pool cache runs"
        assert pool_cache_answers(addr) is None, "pool cache port answers"
    if coordinator:
        assert metrics.get("edgewatch_coordinator_healthy") == 1, "coordinator session not healthy"
        assert metrics.get("edgewatch_coordinator_ready") == 1, "coordinator not ready (no leader sync)"
        assert role_of(metrics) == role, f"coordinator role {role_of(metrics)}, wanted {role}"
        if pool_cache:
            assert seen["pool_cache_source"] == "coordinator", f"pool cache reads {seen['pool_cache_source']}"
        seen.update(coordinator_role=role_of(metrics),
                    leader_writes=sum(v for k, v in metrics.items()
                                          if k.startswith("edgewatch_poolcache_leader_writes_total")))
    else:
        assert role_of(metrics) is None, "a coordinator runs"
    return seen


async def wait_for(predicate: Callable[[], bool], *, timeout_s: float, what: str) -> float:
    """Poll ``predicate`` (blocking, run in a thread) every 0.2 s; seconds it took."""
    t0 = time.monotonic()
    while not await asyncio.to_thread(predicate):
        if time.monotonic() - t0 > timeout_s:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        await asyncio.sleep(0.2)
    return time.monotonic() - t0


async def put_config(kubeconfig: str, data: dict[str, str] | None) -> None:
    """Write (or with None delete) the edgewatch-config ConfigMap in the bench namespace."""
    client = make_client(kubeconfig, timeout_s=30)
    try:
        if data is None:
            with contextlib.suppress(ApiError):
                await client.delete(ConfigMap, CONFIGMAP_NAME, namespace="default")
            return
        cm = ConfigMap(metadata=ObjectMeta(name=CONFIGMAP_NAME, namespace="default"), data=data)
        try:
            await client.create(cm)
        except ApiError:
            await client.replace(cm)
    finally:
        await client.close()


async def create_nodes(kubeconfig: str, names: list[str], labels: dict[str, str]) -> None:
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
                "metadata": {"name": name, "labels": labels},
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


@dataclass(frozen=True)
class Options:
    window_s: float
    pool_cache: bool
    coordinator: bool
    role: str
    env: dict[str, str]
    python_flags: tuple[str, ...]


async def measure(cp: ControlPlane, n: int, opts: Options, workdir: Path) -> dict[str, object]:
    names = [f"g{n}-{i:04d}" for i in range(n)]
    kubeconfig = str(cp.kubeconfig)
    etcd: EtcdServer | None = None
    if opts.coordinator:
        assert cp.binaries is not None
        etcd = EtcdServer(binary=cp.binaries.etcd)
        await asyncio.to_thread(etcd.start)
        await put_config(kubeconfig, {CONFIG_KEY_POOL_COORDINATORS: f"{POOL}: {etcd.client_url}\n"})
    deploy = Path(__file__).resolve().parents[1] / "deploy"  # /metrics needs the shipped scraper's token
    cp.kubectl("apply", "-f", str(deploy / "00-namespace.yaml"), "-f", str(deploy / "13-rbac-metrics.yaml"))
    token = cp.kubectl("create", "token", "edgewatch-metrics-scraper", "--namespace", "edgewatch").strip()
    t0 = time.monotonic()
    await create_nodes(kubeconfig, names, {POOL_LABEL: POOL} if opts.coordinator else {})
    created_s = time.monotonic() - t0
    ring = neighbours([NodeName(x) for x in names])
    me = names[0]
    others = sorted(ring[NodeName(me)])
    # As leader M starts first and is elected before its neighbours run; as follower it starts last.
    run = [me, *others] if opts.role == "leader" else [*others, me]
    index = {name: i for i, name in enumerate(names)}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    started: dict[str, float] = {}
    healthz = await healthz_server()
    env = {**os.environ, **opts.env}
    script = Path(sys.executable).parent / "edgewatch"
    try:
        for name in run:
            state = workdir / f"{name}-{secrets.token_hex(2)}"
            state.mkdir(parents=True, exist_ok=True)
            cache = ["--pool-cache-address", address(index[name])] if opts.pool_cache else ["--pool-cache-port", "0"]
            started[name] = time.monotonic()
            procs[name] = subprocess.Popen(
                [sys.executable, *opts.python_flags, str(script), "agent", "--node", name,
                 "--identity-file", str(state / "id.key"),
                 "--kubeconfig", kubeconfig, "--listen-address", address(index[name]),
                 "--namespace", "default", "--state-dir", str(state), *cache,
                 "--log-level", "WARNING"],
                stdout=subprocess.DEVNULL, stderr=open(state / "agent.log", "wb"), env=env)
            if opts.coordinator and name == me and opts.role == "leader":
                await wait_for(lambda: role_of(metrics_of(address(index[me]), token)) == "leader", timeout_s=60,
                               what="M to lead its pool")
            if opts.coordinator and name == others[-1] and opts.role == "follower":
                await wait_for(lambda: any(role_of(metrics_of(address(index[x]), token)) == "leader" for x in others),
                               timeout_s=60, what="a neighbour to lead the pool")
        await wait_for(lambda: ready(address(index[me])), timeout_s=120, what="M ready")
        start_s = time.monotonic() - started[me]
        await asyncio.sleep(30)  # warm-up: every detector has seen its neighbours
        pid = procs[me].pid
        seen = check_running(await asyncio.to_thread(metrics_of, address(index[me]), token), address(index[me]),
                             pool_cache=opts.pool_cache, coordinator=opts.coordinator, role=opts.role)
        cpu0, t1 = proc_cpu_s(pid), time.monotonic()
        helpers0 = {x: proc_cpu_s(p.pid) for x, p in procs.items() if x != me}
        await asyncio.sleep(opts.window_s)
        elapsed = time.monotonic() - t1
        cpu = (proc_cpu_s(pid) - cpu0) / elapsed
        helpers = [(proc_cpu_s(procs[x].pid) - c) / elapsed for x, c in helpers0.items()]
        memory = proc_memory_mib(pid)
        memory_map = proc_memory_map_mib(pid, top=8)
        threads = proc_threads(pid)
        metrics = await asyncio.to_thread(metrics_of, address(index[me]), token)
        if opts.coordinator:
            assert role_of(metrics) == opts.role, f"M's role changed during the window: {role_of(metrics)}"
        probes_ok = metrics.get('edgewatch_agent_probes_total{result="ok"}', 0.0)
        return {"group": n, "agent_processes": len(run), "neighbours": len(run) - 1,
                "pool_cache": opts.pool_cache, "coordinator": opts.coordinator,
                "cpu_fraction_of_core": round(cpu, 4),
                **{k: round(v, 1) for k, v in memory.items()}, "threads": threads, "memory_map": memory_map,
                "start_to_ready_s": round(start_s, 1),
                "probes_ok_total": probes_ok, "neighbour_cpu_fraction_mean": round(sum(helpers) / len(helpers), 4),
                **seen, **({"agent_env": opts.env} if opts.env else {}),
                **({"python_flags": list(opts.python_flags)} if opts.python_flags else {}),
                "nodes_created_s": round(created_s, 1), "window_s": opts.window_s}
    finally:
        stop_processes(procs.values())
        await healthz.cleanup()
        await delete_nodes(kubeconfig, names)
        if etcd is not None:
            await put_config(kubeconfig, None)
            await asyncio.to_thread(etcd.cleanup)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "One agent process").splitlines()[0])
    parser.add_argument("sizes", type=int, nargs="+")
    parser.add_argument("--window", type=float, default=60.0, help="measurement window, seconds")
    parser.add_argument("--pool-cache", action="store_true", help="run the pool cache as shipped (port 51007)")
    parser.add_argument("--coordinator", action="store_true",
                        help="a real etcd as the pool coordinator, named in the edgewatch-config ConfigMap")
    parser.add_argument("--role", choices=("leader", "follower"), default="leader",
                        help="with --coordinator: the measured agent's role (default leader)")
    parser.add_argument("--agent-env", action="append", default=[], metavar="KEY=VALUE",
                        help="environment of the agent processes (repeatable)")
    parser.add_argument("--python-flag", action="append", default=[], metavar="FLAG",
                        help="interpreter flag of the agent processes, e.g. -OO or -Xfrozen_modules=on (repeatable)")
    args = parser.parse_args()
    opts = Options(window_s=args.window, pool_cache=args.pool_cache, coordinator=args.coordinator, role=args.role,
                   env=dict(kv.split("=", 1) for kv in args.agent_env), python_flags=tuple(args.python_flag))
    workdir = Path(tempfile.mkdtemp(prefix="ew-agent-process-"))
    with ControlPlane() as cp:
        cp.kubectl("create", "namespace", IDENTITY_NAMESPACE)
        for n in args.sizes:
            print(json.dumps(asyncio.run(measure(cp, n, opts, workdir))), flush=True)


if __name__ == "__main__":
    main()

"""What the pool cache saves on the uplink, measured: cloud apiserver bytes and watches for the
pool-scope resources with and without the cache, under churn, on pools of N nodes as shipped.

For each N and each mode it starts the playground cluster (one pool of N edge nodes, agents as
pods of the shipped DaemonSet):

* ``cache``: the pool has a coordinator, so the leader holds the pool's one cloud watch per resource
  and every agent reads the coordinator;
* ``no-cache``: no coordinator, so every agent's node cache reads the cloud itself — what N
  kube-proxies (or CoreDNS) each watching the cloud cost, as in a stock cluster.

Then it creates ``--services`` Services with one EndpointSlice of ``--endpoints`` endpoints each,
and runs ``--rounds`` rounds of churn (every slice grown by half, then shrunk back). It reports
the apiserver's own counters over the churn (``apiserver_watch_events_sizes`` / ``_total`` for
services and endpointslices, LIST response bytes, open watches), the latency from a change written
in the cloud to a client on a node *cut off from the cloud* seeing it on its agent's endpoint
(a watch from inside the node's network namespace), the coordinator's etcd size, and the agents'
RSS.

Usage (root): .venv/bin/python bench/pool_cache.py 5 20 [--services 200 --endpoints 10 --rounds 3]
One JSON line per (N, mode).

Limits: one 2-core machine runs everything; wall-clock latencies are measured with one clock (all
processes share the machine's).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from lightkube import codecs
from lightkube.resources.apps_v1 import DaemonSet

sys.path.insert(0, str(Path(__file__).parent))
from lab_cost import sample  # noqa: E402  (same folder)

from edgewatch.names import DEFAULT_POOL_CACHE_PORT  # noqa: E402
from edgewatch_lab.playground.cluster import PlaygroundCluster  # noqa: E402
from edgewatch_lab.playground.proxies import pool_scope_counters  # noqa: E402
from edgewatch_lab.playground.scenario import parse_scenario  # noqa: E402
from edgewatch.poolcache.tls import CERT_FILE  # noqa: E402
from edgewatch_lab.testing.kubeletsim import make_client  # noqa: E402
from edgewatch_lab.testing.kubeproxy import kube_proxy_credentials  # noqa: E402

NS = "bench"

# argv: CA file, endpoint URL, token file, watch seconds. The pool cache serves only a token the
# cloud authenticated and authorized (kube-proxy's here), checked while the node still reached the
# cloud: so the watcher runs once for 1 s before the cut, then again on the cut-off node.
WATCHER = r"""
import json, ssl, sys, time, urllib.request
ctx = ssl.create_default_context(cafile=sys.argv[1])
token = open(sys.argv[3]).read().strip()
req = urllib.request.Request(sys.argv[2] + "/apis/discovery.k8s.io/v1/namespaces/bench/endpointslices"
                             "?watch=1&resourceVersion=0&labelSelector=bench%2Fmark&timeoutSeconds=" + sys.argv[4],
                             headers={"Authorization": "Bearer " + token})
with urllib.request.urlopen(req, context=ctx, timeout=600) as resp:
    for line in resp:
        ev = json.loads(line)
        labels = ev["object"]["metadata"].get("labels", {})
        print(f'{time.time():.4f} {labels.get("bench/mark", "")}', flush=True)
"""


# argv: a token that may get /metrics (the playground's scraper token)
METRICS = """
import sys, urllib.request
req = urllib.request.Request("http://127.0.0.1:51005/metrics", headers={"Authorization": "Bearer " + sys.argv[1]})
print(urllib.request.urlopen(req, timeout=10).read().decode())
"""


def _slice(name: str, endpoints: int, *, base: int, mark: str | None = None) -> Any:
    labels = {"kubernetes.io/service-name": name, "endpointslice.kubernetes.io/managed-by": "bench.edgewatch.io"}
    if mark:
        labels["bench/mark"] = mark
    return codecs.from_dict({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": f"{name}-1", "namespace": NS, "labels": labels},
        "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": [f"10.{100 + base // 250}.{base % 250}.{i + 1}"], "conditions": {"ready": True}}
                      for i in range(endpoints)]})


async def _gather(limit: int, coros: list[Any]) -> None:
    sem = asyncio.Semaphore(limit)

    async def one(c: Any) -> None:
        async with sem:
            await c
    await asyncio.gather(*(one(c) for c in coros))


async def measure(cluster: PlaygroundCluster, *, nodes: int, services: int, endpoints: int, rounds: int,
                  cache: bool) -> dict[str, Any]:
    assert cluster.admin_kubeconfig is not None and cluster.lab is not None
    client = make_client(str(cluster.admin_kubeconfig), timeout_s=30)
    out: dict[str, Any] = {}
    try:
        deadline = time.monotonic() + 300
        while True:
            ds = await client.get(DaemonSet, "edgewatch-agent", namespace="edgewatch")
            if ds.status is not None and ds.status.numberReady == nodes:
                break
            assert time.monotonic() < deadline, "agents not ready"
            await asyncio.sleep(2)
        await asyncio.sleep(20)  # caches and (with the cache) the leader's sync settle
        await client.create(codecs.from_dict({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}))
        started = time.monotonic()
        await _gather(8, [client.create(codecs.from_dict({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": f"svc-{i}", "namespace": NS},
            "spec": {"ports": [{"name": "http", "port": 80}]}})) for i in range(services)])
        await _gather(8, [client.create(_slice(f"svc-{i}", endpoints, base=i)) for i in range(services)])
        out["create_s"] = round(time.monotonic() - started, 1)
        await asyncio.sleep(15)
        before = await pool_scope_counters(client)
        started = time.monotonic()
        for _ in range(rounds):
            for size in (endpoints + endpoints // 2, endpoints):
                await _gather(8, [client.replace(_slice(f"svc-{i}", size, base=i)) for i in range(services)])
        out["churn_s"] = round(time.monotonic() - started, 1)
        await asyncio.sleep(15)
        after = await pool_scope_counters(client)
        delta = {k: (after[k] if k == "open_watches" else after[k] - before[k]) for k in after}
        out.update({f"cloud_{k}": int(v) for k, v in delta.items()})
        out["changes"] = rounds * 2 * services
        out["cloud_watch_bytes_per_change"] = round(delta["watch_bytes"] / out["changes"])
        out.update(await _latency(cluster, client, nodes=nodes))
        rss = [v[2] for v in sample().values() if v[0] == "agent"]
        out["agent_rss_mib_mean"] = round(sum(rss) / len(rss), 1) if rss else None
        if cache:
            etcd = cluster.coordinators["a"]
            host = cluster.coordinator_hosts["a"].address
            with urllib.request.urlopen(f"http://{host}:{etcd.metrics_port}/metrics", timeout=10) as resp:
                for line in resp.read().decode().splitlines():
                    if line.startswith("etcd_mvcc_db_total_size_in_use_in_bytes "):
                        out["coordinator_db_bytes_in_use"] = int(float(line.split()[1]))
    finally:
        await client.close()
    return out


async def _latency(cluster: PlaygroundCluster, client: Any, *, nodes: int, changes: int = 10) -> dict[str, Any]:
    """Cut the last node from the cloud; time cloud writes until a client on it sees them."""
    name = f"a-{nodes}"
    node = cluster.nodes[name]
    assert node.host is not None and cluster.lab is not None
    cert = node.root / "var/lib/edgewatch/pool-cache" / CERT_FILE
    endpoint = f"https://127.0.0.1:{DEFAULT_POOL_CACHE_PORT}"
    token_file = node.root / "bench-token"
    token_file.write_text((await kube_proxy_credentials(client=client, server_url=endpoint,
                                                        ca_pem=cert.read_bytes())).token)
    token_file.chmod(0o600)
    warm = subprocess.run(node.host.wrap_argv([sys.executable, "-c", WATCHER, str(cert), endpoint, str(token_file),
                                               "1"]), capture_output=True, text=True, timeout=60)
    if warm.returncode != 0:
        print(f"{name}: the watcher's first, connected run failed: {warm.stderr[-500:]}", file=sys.stderr)
    await asyncio.to_thread(cluster.lab.cut_cloud, [name])
    await asyncio.sleep(12)  # the node's cloud link is seen down; its cache stays on its source
    proc = subprocess.Popen(node.host.wrap_argv([sys.executable, "-c", WATCHER, str(cert), endpoint, str(token_file),
                                                 "600"]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: dict[str, float] = {}

    def reader() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            t, _, mark = line.strip().partition(" ")
            if mark and mark not in seen:
                seen[mark] = float(t)

    thread = asyncio.get_running_loop().run_in_executor(None, reader)
    written: dict[str, float] = {}
    await asyncio.sleep(3)
    for i in range(changes):
        mark = f"m{i}"
        written[mark] = time.time()  # before the write: the latency is an upper bound
        await client.replace(_slice(f"svc-{i}", 10, base=i, mark=mark))
        await asyncio.sleep(1.0)
    deadline = time.monotonic() + 60  # a loaded machine may deliver late: measure it, do not cut it off
    while len(seen) < changes and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
    proc.kill()
    _, watcher_err = proc.communicate()
    await thread
    probe = subprocess.run(node.host.wrap_argv([sys.executable, "-c", METRICS, cluster.metrics_token() or ""]), capture_output=True, text=True,
                           timeout=20)
    source = [line.split('"')[1] for line in probe.stdout.splitlines()
              if line.startswith("edgewatch_poolcache_source{") and line.rstrip().endswith(" 1.0")]
    if len(seen) < changes:  # say why, for the record
        print(f"{name}: saw {len(seen)}/{changes}; watcher said {watcher_err[-500:]!r}; its pool-cache metrics:",
              file=sys.stderr)
        print("\n".join(line for line in probe.stdout.splitlines() if "poolcache" in line and not line.startswith("#")
                        and not line.rstrip().endswith(" 0.0")), file=sys.stderr)
    await asyncio.to_thread(cluster.lab.restore_cloud, [name])
    lags = sorted(seen[m] - written[m] for m in written if m in seen)
    return {"cutoff_client_seen": f"{len(lags)}/{changes}", "cutoff_source": source[0] if source else None,
            "loadavg_1m": os.getloadavg()[0],
            "cutoff_client_latency_s_median": round(lags[len(lags) // 2], 3) if lags else None,
            "cutoff_client_latency_s_max": round(lags[-1], 3) if lags else None}


def run(nodes: int, *, cache: bool, services: int, endpoints: int, rounds: int, keep: bool = False) -> dict[str, Any]:
    scenario = parse_scenario({
        "name": f"pool-cache-bench-{nodes}", "topology": {"pools": [{"name": "a", "nodes": nodes, "coordinator": cache}]},
        "steps": [{"at": 1, "action": "end"}]})
    started = time.monotonic()
    with PlaygroundCluster(scenario=scenario) as cluster:
        result = asyncio.run(measure(cluster, nodes=nodes, services=services, endpoints=endpoints, rounds=rounds,
                                     cache=cache))
        if keep:
            print(f"logs: {cluster.workdir}", file=sys.stderr)
        else:
            cluster.remove_workdir()
    return {"nodes": nodes, "mode": "cache" if cache else "no-cache", "services": services,
            "endpoints": endpoints, "wall_s": round(time.monotonic() - started, 1), **result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("nodes", type=int, nargs="+")
    parser.add_argument("--services", type=int, default=200)
    parser.add_argument("--endpoints", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default="cache,no-cache", help="cache, no-cache or both (default)")
    parser.add_argument("--keep-logs", action="store_true", help="keep each run's folder (printed on stderr)")
    args = parser.parse_args()
    for n in args.nodes:
        for mode in args.modes.split(","):
            print(json.dumps(run(n, cache=mode == "cache", services=args.services, endpoints=args.endpoints,
                                 rounds=args.rounds, keep=args.keep_logs)), flush=True)


if __name__ == "__main__":
    main()

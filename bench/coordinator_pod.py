"""Memory and CPU of the pool coordinator pod as edgewatch runs it (docs/benchmarks.md), under a
pool's real load; optionally the recovery time after its node dies.

For each pool size N it starts the real control plane (``edgewatch_lab.testing.controlplane``) and:

* creates N Nodes labelled ``edgewatch.io/pool=<pool>`` (InternalIP 127.0.0.<i+1>), a pool CA
  (``edgewatch.controller.poolca``) with its ConfigMap, a Lease per node, and ``--services``
  Services with one EndpointSlice of 10 endpoints each;
* runs the real ``python -m edgewatch pool-coordinator`` as a subprocess (its own process group;
  its etcd child has one of its own, as the program starts it) on
  node 0 (``--host-ip 127.0.0.1``) with the cached etcd binary and the lab's ADMIN kubeconfig (a
  benchmark, not the pod's ServiceAccount). Its serving and root certificates are pre-issued with
  the pool CA into ``<data-dir>/tls/`` as ``edgewatch.csr`` would have stored them, so it requests
  none (no controller runs here); then waits for its ``/readyz``;
* runs the load in one separate process (``bench/_coordinator_load.py``, not measured): N real agent sessions
  (``edgewatch.agent.coordinator.PoolCoordinator``, default timings: heartbeats every 10 s) each
  with its own node certificate (CN = node). Node 0 starts first and leads with the pool cache on
  (EndpointSlices and Services: its informer writes into etcd); every other node starts after it,
  and the odd ones have their cloud link down (``delegate: true``), so the leader carries their
  heartbeats to their cloud Leases;
* churns ``--churn`` EndpointSlices a second (each grown or shrunk by 5 endpoints);
* samples the pod's process tree (the Python process and its etcd child, from /proc) every second
  over ``--seconds``.

Checked, or the run exits 1 (so a figure never comes from a broken run): the pod is Ready before
and after the window, etcd was not restarted, every session is connected and synced (the leader's
``leader-informer-sync`` seen), exactly node 0 leads, the leader forwarded every delegated node and
wrote cache objects during the window.

Reported per N (one table row and one JSON line): RSS of the Python process, of etcd and their sum
at the end, the sum's peak, CPU as a fraction of one core averaged over the window (each and
total), etcd's db size (``etcd_mvcc_db_total_size_in_bytes`` and ``_in_use``), the pool's keys.

``--recovery``: after the window, SIGKILL the pod's process group (the program and its etcd), start
a fresh pod at once on node 1 (127.0.0.2, another port, an EMPTY data dir but for its pre-issued
certificates), and, once it is Ready, give every session the new URL (what ``CoordinatorRunner``
does when the controller publishes the new address in ``edgewatch-pool-coordinators``: close the
old session, start one on the new target). Times from the kill: (a) new pod Ready, (b) a leader
elected, (c) the leader's sync key seen by a session (pool cache served again), (d) every session
synced. Not included: how long Kubernetes takes to notice the dead node and reschedule the pod,
nor the controller's ConfigMap update (the URL is handed over the moment the pod is Ready).

Usage: .venv/bin/python bench/coordinator_pod.py 5 20 [--seconds 120] [--services 200] [--churn 4]
[--recovery]

Limits: one machine runs the control plane, the pod and the load; every "node" is a loopback
address. The pod's RSS includes shared-library pages.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _coordinator_load import POOL, Load, first_time  # noqa: E402  (this folder)
from _measure import proc_cpu_s, proc_rss_mib  # noqa: E402

from edgewatch_lab.testing.coordinatorpki import free_port_block, issue_pod_certificates  # noqa: E402
NAMESPACE = "edgewatch"
SERVICES_NS = "bench"


# -- pure helpers (tests/unit/test_bench_coordinator.py) ---------------------------------------------

def node_name(i: int) -> str:
    """Name of bench node ``i``."""
    return f"pool-node-{i:03d}"


def node_address(i: int) -> str:
    """InternalIP of bench node ``i`` (127.0.0.<i+1>; node 0 hosts the pod)."""
    if not 0 <= i < 254:
        raise ValueError(f"node index out of range: {i}")
    return f"127.0.0.{i + 1}"


def is_cut(i: int) -> bool:
    """Whether node ``i``'s cloud link is down in the load (the odd nodes: delegated heartbeats)."""
    return i % 2 == 1


def prom_value(text: str, name: str) -> float | None:
    """The value of the unlabelled sample ``name`` in Prometheus text, or None."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def parse_stat(stat: str) -> tuple[int, float]:
    """(ppid, utime+stime in clock ticks) from the text of ``/proc/<pid>/stat``."""
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[1]), float(int(fields[11]) + int(fields[12]))


@dataclass
class TreeStats:
    """The pod's process tree sampled over a window: RSS (MiB) and CPU time (s) per part."""

    samples: list[dict[str, float]] = field(default_factory=list)  # {"t", "python_rss", "etcd_rss"}
    cpu_start: dict[str, float] = field(default_factory=dict)
    cpu_end: dict[str, float] = field(default_factory=dict)

    def add(self, t: float, python_rss: float, etcd_rss: float) -> None:
        self.samples.append({"t": t, "python_rss": python_rss, "etcd_rss": etcd_rss})

    def summary(self) -> dict[str, float]:
        """End and peak RSS, CPU as a fraction of one core over the sampled window."""
        if len(self.samples) < 2:
            raise ValueError("fewer than two samples")
        last = self.samples[-1]
        window = last["t"] - self.samples[0]["t"]
        cpu = {k: (self.cpu_end[k] - self.cpu_start[k]) / window for k in self.cpu_start}
        return {
            "python_rss_mib": round(last["python_rss"], 1), "etcd_rss_mib": round(last["etcd_rss"], 1),
            "total_rss_mib": round(last["python_rss"] + last["etcd_rss"], 1),
            "peak_total_rss_mib": round(max(s["python_rss"] + s["etcd_rss"] for s in self.samples), 1),
            "peak_python_rss_mib": round(max(s["python_rss"] for s in self.samples), 1),
            "peak_etcd_rss_mib": round(max(s["etcd_rss"] for s in self.samples), 1),
            "python_cpu": round(cpu["python"], 4), "etcd_cpu": round(cpu["etcd"], 4),
            "total_cpu": round(cpu["python"] + cpu["etcd"], 4), "window_s": round(window, 1),
        }


def table(rows: list[dict[str, Any]]) -> str:
    """The figures as a fixed-width table (one row per pool size; CPU in % of one core)."""
    cols = [("nodes", "N"), ("python_rss_mib", "py MiB"), ("etcd_rss_mib", "etcd MiB"),
            ("total_rss_mib", "total MiB"), ("peak_total_rss_mib", "peak MiB"), ("python_cpu", "py cpu%"),
            ("etcd_cpu", "etcd cpu%"), ("total_cpu", "cpu%"), ("db_mib", "db MiB"), ("db_in_use_mib", "in use")]

    def cell(key: str, value: Any) -> str:
        if key.endswith("_cpu") and isinstance(value, (int, float)):
            return f"{100 * value:.1f}"
        return "" if value is None else str(value)

    lines = ["  ".join(f"{h:>9}" for _, h in cols)]
    for r in rows:
        lines.append("  ".join(f"{cell(k, r.get(k)):>9}" for k, _ in cols))
    return "\n".join(lines)


# -- /proc ---------------------------------------------------------------------------------------------

def children(pid: int) -> list[int]:
    """PIDs whose parent is ``pid`` (a scan of /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                if parse_stat(Path(f"/proc/{entry}/stat").read_text())[0] == pid:
                    out.append(int(entry))
    return out


def etcd_child(pid: int) -> int | None:
    """The pod process's etcd child, or None."""
    for child in children(pid):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{child}/comm").read_text().strip() == "etcd":
                return child
    return None


# -- certificates ----------------------------------------------------------------------------------------

def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def issue_node_certificate(ca: Any, folder: Path, node: str) -> dict[str, str]:
    """Node ``node``'s own client certificate (CN = node) in ``folder``; the file paths."""
    from cryptography.hazmat.primitives import serialization

    from edgewatch import certs
    from edgewatch.controller.poolca import sign_client_certificate

    folder.mkdir(parents=True, exist_ok=True)
    key = certs.new_key()
    pem = sign_client_certificate(ca, public_key=key.public_key(), node=node, lifetime_s=86400, now=_now())
    (folder / "node.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                        serialization.NoEncryption()))
    (folder / "node.key").chmod(0o600)
    (folder / "node.crt").write_bytes(pem)
    return {"cert": str(folder / "node.crt"), "key": str(folder / "node.key")}


# -- the pod ---------------------------------------------------------------------------------------------

@dataclass
class Pod:
    """One ``edgewatch pool-coordinator`` process (its own process group) and where it listens."""

    proc: subprocess.Popen[bytes]
    host_ip: str
    port: int
    data_dir: Path
    #: a token that may ``get /metrics`` (the shipped scraper ServiceAccount's), sent with every GET
    token: str = ""

    @property
    def ops_port(self) -> int:
        return self.port + 1

    @property
    def url(self) -> str:
        return f"https://{self.host_ip}:{self.port}"

    def get(self, path: str) -> tuple[int, str]:
        try:
            headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
            with urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{self.ops_port}{path}",
                                                               headers=headers), timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError as exc:
            return 0, str(exc)

    def ready(self) -> bool:
        return self.get("/readyz")[0] == 200

    def etcd_metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port + 3}/metrics", timeout=5) as resp:
            return resp.read().decode()

    def _kill_etcd(self, etcd: int | None) -> None:
        """SIGKILL etcd's own process group (the supervisor starts etcd in a new session)."""
        if etcd is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(etcd, signal.SIGKILL)

    def kill(self) -> None:
        """SIGKILL the program and its etcd (the node dies)."""
        etcd = etcd_child(self.proc.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self._kill_etcd(etcd)
        self.proc.wait()

    def stop(self) -> None:
        """SIGTERM the program (it stops etcd), then SIGKILL whatever is left after 15 s."""
        etcd = etcd_child(self.proc.pid) if self.proc.poll() is None else None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self._kill_etcd(etcd)
        self.proc.wait()


def start_pod(*, kubeconfig: str, etcd: str, node: str, host_ip: str, data_dir: Path, log: Path) -> Pod:
    """Start ``python -m edgewatch pool-coordinator`` for node ``node``."""
    port = free_port_block()
    argv = [sys.executable, "-m", "edgewatch", "pool-coordinator", "--pool", POOL, "--namespace", NAMESPACE,
            "--kubeconfig", kubeconfig, "--node", node, "--host-ip", host_ip, "--port", str(port),
            "--ops-port", str(port + 1), "--data-dir", str(data_dir), "--etcd-binary", etcd,
            "--log-level", "WARNING", "--log-format", "text"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(log, "ab"), start_new_session=True)
    return Pod(proc=proc, host_ip=host_ip, port=port, data_dir=data_dir)


def wait_until(predicate: Callable[[], bool], *, timeout_s: float, what: str, step_s: float = 0.1) -> float:
    """Poll ``predicate`` until true; seconds it took. Raises AssertionError on timeout."""
    t0 = time.monotonic()
    while not predicate():
        if time.monotonic() - t0 > timeout_s:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(step_s)
    return time.monotonic() - t0


# -- the cloud side ----------------------------------------------------------------------------------------

def _slice(name: str, endpoints: int, base: int) -> dict[str, Any]:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"{name}-1", "namespace": SERVICES_NS,
                         "labels": {"kubernetes.io/service-name": name,
                                    "endpointslice.kubernetes.io/managed-by": "bench.edgewatch.io"}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": [f"10.{100 + base // 250}.{base % 250}.{i + 1}"],
                           "conditions": {"ready": True}} for i in range(endpoints)]}


async def populate(kubeconfig: str, ca: Any, n: int, services: int) -> None:
    """The pool's Nodes (InternalIPs), their Leases (renewed a minute ago), the pool CA ConfigMap,
    and the Services with their EndpointSlices."""
    from lightkube import codecs

    from edgewatch.names import POOL_CA_CONFIGMAP_KEY, POOL_LABEL, pool_ca_name
    from edgewatch_lab.testing.kubeletsim import make_client
    from lightkube.resources.core_v1 import Node

    client = make_client(kubeconfig, timeout_s=30)
    sem = asyncio.Semaphore(8)

    async def bounded(coro: Any) -> None:
        async with sem:
            await coro

    async def node(i: int) -> None:
        name, ip = node_name(i), node_address(i)
        await client.create(Node.from_dict({"metadata": {"name": name, "labels": {POOL_LABEL: POOL}},
                                            "status": {"addresses": [{"type": "InternalIP", "address": ip}]}}))
        await client.patch(Node.Status, name, {"status": {"addresses": [{"type": "InternalIP", "address": ip}]}})
        past = (_now() - dt.timedelta(seconds=60)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        await client.create(codecs.from_dict({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": past}}))

    try:
        for ns in (NAMESPACE, SERVICES_NS):
            await client.create(codecs.from_dict({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
        await client.create(codecs.from_dict({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": pool_ca_name(POOL), "namespace": NAMESPACE},
            "data": {POOL_CA_CONFIGMAP_KEY: ca.cert_pem().decode()}}))
        await asyncio.gather(*(bounded(node(i)) for i in range(n)))
        await asyncio.gather(*(bounded(client.create(codecs.from_dict({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": f"svc-{i}", "namespace": SERVICES_NS},
            "spec": {"ports": [{"name": "http", "port": 80}]}}))) for i in range(services)))
        await asyncio.gather(*(bounded(client.create(codecs.from_dict(_slice(f"svc-{i}", 10, i))))
                               for i in range(services)))
    finally:
        await client.close()


async def churn(kubeconfig: str, services: int, per_s: float, stop: asyncio.Event, done: list[int]) -> None:
    """Replace ``per_s`` EndpointSlices a second (10 or 15 endpoints, round robin) until ``stop``."""
    from lightkube import codecs

    from edgewatch_lab.testing.kubeletsim import make_client

    client = make_client(kubeconfig, timeout_s=30)
    i = 0
    try:
        while not stop.is_set():
            t0 = time.monotonic()
            svc = i % services
            size = 15 if (i // services) % 2 == 0 else 10
            try:
                await client.replace(codecs.from_dict(_slice(f"svc-{svc}", size, svc)))
                done[0] += 1
            except Exception as exc:  # noqa: BLE001 - a failed write is counted, not fatal
                print(f"churn: {exc}", file=sys.stderr)
            i += 1
            await asyncio.sleep(max(0.0, 1.0 / per_s - (time.monotonic() - t0)))
    finally:
        await client.close()


def _etcd_keys(pod: Pod, ca_file: Path) -> int | None:
    """Number of keys under the pool's prefix, read with the pod's root certificate (etcdctl-free)."""
    async def count() -> int:
        import grpc
        from aetcd import rpc as etcd_rpc

        from edgewatch.poolcoordinator.certificates import TlsFiles, root_credentials
        from edgewatch.poolkeys import PoolKeys

        creds: grpc.ChannelCredentials = root_credentials(TlsFiles.under(pod.data_dir))
        channel = etcd_rpc.secure_channel(f"127.0.0.1:{pod.port}", creds)
        try:
            prefix = PoolKeys(POOL).prefix.encode()
            end = prefix[:-1] + bytes([prefix[-1] + 1])
            resp = await etcd_rpc.KVStub(channel).Range(
                etcd_rpc.RangeRequest(key=prefix, range_end=end, count_only=True), timeout=5)
            return int(resp.count)
        finally:
            await channel.close()

    try:
        return asyncio.run(count())
    except Exception as exc:  # noqa: BLE001 - informative only
        print(f"key count: {exc}", file=sys.stderr)
        return None


# -- one run -------------------------------------------------------------------------------------------------

class _Abort(Exception):
    """A check failed that the rest of the run depends on."""


def check(ok: bool, why: str, failures: list[str]) -> None:
    if not ok:
        failures.append(why)
        print(f"CHECK FAILED: {why}", file=sys.stderr)


def measure(n: int, args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    """One pool of ``n`` nodes: the figures and the failed checks (module docstring)."""
    from edgewatch.controller.poolca import make_ca
    from edgewatch_lab.testing.controlplane import ControlPlane

    failures: list[str] = []
    work = Path(tempfile.mkdtemp(prefix=f"ew-coordinator-pod-{n}-"))
    pods: list[Pod] = []
    load: Load | None = None
    row: dict[str, Any] = {"nodes": n}
    with ControlPlane() as cp:
        try:
            assert cp.kubeconfig is not None and cp.binaries is not None
            kubeconfig, etcd = str(cp.kubeconfig), str(cp.binaries.etcd)
            ca = make_ca(POOL, now=_now())
            ca_file = work / "pool-ca.crt"
            ca_file.write_bytes(ca.cert_pem())
            asyncio.run(populate(kubeconfig, ca, n, args.services))
            data = work / "pod-0"
            issue_pod_certificates(ca, data, node=node_name(0), host_ip=node_address(0))
            pod = start_pod(kubeconfig=kubeconfig, etcd=etcd, node=node_name(0), host_ip=node_address(0),
                            data_dir=data, log=work / "pod-0.log")
            pods.append(pod)
            # the pod's /metrics answers only a token allowed to read it: the shipped scraper's
            deploy = Path(__file__).resolve().parents[1] / "deploy"
            cp.kubectl("apply", "-f", str(deploy / "00-namespace.yaml"), "-f", str(deploy / "13-rbac-metrics.yaml"))
            pod.token = cp.kubectl("create", "token", "edgewatch-metrics-scraper", "--namespace", "edgewatch").strip()
            started = time.monotonic()
            row["pod_ready_s"] = round(wait_until(pod.ready, timeout_s=90, what="the pod's /readyz"), 1)
            nodes = [{"name": node_name(i), "cut": is_cut(i), **issue_node_certificate(ca, work / "nodes" / node_name(i),
                                                                                        node_name(i))}
                     for i in range(n)]
            spec = work / "sessions.json"
            spec.write_text(json.dumps({"kubeconfig": kubeconfig, "ca": str(ca_file), "url": pod.url, "nodes": nodes}))
            load = Load(spec, work / "sessions.log")
            delegated = {x["name"] for x in nodes if x["cut"]}

            def joined() -> bool:
                s = load.status  # type: ignore[union-attr]
                return (s.get("healthy") == n and s.get("ready") == n and s.get("leaders") == [node_name(0)]
                        and set(s.get("forwarded", [])) >= delegated)

            try:
                row["sessions_joined_s"] = round(wait_until(joined, timeout_s=120, what="every session to join"), 1)
            except AssertionError as exc:
                check(False, f"{exc}: last status {load.status}", failures)
                raise _Abort from exc
            time.sleep(args.warmup)

            stop = asyncio.Event()
            churned = [0]
            churner = threading.Thread(target=lambda: asyncio.run(churn(kubeconfig, args.services, args.churn, stop,
                                                                        churned)), daemon=True)
            churner.start()
            pid = pod.proc.pid
            etcd_pid = etcd_child(pid)
            check(etcd_pid is not None, "no etcd child of the pod process", failures)
            assert etcd_pid is not None
            restarts0 = prom_value(pod.get("/metrics")[1], "edgewatch_pool_coordinator_etcd_restarts_total")
            writes0 = load.status.get("writes", 0.0)
            stats = TreeStats()
            stats.cpu_start = {"python": proc_cpu_s(pid), "etcd": proc_cpu_s(etcd_pid)}
            t_end = time.monotonic() + args.seconds
            stats.add(time.monotonic(), proc_rss_mib(pid), proc_rss_mib(etcd_pid))
            while time.monotonic() < t_end:
                time.sleep(1.0)
                stats.add(time.monotonic(), proc_rss_mib(pid), proc_rss_mib(etcd_pid))
            stats.cpu_end = {"python": proc_cpu_s(pid), "etcd": proc_cpu_s(etcd_pid)}
            stop.set()
            churner.join(timeout=30)
            row.update(stats.summary())
            metrics = pod.etcd_metrics()
            db = prom_value(metrics, "etcd_mvcc_db_total_size_in_bytes") or 0.0
            in_use = prom_value(metrics, "etcd_mvcc_db_total_size_in_use_in_bytes") or 0.0
            row.update(db_mib=round(db / 2**20, 2), db_in_use_mib=round(in_use / 2**20, 2),
                       pool_keys=_etcd_keys(pod, ca_file), services=args.services, churned=churned[0],
                       churn_per_s=args.churn, leader_writes=load.status.get("writes", 0.0) - writes0,
                       delegated_nodes=len(delegated), forwarded=len(load.status.get("forwarded", [])))
            check(pod.ready(), "the pod is not Ready at the end of the window", failures)
            check(prom_value(pod.get("/metrics")[1], "edgewatch_pool_coordinator_etcd_restarts_total") == restarts0,
                  "etcd restarted during the window", failures)
            check(etcd_child(pid) == etcd_pid, "etcd's pid changed during the window", failures)
            check(joined(), f"a session left or the leader changed during the window: {load.status}", failures)
            check(row["leader_writes"] > 0, "the leader wrote no cache object during the window", failures)
            check(churned[0] > 0.5 * args.churn * args.seconds, f"churn fell behind: {churned[0]}", failures)
            if args.recovery and not failures:
                row.update(recovery(pod, load, ca, kubeconfig, etcd, work, n, failures, pods))
            row["wall_s"] = round(time.monotonic() - started, 1)
        except _Abort:
            pass
        finally:
            if load is not None:
                load.stop()
            for p in pods:
                p.stop()
            with contextlib.suppress(Exception):
                cp.kubectl("delete", "namespace", SERVICES_NS, "--wait=false")
    if args.keep or failures:
        print(f"logs: {work}", file=sys.stderr)
    else:
        import shutil
        shutil.rmtree(work, ignore_errors=True)
    return row, failures


def recovery(pod: Pod, load: Load, ca: Any, kubeconfig: str, etcd: str, work: Path, n: int,
             failures: list[str], pods: list[Pod]) -> dict[str, Any]:
    """Kill the pod; a fresh one on node 1 with an empty data dir; times from the kill (module docstring)."""
    data = work / "pod-1"
    issue_pod_certificates(ca, data, node=node_name(1), host_ip=node_address(1))  # before the clock starts
    t_kill = time.time()
    pod.kill()
    new = start_pod(kubeconfig=kubeconfig, etcd=etcd, node=node_name(1), host_ip=node_address(1), data_dir=data,
                    log=work / "pod-1.log")
    pods.append(new)
    out: dict[str, Any] = {}
    try:
        wait_until(new.ready, timeout_s=90, what="the new pod's /readyz", step_s=0.05)
    except AssertionError as exc:
        check(False, str(exc), failures)
        return out
    t_ready = time.time()
    out["recovery_pod_ready_s"] = round(t_ready - t_kill, 2)
    load.send(f"url {new.url}")
    try:
        wait_until(lambda: load.status.get("t", 0) > t_ready and load.status.get("ready") == n
                   and len(load.status.get("leaders", [])) == 1, timeout_s=120, what="every session synced again")
    except AssertionError as exc:
        check(False, f"{exc}: {load.status}", failures)
    history = list(load.history)
    leader = first_time(history, t_ready, lambda s: len(s["leaders"]) == 1)
    synced = first_time(history, t_ready, lambda s: s["ready"] >= 1)
    every = first_time(history, t_ready, lambda s: s["ready"] == n)
    out.update({"recovery_leader_s": leader and round(leader - t_kill, 2),
                "recovery_cache_served_s": synced and round(synced - t_kill, 2),
                "recovery_all_synced_s": every and round(every - t_kill, 2)})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("nodes", type=int, nargs="*")
    parser.add_argument("--seconds", type=float, default=120.0, help="measurement window (default 120)")
    parser.add_argument("--services", type=int, default=200, help="Services with one EndpointSlice each")
    parser.add_argument("--churn", type=float, default=4.0, help="EndpointSlice replacements a second")
    parser.add_argument("--warmup", type=float, default=20.0, help="seconds after every session joined")
    parser.add_argument("--recovery", action="store_true", help="then kill the pod and time the recovery")
    parser.add_argument("--keep", action="store_true", help="keep the run folder (logs)")
    args = parser.parse_args()
    if not args.nodes or any(not 2 <= n <= 250 for n in args.nodes):
        parser.error("pool sizes must be 2 .. 250")
    rows, failed = [], False
    for n in args.nodes:
        row, failures = measure(n, args)
        row["ok"] = not failures
        failed |= bool(failures)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(table(rows))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

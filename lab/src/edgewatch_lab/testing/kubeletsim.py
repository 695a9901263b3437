"""A kubelet simulator: what a real kubelet does to the API, minus containers.

For each simulated node it registers the Node (addresses, capacity, a Ready condition), renews the
node's Lease in ``kube-node-lease`` at kubelet's rate (40 s duration, renewed every 10 s;
Kubernetes docs, "Nodes"), re-posts NodeStatus when the API's copy differs from what the node knows (as after
kube-controller-manager marked it Unknown) or every ``status_report_s``, serves ``/healthz`` on the
node's address, listens on its server port (10250: the TCP handshake answers, as peers' edgewatch
agents check before voting a silent node dead), marks the pods bound to it Running and Ready (so
Services get endpoints), and completes their deletion (a real kubelet deletes with grace 0 once
containers are gone).

Many nodes fit in one process (``KubeletFleet`` shares one API client and one pod watch) for scale
runs; the playground runs one fleet of one node per network namespace
(``python -m edgewatch_lab.testing.kubeletsim``).

Pods of edgewatch's own image (``--run-image``) really run: ``edgewatch_lab.testing.podrunner`` starts
their containers as local processes with the volumes, environment, user and probes a kubelet would
give them (the agent DaemonSet and the controller Deployment as shipped). Every other pod is only
reported Running and Ready.

A node's clock can be skewed (``--clock-dir``): the simulator writes its Lease ``renewTime`` and
NodeStatus times with the node's clock, and its containers see the same clock (libfaketime).

Limits: no CRI; other pods' IPs are made up (10.244.<node>.<n>) and never contacted; no node-status
fields beyond what the node lifecycle, scheduler and EndpointSlice controllers read.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import logging
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import httpx2 as httpx
from aiohttp import web
from lightkube import ApiError, AsyncClient
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node, Pod

from edgewatch.kube.client import api_client
from edgewatch.runtime import run_until_signalled
from edgewatch_lab.testing.podrunner import PodRunner, PodRunnerConfig, read_clock_offset, runs_here
from edgewatch.timefmt import format_micro_time as micro_time
from edgewatch.timefmt import format_rfc3339 as rfc3339
from edgewatch.kube.errors import API_ERRORS
from edgewatch.kube.events import Bookmark, Change, Reset
from edgewatch.kube.informer import Informer, InformerConfig
from edgewatch.kube.listwatch import lister_watcher
from edgewatch.kube.resources import PODS

log = logging.getLogger(__name__)

KUBELET_VERSION = "v1.36.3"
NODE_LEASE_NAMESPACE = "kube-node-lease"


@dataclass(frozen=True)
class KubeletSimConfig:
    """Timings of the simulated kubelet, in seconds.

    Attributes:
        lease_duration_s: Lease spec.leaseDurationSeconds (kubelet default 40 s).
        lease_renew_s: renew interval (kubelet renews every 25 % of the duration: 10 s).
        lease_retry_s: retry interval after a failed renewal (kubelet backs off from 200 ms to 7 s;
            1 s keeps a healed link visible quickly).
        status_check_s: how often the node compares the API's NodeStatus with its own
            (kubelet --node-status-update-frequency, 10 s).
        status_report_s: re-post NodeStatus at least this often even when unchanged (kubelet's
            nodeStatusReportFrequency, 5 min).
        request_timeout_s: timeout of every API request except watches.
        pod_retry_s: how often pods whose last status post or delete failed (a timeout while the
            machine is busy) are tried again with their latest watched state (kubelet's status
            manager re-syncs every 10 s; 2 s keeps a busy lab's start short). Without it such a
            pod would wait for its next watch event, which may never come.
        healthz_port: port of the /healthz endpoint on the node's address (kubelet 10248);
            None = no endpoint.
        server_port: kubelet's server port on the node's address (kubelet ``--port`` 10250, the
            Node's ``daemonEndpoints.kubeletEndpoint.Port``; Kubernetes docs "Ports and
            Protocols"): a listener that completes the TCP handshake and closes each connection
            at once (no HTTPS behind it), so a node's peers find its host alive exactly while its
            simulated kubelet runs. None = no listener. Nodes of a fleet sharing an address share
            the first one's listener.
    """

    lease_duration_s: int = 40
    lease_renew_s: float = 10.0
    lease_retry_s: float = 1.0
    status_check_s: float = 10.0
    status_report_s: float = 300.0
    request_timeout_s: float = 5.0
    pod_retry_s: float = 2.0
    healthz_port: int | None = 10248
    server_port: int | None = 10250


@dataclass(frozen=True)
class SimNode:
    """One simulated node.

    Attributes:
        name: Node name (DNS-1123 subdomain).
        address: InternalIP, and the address /healthz binds.
        index: small integer used to make up pod IPs 10.244.<index>.<n> (0..255).
        labels: extra Node labels (e.g. the pool or topology-zone label).
        taints: (key, effect) taints registered with the Node (like kubelet --register-with-taints).
    """

    name: str
    address: str
    index: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[tuple[str, str], ...] = ()


def node_manifest(node: SimNode, *, now: dt.datetime | None = None) -> dict[str, Any]:
    """The Node object a kubelet registers, with a Ready condition (heartbeat ``now``, node clock)."""
    labels = {"kubernetes.io/hostname": node.name, "kubernetes.io/os": "linux", **node.labels}
    capacity = {"cpu": "4", "memory": "8Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": labels},
        "spec": {"podCIDR": f"10.244.{node.index}.0/24",
                 "taints": [{"key": k, "effect": e} for k, e in node.taints]},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "addresses": [{"type": "InternalIP", "address": node.address},
                          {"type": "Hostname", "address": node.name}],
            "conditions": node_conditions(now=now),
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "kubeletVersion": KUBELET_VERSION, "kubeProxyVersion": "", "architecture": "amd64",
                "operatingSystem": "linux", "osImage": "edgewatch kubelet simulator",
                "containerRuntimeVersion": "sim://0", "kernelVersion": "", "machineID": node.name,
                "systemUUID": node.name, "bootID": node.name,
            },
        },
    }


def node_conditions(*, now: dt.datetime | None = None) -> list[dict[str, str]]:
    """The five conditions a healthy kubelet reports, heartbeat ``now`` (default: the true clock)."""
    now = rfc3339(now)
    ok = {"status": "False", "lastHeartbeatTime": now, "lastTransitionTime": now}
    return [
        {"type": "Ready", "status": "True", "reason": "KubeletReady",
         "message": "kubelet is posting ready status", "lastHeartbeatTime": now, "lastTransitionTime": now},
        {"type": "MemoryPressure", "reason": "KubeletHasSufficientMemory", "message": "ok", **ok},
        {"type": "DiskPressure", "reason": "KubeletHasNoDiskPressure", "message": "ok", **ok},
        {"type": "PIDPressure", "reason": "KubeletHasSufficientPID", "message": "ok", **ok},
        {"type": "NetworkUnavailable", "reason": "RouteCreated", "message": "ok", **ok},
    ]


def pod_ready(pod: Pod) -> bool:
    """True if the pod shows condition Ready=True."""
    status = pod.status
    return status is not None and any(c.type == "Ready" and c.status == "True" for c in status.conditions or [])


def pod_is_running_ready(pod: Pod) -> bool:
    """True if the pod already shows phase Running and condition Ready=True."""
    return pod.status is not None and pod.status.phase == "Running" and pod_ready(pod)


def running_status(pod: Pod, *, host_ip: str, pod_ip: str) -> dict[str, Any]:
    """The status patch that makes ``pod`` Running and Ready, as a kubelet would post it."""
    now = rfc3339()
    containers = pod.spec.containers if pod.spec is not None else []
    conditions = [
        {"type": t, "status": "True", "lastTransitionTime": now}
        for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
    ]
    return {
        "status": {
            "phase": "Running",
            "conditions": conditions,
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "startTime": now,
            "containerStatuses": [
                {"name": c.name, "image": c.image or "sim", "imageID": "sim://" + (c.image or "sim"),
                 "ready": True, "started": True, "restartCount": 0,
                 "containerID": f"sim://{pod.metadata.uid}/{c.name}",
                 "state": {"running": {"startedAt": now}}}
                for c in containers
            ],
        }
    }


class _SimKubelet:
    """The loops of one simulated node. Not public: use ``KubeletFleet``."""

    def __init__(self, *, node: SimNode, client: AsyncClient, config: KubeletSimConfig,
                 runner: PodRunner | None = None, clock_dir: Any = None) -> None:
        self.node = node
        self.client = client
        self.config = config
        self.runner = runner
        self.clock_dir = clock_dir
        self.alive = asyncio.Event()
        self.alive.set()
        self.killed = asyncio.Event()  # set while killed (the complement of ``alive``)
        self._server: asyncio.Server | None = None  # the server port's listener while alive
        self._pod_ips: dict[str, str] = {}
        self._last_status_post = 0.0

    def _pod_ip(self, uid: str) -> str:  # noqa: D401
        if uid not in self._pod_ips:
            self._pod_ips[uid] = f"10.244.{self.node.index}.{len(self._pod_ips) % 250 + 2}"
        return self._pod_ips[uid]

    def kill(self) -> None:
        """Stop this kubelet as if its machine died: its loops idle and its server port closes now."""
        self.alive.clear()
        self.killed.set()
        if self._server is not None:
            self._server.close()

    def revive(self) -> None:
        """Start this kubelet again (its server port opens again in :meth:`server_port_loop`)."""
        self.killed.clear()
        self.alive.set()

    async def server_port_loop(self, port: int) -> None:
        """Listen on ``<node address>:port`` while the node is alive: every connection is closed as
        soon as it is accepted (a peer's check needs only the handshake). The listener closes when
        the node is killed and when this loop is cancelled (the fleet stopped), and opens again on
        revive. An address and port that cannot be bound (taken, e.g. by a real kubelet) is logged
        and not served; never raises."""
        while True:
            await self.alive.wait()
            try:
                server = await asyncio.start_server(_hang_up, self.node.address, port)
            except OSError as exc:
                log.warning("node %s: cannot listen on %s:%d (%s); its kubelet server port is not simulated",
                            self.node.name, self.node.address, port, exc)
                return
            self._server = server
            try:
                if self.alive.is_set():  # not killed while the listener was being opened
                    await self.killed.wait()
            finally:
                self._server = None
                server.close()

    def now(self) -> dt.datetime:
        """The node's wall clock: the true time plus its skew (``--clock-dir``), if any."""
        return dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=read_clock_offset(self.clock_dir))

    async def register(self) -> None:
        """Create the Node, or make an existing one match (labels, addresses, Ready)."""
        manifest = node_manifest(self.node)
        try:
            await self.client.create(Node.from_dict(manifest))
        except ApiError as exc:
            if exc.status.code != 409:
                raise
            await self.client.patch(Node, self.node.name, {"metadata": {"labels": manifest["metadata"]["labels"]}})
        await self.post_status()

    async def post_status(self) -> None:
        manifest = node_manifest(self.node, now=self.now())
        body = {"status": {k: manifest["status"][k] for k in ("conditions", "addresses", "capacity", "allocatable")}}
        await self.client.patch(Node.Status, self.node.name, body)
        self._last_status_post = asyncio.get_running_loop().time()

    async def renew_lease(self) -> None:
        """Create or renew the node's Lease (holderIdentity = node name)."""
        spec = {"holderIdentity": self.node.name, "leaseDurationSeconds": self.config.lease_duration_s,
                "renewTime": micro_time(self.now())}
        try:
            await self.client.patch(Lease, self.node.name, {"spec": spec}, namespace=NODE_LEASE_NAMESPACE)
        except ApiError as exc:
            if exc.status.code != 404:
                raise
            await self.client.create(Lease.from_dict({
                "metadata": {"name": self.node.name, "namespace": NODE_LEASE_NAMESPACE,
                             "ownerReferences": []},
                "spec": spec,
            }))

    async def lease_loop(self) -> None:
        while True:
            await self.alive.wait()
            try:
                await self.renew_lease()
                delay = self.config.lease_renew_s
            except API_ERRORS as exc:
                log.info("node %s: lease renewal failed: %s", self.node.name, exc)
                delay = self.config.lease_retry_s
            await asyncio.sleep(delay)

    async def status_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.status_check_s)
            await self.alive.wait()
            try:
                node = await self.client.get(Node, self.node.name)
                ready = next((c for c in (node.status.conditions or []) if c.type == "Ready"), None)
                stale = asyncio.get_running_loop().time() - self._last_status_post >= self.config.status_report_s
                if ready is None or ready.status != "True" or stale:
                    await self.post_status()
            except API_ERRORS as exc:
                log.info("node %s: status update failed: %s", self.node.name, exc)

    async def handle_pod(self, pod: Pod) -> bool:
        """Bring one pod bound to this node to its kubelet-side end state.

        Returns False when it should be tried again later: a request failed (timeout, refusal
        other than 404 NotFound or 409 Conflict, which mean the pod is gone or newer) or the node
        is dead (its pods are handled again once it is revived). Pods the node's ``PodRunner``
        runs are its own loops' work (True).
        """
        if not self.alive.is_set():
            return False
        meta = pod.metadata
        if self.runner is not None and runs_here(pod.to_dict(), image_prefix=self.runner.config.image_prefix):
            await self.runner.sync(pod)
            return True
        try:
            if meta.deletionTimestamp is not None:
                await self.client.delete(Pod, meta.name, namespace=meta.namespace, grace_period=0)
            elif not pod_is_running_ready(pod):
                body = running_status(pod, host_ip=self.node.address, pod_ip=self._pod_ip(meta.uid))
                await self.client.patch(Pod.Status, meta.name, body, namespace=meta.namespace)
        except ApiError as exc:
            if exc.status.code not in (404, 409):
                log.info("node %s: pod %s/%s: %s; retrying", self.node.name, meta.namespace, meta.name, exc)
                return False
        except (httpx.HTTPError, OSError) as exc:
            log.info("node %s: pod %s/%s: %s; retrying", self.node.name, meta.namespace, meta.name, exc)
            return False
        return True


class KubeletFleet:
    """Simulated kubelets for one or many nodes, sharing one API client and one pod watch.

    Args:
        client: an AsyncClient with admin rights (nodes, leases, pods, pods/status).
        nodes: the nodes to simulate.
        config: timings; see ``KubeletSimConfig``.

    ``run()`` registers every node and then runs until cancelled (structured: all loops live in
    one TaskGroup). ``kill(name)`` stops a node's kubelet as if the machine died (no more Lease,
    status, pod handling or /healthz); ``revive(name)`` starts it again.
    """

    def __init__(self, *, client: AsyncClient, nodes: Sequence[SimNode], config: KubeletSimConfig,
                 runners: Mapping[str, PodRunner] | None = None, clock_dirs: Mapping[str, Any] | None = None) -> None:
        self.client = client
        self.config = config
        runners, clock_dirs = runners or {}, clock_dirs or {}
        self.kubelets = {n.name: _SimKubelet(node=n, client=client, config=config, runner=runners.get(n.name),
                                             clock_dir=clock_dirs.get(n.name))
                         for n in nodes}
        self.registered = asyncio.Event()

    def kill(self, name: str) -> None:
        """Stop the named node's kubelet (its loops idle; /healthz answers 503; its server port
        closes)."""
        self.kubelets[name].kill()

    def revive(self, name: str) -> None:
        """Restart the named node's kubelet (its server port opens again)."""
        self.kubelets[name].revive()

    async def run(self) -> None:
        """Register the nodes, then renew leases, post status and handle pods until cancelled."""
        for kubelet in self.kubelets.values():
            await self._retry(kubelet.register)
            await self._retry(kubelet.renew_lease)  # "registered" means: Node and Lease exist
        self.registered.set()
        async with asyncio.TaskGroup() as tg:
            for kubelet in self.kubelets.values():
                tg.create_task(kubelet.lease_loop())
                tg.create_task(kubelet.status_loop())
            tg.create_task(self._pod_loop())
            for kubelet in self.kubelets.values():
                if kubelet.runner is not None:
                    tg.create_task(kubelet.runner.run())
            if self.config.healthz_port is not None:
                tg.create_task(self._serve_healthz())
            if self.config.server_port is not None:
                served: set[str] = set()
                for kubelet in self.kubelets.values():
                    if kubelet.node.address not in served:  # one listener an address
                        served.add(kubelet.node.address)
                        tg.create_task(kubelet.server_port_loop(self.config.server_port))

    async def _retry(self, action: Any) -> None:
        while True:
            try:
                return await action()
            except API_ERRORS as exc:
                log.info("kubelet sim: %s; retrying", exc)
                await asyncio.sleep(self.config.lease_retry_s)

    async def _pod_loop(self) -> None:
        """Follow the pods bound to our nodes through the cloud door's informer (list, watch,
        re-list after a 410 or a cut): a re-list hands over the whole state, so pods deleted
        while the watch was down are forgotten too."""
        known: dict[tuple[str, str], Pod] = {}
        retry: set[tuple[str, str]] = set()  # pods whose last handling failed

        async def on_pod(op: str, pod: Pod) -> None:
            key = (pod.metadata.namespace or "", pod.metadata.name or "") if pod.metadata else ("", "")
            kubelet = self.kubelets.get(pod.spec.nodeName if pod.spec else "")
            if op == "DELETED":
                known.pop(key, None)
                retry.discard(key)
                if kubelet is not None and kubelet.runner is not None:
                    await kubelet.runner.forget(pod)
                return
            known[key] = pod
            if kubelet is not None:
                if await kubelet.handle_pod(pod):
                    retry.discard(key)
                else:
                    retry.add(key)

        async def retry_loop() -> None:
            while True:
                await asyncio.sleep(self.config.pod_retry_s)
                for key in sorted(retry):  # a deleted pod left both (on_pod "DELETED")
                    if key in retry and key in known:  # still failed, still there: its latest state
                        await on_pod("MODIFIED", known[key])

        async def sink(event: Reset[Pod] | Change[Pod] | Bookmark) -> None:
            if isinstance(event, Reset):
                listed = {(p.metadata.namespace or "", p.metadata.name or ""): p for p in event.objects if p.metadata}
                for key in set(known) - set(listed):
                    await on_pod("DELETED", known[key])
                for pod in event.objects:
                    await on_pod("ADDED", pod)
            elif isinstance(event, Change):
                await on_pod(event.type, event.obj)

        single = next(iter(self.kubelets)) if len(self.kubelets) == 1 else None
        source = lister_watcher(self.client, PODS, field_selector=f"spec.nodeName={single}" if single else None)
        informer = Informer(source=source, sink=sink, decode=Pod.from_dict, name="kubelet-sim",
                            config=InformerConfig(request_timeout_s=self.config.request_timeout_s,
                                                  backoff_initial_s=self.config.lease_retry_s / 2,
                                                  backoff_max_s=self.config.lease_retry_s * 2))
        async with asyncio.TaskGroup() as tg:
            tg.create_task(informer.run())
            tg.create_task(retry_loop())

    async def _serve_healthz(self) -> None:
        runners = []
        try:
            for kubelet in self.kubelets.values():
                async def healthz(_req: web.Request, k: _SimKubelet = kubelet) -> web.Response:
                    return web.Response(text="ok") if k.alive.is_set() else web.Response(status=503, text="dead")

                app = web.Application()
                app.router.add_get("/healthz", healthz)
                runner = web.AppRunner(app, access_log=None)
                await runner.setup()
                # kubelet's --healthz-bind-address is 127.0.0.1; one node per process (the
                # playground) also binds its loopback, where the agent pod asks.
                hosts = [kubelet.node.address] + (["127.0.0.1"] if len(self.kubelets) == 1 else [])
                await web.TCPSite(runner, hosts, self.config.healthz_port).start()
                runners.append(runner)
            await asyncio.Event().wait()
        finally:
            for runner in runners:
                await runner.cleanup()


async def _hang_up(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Close an accepted connection at once (the simulated server port answers the handshake only)."""
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:
        pass


def make_client(kubeconfig: str, *, timeout_s: float) -> AsyncClient:
    """An AsyncClient for ``kubeconfig`` with a timeout on every request (watches excepted)."""
    return api_client(kubeconfig, timeout_s=timeout_s)


async def _main(args: argparse.Namespace) -> None:
    from pathlib import Path
    from urllib.parse import urlsplit

    import yaml

    labels = dict(kv.split("=", 1) for kv in args.label)
    config = KubeletSimConfig(healthz_port=args.healthz_port or None, server_port=args.server_port or None)
    taints = tuple(tuple(t.rsplit(":", 1)) for t in args.taint)
    client = make_client(args.kubeconfig, timeout_s=config.request_timeout_s)
    clock_dir = Path(args.clock_dir) if args.clock_dir else None
    runners = {}
    if args.run_image:
        server = urlsplit(yaml.safe_load(Path(args.kubeconfig).read_text())["clusters"][0]["cluster"]["server"])
        runners[args.node] = PodRunner(client=client, config=PodRunnerConfig(
            node_name=args.node, node_address=args.address, node_root=Path(args.node_root),
            image_prefix=tuple(args.run_image), apiserver_host=server.hostname or "", apiserver_port=server.port or 443,
            clock_dir=clock_dir, image_bin_dirs=tuple(args.image_bin_dir)))
    fleet = KubeletFleet(client=client, config=config, runners=runners, clock_dirs={args.node: clock_dir},
                         nodes=[SimNode(name=args.node, address=args.address, index=args.index, labels=labels,
                                        taints=taints)])  # type: ignore[arg-type]
    await run_until_signalled(fleet.run())
    await client.close()


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m edgewatch_lab.testing.kubeletsim``: simulate one node's kubelet until SIGTERM."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--node", required=True, help="Node name")
    parser.add_argument("--address", required=True, help="InternalIP; /healthz binds it")
    parser.add_argument("--index", type=int, default=0, help="pod IPs are 10.244.<index>.<n>")
    parser.add_argument("--label", action="append", default=[], help="extra Node label k=v (repeatable)")
    parser.add_argument("--taint", action="append", default=[], help="register with taint key:Effect (repeatable)")
    parser.add_argument("--healthz-port", type=int, default=10248, help="0 = no /healthz endpoint")
    parser.add_argument("--server-port", type=int, default=10250,
                        help="kubelet's server port on --address (handshake only); 0 = no listener")
    parser.add_argument("--run-image", action="append", default=[],
                        help="run the pods whose image starts with this as processes (repeatable)")
    parser.add_argument("--node-root", default="", help="the node's root folder (hostPath volumes, pod folders)")
    parser.add_argument("--image-bin-dir", action="append", default=[],
                        help="a folder of the image's programs besides edgewatch, first on its containers' PATH "
                             "(repeatable; e.g. etcd's)")
    parser.add_argument("--clock-dir", default="", help="folder of the node's clock skew file (faketime)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()

"""The playground's pool-cache instruments: real kube-proxies and CoreDNS on edge nodes, and what
the cloud apiserver sent for the pool-scope resources.

What it is for
    A pool's ``kube_proxy: [nodes]`` runs a real kube-proxy (``edgewatch_lab.testing.kubeproxy``,
    nftables, inside the node's network namespace) on those nodes. With edgewatch it reads
    Services and EndpointSlices from the agent's pool cache on ``https://127.0.0.1:51007`` (the
    kubeconfig ``edgewatch kubeconfig`` makes: the agent's certificate, kube-proxy's own token);
    in baseline runs straight from the cloud apiserver, as stock clusters do. A pool's
    ``coredns: [nodes]`` runs a real CoreDNS (``edgewatch_lab.testing.coredns``, kubernetes plugin) the
    same way, with its own token (ServiceAccount ``kube-system/coredns``, ClusterRole
    ``system:coredns``) in the kubeconfig the real ``edgewatch kubeconfig --token-file`` writes.
    :class:`NodeProxies` starts them, polls the backends each kube-proxy programs for the sample
    Service and each CoreDNS's answer for ``sample-headless`` (the same pods, headless), and
    stops them. Every client starts while its node reaches the cloud: the pool cache checks its
    token with the cloud then, and keeps that decision while the node is cut off.

    :func:`pool_scope_counters` reads the apiserver's own metrics: watch-event bytes and events,
    LIST response bytes and counts, and open watches for EndpointSlices and Services — the uplink
    cost the pool cache is there to cut.

Limits
    Only the sample Service is followed; kube-proxy and CoreDNS tokens come from the lab's admin
    client (ServiceAccount ``kube-system/kube-proxy`` bound to ``system:node-proxier``,
    ``kube-system/coredns`` bound to ``system:coredns``), never from edgewatch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

from lightkube import AsyncClient
from prometheus_client.parser import text_string_to_metric_families

from edgewatch.names import DEFAULT_POOL_CACHE_PORT
from edgewatch_lab.playground.cluster import WORKLOAD_NAMESPACE, PlaygroundCluster
from edgewatch_lab.playground.report import Recording
from edgewatch.poolcache.tls import CERT_FILE, client_kubeconfig
from edgewatch_lab.testing.binaries import ensure_coredns
from edgewatch_lab.testing.coredns import CoreDNS, coredns_credentials
from edgewatch_lab.testing.kubeproxy import KubeProxy, kube_proxy_credentials
from edgewatch.kube.http import http_client_of

log = logging.getLogger(__name__)

__all__ = ["NodeProxies", "POOL_SCOPE_KINDS", "pool_scope_counters"]

SERVICE_KEY = f"{WORKLOAD_NAMESPACE}/sample"
HEADLESS_NAME = f"sample-headless.{WORKLOAD_NAMESPACE}.svc.cluster.local"
POOL_SCOPE_KINDS = {("discovery.k8s.io", "EndpointSlice", "endpointslices"), ("", "Service", "services")}


class NodeProxies:
    """The real kube-proxies of a run (see the module docstring)."""

    def __init__(self, *, cluster: PlaygroundCluster, client: AsyncClient, nodes: list[str],
                 dns_nodes: list[str] | None = None) -> None:
        self.cluster = cluster
        self.client = client
        self.nodes = nodes
        self.dns_nodes = dns_nodes or []
        self.proxies: dict[str, KubeProxy] = {}
        self.resolvers: dict[str, CoreDNS] = {}
        self.errors = 0

    async def _server(self, name: str, *, timeout_s: float) -> tuple[str, bytes]:
        """The API server a node's client reads, and the CA it trusts: the agent's pool cache
        (edgewatch runs; waits for its certificate) or the cloud apiserver (baseline)."""
        cluster = self.cluster
        assert cluster.cp is not None
        if cluster.edgewatch:
            cert = cluster.nodes[name].root / "var/lib/edgewatch/pool-cache" / CERT_FILE
            async with asyncio.timeout(timeout_s):
                while not cert.is_file():
                    await asyncio.sleep(0.5)
            return f"https://127.0.0.1:{DEFAULT_POOL_CACHE_PORT}", cert.read_bytes()
        assert cluster.cp.ca_file is not None
        return cluster.cp.apiserver_url, cluster.cp.ca_file.read_bytes()

    async def start(self, *, timeout_s: float = 120.0) -> None:
        """Start one kube-proxy per node and wait until each is healthy.

        Raises:
            TimeoutError: the agent's certificate did not appear, or a kube-proxy did not get ready.
        """
        cluster = self.cluster
        assert cluster.cp is not None and cluster.workdir is not None
        for name in self.nodes:
            node = cluster.nodes[name]
            assert node.host is not None
            server, ca = await self._server(name, timeout_s=timeout_s)
            work = cluster.workdir / "kube-proxy" / name
            work.mkdir(parents=True, exist_ok=True)
            creds = await kube_proxy_credentials(client=self.client, server_url=server, ca_pem=ca,
                                                 path=work / "kubeconfig")
            assert creds.kubeconfig
            proxy = KubeProxy(netns=node.host.netns, node_name=name, kubeconfig=work / "kubeconfig", work_dir=work,
                              node_ip=node.address)
            await proxy.start()
            self.proxies[name] = proxy
        for name in self.dns_nodes:
            await self._start_coredns(name, timeout_s=timeout_s)
        for name, proxy in self.proxies.items():
            await proxy.wait_ready(timeout_s=timeout_s)
            log.info("kube-proxy ready on %s", name, extra={"node": name})
        for name, dns in self.resolvers.items():
            await dns.wait_ready(timeout_s=timeout_s)
            log.info("CoreDNS ready on %s", name, extra={"node": name})

    async def _start_coredns(self, name: str, *, timeout_s: float) -> None:
        """CoreDNS on ``name`` with its own token in a file; the kubeconfig from the real
        ``edgewatch kubeconfig --token-file`` on the node's state folder (edgewatch runs)."""
        cluster = self.cluster
        assert cluster.workdir is not None
        node = cluster.nodes[name]
        assert node.host is not None
        work = cluster.workdir / "coredns" / name
        creds = await coredns_credentials(client=self.client, token_file=work / "token")
        server, ca = await self._server(name, timeout_s=timeout_s)
        kubeconfig = work / "kubeconfig"
        if cluster.edgewatch:
            await asyncio.to_thread(subprocess.run, [
                sys.executable, "-m", "edgewatch", "kubeconfig", "--state-dir", str(node.root / "var/lib/edgewatch"),
                "--token-file", str(creds.token_file), "-o", str(kubeconfig)], check=True, timeout=60,
                capture_output=True)
        else:
            kubeconfig.write_text(client_kubeconfig(server=server, ca_pem=ca, token_file=str(creds.token_file)))
        dns = CoreDNS(netns=node.host.netns, kubeconfig=kubeconfig, work_dir=work,
                      binary=await asyncio.to_thread(ensure_coredns))
        await dns.start()
        self.resolvers[name] = dns

    async def poll(self, recording: Recording, t: float) -> None:
        """Record each kube-proxy's backends for the sample Service when they changed."""
        for name, proxy in self.proxies.items():
            try:
                backends = await proxy.service_backends(timeout_s=5.0)
            except Exception:  # noqa: BLE001 - a killed node's namespace may be going away
                self.errors += 1
                continue
            ips = sorted(backends.get(SERVICE_KEY, set()))
            record = recording.nodes[name]
            if not record.kube_proxy or record.kube_proxy[-1][1] != ips:
                record.kube_proxy.append((t, ips))
        for name, dns in self.resolvers.items():
            try:
                answer = await dns.resolve(HEADLESS_NAME, timeout_s=2.0)
            except Exception:  # noqa: BLE001 - a killed node's namespace may be going away
                self.errors += 1
                continue
            addresses = sorted(answer.addresses)
            record = recording.nodes[name]
            if not record.coredns or record.coredns[-1][1] != addresses:
                record.coredns.append((t, addresses))

    async def stop(self) -> None:
        """Stop every kube-proxy (safe twice)."""
        for proxy in self.proxies.values():
            with contextlib.suppress(Exception):
                await proxy.stop()
        self.proxies.clear()
        for dns in self.resolvers.values():
            with contextlib.suppress(Exception):
                await dns.stop()
        self.resolvers.clear()

    def log_files(self) -> list[Path]:
        """kube-proxy and CoreDNS logs (for a failed run's report)."""
        return [p.log_path for p in self.proxies.values()] + [d.log_path for d in self.resolvers.values()]


async def pool_scope_counters(client: AsyncClient) -> dict[str, float]:
    """The apiserver's counters for the pool-scope resources, from its ``/metrics``:
    ``watch_bytes`` / ``watch_events`` (``apiserver_watch_events_sizes``: every event sent to every
    watcher), ``list_bytes`` / ``lists`` (``apiserver_response_sizes`` of LIST), and
    ``open_watches`` (``apiserver_longrunning_requests`` of WATCH, a gauge). Counters only grow:
    callers take differences. In a playground run the observer's own polling LISTs of the sample
    Service's EndpointSlices (4 per second, the same in both runs) are in ``list_bytes``; the watch
    figures are the fan-out the pool cache removes.

    Raises:
        httpx errors or TimeoutError: the apiserver did not answer.
    """
    http = http_client_of(client)  # the admin client's
    assert http is not None
    resp = await http.get("/metrics", timeout=10.0)
    resp.raise_for_status()
    resources = {r for _, _, r in POOL_SCOPE_KINDS}
    out = {"watch_bytes": 0.0, "watch_events": 0.0, "list_bytes": 0.0, "lists": 0.0, "open_watches": 0.0}
    for family in text_string_to_metric_families(resp.text):
        for sample in family.samples:
            labels: dict[str, Any] = sample.labels
            if family.name == "apiserver_watch_events_sizes" and labels.get("resource") in resources:
                if sample.name.endswith("_sum"):
                    out["watch_bytes"] += sample.value
                elif sample.name.endswith("_count"):
                    out["watch_events"] += sample.value
            elif family.name == "apiserver_response_sizes" and labels.get("verb") == "LIST" \
                    and labels.get("resource") in resources:
                if sample.name.endswith("_sum"):
                    out["list_bytes"] += sample.value
                elif sample.name.endswith("_count"):
                    out["lists"] += sample.value
            elif family.name == "apiserver_longrunning_requests" and labels.get("verb") == "WATCH" \
                    and labels.get("resource") in resources:
                out["open_watches"] += sample.value
    return out

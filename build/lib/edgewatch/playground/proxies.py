"""The playground's pool-cache instruments: real kube-proxies on edge nodes, and what the cloud
apiserver sent for the pool-scope resources.

What it is for
    A pool's ``kube_proxy: [nodes]`` runs a real kube-proxy (``edgewatch.testing.kubeproxy``,
    nftables, inside the node's network namespace) on those nodes. With edgewatch it reads
    Services and EndpointSlices from the agent's pool cache on ``https://127.0.0.1:51007`` (the
    kubeconfig ``edgewatch kubeconfig`` makes: the agent's certificate, kube-proxy's own token);
    in baseline runs straight from the cloud apiserver, as stock clusters do. :class:`NodeProxies`
    starts them, polls the backends each programs for the sample Service, and stops them.

    :func:`pool_scope_counters` reads the apiserver's own metrics: watch-event bytes and events,
    LIST response bytes and counts, and open watches for EndpointSlices and Services — the uplink
    cost the pool cache is there to cut.

Limits
    Only the sample Service is followed; kube-proxy tokens come from the lab's admin client
    (ServiceAccount ``kube-system/kube-proxy`` bound to ``system:node-proxier``), never from
    edgewatch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any

from lightkube import AsyncClient
from prometheus_client.parser import text_string_to_metric_families

from edgewatch.names import DEFAULT_POOL_CACHE_PORT
from edgewatch.playground.cluster import WORKLOAD_NAMESPACE, PlaygroundCluster
from edgewatch.playground.report import Recording
from edgewatch.poolcache.tls import CERT_FILE
from edgewatch.testing.kubeproxy import KubeProxy, kube_proxy_credentials

log = logging.getLogger(__name__)

__all__ = ["NodeProxies", "POOL_SCOPE_KINDS", "pool_scope_counters"]

SERVICE_KEY = f"{WORKLOAD_NAMESPACE}/sample"
POOL_SCOPE_KINDS = {("discovery.k8s.io", "EndpointSlice", "endpointslices"), ("", "Service", "services")}


class NodeProxies:
    """The real kube-proxies of a run (see the module docstring)."""

    def __init__(self, *, cluster: PlaygroundCluster, client: AsyncClient, nodes: list[str]) -> None:
        self.cluster = cluster
        self.client = client
        self.nodes = nodes
        self.proxies: dict[str, KubeProxy] = {}
        self.errors = 0

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
            if cluster.edgewatch:
                cert = node.root / "var/lib/edgewatch/pool-cache" / CERT_FILE
                async with asyncio.timeout(timeout_s):
                    while not cert.is_file():
                        await asyncio.sleep(0.5)
                server, ca = f"https://127.0.0.1:{DEFAULT_POOL_CACHE_PORT}", cert.read_bytes()
            else:
                assert cluster.cp.ca_file is not None
                server, ca = cluster.cp.apiserver_url, cluster.cp.ca_file.read_bytes()
            work = cluster.workdir / "kube-proxy" / name
            work.mkdir(parents=True, exist_ok=True)
            creds = await kube_proxy_credentials(client=self.client, server_url=server, ca_pem=ca,
                                                 path=work / "kubeconfig")
            assert creds.kubeconfig
            proxy = KubeProxy(netns=node.host.netns, node_name=name, kubeconfig=work / "kubeconfig", work_dir=work,
                              node_ip=node.address)
            await proxy.start()
            self.proxies[name] = proxy
        for name, proxy in self.proxies.items():
            await proxy.wait_ready(timeout_s=timeout_s)
            log.info("kube-proxy ready on %s", name, extra={"node": name})

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

    async def stop(self) -> None:
        """Stop every kube-proxy (safe twice)."""
        for proxy in self.proxies.values():
            with contextlib.suppress(Exception):
                await proxy.stop()
        self.proxies.clear()

    def log_files(self) -> list[Path]:
        """kube-proxy logs (for a failed run's report)."""
        return [p.log_path for p in self.proxies.values()]


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
    http = client._client._client  # type: ignore[attr-defined]  # lightkube's httpx client (admin)
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

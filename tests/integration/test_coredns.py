"""A real CoreDNS (v1.15.0, kubernetes plugin) in a lab node's network namespace, reading the
node-local pool cache endpoint with its own ServiceAccount token (ClusterRole system:coredns, as
kubeadm makes it) and the kubeconfig `edgewatch kubeconfig` prints: it resolves a headless Service
to its endpoints, and after the node is cut from the cloud it still does, and follows a change
the pool delivers to the cache (what the coordinator feed does while the pool leader is connected).

The endpoint's access control reviews tokens on the real control plane with the agent's RBAC from
deploy/ (``_poolauth.AgentCloud``); Namespaces, which the cache does not hold, are forwarded to the
cloud with CoreDNS's own token.
"""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from _poolauth import AgentCloud
from aiohttp import web
from lightkube import codecs
from lightkube.resources.core_v1 import Namespace
from prometheus_client import CollectorRegistry, generate_latest

from edgewatch.poolcache.apiserver import make_app, self_signed_tls
from edgewatch.poolcache.resources import ENDPOINTSLICES, SERVICES
from edgewatch.poolcache.store import ResourceCache
from edgewatch_lab.testing.binaries import ensure_coredns
from edgewatch_lab.testing.coredns import CoreDNS, coredns_credentials, decode_answer, encode_query
from edgewatch_lab.testing.kubeproxy import NetnsTcpRelay
from edgewatch_lab.testing.netlab import Host, NetLab

pytestmark = [pytest.mark.root, pytest.mark.controlplane]


@pytest.fixture
def node_host() -> Any:
    """One lab host (its own network namespace), removed after the test whatever happens."""
    with NetLab.create() as lab:
        yield lab.add_host("dns-1", pool="dns")


def _headless(ns: str) -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": "web", "resourceVersion": "10", "labels": {}},
            "spec": {"type": "ClusterIP", "clusterIP": "None", "clusterIPs": ["None"],
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}


def _slice(ns: str, rv: int, ips: list[str]) -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": "web-1", "resourceVersion": str(rv),
                         "labels": {"kubernetes.io/service-name": "web", "service.kubernetes.io/headless": ""}},
            "addressType": "IPv4", "endpoints": [{"addresses": [ip], "conditions": {"ready": True}} for ip in ips],
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}


def test_dns_messages_round_trip() -> None:
    query = encode_query("web.ns.svc.cluster.local", query_id=0x1234)
    assert query[:2] == b"\x12\x34" and query.endswith(b"\x00\x01\x00\x01")
    # a response: header, the question again, two A records with compressed names (pointer 0xc00c)
    answer = (b"\x12\x34\x85\x00\x00\x01\x00\x02\x00\x00\x00\x00" + query[12:]
              + b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x00\x00\x04\x0a\x01\x00\x01"
              + b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x00\x00\x04\x0a\x01\x00\x02")
    got = decode_answer(answer, query_id=0x1234)
    assert (got.rcode, got.addresses) == (0, ("10.1.0.1", "10.1.0.2"))
    with pytest.raises(ValueError):
        decode_answer(answer, query_id=0x4321)
    with pytest.raises(ValueError):
        decode_answer(answer[:-3], query_id=0x1234)
    with pytest.raises(ValueError):
        encode_query("a..b", query_id=1)


async def test_coredns_resolves_through_the_pool_cache_also_cut_off(control_plane: Any, kube: Any,
                                                                    node_host: Host, tmp_path: Path) -> None:
    ns = f"dns-{secrets.token_hex(3)}"
    await kube.create(codecs.from_dict({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
    caches = {SERVICES: ResourceCache(SERVICES), ENDPOINTSLICES: ResourceCache(ENDPOINTSLICES)}
    caches[SERVICES].replace([_headless(ns)], "100", source="coordinator")
    caches[ENDPOINTSLICES].replace([_slice(ns, 20, ["10.1.0.1"])], "100", source="coordinator")
    state = tmp_path / "var-lib-edgewatch"
    ssl_ctx, _ = self_signed_tls(dir=state / "pool-cache")
    registry = CollectorRegistry()
    runner: web.AppRunner | None = None
    try:
        async with AgentCloud(kube, control_plane) as cloud:
            runner = web.AppRunner(make_app(caches=caches, upstream=cloud.upstream(), registry=registry,
                                            access=cloud.access()))
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_ctx)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            creds = await coredns_credentials(client=kube, token_file=tmp_path / "coredns" / "token")
            kubeconfig = tmp_path / "coredns" / "kubeconfig"
            subprocess.run([sys.executable, "-m", "edgewatch", "kubeconfig", "--state-dir", str(state),
                            "--token-file", str(creds.token_file), "-o", str(kubeconfig)], check=True, timeout=60)
            name = f"web.{ns}.svc.cluster.local"
            async with NetnsTcpRelay(netns=node_host.netns, target_host="127.0.0.1", target_port=port,
                                     listen_port=51007), \
                    CoreDNS(netns=node_host.netns, kubeconfig=kubeconfig, work_dir=tmp_path / "coredns",
                            binary=ensure_coredns()) as dns:
                await dns.wait_ready(timeout_s=60)
                answer = await dns.resolve(name)
                assert (answer.rcode, answer.addresses) == (0, ("10.1.0.1",)), dns.log_tail()
                metrics = generate_latest(registry).decode()
                assert 'edgewatch_poolcache_reviews_total{result="allowed",review="access"}' in metrics
                assert "edgewatch_poolcache_refused_requests_total{" not in metrics, metrics
                # The node is cut from the cloud; the pool delivers a change to the cache.
                await cloud.relay.cut()
                cloud.cloud_ok = False
                await asyncio.sleep(2)
                assert caches[ENDPOINTSLICES].apply("MODIFIED", _slice(ns, 101, ["10.1.0.1", "10.1.0.2"]))
                changed = time.monotonic()
                while True:
                    answer = await dns.resolve(name)
                    if set(answer.addresses) == {"10.1.0.1", "10.1.0.2"}:
                        break
                    assert time.monotonic() - changed < 15, f"CoreDNS still answers {answer}: {dns.log_tail()}"
                    await asyncio.sleep(0.2)
                print(f"\ncut-off CoreDNS answered the change {time.monotonic() - changed:.2f} s after the cache had it")
                assert caches[ENDPOINTSLICES].apply("DELETED", _slice(ns, 102, ["10.1.0.1", "10.1.0.2"]))
                while (await dns.resolve(name)).addresses:
                    assert time.monotonic() - changed < 30, dns.log_tail()
                    await asyncio.sleep(0.2)
                assert (await dns.resolve(f"nope.{ns}.svc.cluster.local")).rcode == 3   # NXDOMAIN
    finally:
        if runner is not None:
            await runner.cleanup()
        await kube.delete(Namespace, ns)

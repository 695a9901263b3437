"""The pool cache's data path on the real apiserver and a real etcd: the leader's informer writes
the cloud's EndpointSlices and Services into the coordinator, a node's coordinator feed reads them
into its cache with the cloud's own resourceVersions; changes, deletions while nobody led, a new
leader's reconcile, malformed values in etcd, and the node's source switching (coordinator ->
cloud -> last known) when the coordinator or the cloud goes away.

The cloud client here is the test's admin client (the data path is under test); the shipped RBAC
is exercised by the playground scenario ``pool-cache``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aetcd
import pytest
from aiohttp import web
from lightkube import AsyncClient, codecs
from lightkube.resources.core_v1 import Namespace, Service
from lightkube.resources.discovery_v1 import EndpointSlice
from prometheus_client import CollectorRegistry

from edgewatch.poolcache.apiserver import client_kubeconfig, make_app, self_signed_tls
from edgewatch.poolcache.authn import AccessControl, Attributes, UserInfo
from edgewatch.poolcache.reviews import Authentication, Authorization
from edgewatch.poolcache.etcdfeed import run_coordinator_feed
from edgewatch.core.identity import NodeKey, NodeKeyring, PublicKeys
from edgewatch.poolcache.layout import CacheArea, CacheKeys, encode_marker, encode_object
from edgewatch.poolcache.leader import CacheLeaderConfig, LeaderMetrics, PoolCacheLeader
from edgewatch.poolcache.reflector import ReflectorConfig
from edgewatch.poolcache.resources import ENDPOINTSLICES, SERVICES
from edgewatch.core.seal import seal, unseal
from edgewatch.poolcache.sources import NodeCacheConfig, NodePoolCache, Source
from edgewatch.poolcache.store import ResourceCache
from edgewatch_lab.testing.binaries import Binaries
from edgewatch_lab.testing.etcd import EtcdServer
from edgewatch.kube.http import http_client_of

pytestmark = pytest.mark.controlplane

FAST = CacheLeaderConfig(sync_renew_s=1.0, reflector=ReflectorConfig(backoff_initial_s=0.2, backoff_max_s=1.0))


async def wait_until(predicate: Callable[[], object], *, timeout_s: float, what: str) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.05)
    return time.monotonic() - start



@pytest.fixture
async def namespace(kube: AsyncClient) -> AsyncIterator[str]:
    name = f"pc-{secrets.token_hex(3)}"
    await kube.create(codecs.from_dict({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}))
    try:
        yield name
    finally:
        with contextlib.suppress(Exception):
            await kube.delete(Namespace, name)


def _client(etcd: EtcdServer) -> aetcd.Client:
    host, port = etcd.client_url.removeprefix("http://").rsplit(":", 1)
    return aetcd.Client(host=host, port=int(port), timeout=3.0)


async def _rpc(call: Any) -> Any:
    async with asyncio.timeout(3.0):
        return await call


def _service(ns: str, name: str) -> Any:
    return codecs.from_dict({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
                             "spec": {"ports": [{"port": 80, "name": "http"}]}})  # no selector: slices are ours


def _slice(ns: str, service: str, ips: list[str], *, name: str | None = None) -> Any:
    return codecs.from_dict({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name or f"{service}-x", "namespace": ns,
                     "labels": {"kubernetes.io/service-name": service,
                                "endpointslice.kubernetes.io/managed-by": "test.edgewatch.io"}},
        "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": True}} for ip in ips]})


async def _cloud_state(kube: AsyncClient, ns: str) -> dict[tuple[str, str], str]:
    out = {}
    async for res in kube.list(EndpointSlice, namespace=ns):
        out[("endpointslices", res.metadata.name)] = res.metadata.resourceVersion
    async for svc in kube.list(Service, namespace=ns):
        out[("services", svc.metadata.name)] = svc.metadata.resourceVersion
    return out


def _cache_state(caches: dict, ns: str) -> dict[tuple[str, str], str]:
    out = {}
    for resource, cache in caches.items():
        if not cache.synced:
            continue
        items, _rv = cache.list(namespace=ns, label_selector=None, field_selector=None, resource_version=None,
                                resource_version_match=None)
        for item in items:
            out[(resource.resource, item["metadata"]["name"])] = item["metadata"]["resourceVersion"]
    return out


#: The published keys every node holds; the leader ``n-1`` seals what it writes, ``n-2`` reads.
PUBLISHED = PublicKeys()
LEADER_KEYS = NodeKeyring(node="n-1", keys=[NodeKey.generate()], public=PUBLISHED)
READER_KEYS = NodeKeyring(node="n-2", keys=[NodeKey.generate()], public=PUBLISHED)


class _Coordinator:
    """The parts of a pool coordinator the node cache reads (the coordinator's own tests cover how
    ready/healthy are derived); flags set by the test, a real etcd behind ``new_client``; the
    leader is ``n-1``."""

    def __init__(self, etcd: EtcdServer, prefix: str) -> None:
        self.etcd, self.cache_area = etcd, CacheArea("n-1", prefix)
        self.healthy = True
        self.ready = True

    def new_client(self) -> aetcd.Client:
        return _client(self.etcd)


async def test_leader_writes_the_cloud_into_etcd_and_nodes_read_it_back(kube: AsyncClient, etcd: EtcdServer,
                                                                          namespace: str) -> None:
    ns = namespace
    for i in range(3):
        await kube.create(_service(ns, f"web-{i}"))
        await kube.create(_slice(ns, f"web-{i}", [f"10.244.1.{i + 10}"]))
    prefix = f"/edgewatch/pools/p-{secrets.token_hex(2)}/"
    registry = CollectorRegistry()
    leader = PoolCacheLeader(resources=(ENDPOINTSLICES, SERVICES), http=http_client_of(kube), prefix=prefix,
                             sync_key=prefix.encode() + b"sync",
                             node="n-1", signer=LEADER_KEYS, metrics=LeaderMetrics(registry), config=FAST)
    etcd_client = _client(etcd)
    lease = int((await etcd_client.lease(30)).id)
    caches = {r: ResourceCache(r) for r in (ENDPOINTSLICES, SERVICES)}
    node = NodePoolCache(caches=caches, http=http_client_of(kube),
                         coordinator=lambda: coordinator, cloud_ok=lambda: True, verifier=READER_KEYS,
                         registry=CollectorRegistry(), config=NodeCacheConfig(poll_s=0.1))
    coordinator = _Coordinator(etcd, prefix)
    async with asyncio.TaskGroup() as tg:
        lead = tg.create_task(leader.run(etcd=etcd_client, rpc=_rpc, lease=lease))
        feed = tg.create_task(node.run())
        try:
            # The sync key comes after the initial sync, and carries what was synced.
            async def sync_value() -> dict[str, Any] | None:
                got = await etcd_client.get(leader.sync_key)
                if got is None:
                    return None
                return json.loads(unseal(got.value, key=leader.sync_key, writer="n-1", verifier=READER_KEYS))
            deadline = time.monotonic() + 20
            while (synced := await sync_value()) is None:
                assert time.monotonic() < deadline, "leader-informer-sync never written"
                await asyncio.sleep(0.1)
            assert synced["leader"] == "n-1" and set(synced["resources"]) == {ENDPOINTSLICES.name, SERVICES.name}
            cloud = await _cloud_state(kube, ns)
            assert len(cloud) == 6
            await wait_until(lambda: _cache_state(caches, ns) == cloud, timeout_s=20,
                             what="the node cache to hold the cloud's objects at the cloud's resourceVersions")
            assert node.source is Source.COORDINATOR
            # Changes in the cloud reach the node's cache through the coordinator, with a watch.
            watch = caches[ENDPOINTSLICES].watch(namespace=ns, label_selector=None, field_selector=None,
                                                 resource_version=caches[ENDPOINTSLICES].resource_version,
                                                 allow_bookmarks=False)
            await kube.create(_slice(ns, "web-9", ["10.244.1.99"]))
            es = await kube.get(EndpointSlice, "web-0-x", namespace=ns)
            es.endpoints[0].addresses = ["10.244.1.50"]
            await kube.replace(es)
            await kube.delete(EndpointSlice, "web-1-x", namespace=ns)
            seen: list[tuple[str, str]] = []
            async with asyncio.timeout(20):
                while len(seen) < 3:
                    kind, obj = await watch.__anext__()
                    seen.append((kind, obj["metadata"]["name"]))
            assert seen == [("ADDED", "web-9-x"), ("MODIFIED", "web-0-x"), ("DELETED", "web-1-x")]
            cloud = await _cloud_state(kube, ns)
            await wait_until(lambda: _cache_state(caches, ns) == cloud, timeout_s=20, what="cache == cloud")
            assert registry.get_sample_value("edgewatch_poolcache_leader_synced", {"resource": SERVICES.name}) == 1

            # Leadership ends; objects change while nobody leads; the next leader reconciles: only
            # what changed is written, the deletion becomes a tombstone the node turns into DELETED.
            lead.cancel()
            await asyncio.wait({lead})
            await etcd_client.revoke_lease(lease)
            coordinator.ready = False  # (no sync key; the node stays on the coordinator for the grace)
            await kube.delete(Service, "web-2", namespace=ns)
            await kube.create(_service(ns, "late"))
            writes_before = registry.get_sample_value("edgewatch_poolcache_leader_writes_total",
                                                      {"resource": SERVICES.name, "op": "put"})
            lease2 = int((await etcd_client.lease(30)).id)
            lead = tg.create_task(leader.run(etcd=etcd_client, rpc=_rpc, lease=lease2))
            cloud = await _cloud_state(kube, ns)
            await wait_until(lambda: _cache_state(caches, ns) == cloud, timeout_s=20,
                             what="the next leader's reconcile to reach the node")
            coordinator.ready = True
            writes = registry.get_sample_value("edgewatch_poolcache_leader_writes_total",
                                               {"resource": SERVICES.name, "op": "put"}) - writes_before
            # The whole cluster's Services were listed again (kube-system has one too), but only the
            # new one was written.
            assert writes == 1, writes
            assert node.history[-1][1] is Source.COORDINATOR and len(node.history) == 1
        finally:
            lead.cancel()
            feed.cancel()
    await etcd_client.close()


async def test_malformed_and_forged_values_in_etcd_are_refused_and_the_rest_is_served(
        kube: AsyncClient, etcd: EtcdServer, namespace: str) -> None:
    """The coordinator's host writes what it likes into the leader's area: unsealed, sealed by
    another pool member (its real key), moved from another key; and the leader's own values are
    checked after their seal (malformed, mismatched, oversized). Only the good one is served."""
    prefix = f"/edgewatch/pools/p-{secrets.token_hex(2)}/nodes/n-1/"
    keys = CacheKeys(prefix, SERVICES, "n-1")
    good = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "ok", "namespace": namespace,
                                                                 "resourceVersion": "7"}, "spec": {}}
    forged = {**good, "metadata": {**good["metadata"], "name": "forged"}}
    client = _client(etcd)
    await client.put(keys.object_key(namespace, "ok"), encode_object(good, keys=keys, signer=LEADER_KEYS))
    await client.put(keys.object_key(namespace, "bad"), seal(b"{not json", key=keys.object_key(namespace, "bad"),
                                                             signer=LEADER_KEYS))
    await client.put(keys.object_key(namespace, "big"), b"x" * 1_200_000)
    await client.put(keys.object_key(namespace, "other"), seal(json.dumps(good).encode(),
                                                               key=keys.object_key(namespace, "other"),
                                                               signer=LEADER_KEYS))
    await client.put(keys.object_key(namespace, "forged"), json.dumps(forged).encode())  # no seal
    await client.put(keys.object_key(namespace, "member"), encode_object(  # a member's real key
        {**good, "metadata": {**good["metadata"], "name": "member"}}, keys=keys, signer=READER_KEYS))
    await client.put(keys.object_key(namespace, "moved"), encode_object(good, keys=keys, signer=LEADER_KEYS))
    await client.put(keys.rv, encode_marker("9", key=keys.rv, signer=LEADER_KEYS))
    cache = ResourceCache(SERVICES)
    rejected: list[str] = []
    events: list[Any] = []

    async def sink(event: Any) -> None:
        events.append(event)
        if len(events) == 2:
            raise asyncio.CancelledError

    task = asyncio.create_task(run_coordinator_feed(etcd=client, keys=keys, sink=sink, rpc_timeout_s=3.0,
                                                    verifier=READER_KEYS, on_rejected=rejected.append))
    await wait_until(lambda: len(events) == 1, timeout_s=10, what="the initial state")
    reset = events[0]
    assert [o["metadata"]["name"] for o in reset.objects] == ["ok"] and reset.resource_version == "9"
    assert sorted(rejected) == ["bad_signature", "malformed", "mismatch", "not_writer", "oversized", "unsigned"]
    cache.replace(reset.objects, reset.resource_version, source="coordinator")
    await client.put(keys.object_key(namespace, "worse"), seal(b"[]", key=keys.object_key(namespace, "worse"),
                                                               signer=LEADER_KEYS))
    await client.put(keys.rv, b"99")  # an unsealed bookmark: refused, not fed
    await client.put(keys.rv, encode_marker("10", key=keys.rv, signer=LEADER_KEYS))
    await wait_until(lambda: len(events) == 2 or task.done(), timeout_s=10, what="the bookmark after a bad value")
    assert "shape" in rejected or "kind" in rejected
    assert rejected.count("unsigned") == 2 and events[1].resource_version == "10"
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await client.close()


async def test_node_falls_back_to_the_cloud_and_then_keeps_the_last_state(kube: AsyncClient, etcd: EtcdServer,
                                                                            namespace: str) -> None:
    ns = namespace
    await kube.create(_service(ns, "a"))
    prefix = f"/edgewatch/pools/p-{secrets.token_hex(2)}/"
    etcd_client = _client(etcd)
    lease = int((await etcd_client.lease(30)).id)
    leader = PoolCacheLeader(resources=(SERVICES,), http=http_client_of(kube), prefix=prefix,
                             sync_key=prefix.encode() + b"sync", node="n-1", signer=LEADER_KEYS,
                             metrics=LeaderMetrics(CollectorRegistry()), config=FAST)
    coordinator = _Coordinator(etcd, prefix)
    cloud_up = [True]
    caches = {SERVICES: ResourceCache(SERVICES)}
    node = NodePoolCache(caches=caches, http=http_client_of(kube), coordinator=lambda: coordinator,
                         cloud_ok=lambda: cloud_up[0], verifier=READER_KEYS,
                         registry=CollectorRegistry(), config=NodeCacheConfig(poll_s=0.1, handover_grace_s=1.0))
    async with asyncio.TaskGroup() as tg:
        lead = tg.create_task(leader.run(etcd=etcd_client, rpc=_rpc, lease=lease))
        feed = tg.create_task(node.run())
        try:
            await wait_until(lambda: ("services", "a") in _cache_state(caches, ns), timeout_s=20, what="first state")
            assert node.source is Source.COORDINATOR
            # The coordinator dies: the node reads the cloud; the old state is served meanwhile.
            lead.cancel()
            await asyncio.to_thread(etcd.kill)
            coordinator.healthy = coordinator.ready = False
            await wait_until(lambda: node.source is Source.CLOUD, timeout_s=5, what="switch to the cloud")
            await kube.create(_service(ns, "b"))
            await wait_until(lambda: ("services", "b") in _cache_state(caches, ns), timeout_s=20,
                             what="a cloud change through the cloud feed")
            # The cloud goes too: the last state stays, served.
            cloud_up[0] = False
            await wait_until(lambda: node.source is Source.LAST_KNOWN, timeout_s=5, what="last known")
            assert set(_cache_state(caches, ns)) == {("services", "a"), ("services", "b")}
        finally:
            lead.cancel()
            feed.cancel()
    with contextlib.suppress(Exception):
        await etcd_client.close()


async def _kubectl_watch(kubectl: str, kubeconfig: Path) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        kubectl, "--kubeconfig", str(kubeconfig), "get", "endpointslices", "-A", "--watch", "--output-watch-events",
        "-o", "json", stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)


def _events(text: str) -> list[tuple[str, str, str, str]]:
    """(type, namespace, name, resourceVersion) of each document kubectl printed."""
    decoder, rest, out = json.JSONDecoder(), text.strip(), []
    while rest:
        doc, end = decoder.raw_decode(rest)
        meta = doc["object"]["metadata"]
        out.append((doc["type"], meta["namespace"], meta["name"], meta["resourceVersion"]))
        rest = rest[end:].strip()
    return out


class _Reviews:
    """The cloud's reviews as a table (the data path is under test here; the real reviews are in
    test_poolcache_apiserver.py): ``reader-token`` may read."""

    async def token_review(self, token: str, *, timeout_s: float) -> Authentication:
        return Authentication(UserInfo(username="reader") if token == "reader-token" else None)

    async def access_review(self, user: UserInfo, attrs: Attributes, *, timeout_s: float) -> Authorization:
        return Authorization(attrs.verb in ("get", "list", "watch"))


async def test_kubectl_watch_through_the_cache_sees_what_the_apiserver_shows(
        kube: AsyncClient, etcd: EtcdServer, namespace: str, control_plane: Any, binaries: Binaries,
        tmp_path: Path) -> None:
    """The whole data path — cloud -> leader -> coordinator etcd -> node cache -> endpoint — under
    the real kubectl: ``get endpointslices -A --watch`` prints the same objects and the same events
    (type, name, resourceVersion) through the endpoint as against the apiserver."""
    ns = namespace
    # Other namespaces are compared too: wait until the earlier tests' namespaces are gone (the
    # namespace controller deletes their slices after their teardown), or a deletion landing
    # between the two kubectls' first lists shows as a difference the cache did not make.
    deadline = time.monotonic() + 90
    while [n async for n in kube.list(Namespace) if n.status is not None and n.status.phase == "Terminating"]:
        assert time.monotonic() < deadline, "earlier tests' namespaces still terminating after 90 s"
        await asyncio.sleep(0.5)
    await kube.create(_slice(ns, "pre", ["10.244.9.1"]))
    prefix = f"/edgewatch/pools/p-{secrets.token_hex(2)}/"
    etcd_client = _client(etcd)
    lease = int((await etcd_client.lease(30)).id)
    leader = PoolCacheLeader(resources=(ENDPOINTSLICES, SERVICES), http=http_client_of(kube), prefix=prefix,
                             sync_key=prefix.encode() + b"sync",
                             node="n-1", signer=LEADER_KEYS, metrics=LeaderMetrics(CollectorRegistry()), config=FAST)
    caches = {r: ResourceCache(r) for r in (ENDPOINTSLICES, SERVICES)}
    coordinator = _Coordinator(etcd, prefix)  # one object, as the agent's runner keeps one per session target
    node = NodePoolCache(caches=caches, http=http_client_of(kube), coordinator=lambda: coordinator,
                         cloud_ok=lambda: True, verifier=READER_KEYS, registry=CollectorRegistry(),
                         config=NodeCacheConfig(poll_s=0.1))
    ssl_ctx, cert = self_signed_tls(dir=tmp_path / "tls")
    runner = web.AppRunner(make_app(caches=caches, upstream=None, registry=CollectorRegistry(),
                                    access=AccessControl(client=_Reviews(), cloud_ok=lambda: True)))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_ctx)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    ours = tmp_path / "cache.kubeconfig"
    ours.write_text(client_kubeconfig(server=f"https://127.0.0.1:{port}", ca_pem=cert, token="reader-token"))
    procs: list[asyncio.subprocess.Process] = []
    async with asyncio.TaskGroup() as tg:
        lead = tg.create_task(leader.run(etcd=etcd_client, rpc=_rpc, lease=lease))
        feed = tg.create_task(node.run())
        try:
            cloud = await _cloud_state(kube, ns)
            await wait_until(lambda: _cache_state(caches, ns) == cloud, timeout_s=20, what="the cache synced")
            for kubeconfig in (control_plane.kubeconfig, ours):
                procs.append(await _kubectl_watch(str(binaries.kubectl), kubeconfig))
            await asyncio.sleep(3)  # both printed the initial state and watch
            await kube.create(_slice(ns, "web", ["10.244.9.2"]))
            es = await kube.get(EndpointSlice, "web-x", namespace=ns)
            es.endpoints[0].addresses = ["10.244.9.3"]
            await kube.replace(es)
            await kube.delete(EndpointSlice, "pre-x", namespace=ns)
            await kube.create(_slice(ns, "late", ["10.244.9.4"]))
            await asyncio.sleep(4)
        finally:
            for proc in procs:
                with contextlib.suppress(ProcessLookupError):
                    proc.terminate()
            outputs = [await proc.communicate() for proc in procs]
            lead.cancel()
            feed.cancel()
    await runner.cleanup()
    await etcd_client.close()
    (direct, _), (cached, err) = outputs
    direct_events = [e for e in _events(direct.decode()) if e[1] == ns]
    cached_events = [e for e in _events(cached.decode()) if e[1] == ns]
    assert [(t, n) for t, _, n, _ in direct_events] == [("ADDED", "pre-x"), ("ADDED", "web-x"), ("MODIFIED", "web-x"),
                                                       ("DELETED", "pre-x"), ("ADDED", "late-x")], direct_events
    assert cached_events == direct_events, f"through the cache: {cached_events}; kubectl said {err.decode()[-300:]}"
    # Outside our namespace too: the same objects at the same resourceVersions at the start.
    assert {e[1:] for e in _events(cached.decode()) if e[0] == "ADDED" and e[1] != ns} == {
        e[1:] for e in _events(direct.decode()) if e[0] == "ADDED" and e[1] != ns}


async def test_a_coordinator_that_moved_is_followed_even_with_the_same_leader(kube: AsyncClient, etcd: EtcdServer,
                                                                              binaries: Binaries, tmp_path: Path,
                                                                              namespace: str) -> None:
    """The coordinator's pod moved to another node (a new, empty etcd at another address) and the
    same node leads again: its area has the same name, but the feed must leave the dead etcd's
    connection for the new one (found by the coordinator-pod scenario: a 30 s stale cache)."""
    prefix = f"/edgewatch/pools/p-{secrets.token_hex(2)}/nodes/n-1/"
    keys = CacheKeys(prefix, SERVICES, "n-1")

    def service(name: str, rv: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace,
                                                                     "resourceVersion": rv}, "spec": {}}

    second = EtcdServer(binary=binaries.etcd, data_dir=tmp_path / "etcd2")
    await asyncio.to_thread(second.start)
    try:
        for server, name, rv in ((etcd, "old", "7"), (second, "new", "8")):
            client = _client(server)
            await client.put(keys.object_key(namespace, name),
                             encode_object(service(name, rv), keys=keys, signer=LEADER_KEYS))
            await client.put(keys.rv, encode_marker(rv, key=keys.rv, signer=LEADER_KEYS))
            await client.close()
        current = [_Coordinator(etcd, prefix)]
        cache = ResourceCache(SERVICES)
        node = NodePoolCache(caches={SERVICES: cache}, http=http_client_of(kube), coordinator=lambda: current[0],
                             cloud_ok=lambda: True, verifier=READER_KEYS, registry=CollectorRegistry(),
                             config=NodeCacheConfig(poll_s=0.1))

        def names() -> list[str]:
            try:
                objects, _ = cache.list(namespace=namespace, label_selector=None, field_selector=None,
                                        resource_version=None, resource_version_match=None)
            except Exception:  # noqa: BLE001 - not filled yet
                return []
            return [o["metadata"]["name"] for o in objects]

        task = asyncio.create_task(node.run())
        try:
            await wait_until(lambda: names() == ["old"], timeout_s=15, what="the first coordinator's cache")
            current[0] = _Coordinator(second, prefix)  # same leader, same area name, another etcd
            await wait_until(lambda: names() == ["new"], timeout_s=15, what="the moved coordinator's cache")
            assert node.source is Source.COORDINATOR
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    finally:
        await asyncio.to_thread(second.cleanup)

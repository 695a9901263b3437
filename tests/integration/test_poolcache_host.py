"""The agent's pool cache host on the real apiserver: its feeds (one cloud watch per pool-scope
resource) start with the endpoint's first request, not before, so a node none of whose clients
reads the pool cache opens no watch for it; once read, the caches sync from the cloud."""

from __future__ import annotations

import asyncio
import ssl
import time
from pathlib import Path

import httpx2 as httpx
import pytest

from edgewatch.agent.cachehost import PoolCacheHost
from edgewatch.core.identity import NodeKey, NodeKeyring, PublicKeys
from edgewatch.core.types import NodeName
from edgewatch.kube.http import http_client_of
from edgewatch.poolcache.resources import DEFAULT_RESOURCES, PoolResource
from edgewatch_lab.testing.controlplane import free_port

pytestmark = pytest.mark.controlplane


class _Wanted:
    def known_pool_resources(self) -> tuple[PoolResource, ...]:
        return DEFAULT_RESOURCES


class _NoCoordinator:
    def current_coordinator(self) -> None:
        return None


class _Up:
    up = True


async def test_the_feeds_start_with_the_first_request(kube, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    http = http_client_of(kube)
    assert http is not None
    port = free_port("127.0.0.1")
    host = PoolCacheHost(resources=_Wanted(), http=http, upstream=None, coordinators=_NoCoordinator(),
                         link=_Up(), verifier=NodeKeyring(node=NodeName("n-1"), keys=[NodeKey.generate()],
                                                          public=PublicKeys()),
                         port=port, state_dir=tmp_path)
    task = asyncio.create_task(host.run(poll_s=0.1))
    try:
        async with asyncio.timeout(20):
            while not host.serving:
                await asyncio.sleep(0.05)
        await asyncio.sleep(3.0)  # served, and nobody asked: no feed, nothing synced
        assert not host.read.is_set()
        assert not any(c.synced for c in host.caches.values())
        context = ssl.create_default_context(cafile=str(tmp_path / "pool-cache" / "poolcache-tls.crt"))
        async with httpx.AsyncClient(verify=context, timeout=5) as client:
            answer = await client.get(f"https://127.0.0.1:{port}/api/v1/services")
        assert answer.status_code in (401, 403, 503), answer.status_code  # no token: not served, but read
        assert host.read.is_set()
        started = time.monotonic()
        async with asyncio.timeout(20):
            while not all(c.synced for c in host.caches.values()):
                await asyncio.sleep(0.05)
        print(f"\npool cache synced {time.monotonic() - started:.2f} s after its first request")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

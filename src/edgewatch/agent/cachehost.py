"""The agent's side of the pool cache: the node's caches, their feeds and the local endpoint.

What it is for
    Composes :mod:`edgewatch.poolcache` inside the agent: one
    :class:`~edgewatch.poolcache.store.ResourceCache` per pool-scope resource named by the
    ConfigMap (``poolScopeResources``), filled by :class:`~edgewatch.poolcache.sources.NodePoolCache`
    (coordinator while Ready, cloud while not, last known state when neither), and served on
    ``https://<address>:<port>`` (loopback, port 51007 by default) by
    :func:`~edgewatch.poolcache.apiserver.make_app`. The TLS certificate and a kubeconfig for the
    node's clients are kept in ``<state-dir>/pool-cache/`` (``edgewatch kubeconfig`` prints one
    with the client's own token file added).

    A change of ``poolScopeResources`` restarts the caches and the endpoint with the new list
    (clients' watches end; they re-list). An empty list turns the node side off (no endpoint).

    The feeds start with the endpoint's first request, not before: a node none of whose clients
    (kube-proxy, CoreDNS, ...) is pointed at the pool cache would otherwise keep one cloud watch
    per resource open for nothing (two more per node than stock Kubernetes, and their lists and
    acknowledgements on the node's uplink). The first request is answered 503 (not synced yet, as
    any client of an unsynced cache is; informers retry) and later ones from the cache. A client
    that first connects while the node is cut off from the cloud and its pool has no coordinator
    gets nothing, as a client of a cache that never synced does.

    Who may read: :class:`~edgewatch.poolcache.authn.AccessControl` asks the cloud (TokenReview,
    SubjectAccessReview) with the agent's own client and credentials, and keeps its decisions for
    the agent's life (a restart of the endpoint keeps them, so a cut-off node's clients stay served).

What it is handed
    The pool-scope resources the ConfigMap names (:class:`PoolScope`: the membership), the running
    pool coordinator (:class:`CoordinatorSource`: the agent's ``CoordinatorRunner``), this node's
    cloud link (:class:`edgewatch.agent.ports.CloudLinkView`), the cloud API's HTTP client and
    where to serve.

Errors
    A port that cannot be bound or a state folder that cannot be written is logged (and the
    endpoint retried every ``retry_s``); nothing here ends the agent.

Limits
    Metrics live in their own registry per generation (:attr:`PoolCacheHost.registry`), exported
    by the agent's /metrics next to its own.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from pathlib import Path
from collections.abc import Awaitable, Callable
from typing import Protocol

from aiohttp import web
from prometheus_client import CollectorRegistry

from edgewatch.agent.ports import CloudLinkView
from edgewatch.core.seal import SealVerifier
from edgewatch.kube.api import HttpClient
from edgewatch.names import DEFAULT_POOL_CACHE_PORT
from edgewatch.poolcache.apiserver import Upstream, client_kubeconfig, make_app, self_signed_tls
from edgewatch.poolcache.authn import AccessControl, CloudReviewClient, ReviewPolicy
from edgewatch.poolcache.resources import PoolResource
from edgewatch.poolcache.sources import CoordinatorView, NodeCacheConfig, NodePoolCache, Source
from edgewatch.poolcache.store import ResourceCache

log = logging.getLogger(__name__)

__all__ = ["CoordinatorSource", "KUBECONFIG_FILE", "PoolCacheHost", "PoolScope"]

KUBECONFIG_FILE = "kubeconfig"
"""File name of the clients' kubeconfig in ``<state-dir>/pool-cache/`` (no credentials in it)."""


class PoolScope(Protocol):
    """Which pool-scope resources to cache (``edgewatch.agent.membership``)."""

    def known_pool_resources(self) -> tuple[PoolResource, ...] | None:
        """The ConfigMap's ``poolScopeResources`` (empty: the node side is off), or None until the
        ConfigMap has been read."""
        ...


class CoordinatorSource(Protocol):
    """The pool coordinator in use now (``edgewatch.agent.coordinating.CoordinatorRunner``)."""

    def current_coordinator(self) -> CoordinatorView | None:
        """The running coordinator, or None."""
        ...


class PoolCacheHost:
    """Runs the node's pool cache (see the module docstring).

    Args (keyword-only):
        resources: the pool-scope resources wanted now (:class:`PoolScope`).
        http: the cloud API's HTTP client (agent credentials; used by the cloud feed only).
        upstream: where the endpoint forwards everything it does not cache (the client's own
            credentials, never ours), or None.
        coordinators: the pool coordinator now in use (:class:`CoordinatorSource`).
        link: this node's cloud link.
        verifier: every node's published keys (the agent's keyring): the coordinator's values
            count only sealed by the leader whose area is read.
        address, port: where to serve (HTTPS).
        state_dir: the agent's state folder (TLS files and kubeconfig under ``pool-cache/``), or
            None (a temporary folder).
        config: feed settings.
        retry_s: how often a failed start is retried, seconds.
        review_policy: TTLs and bounds of the cloud's access decisions (default: the kubelet's).
    """

    def __init__(self, *, resources: PoolScope, http: HttpClient, upstream: Upstream | None,
                 coordinators: CoordinatorSource, link: CloudLinkView, verifier: SealVerifier,
                 address: str = "127.0.0.1",
                 port: int = DEFAULT_POOL_CACHE_PORT, state_dir: Path | None = None,
                 config: NodeCacheConfig | None = None, retry_s: float = 5.0,
                 review_policy: ReviewPolicy | None = None) -> None:
        self._resources = resources
        self.http = http
        self.upstream = upstream
        self._coordinators = coordinators
        self._link = link
        self._verifier = verifier
        self.address = address
        self.port = port
        self.state_dir = state_dir
        self.config = config or NodeCacheConfig()
        self.retry_s = retry_s
        self.access = AccessControl(client=CloudReviewClient(http=http), cloud_ok=self._cloud_ok, policy=review_policy)
        self.registry = CollectorRegistry()
        self.node: NodePoolCache | None = None
        self.caches: dict[PoolResource, ResourceCache] = {}
        self.serving: tuple[PoolResource, ...] = ()
        self.read = asyncio.Event()  # set by the endpoint's first request: the feeds run from then on

    @property
    def source(self) -> Source | None:
        """The source the caches read from now (None: not running)."""
        return self.node.source if self.node is not None else None

    def _cloud_ok(self) -> bool:
        """This node's cloud link, as the pool cache's feeds and access control read it."""
        return self._link.up

    def _dir(self) -> Path:
        if self.state_dir is not None:
            return self.state_dir / "pool-cache"
        return Path(tempfile.mkdtemp(prefix="edgewatch-pool-cache-"))

    async def run(self, *, poll_s: float = 1.0) -> None:
        """Serve the wanted resources until cancelled; restart when they change."""
        while True:
            wanted = self._resources.known_pool_resources()
            if wanted is None or not wanted:
                await asyncio.sleep(poll_s)
                continue
            try:
                await self._generation(wanted, poll_s=poll_s)
            except OSError as exc:
                log.error("pool cache endpoint on %s:%d failed: %s; retrying in %.0f s", self.address, self.port,
                          exc, self.retry_s, extra={"kind": "pool_cache"})
                await asyncio.sleep(self.retry_s)

    @web.middleware
    async def _first_request(self, request: web.Request,
                             handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        """Note that a client reads the pool cache (the feeds start), then serve the request."""
        if not self.read.is_set():
            log.info("pool cache: first request (%s %s); starting its feeds", request.method, request.path[:200],
                     extra={"kind": "pool_cache"})
            self.read.set()
        return await handler(request)

    async def _feed_once_read(self, node: NodePoolCache) -> None:
        """Run ``node``'s feeds once the endpoint has been read (module docstring)."""
        await self.read.wait()
        await node.run()

    async def _generation(self, resources: tuple[PoolResource, ...], *, poll_s: float) -> None:
        """Serve ``resources`` until the wanted list changes (returns) or cancelled."""
        folder = self._dir()
        ssl_ctx, cert = self_signed_tls(dir=folder)
        server = f"https://{'[' + self.address + ']' if ':' in self.address else self.address}:{self.port}"
        (folder / KUBECONFIG_FILE).write_text(client_kubeconfig(server=server, ca_pem=cert))
        self.registry = registry = CollectorRegistry()
        self.caches = caches = {r: ResourceCache(r) for r in resources}
        self.node = node = NodePoolCache(caches=caches, http=self.http, coordinator=self._coordinators.current_coordinator,
                                         cloud_ok=self._cloud_ok, verifier=self._verifier, registry=registry,
                                         config=self.config)
        app = make_app(caches=caches, upstream=self.upstream, registry=registry, access=self.access)
        app.middlewares.append(self._first_request)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, self.address, self.port, ssl_context=ssl_ctx).start()
            self.serving = resources
            log.info("pool cache serving %s on %s", [r.name for r in resources], server,
                     extra={"kind": "pool_cache", "kubeconfig": str(folder / KUBECONFIG_FILE)})
            async with asyncio.TaskGroup() as tg:
                feed = tg.create_task(self._feed_once_read(node), name="pool-cache-node")
                while self._resources.known_pool_resources() == resources:
                    await asyncio.sleep(poll_s)
                log.info("pool-scope resources changed: restarting the pool cache", extra={"kind": "pool_cache"})
                feed.cancel()
        finally:
            self.serving = ()
            for cache in caches.values():
                cache.close_watches()
            await runner.cleanup()


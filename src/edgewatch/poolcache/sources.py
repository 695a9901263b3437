"""Where a node's pool cache reads from: the coordinator while Ready, the cloud while not, the last
known state when neither can be reached (docs/pool-cache.md; OpenYurt's Yurt-Coordinator).

What it is for
    Every agent keeps one in-memory cache per pool-scope resource
    (:class:`edgewatch.poolcache.store.ResourceCache`), served to its node's clients. This module
    fills those caches from the right source and switches source when the situation changes.

The choice (:func:`choose_source`, pure and tested exhaustively)
    * ``coordinator`` while the pool coordinator is Ready (reachable and ``leader-informer-sync``
      fresh): one pool-wide cloud watch serves every node, and a node cut off from the cloud still
      gets changes its leader sees.
    * It *stays* on the coordinator for up to ``handover_grace_s`` (10 s) after it was last Ready:
      a leader hand-over deletes the sync key and the next leader puts it back after its sync
      (about 6 s, see ``edgewatch.agent.coordinator``), and a coordinator call that times out on a
      busy box ends the session for a moment; neither should send every node of the pool to
      re-list from the cloud at once (the uplink cost the cache exists to avoid). Meanwhile the
      cache serves what it has.
    * ``cloud`` otherwise, if this node's cloud link is up: as without the cache.
    * ``last-known`` when neither: the caches keep what they hold and keep serving it (never an
      empty list), and ``edgewatch_poolcache_last_known`` says so.

    A switch stops the old feed; the new feed's first full state replaces each cache's content,
    which ends the clients' open watches so they re-list cleanly (the cache answers their re-watch
    from an older resourceVersion with 410 Gone). Until then the old content is served: switching
    causes no outage.

Errors
    A feed that fails (etcd or cloud errors) is retried with jittered backoff while its source is
    still the chosen one; nothing here raises out of :meth:`NodePoolCache.run` but cancellation.

Limits
    Polls the coordinator's and the cloud link's state every ``poll_s`` (0.5 s); the coordinator
    feed opens its own etcd connection (one per node).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge

from edgewatch.kube.api import HttpClient
from edgewatch.poolcache.feed import Bookmark, Change, FeedEvent, Reset
from edgewatch.core.seal import SealVerifier
from edgewatch.poolcache.layout import CacheArea, CacheKeys
from edgewatch.poolcache.reflector import CloudReflector, ReflectorConfig, backoff_delay
from edgewatch.poolcache.resources import PoolResource
from edgewatch.poolcache.store import BadRequest, CacheFull, ResourceCache
from edgewatch.waits import apart, bounded

if TYPE_CHECKING:  # the coordinator's feed (aetcd, gRPC) is loaded once a coordinator serves the cache
    import aetcd

log = logging.getLogger(__name__)

__all__ = ["CoordinatorView", "NodePoolCache", "NodeCacheConfig", "Source", "choose_source"]


class FeedRefused(ValueError):
    """A source's full state was refused by the cache (malformed, or over its memory bound); the
    feed is retried with backoff and the cache keeps serving what it had."""


class Source(enum.StrEnum):
    """Where the node's cache reads from."""

    COORDINATOR = "coordinator"
    CLOUD = "cloud"
    LAST_KNOWN = "last-known"


def choose_source(*, current: Source, coordinator_ready: bool, coordinator_healthy: bool, unready_for_s: float,
                  cloud_ok: bool, handover_grace_s: float) -> Source:
    """The source the node's cache should read from now (see the module docstring).

    Args:
        current: the source in use.
        coordinator_ready: the pool coordinator is reachable and its sync key fresh.
        coordinator_healthy: the pool coordinator is reachable (informational: a coordinator
            unreachable for longer than the grace is not Ready either).
        unready_for_s: seconds since the coordinator was last seen Ready (0 if it is).
        cloud_ok: this node's own cloud link is up.
        handover_grace_s: how long a reachable coordinator may be un-Ready before leaving it.
    """
    if coordinator_ready:
        return Source.COORDINATOR
    if current is Source.COORDINATOR and unready_for_s < handover_grace_s:
        return Source.COORDINATOR  # a hand-over or a blip: no herd of cloud re-lists for it
    if cloud_ok:
        return Source.CLOUD
    return Source.LAST_KNOWN


class CoordinatorView(Protocol):
    """What the node cache needs of the pool coordinator (``edgewatch.agent.coordinator``). One
    object per coordinator session target (the agent's runner keeps one until the URL, pool or
    trust changes): a different object is a different coordinator, whose feed starts anew."""

    @property
    def cache_area(self) -> CacheArea | None:
        """The current leader and its area (``poolkeys.PoolKeys.writer``); None without a leader."""

    @property
    def healthy(self) -> bool: ...

    @property
    def ready(self) -> bool: ...

    def new_client(self) -> aetcd.Client: ...


@dataclass(frozen=True, kw_only=True)
class NodeCacheConfig:
    """Settings of a node's cache feeds.

    Attributes:
        poll_s: how often the source is chosen again, seconds (default 0.5 s).
        handover_grace_s: how long to stay on a reachable but un-Ready coordinator, seconds
            (default 10 s: a leader hand-over takes about 6 s).
        rpc_timeout_s: bound of one coordinator read or watch start, seconds (default 5 s).
        reflector: cloud list/watch timings (cloud source).
    """

    poll_s: float = 0.5
    handover_grace_s: float = 10.0
    rpc_timeout_s: float = 5.0
    reflector: ReflectorConfig = ReflectorConfig()


class NodeCacheMetrics:
    """The node cache's source metrics."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.source = Gauge("edgewatch_poolcache_source", "1 for the source the node's pool cache reads from",
                            ["source"], registry=registry)
        self.switches = Counter("edgewatch_poolcache_source_switches", "Source switches of the node's pool cache",
                                ["to"], registry=registry)
        self.last_known = Gauge("edgewatch_poolcache_last_known", "1 while the node's pool cache serves its last "
                                "known state (neither the coordinator nor the cloud reachable)", registry=registry)
        self.resets = Counter("edgewatch_poolcache_resets", "Full states loaded into the node's pool cache",
                              ["resource", "source"], registry=registry)
        self.feed_errors = Counter("edgewatch_poolcache_feed_errors", "Failures of the node's pool cache feed",
                                   ["source", "reason"], registry=registry)
        self.rejected = Counter("edgewatch_poolcache_feed_rejected", "Objects the node's pool cache feed refused",
                                ["resource", "source", "reason"], registry=registry)


class NodePoolCache:
    """Fills a node's caches from the chosen source (see the module docstring).

    Args (keyword-only):
        caches: one cache per pool-scope resource.
        http: the cloud API's HTTP client (agent credentials).
        coordinator: returns the pool coordinator now in use, or None (no coordinator: cloud only).
        cloud_ok: this node's cloud link state.
        verifier: every node's published keys (the agent's keyring): a coordinator value counts
            only sealed by the leader whose area is read (:mod:`edgewatch.core.seal`), and a
            coordinator whose leader's keys are not known here is not read.
        registry: where the metrics go.
        config: settings.

    ``source`` is the source in use and ``history`` the list of ``(monotonic time, source)``
    switches (for status and the playground report).
    """

    def __init__(self, *, caches: Mapping[PoolResource, ResourceCache], http: HttpClient,
                 coordinator: Callable[[], CoordinatorView | None], cloud_ok: Callable[[], bool],
                 verifier: SealVerifier, registry: CollectorRegistry, config: NodeCacheConfig | None = None) -> None:
        self.caches = dict(caches)
        self.verifier = verifier
        self.http = http
        self._coordinator = coordinator
        self._cloud_ok = cloud_ok
        self.config = config or NodeCacheConfig()
        self.metrics = NodeCacheMetrics(registry)
        self.source = Source.LAST_KNOWN
        self.history: list[tuple[float, Source]] = []
        self._ready_seen = 0.0
        self._feed_area: CacheArea | None = None  # the leader's area the coordinator feed reads
        self._feed_view: CoordinatorView | None = None  # the coordinator it reads it from

    def _choose(self) -> Source:
        coordinator = self._coordinator()
        now = time.monotonic()
        ready = bool(coordinator is not None and coordinator.ready and self._leader_known(coordinator))
        healthy = bool(coordinator is not None and coordinator.healthy)
        if ready:
            self._ready_seen = now
        try:
            cloud = bool(self._cloud_ok())
        except Exception:  # noqa: BLE001 - a broken callback means: do not trust the cloud
            cloud = False
        return choose_source(current=self.source, coordinator_ready=ready, coordinator_healthy=healthy,
                             unready_for_s=now - self._ready_seen, cloud_ok=cloud,
                             handover_grace_s=self.config.handover_grace_s)

    def _set_source(self, source: Source) -> None:
        if source is not self.source or not self.history:
            log.info("pool cache source %s -> %s", self.source.value, source.value,
                     extra={"from": self.source.value, "to": source.value})
            self.metrics.switches.labels(to=source.value).inc()
            self.history.append((time.monotonic(), source))
            del self.history[:-100]
        self.source = source
        for s in Source:
            self.metrics.source.labels(source=s.value).set(1 if s is source else 0)
        self.metrics.last_known.set(1 if source is Source.LAST_KNOWN else 0)

    async def run(self) -> None:
        """Choose the source every ``poll_s`` and run its feed; until cancelled. The coordinator
        feed follows the current coordinator and its leader's area, and moves to a new one (a
        coordinator at another address, or a new leader) only once it is synced (Ready): until
        then the last state is served, never a half-written one."""
        if not self.caches:
            return
        feed: asyncio.Task[None] | None = None
        try:
            while True:
                wanted = self._choose()
                view, area = self._coordinator_target() if wanted is Source.COORDINATOR else (None, None)
                moved = (wanted is Source.COORDINATOR and area is not None
                         and (area != self._feed_area or view is not self._feed_view))
                if feed is None or wanted is not self.source or moved:
                    if feed is not None:
                        feed.cancel()
                        await asyncio.wait({feed})
                    if moved and self.source is Source.COORDINATOR and self._feed_area is not None:
                        log.info("pool cache: following the pool coordinator's new leader or address",
                                 extra={"from": self._feed_area.prefix, "to": area.prefix if area else None,
                                        "new_coordinator": view is not self._feed_view})
                    self._set_source(wanted)
                    on_coordinator = wanted is Source.COORDINATOR
                    self._feed_view, self._feed_area = (view, area) if on_coordinator else (None, None)
                    feed = asyncio.create_task(self._feed(wanted, self._feed_view, self._feed_area),
                                               name=f"pool-cache-feed-{wanted.value}")
                await asyncio.sleep(self.config.poll_s)
        finally:
            if feed is not None:
                feed.cancel()
                await asyncio.wait({feed})

    def _leader_known(self, coordinator: CoordinatorView) -> bool:
        """Whether this node holds the published keys of the coordinator's leader: without them
        every value it wrote would be refused (and stay refused: a feed does not re-read a value
        that did not change), so such a coordinator is not Ready for this node until they come."""
        area = coordinator.cache_area
        return area is not None and bool(self.verifier.keys_of(area.writer))

    def _coordinator_target(self) -> tuple[CoordinatorView | None, CacheArea | None]:
        """What to read while on the coordinator: the current coordinator and its leader's area
        once it is Ready, else what is being read (a coordinator that moved to another address
        is a new object: its feed must not stay on the old one's connection)."""
        coordinator = self._coordinator()
        if coordinator is not None and coordinator.ready and self._leader_known(coordinator):
            area = coordinator.cache_area
            if area is not None:
                return coordinator, area
        return self._feed_view, self._feed_area

    # -- feeds ---------------------------------------------------------------------------------------

    def _sink(self, resource: PoolResource, source: Source) -> Callable[[FeedEvent], Any]:
        cache = self.caches[resource]

        async def sink(event: FeedEvent) -> None:
            if isinstance(event, Reset):
                try:
                    cache.replace(event.objects, event.resource_version, source=source.value)
                except (BadRequest, CacheFull) as exc:  # the cache keeps its previous state
                    self.metrics.rejected.labels(resource=resource.name, source=source.value,
                                                 reason=type(exc).__name__).inc()
                    raise FeedRefused(f"{resource.name}: {exc}") from exc
                self.metrics.resets.labels(resource=resource.name, source=source.value).inc()
            elif isinstance(event, Change):
                cache.apply(event.type, event.obj, source=source.value)
            elif isinstance(event, Bookmark):
                cache.bookmark(event.resource_version)
        return sink

    async def _feed(self, source: Source, view: CoordinatorView | None, area: CacheArea | None) -> None:
        """Run ``source``'s feeds (one per resource; the coordinator's read the leader's ``area``
        of the coordinator ``view``) until cancelled; retry after any failure."""
        if source is Source.LAST_KNOWN or (source is Source.COORDINATOR and (area is None or view is None)):
            return
        attempt = 0
        while True:
            try:
                # each run of feeds in a task of its own (edgewatch.waits.apart): on Python 3.11 a
                # TaskGroup cancelled while a feed fails raises the feed's error and drops the
                # cancellation, which the handler below would then eat and retry for ever
                if source is Source.CLOUD:
                    await apart(self._cloud_feeds(), name=f"poolcache-{source.value}-feeds")
                else:
                    assert view is not None and area is not None
                    await apart(self._coordinator_feeds(view, area), name=f"poolcache-{source.value}-feeds")
            except Exception as exc:  # noqa: BLE001 - any failure: retry while still the source
                leaf = exc
                while isinstance(leaf, BaseExceptionGroup) and leaf.exceptions:
                    leaf = leaf.exceptions[0]
                attempt += 1
                delay = backoff_delay(attempt, initial=0.5, cap=10.0)
                self.metrics.feed_errors.labels(source=source.value, reason=type(leaf).__name__).inc()
                log.warning("pool cache: %s feed failed: %s; retrying in %.1f s", source.value,
                            str(leaf)[:300] or type(leaf).__name__, delay,
                            extra={"source": source.value, "reason": type(leaf).__name__})
                await asyncio.sleep(delay)

    async def _cloud_feeds(self) -> None:
        async with asyncio.TaskGroup() as tg:
            for resource in self.caches:
                name = resource.name
                tg.create_task(CloudReflector(
                    resource=resource, http=self.http, sink=self._sink(resource, Source.CLOUD),
                    config=self.config.reflector, name="node",
                    on_error=lambda reason: self.metrics.feed_errors.labels(source="cloud", reason=reason).inc(),
                    on_rejected=lambda reason, n=name: self.metrics.rejected.labels(
                        resource=n, source="cloud", reason=reason).inc()).run())

    async def _coordinator_feeds(self, coordinator: CoordinatorView, area: CacheArea) -> None:
        # not with this module: an agent in a pool without a coordinator never loads aetcd and gRPC
        from edgewatch.poolcache.etcdfeed import run_coordinator_feed  # noqa: PLC0415

        etcd = coordinator.new_client()
        try:
            async with asyncio.TaskGroup() as tg:
                for resource in self.caches:
                    name = resource.name
                    tg.create_task(run_coordinator_feed(
                        etcd=etcd, keys=CacheKeys(area.prefix, resource, area.writer), verifier=self.verifier,
                        sink=self._sink(resource, Source.COORDINATOR), rpc_timeout_s=self.config.rpc_timeout_s,
                        on_rejected=lambda reason, n=name: self.metrics.rejected.labels(
                            resource=n, source="coordinator", reason=reason).inc()))
        finally:
            with contextlib.suppress(Exception):
                await bounded(etcd.close(), 2.0)

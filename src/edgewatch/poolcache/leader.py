"""The pool leader's informer: one cloud watch per pool-scope resource, written into the pool's etcd.

What it is for
    OpenYurt's Yurt-Coordinator (docs/pool-cache.md): the pool coordinator caches pool-scope resources
    so the pool pulls each change over the uplink once, not once per node, and so a node cut off from
    the cloud still sees changes while its pool leader is connected. The agent elected pool leader runs
    :meth:`PoolCacheLeader.run` for as long as it leads (``edgewatch.agent.coordinator`` calls it inside
    its leadership's TaskGroup; cancelled on step-down).

How
    * One :class:`~edgewatch.poolcache.reflector.CloudReflector` per resource (list, watch with
      bookmarks, re-list on 410, jittered backoff, every call bounded).
    * Its events go to etcd (layout: :mod:`edgewatch.poolcache.layout`): a list reconciles the
      stored objects with the listed ones (unchanged objects are not rewritten, missing ones get a
      tombstone); changes are written as they come, those that queued up during a transaction
      together in the next one (objects or tombstones in resourceVersion order, then the
      resource's ``rv`` key); a bookmark updates ``rv``. Objects in etcd outlive a leadership, so a node that leads again
      writes only what changed since its last term (each leader keeps its own copy: readers follow
      only the current leader's, which no other node can write).
    * ``leader-informer-sync`` is put, under the leader's etcd lease (so it goes when leadership
      goes), only after every resource's initial list is in etcd, then renewed every
      ``sync_renew_s`` (10 s) while every reflector is synced; readers take it as stale when it
      has not changed for 30 s *by their own clock* (never comparing the ``synced_at`` inside).

Errors
    Cloud errors stay inside the reflectors (logged, counted, retried). An etcd error raises out of
    :meth:`run` (the coordinator session handles it: it ends the session and reconnects).

Limits
    Transactions of at most ``txn_ops`` operations (etcd's default ``--max-txn-ops`` is 128); a
    list's reconcile reads the resource's whole prefix once per leadership term.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import aetcd
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from edgewatch.kube.api import HttpClient
from edgewatch.poolcache.feed import Bookmark, Change, FeedEvent, ObjectRejected, Reset, resource_version_of
from edgewatch.core.seal import seal
from edgewatch.core.signing import Signer
from edgewatch.poolcache.layout import (CacheKeys, Tombstone, decode_value, encode_marker, encode_object,
                                        encode_tombstone)
from edgewatch.poolcache.reflector import CloudReflector, ReflectorConfig
from edgewatch.poolcache.resources import PoolResource
from edgewatch.timefmt import format_micro_time

log = logging.getLogger(__name__)

T = TypeVar("T")
Rpc = Callable[[Awaitable[T]], Awaitable[T]]

__all__ = ["CacheLeaderConfig", "LeaderMetrics", "PoolCacheLeader"]


@dataclass(frozen=True, kw_only=True)
class CacheLeaderConfig:
    """Settings of the leader's informer.

    Attributes:
        sync_renew_s: re-put ``leader-informer-sync`` this often, seconds (default 10 s,
            OpenYurt's Yurt-Coordinator figure; readers call it stale after 30 s without a change).
        tombstone_ttl_s: how long a deletion stays visible in etcd, seconds (default 300 s: a node
            whose coordinator feed is down longer re-lists anyway).
        txn_ops: operations per etcd transaction (default 64, half etcd's default limit of 128).
        reflector: cloud list/watch timings.
    """

    sync_renew_s: float = 10.0
    tombstone_ttl_s: int = 300
    txn_ops: int = 64
    reflector: ReflectorConfig = ReflectorConfig()


class LeaderMetrics:
    """The leader informer's metrics (registered once per registry)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.writes = Counter("edgewatch_poolcache_leader_writes", "Objects the pool leader wrote into the "
                              "coordinator (puts and tombstones)", ["resource", "op"], registry=registry)
        self.synced = Gauge("edgewatch_poolcache_leader_synced", "1 while this leader's informer of the "
                            "resource is synced with the cloud", ["resource"], registry=registry)
        self.cloud_errors = Counter("edgewatch_poolcache_cloud_errors", "Errors listing or watching pool-scope "
                                    "resources on the cloud", ["resource", "reason", "by"], registry=registry)
        self.rejected = Counter("edgewatch_poolcache_rejected", "Pool-scope objects refused as malformed "
                                "(from the cloud or the coordinator)", ["resource", "reason", "by"], registry=registry)
        self.lists = Counter("edgewatch_poolcache_cloud_lists", "Lists of pool-scope resources from the cloud",
                             ["resource", "by"], registry=registry)
        self.batch = Histogram("edgewatch_poolcache_leader_batch_events", "Cloud events the leader wrote to the "
                               "coordinator in one go", ["resource"], buckets=(1, 2, 5, 10, 20, 50, 100, 200),
                               registry=registry)


class _Writer:
    """Writes one resource's feed into etcd.

    The reflector hands events to a queue (``__call__``); :meth:`run` writes them. Changes that
    queued up while a transaction was in flight go out together in the next one (same key: the
    newest wins; in resourceVersion order; then the ``rv`` key), so a leader on a loaded box keeps up
    with a burst of changes instead of falling behind one round trip per event.
    """

    def __init__(self, *, keys: CacheKeys, etcd: aetcd.Client, rpc: Rpc[Any], tombstone_lease: Callable[[], Awaitable[int]],
                 txn_ops: int, metrics: LeaderMetrics, signer: Signer, queue_size: int = 10_000) -> None:
        self.keys = keys
        self.signer = signer
        self.etcd = etcd
        self.rpc = rpc
        self.tombstone_lease = tombstone_lease
        self.txn_ops = txn_ops
        self.metrics = metrics
        self.stored: dict[bytes, str] | None = None  # live object key -> resourceVersion in etcd
        self.rv = ""
        self.initial = asyncio.Event()
        self.queue: asyncio.Queue[FeedEvent] = asyncio.Queue(maxsize=queue_size)

    async def __call__(self, event: FeedEvent) -> None:
        """The reflector's sink: queue the event (waits while the queue is full: back-pressure)."""
        await self.queue.put(event)

    async def run(self) -> None:
        """Write queued events until cancelled; raises etcd errors."""
        pending: FeedEvent | None = None
        while True:
            event = pending if pending is not None else await self.queue.get()
            pending = None
            if isinstance(event, Reset):
                await self._reset(event)
                self.metrics.lists.labels(resource=self.keys.resource.name, by="leader").inc()
                self.initial.set()
                continue
            batch: list[FeedEvent] = [event]
            while len(batch) < 4 * self.txn_ops and not self.queue.empty():
                nxt = self.queue.get_nowait()
                if isinstance(nxt, Reset):
                    pending = nxt  # a list starts afresh: write what came before it first
                    break
                batch.append(nxt)
            await self._changes(batch)

    async def _changes(self, batch: list[FeedEvent]) -> None:
        assert self.stored is not None
        latest: dict[bytes, Change] = {}
        rv = self.rv
        for event in batch:
            if isinstance(event, Change):
                latest[self.keys.key_of(event.obj)] = event
                rv = event.obj["metadata"]["resourceVersion"]
            elif isinstance(event, Bookmark):
                rv = event.resource_version
        if not latest and rv == self.rv:
            return
        tx = self.etcd.transactions
        ordered = sorted(latest.items(), key=lambda kv: resource_version_of(kv[1].obj))
        lease = await self.tombstone_lease() if any(c.type == "DELETED" for c in latest.values()) else None
        ops: list[Any] = []
        puts = tombstones = 0
        for key, change in ordered:
            obj_rv = change.obj["metadata"]["resourceVersion"]
            if change.type == "DELETED":
                ops.append(tx.put(key, encode_tombstone(obj_rv, key=key, signer=self.signer), lease=lease))
                self.stored.pop(key, None)
                tombstones += 1
            else:
                ops.append(tx.put(key, encode_object(change.obj, keys=self.keys, signer=self.signer)))
                self.stored[key] = obj_rv
                puts += 1
        step = self.txn_ops - 1  # room for the rv key in every transaction
        for start in range(0, max(1, len(ops)), step):
            chunk = ops[start:start + step]
            last = ordered[start + len(chunk) - 1][1].obj["metadata"]["resourceVersion"] if chunk else rv
            upto = rv if start + step >= len(ops) else last
            rv_value = encode_marker(upto, key=self.keys.rv, signer=self.signer)
            await self.rpc(self.etcd.transaction(compare=[], success=[*chunk, tx.put(self.keys.rv, rv_value)],
                                                 failure=[]))
        self.rv = rv
        name = self.keys.resource.name
        self.metrics.writes.labels(resource=name, op="put").inc(puts)
        self.metrics.writes.labels(resource=name, op="tombstone").inc(tombstones)
        self.metrics.batch.labels(resource=name).observe(len(batch))

    async def _load(self) -> dict[bytes, str]:
        stored: dict[bytes, str] = {}
        listing = await self.rpc(self.etcd.get_prefix(self.keys.objects))
        for kv in listing:
            try:
                decoded = decode_value(self.keys, kv.key, kv.value, verifier=self.signer)
            except ObjectRejected as exc:
                self.metrics.rejected.labels(resource=self.keys.resource.name, reason=exc.reason, by="leader").inc()
                stored[kv.key] = ""  # rewritten (or tombstoned) by the reconcile below
                continue
            if not isinstance(decoded, Tombstone):
                stored[kv.key] = decoded["metadata"]["resourceVersion"]
        return stored

    async def _reset(self, event: Reset) -> None:
        if self.stored is None:
            self.stored = await self._load()
        stored = self.stored
        ops: list[Any] = []
        seen: set[bytes] = set()
        tx = self.etcd.transactions
        puts = tombstones = 0
        # In resourceVersion order: nodes apply events in that order, so a reconcile's writes (what
        # changed while nobody led) must reach them oldest first or the older ones look stale.
        for obj in sorted(event.objects, key=resource_version_of):
            key = self.keys.key_of(obj)
            seen.add(key)
            rv = obj["metadata"]["resourceVersion"]
            if stored.get(key) != rv:
                ops.append(tx.put(key, encode_object(obj, keys=self.keys, signer=self.signer)))
                stored[key] = rv
                puts += 1
        gone = [key for key in stored if key not in seen]
        if gone:
            lease = await self.tombstone_lease()
            for key in gone:
                ops.append(tx.put(key, encode_tombstone(event.resource_version, key=key, signer=self.signer),
                                  lease=lease))
                del stored[key]
                tombstones += 1
        ops.append(tx.put(self.keys.rv, encode_marker(event.resource_version, key=self.keys.rv, signer=self.signer)))
        if tombstones:  # nodes cannot replay several deletions at one resourceVersion: re-read
            epoch = f"{event.resource_version}:{time.time_ns()}"
            ops.append(tx.put(self.keys.epoch, encode_marker(epoch, key=self.keys.epoch, signer=self.signer)))
        for start in range(0, len(ops), self.txn_ops):
            await self.rpc(self.etcd.transaction(compare=[], success=ops[start:start + self.txn_ops], failure=[]))
        self.rv = event.resource_version
        name = self.keys.resource.name
        self.metrics.writes.labels(resource=name, op="put").inc(puts)
        self.metrics.writes.labels(resource=name, op="tombstone").inc(tombstones)
        log.info("pool cache: %s listed from the cloud and reconciled into the coordinator", name,
                 extra={"resource": name, "objects": len(event.objects), "written": puts, "tombstoned": tombstones,
                        "resource_version": event.resource_version})

class PoolCacheLeader:
    """The pool leader's informer for the pool-scope resources (see the module docstring).

    Args (keyword-only):
        resources: what to cache; empty = the cache is off (the sync key is still written, so
            Ready keeps its meaning: the leader is in charge and synced).
        http: the cloud API's HTTP client (the agent's own credentials; RBAC: list/watch of exactly
            these resources).
        prefix: where this leader writes the cache: its own area of the pool's etcd
            (``poolkeys.PoolKeys.writer``, ``/edgewatch/pools/<pool>/nodes/<node>/``), the only
            one readers follow while it leads and the only one it may write.
        sync_key: its ``leader-informer-sync`` key (``poolkeys.PoolKeys.sync``).
        node: this node (written into the sync key, for people reading etcd; the owner of ``prefix``).
        signer: this node's keyring: every value written is sealed with its key
            (:mod:`edgewatch.core.seal`), which readers check against ``node``'s published keys.
        metrics: where to count.
        config: settings.
    """

    def __init__(self, *, resources: Sequence[PoolResource], http: HttpClient, prefix: str, sync_key: bytes, node: str,
                 signer: Signer, metrics: LeaderMetrics, config: CacheLeaderConfig | None = None) -> None:
        self.resources = tuple(resources)
        self.signer = signer
        self.http = http
        self.prefix = prefix
        self.node = node
        self.metrics = metrics
        self.config = config or CacheLeaderConfig()
        self.sync_key = sync_key

    async def run(self, *, etcd: aetcd.Client, rpc: Rpc[Any], lease: int) -> None:
        """Lead the pool's cache until cancelled (leadership ends). ``lease`` is the leader's etcd
        lease; ``rpc`` bounds one etcd call. Raises etcd errors (the session's to handle)."""
        tombstone: list[tuple[int, float]] = []

        async def tombstone_lease() -> int:
            now = time.monotonic()
            if not tombstone or now - tombstone[0][1] > self.config.tombstone_ttl_s / 5:
                granted = await rpc(etcd.lease(self.config.tombstone_ttl_s))
                tombstone[:] = [(int(granted.id), now)]
            return tombstone[0][0]

        writers: dict[PoolResource, _Writer] = {}
        reflectors: list[CloudReflector] = []
        for resource in self.resources:
            writer = _Writer(keys=CacheKeys(self.prefix, resource, self.node), etcd=etcd, rpc=rpc,
                             tombstone_lease=tombstone_lease, txn_ops=self.config.txn_ops, metrics=self.metrics,
                             signer=self.signer)
            writers[resource] = writer
            name = resource.name
            reflectors.append(CloudReflector(
                resource=resource, http=self.http, sink=writer, config=self.config.reflector, name="leader",
                on_error=lambda reason, n=name: self.metrics.cloud_errors.labels(resource=n, reason=reason,
                                                                                by="leader").inc(),
                on_rejected=lambda reason, n=name: self.metrics.rejected.labels(resource=n, reason=reason,
                                                                               by="leader").inc()))
        try:
            async with asyncio.TaskGroup() as tg:
                for reflector in reflectors:
                    tg.create_task(reflector.run(), name=f"pool-cache-{reflector.resource.name}")
                for writer in writers.values():
                    tg.create_task(writer.run(), name=f"pool-cache-writer-{writer.keys.resource.name}")
                tg.create_task(self._sync_key(etcd=etcd, rpc=rpc, lease=lease, writers=writers, reflectors=reflectors))
        finally:
            for resource in self.resources:
                self.metrics.synced.labels(resource=resource.name).set(0)

    async def _sync_key(self, *, etcd: aetcd.Client, rpc: Rpc[Any], lease: int, writers: dict[PoolResource, _Writer],
                        reflectors: list[CloudReflector]) -> None:
        started = time.monotonic()
        for writer in writers.values():
            await writer.initial.wait()
        log.info("pool cache synced: every pool-scope resource is in the coordinator",
                 extra={"resources": [r.name for r in self.resources], "took_s": round(time.monotonic() - started, 3)})
        while True:
            synced = all(r.synced for r in reflectors)
            for reflector in reflectors:
                self.metrics.synced.labels(resource=reflector.resource.name).set(1 if reflector.synced else 0)
            if synced:
                value = {"leader": self.node, "synced_at": format_micro_time(dt.datetime.now(dt.timezone.utc)),
                         "resources": {r.name: w.rv for r, w in writers.items()}}
                sealed = seal(json.dumps(value).encode(), key=self.sync_key, signer=self.signer)
                await rpc(etcd.put(self.sync_key, sealed, lease=lease))
            else:
                log.warning("not renewing leader-informer-sync: an informer is out of sync with the cloud",
                            extra={"unsynced": [r.resource.name for r in reflectors if not r.synced]})
            await asyncio.sleep(self.config.sync_renew_s)

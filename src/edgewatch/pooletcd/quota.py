"""Per-member write quotas on a pool coordinator's etcd (``QuotaKeeper``): one member cannot fill
the store, or starve the janitor, for everyone.

What it stops
    etcd has one quota for the whole store (``--quota-backend-bytes``) and none per user. A member
    (root on one node, its own certificate and key) may write without limit under its own keys
    (heartbeat, candidacy, sync key, ``nodes/<node>/`` area): large values, many keys, or one key
    rewritten fast, each revision kept until compaction. Past the quota etcd raises its ``NOSPACE``
    alarm and refuses every write of the pool (heartbeats, the election, the pool cache).

How
    The coordinator (root credentials, beside its etcd) follows every change under the pool's
    prefix from one paged listing (:class:`QuotaLedger`, pure) and charges each to the member whose
    key it is (``PoolKeys.writer_of``), at etcd's own estimate of a revision's cost:
    :data:`REVISION_OVERHEAD_BYTES` plus key plus value, deletions included:

    * **its keys** (heartbeat, candidacy, sync key): a token bucket, ``key_burst_bytes`` deep,
      refilled at ``key_bytes_per_s`` (an honest node writes its heartbeat every 10 s and its
      candidacy once an election). Over it: *read only*: its role keeps the pool read alone;
    * **its area** (``nodes/<node>/``, the pool cache it writes while it leads): the bytes of its
      live keys, at most ``area_bytes``. Over it: *no area*: its area's write grant goes and the
      area is deleted (and what lands there before the revocation: every put to the area seen
      while suspended, or after the lift but at a revision from before it, since the watch may
      lag); its heartbeat and candidacy stay. (The bound is twice what a follower's caches hold, so only a cache no follower could
      hold anyway takes an honest leader past it; its cache writes then fail and it stands down.)

    A suspension lasts ``suspend_s``; the access control reconcile
    (``edgewatch.poolcoordinator.members``, kicked, no debounce) applies it and lifts it. A lift
    first reads etcd's current revision, so a put made before the grant came back is told from one
    made after by its revision, however late the watch delivers it (it waits while the
    coordinator cannot reach its etcd). The bucket is not refilled by the lift.

    The area's write *rate* is not bounded here (cluster churn, e.g. pods flapping Ready, makes an
    honest leader's cache churn): the history it piles up is bounded by the coordinator's upkeep
    (``edgewatch.pooletcd.upkeep``), which compacts and defragments etcd when its file grows.

Limits
    Writes made between going over and the revocation (a few etcd calls) still land, and count.
    A member suspended from its area while it leads serves a stale pool cache until the
    suspension ends. Cost: one more watch on the coordinator's own etcd; every change of the pool
    decoded once more in the coordinator pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

import aetcd
import grpc
from aetcd import rpc as etcd_rpc
from aetcd import utils as etcd_utils

from edgewatch.poolkeys import PoolKeys, prefix_end
from edgewatch.pooletcd.acl import Suspensions
from edgewatch.pooletcd.client import EtcdClient, keep_sessions

__all__ = ["REVISION_OVERHEAD_BYTES", "QuotaKeeper", "QuotaLedger", "QuotaPolicy"]

log = logging.getLogger(__name__)

REVISION_OVERHEAD_BYTES: Final = 256
"""What etcd counts for a request beyond its key and value (``storage/quota.go``'s cost estimate):
one revision's index, metadata and page space."""

_PAGE: Final = 128  # keys per range of the listing (a listing never holds the whole pool at once)


@dataclass(frozen=True, kw_only=True)
class QuotaPolicy:
    """Each member's write quota (module docstring).

    Attributes:
        key_bytes_per_s: sustained cost of writes to its heartbeat, candidacy and sync key, bytes
            per second (4 KiB/s: an honest node spends under 100 B/s).
        key_burst_bytes: cost spent at once on those keys (64 KiB: a few elections in a row).
        area_bytes: live bytes in its ``nodes/<node>/`` area (128 MiB: the two pool-scope caches
            a follower holds, 64 MiB of JSON each, ``poolcache.store``).
        suspend_s: how long a suspension lasts, seconds (300 s).
    """

    key_bytes_per_s: float = 4 * 1024
    key_burst_bytes: int = 64 * 1024
    area_bytes: int = 128 * 2**20
    suspend_s: float = 300.0

    def __post_init__(self) -> None:
        if not (self.key_bytes_per_s > 0 and self.key_burst_bytes > 0 and self.area_bytes > 0
                and self.suspend_s > 0):
            raise ValueError(f"every quota must be positive, got {self}")


class QuotaLedger:
    """Cost written and bytes stored per member, and who is suspended (pure: ``now`` is passed in,
    seconds on one monotonic clock).

    Args:
        policy: the quotas.
    """

    def __init__(self, policy: QuotaPolicy) -> None:
        self.policy = policy
        self._area_keys: dict[bytes, tuple[str, int]] = {}  # area key -> (member, bytes)
        self.area: dict[str, int] = {}                        # member -> live bytes in its area
        self._buckets: dict[str, tuple[float, float]] = {}    # member -> (cost left, at)
        self.read_only: dict[str, float] = {}                 # member -> suspended until
        self.no_area: dict[str, float] = {}
        self._purge_through: dict[str, int] = {}              # member -> last revision of its lifted no_area

    def load(self, entries: Iterable[tuple[str, bytes, int]]) -> None:
        """Start over from a listing of the areas' keys as ``(member, key, bytes)`` (nothing is
        charged to the buckets; suspensions and buckets stay)."""
        self._area_keys.clear()
        self.area.clear()
        for member, key, size in entries:
            self._area_keys[key] = (member, size)
            self.area[member] = self.area.get(member, 0) + size

    def _charge(self, member: str, cost: int, now: float) -> bool:
        """Spend ``cost`` from the member's bucket; False if it went below zero."""
        p = self.policy
        left, at = self._buckets.get(member, (float(p.key_burst_bytes), now))
        left = min(float(p.key_burst_bytes), left + max(0.0, now - at) * p.key_bytes_per_s) - cost
        self._buckets[member] = (left, now)
        return left >= 0

    def change(self, member: str, key: bytes, *, area: bool, size: int | None, now: float) -> str | None:
        """Charge a change of ``key`` by ``member``: a put of ``size`` bytes (key plus value), or a
        deletion (``size`` None). ``area``: the key is in the member's area. The suspension it
        starts (``read_only`` or ``no_area``), or None."""
        if area:
            old = self._area_keys.pop(key, None)
            if old is not None:
                self.area[old[0]] = self.area.get(old[0], 0) - old[1]
            if size is None:
                return None
            self._area_keys[key] = (member, size)
            self.area[member] = self.area.get(member, 0) + size
            if self.area[member] > self.policy.area_bytes and self.no_area.get(member, -1.0) <= now:
                self.no_area[member] = now + self.policy.suspend_s
                return "no_area"
            return None
        ok = self._charge(member, REVISION_OVERHEAD_BYTES + (size if size is not None else len(key)), now)
        if not ok and self.read_only.get(member, -1.0) <= now:
            self.read_only[member] = now + self.policy.suspend_s
            return "read_only"
        return None

    def suspensions(self, *, now: float) -> Suspensions:
        """The members suspended at ``now``."""
        return Suspensions(read_only=frozenset(m for m, t in self.read_only.items() if t > now),
                           no_area=frozenset(m for m, t in self.no_area.items() if t > now))

    def due(self, *, now: float) -> bool:
        """True if a suspension is over at ``now`` and not yet lifted."""
        return any(t <= now for table in (self.read_only, self.no_area) for t in table.values())

    def lift(self, *, now: float, revision: int) -> list[str]:
        """End the suspensions that are over at ``now``; those members (sorted). ``revision``:
        etcd's revision read before the lift (before any grant comes back): a put to a lifted
        member's area at or below it was made while it was suspended (:meth:`stale_area_put`).
        Buckets are not refilled: a member keeps paying for what it wrote while suspended."""
        over = set()
        for table in (self.read_only, self.no_area):
            for member in [m for m, t in table.items() if t <= now]:
                del table[member]
                over.add(member)
                if table is self.no_area:
                    self._purge_through[member] = revision
        return sorted(over)

    def stale_area_put(self, member: str, *, revision: int) -> bool:
        """True if a put to ``member``'s area at ``revision`` landed while its area was suspended
        (between the area's deletion and the revocation of its grant): it is to be deleted. Read
        in the watch's order, so by revision, never by the clock: the watch may lag the lift."""
        return member in self.no_area or revision <= self._purge_through.get(member, 0)


class QuotaKeeper:
    """Follows a pool's changes with root credentials and suspends a member over its quota
    (module docstring).

    Args (keyword-only):
        host, port: the etcd client endpoint.
        credentials: makes the root TLS credentials (called per session).
        pool: the pool.
        policy: the quotas (default :class:`QuotaPolicy`).
        on_change: called when the suspensions changed (the access control's ``MembersLoop.kick``);
            must not raise.
        on_action: told each suspension (``read_only``, ``no_area``), ``lifted`` and ``error``;
            must not raise.
        timeout_s: bound of each etcd call, seconds.
        retry_s: pause after a failed session, seconds.
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(self, *, host: str, port: int, credentials: Callable[[], grpc.ChannelCredentials], pool: str,
                 policy: QuotaPolicy | None = None, on_change: Callable[[], None] = lambda: None,
                 on_action: Callable[[str], None] = lambda _a: None, timeout_s: float = 5.0, retry_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.host, self.port, self.pool = host, port, pool
        self.keys = PoolKeys(pool)
        self.ledger = QuotaLedger(policy or QuotaPolicy())
        self._credentials = credentials
        self._on_change, self._on_action = on_change, on_action
        self.timeout_s, self.retry_s = timeout_s, retry_s
        self._clock = clock
        self.synced = asyncio.Event()  # set once the first listing is loaded
        self._client: EtcdClient | None = None  # the session's, while it follows the pool

    def suspended(self) -> Suspensions:
        """The members over their quota now (``MembersLoop``'s ``suspended``)."""
        return self.ledger.suspensions(now=self._clock())

    async def run(self) -> None:
        """Sessions until cancelled; never raises for etcd errors (logged, counted, retried)."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._lift_loop())
            await keep_sessions(host=self.host, port=self.port, timeout_s=self.timeout_s,
                                credentials=self._credentials, session=self._session, on_error=self._failed,
                                pause_s=self.retry_s)

    def _failed(self, exc: Exception) -> None:
        self._on_action("error")
        log.warning("pool write quota: %s; retrying in %.1f s", f"{type(exc).__name__}: {exc}"[:300], self.retry_s,
                    extra={"pool": self.pool})

    async def _call(self, call: Any) -> Any:
        async with asyncio.timeout(self.timeout_s):
            return await call

    def _area_of(self, key: bytes) -> str | None:
        member = self.keys.writer_of(key)
        return member if member is not None and key.startswith(self.keys.writer(member).encode()) else None

    async def _listing(self, client: EtcdClient) -> int:
        """Load the areas' live sizes, a page of keys at a time at one revision, and delete what the
        watch would have deleted (:meth:`QuotaLedger.stale_area_put`: a suspended member's area,
        puts that landed while it was; level-triggered, so a deletion a lost session did not finish
        is done by the next); that revision."""
        prefix = self.keys.prefix.encode()
        end, start, revision = prefix_end(prefix), prefix, 0
        entries: list[tuple[str, bytes, int]] = []
        stale: list[tuple[str, bytes]] = []
        while True:
            request = etcd_rpc.RangeRequest(key=start, range_end=end, limit=_PAGE, revision=revision)
            reply = await self._call(client.kvstub.Range(request, timeout=self.timeout_s))
            revision = revision or int(reply.header.revision)
            for kv in reply.kvs:
                member = self._area_of(kv.key)
                if member is None:
                    continue
                if self.ledger.stale_area_put(member, revision=int(kv.mod_revision)):
                    stale.append((member, bytes(kv.key)))
                else:
                    entries.append((member, bytes(kv.key), len(kv.key) + len(kv.value)))
            if not reply.more or not reply.kvs:
                break
            start = bytes(reply.kvs[-1].key) + b"\0"
        self.ledger.load(entries)
        for _member, key in stale:
            await self._call(client.delete(key))
        if stale:
            log.info("pool write quota: deleted %d key(s) left in suspended areas", len(stale),
                     extra={"pool": self.pool, "members": sorted({m[:80] for m, _ in stale})})
        return revision

    async def _session(self, client: EtcdClient) -> None:
        await self._call(client.connect())
        revision = await self._listing(client)
        self.synced.set()
        prefix = self.keys.prefix.encode()
        watch = await self._call(client.watch(prefix, range_end=etcd_utils.prefix_range_end(prefix),
                                              start_revision=revision + 1))
        self._client = client
        try:
            async for event in watch:
                key = bytes(event.kv.key)
                member = self.keys.writer_of(key)
                if member is None:
                    continue
                in_area = self._area_of(key) is not None
                size = None if event.kind == "DELETE" else len(key) + len(event.kv.value)
                if size is not None and in_area and self.ledger.stale_area_put(
                        member, revision=int(event.kv.mod_revision)):
                    # landed after the area was deleted, before its write grant was revoked: not
                    # charged (it cannot start another suspension), deleted
                    await self._call(client.delete(key))
                    continue
                suspension = self.ledger.change(member, key, area=in_area, size=size, now=self._clock())
                if suspension is not None:
                    await self._suspend(client, member, suspension)
        finally:
            self._client = None
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1.0):
                    await watch.cancel()
        raise TimeoutError("the pool's watch ended")

    async def _suspend(self, client: EtcdClient, member: str, suspension: str) -> None:
        p = self.ledger.policy
        self._on_action(suspension)
        self._on_change()
        log.warning("pool write quota: %s %s for %g s: %s", member[:80],
                    "may only read" if suspension == "read_only" else "may not write its area", p.suspend_s,
                    f"over {p.area_bytes} bytes in its area" if suspension == "no_area"
                    else f"writes to its keys cost over {p.key_burst_bytes} bytes at once or "
                         f"{p.key_bytes_per_s:g} bytes/s",
                    extra={"pool": self.pool, "member": member[:80], "suspension": suspension,
                           "area_bytes": self.ledger.area.get(member, 0)})
        if suspension == "no_area":  # its area goes (the pool cache is rewritten once it may again)
            area = self.keys.writer(member).encode()
            with contextlib.suppress(aetcd.ClientError):
                await self._call(client.delete_range(area, prefix_end(area)))

    async def _revision(self, client: EtcdClient) -> int:
        """etcd's current revision (a one-key read's header)."""
        request = etcd_rpc.RangeRequest(key=self.keys.prefix.encode(), limit=1, keys_only=True)
        reply = await self._call(client.kvstub.Range(request, timeout=self.timeout_s))
        return int(reply.header.revision)

    async def _lift_loop(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            client = self._client
            if client is None or not self.ledger.due(now=self._clock()):
                continue  # no session: lifted once the pool's etcd answers (a lift needs its revision)
            try:
                revision = await self._revision(client)
            except (grpc.RpcError, aetcd.ClientError, TimeoutError, OSError) as exc:
                self._failed(exc)
                continue
            lifted = self.ledger.lift(now=self._clock(), revision=revision)
            if lifted:
                for member in lifted:
                    self._on_action("lifted")
                    log.info("pool write quota: %s's suspension is over", member[:80],
                             extra={"pool": self.pool, "member": member[:80]})
                self._on_change()

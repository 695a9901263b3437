"""Per-member write quotas on a pool coordinator's etcd (``QuotaKeeper``): one member cannot fill
the store for everyone.

What it stops
    etcd has one quota for the whole store (``--quota-backend-bytes``) and none per user. A member
    (root on one node, its own certificate and key) may write without limit under its own keys
    (heartbeat, candidacy, sync key, ``nodes/<node>/`` area): large values, many keys, or one key
    rewritten fast, each revision kept until compaction. Past the quota etcd raises its ``NOSPACE``
    alarm and refuses every write of the pool (heartbeats, the election, the pool cache) until an
    operator compacts, defragments and disarms it.

How
    The coordinator (root credentials, beside its etcd) follows every write under the pool's
    prefix from one listing (:class:`QuotaLedger`, pure) and charges each to the member whose keys
    it is (``PoolKeys.writer_of``), key plus value bytes:

    * **rate**: a token bucket per member, ``burst_bytes`` deep, refilled at
      ``write_bytes_per_s`` (a new leader writes its whole pool cache at once; heartbeats and
      cache changes after that are a trickle);
    * **stored**: the bytes of the member's live keys, at most ``stored_bytes``.

    A member over either is *suspended* for ``suspend_s``: the coordinator's access control
    reconcile (``edgewatch.poolcoordinator.members``, at once, no debounce) gives its etcd role the
    pool read alone (``node_grants(writes=False)``) until then, and, when over ``stored_bytes``,
    its ``nodes/<node>/`` area is deleted (and what lands there before the revocation). It reads as before; honest members' writes never wait for
    it. After the suspension its write grants come back and its bucket is full again.

Bounds (defaults, :class:`QuotaPolicy`)
    One member holds at most ``stored_bytes`` live (160 MiB: the two pool-scope caches of a
    follower hold at most 64 MiB of JSON each, plus seals) and adds at most ``burst_bytes`` plus
    ``write_bytes_per_s`` times etcd's compaction retention (5 min) of history before it is
    suspended: about 400 MiB, against a 2 GiB quota (``etcdprocess.QUOTA_BACKEND_BYTES``); five
    compromised members of one pool are needed to fill it.

Limits
    The writes a member makes between going over and the reconcile revoking its grants (a few
    etcd calls, milliseconds to a second on a busy host) still land (and count). A suspended leader's pool cache goes stale (followers see its
    sync key unchanged); it leads on. Cost: one more watch on the coordinator's own etcd, every
    write of the pool decoded once more in the coordinator pod (heartbeats: one small value per
    member per interval).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import aetcd
import grpc
from aetcd import utils as etcd_utils

from edgewatch.poolkeys import PoolKeys, prefix_end
from edgewatch.pooletcd.client import EtcdClient

__all__ = ["QuotaKeeper", "QuotaLedger", "QuotaPolicy"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class QuotaPolicy:
    """Each member's write quota (module docstring).

    Attributes:
        write_bytes_per_s: sustained write rate, bytes per second (256 KiB/s: a heartbeat is under
            1 KiB per interval; a busy pool's cache changes a few KiB a second).
        burst_bytes: bytes written at once (160 MiB: a new leader's whole pool cache).
        stored_bytes: live bytes under the member's keys (160 MiB, the same bound).
        suspend_s: how long a member over its quota may only read, seconds (300 s).
    """

    write_bytes_per_s: float = 256 * 1024
    burst_bytes: int = 160 * 2**20
    stored_bytes: int = 160 * 2**20
    suspend_s: float = 300.0

    def __post_init__(self) -> None:
        if not (self.write_bytes_per_s > 0 and self.burst_bytes > 0 and self.stored_bytes > 0
                and self.suspend_s > 0):
            raise ValueError(f"every quota must be positive, got {self}")


class QuotaLedger:
    """Bytes written and stored per member, and who is suspended (pure: ``now`` is passed in,
    seconds on one monotonic clock).

    Args:
        policy: the quotas.
    """

    def __init__(self, policy: QuotaPolicy) -> None:
        self.policy = policy
        self._keys: dict[bytes, tuple[str, int]] = {}     # key -> (member, bytes)
        self.stored: dict[str, int] = {}                    # member -> live bytes
        self._buckets: dict[str, tuple[float, float]] = {}  # member -> (bytes left, at)
        self.suspended_until: dict[str, float] = {}

    def load(self, entries: Iterable[tuple[str, bytes, int]]) -> None:
        """Start over from a listing of ``(member, key, bytes)``: the live sizes (nothing is
        charged to the rate; suspensions and buckets stay)."""
        self._keys.clear()
        self.stored.clear()
        for member, key, size in entries:
            self._keys[key] = (member, size)
            self.stored[member] = self.stored.get(member, 0) + size

    def put(self, member: str, key: bytes, size: int, *, now: float) -> str | None:
        """Charge a write of ``size`` bytes to ``key`` by ``member``; the reason (``rate`` or
        ``stored``) if this write takes a member not suspended yet over its quota (it is
        suspended from ``now``), else None."""
        old = self._keys.get(key)
        if old is not None:
            self.stored[old[0]] = self.stored.get(old[0], 0) - old[1]
        self._keys[key] = (member, size)
        self.stored[member] = self.stored.get(member, 0) + size
        p = self.policy
        left, at = self._buckets.get(member, (float(p.burst_bytes), now))
        left = min(float(p.burst_bytes), left + max(0.0, now - at) * p.write_bytes_per_s) - size
        self._buckets[member] = (left, now)
        if self.suspended_until.get(member, -1.0) > now:
            return None
        reason = "stored" if self.stored[member] > p.stored_bytes else "rate" if left < 0 else None
        if reason is not None:
            self.suspended_until[member] = now + p.suspend_s
        return reason

    def delete(self, key: bytes) -> None:
        """A key is gone."""
        old = self._keys.pop(key, None)
        if old is not None:
            self.stored[old[0]] = self.stored.get(old[0], 0) - old[1]

    def suspended(self, *, now: float) -> frozenset[str]:
        """The members suspended at ``now``."""
        return frozenset(m for m, until in self.suspended_until.items() if until > now)

    def lift(self, *, now: float) -> list[str]:
        """End the suspensions that are over at ``now``; those members (sorted), each with a full
        bucket again."""
        over = sorted(m for m, until in self.suspended_until.items() if until <= now)
        for member in over:
            del self.suspended_until[member]
            self._buckets.pop(member, None)
        return over


class QuotaKeeper:
    """Follows a pool's writes with root credentials and suspends a member over its quota (module
    docstring).

    Args (keyword-only):
        host, port: the etcd client endpoint.
        credentials: makes the root TLS credentials (called per session).
        pool: the pool.
        policy: the quotas (default :class:`QuotaPolicy`).
        on_change: called when the set of suspended members changed (the access control's
            ``MembersLoop.kick``); must not raise.
        on_action: told each suspension's reason (``rate``, ``stored``), ``lifted`` and ``error``;
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
        self._purging: set[str] = set()  # suspended for their stored bytes: their area is kept empty

    def suspended(self) -> frozenset[str]:
        """The members that may only read now (``MembersLoop``'s ``suspended``)."""
        return self.ledger.suspended(now=self._clock())

    async def run(self) -> None:
        """Sessions until cancelled; never raises for etcd errors (logged, counted, retried)."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._lift_loop())
            while True:
                client = EtcdClient(host=self.host, port=self.port, timeout=self.timeout_s,
                                    credentials=self._credentials())
                try:
                    await self._session(client)
                except Exception as exc:  # noqa: BLE001 - an etcd failure or a bug: retried, never fatal
                    self._on_action("error")
                    log.warning("pool write quota: %s; retrying in %.1f s", f"{type(exc).__name__}: {exc}"[:300],
                                self.retry_s, extra={"pool": self.pool})
                finally:
                    with contextlib.suppress(Exception):
                        async with asyncio.timeout(self.timeout_s):
                            await client.close()
                await asyncio.sleep(self.retry_s)

    async def _call(self, call: object) -> object:
        async with asyncio.timeout(self.timeout_s):
            return await call  # type: ignore[misc]

    async def _session(self, client: EtcdClient) -> None:
        await self._call(client.connect())
        prefix = self.keys.prefix.encode()
        listing = await self._call(client.get_prefix(prefix))
        entries = []
        for kv in listing:  # type: ignore[attr-defined]
            member = self.keys.writer_of(kv.key)
            if member is not None:
                entries.append((member, bytes(kv.key), len(kv.key) + len(kv.value)))
        self.ledger.load(entries)
        self.synced.set()
        watch = await self._call(client.watch(prefix, range_end=etcd_utils.prefix_range_end(prefix),
                                              start_revision=int(listing.header.revision) + 1))  # type: ignore[attr-defined]
        try:
            async for event in watch:  # type: ignore[attr-defined]
                key = bytes(event.kv.key)
                if event.kind == "DELETE":
                    self.ledger.delete(key)
                    continue
                member = self.keys.writer_of(key)
                if member is None:
                    continue
                reason = self.ledger.put(member, key, len(key) + len(event.kv.value), now=self._clock())
                if reason is not None:
                    await self._suspend(client, member, reason)
                elif member in self._purging and key.startswith(self.keys.writer(member).encode()):
                    # landed after the area was deleted, before its write grants were revoked
                    await self._call(client.delete(key))
        finally:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1.0):
                    await watch.cancel()  # type: ignore[attr-defined]
        raise TimeoutError("the pool's watch ended")

    async def _suspend(self, client: EtcdClient, member: str, reason: str) -> None:
        p = self.ledger.policy
        self._on_action(reason)
        self._on_change()
        log.warning("pool write quota: %s may only read for %g s: %s", member[:80], p.suspend_s,
                    f"over {p.stored_bytes} stored bytes" if reason == "stored"
                    else f"over {p.burst_bytes} bytes at once or {p.write_bytes_per_s:g} bytes/s",
                    extra={"pool": self.pool, "member": member[:80], "reason": reason,
                           "stored_bytes": self.ledger.stored.get(member, 0)})
        if reason == "stored":  # its area goes (the pool cache it wrote is rewritten once it leads again)
            self._purging.add(member)
            area = self.keys.writer(member).encode()
            with contextlib.suppress(aetcd.ClientError):
                await self._call(client.delete_range(area, prefix_end(area)))

    async def _lift_loop(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            lifted = self.ledger.lift(now=self._clock())
            if lifted:
                for member in lifted:
                    self._purging.discard(member)
                    self._on_action("lifted")
                    log.info("pool write quota: %s may write again", member[:80],
                             extra={"pool": self.pool, "member": member[:80]})
                self._on_change()

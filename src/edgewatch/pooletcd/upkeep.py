"""The pool coordinator keeps its etcd within its quota and its leases honest (``StoreUpkeep``).

What it stops
    * **A store filling up.** The write quotas (``edgewatch.pooletcd.quota``) bound what each
      member keeps, not how fast a leader's pool cache churns, and etcd's file never shrinks by
      itself: freed pages are reused, not returned. Past ``--quota-backend-bytes`` etcd raises its
      ``NOSPACE`` alarm and refuses every write of the pool until someone compacts, defragments
      and disarms it. Here the coordinator does it itself.
    * **Leases without keys.** etcd lets any client with a certificate of the pool's CA grant
      leases (no key permission is checked), and a lease with no key is invisible to the quotas.
      A member granting them in a loop grows etcd's memory and its file. Every honest lease
      carries a key at once (a heartbeat, a candidacy, the pool cache's tombstones) and lives at
      most 300 s.

How (every ``interval_s``, with root credentials, beside etcd)
    1. ``Status``: when the file is over ``high_water`` of the quota, or a ``NOSPACE`` alarm is
       raised (:func:`needs_compaction`), compact to the current revision (watchers then start
       over from a listing), defragment (etcd stops serving for the moment it takes: about a
       second per 100 MiB), disarm ``NOSPACE``.
    2. Leases (every ``lease_every`` rounds): list them (``LeaseLeases``), look at up to
       ``max_lease_checks`` (``LeaseTimeToLive`` with keys) and revoke those granted for more
       than :data:`MAX_MEMBER_LEASE_TTL_S` or keyless at every look for :data:`KEYLESS_GRACE_S`
       (:class:`LeaseJudge`, pure).

Limits
    A member granting leases faster than one look each per round outruns the sweep (each look is
    one call); the cure is a proxy in front of etcd that only passes the few calls agents make
    (docs/security.md). Defragmenting briefly stops etcd: under a churn attack every write of the
    pool waits for it once per round at most.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Final

import grpc
from aetcd import rpc as etcd_rpc

from edgewatch.pooletcd.client import EtcdClient, keep_sessions

__all__ = ["KEYLESS_GRACE_S", "MAX_MEMBER_LEASE_TTL_S", "LeaseJudge", "StoreUpkeep", "needs_compaction"]

log = logging.getLogger(__name__)

MAX_MEMBER_LEASE_TTL_S: Final = 600
"""The longest lease a member may hold, seconds: twice the pool cache's 300 s tombstones, the
longest honest one (heartbeats 40 s, candidacies at most 15 s)."""

KEYLESS_GRACE_S: Final = 120.0
"""How long a lease may stay without a key before it is revoked, seconds (twice the 60 s for which
the pool cache's leader reuses a tombstone lease)."""

_NOSPACE: Final = 1  # etcdserverpb.AlarmType.NOSPACE


def needs_compaction(*, db_size: int, quota_bytes: int, alarms: Iterable[int], high_water: float) -> bool:
    """Whether the store must be compacted and defragmented now: its file over ``high_water``
    (a fraction) of ``quota_bytes``, or a ``NOSPACE`` alarm among ``alarms`` (etcd alarm types)."""
    return db_size > high_water * quota_bytes or _NOSPACE in set(alarms)


class LeaseJudge:
    """Which leases to revoke (pure): granted for more than :data:`MAX_MEMBER_LEASE_TTL_S`, or
    keyless at every look for at least ``grace_s`` (default :data:`KEYLESS_GRACE_S`; an honest
    lease gets its key right after its grant; the pool cache's leader reuses a tombstone lease for
    at most 60 s after its grant, whose keys may all be gone meanwhile)."""

    def __init__(self, *, grace_s: float = KEYLESS_GRACE_S) -> None:
        self.grace_s = grace_s
        self._keyless_since: dict[int, float] = {}

    def judge(self, looks: Iterable[tuple[int, int, bool]], *, now: float) -> dict[int, str]:
        """``looks``: ``(lease, granted TTL seconds, has keys)`` of this sweep, at ``now``
        (monotonic seconds); the leases to revoke with why (``long_lease``, ``keyless``). Leases
        not looked at this sweep are forgotten."""
        verdicts: dict[int, str] = {}
        keyless: dict[int, float] = {}
        for lease, granted_s, has_keys in looks:
            if granted_s > MAX_MEMBER_LEASE_TTL_S:
                verdicts[lease] = "long_lease"
            elif not has_keys:
                since = self._keyless_since.get(lease, now)
                if now - since >= self.grace_s:
                    verdicts[lease] = "keyless"
                else:
                    keyless[lease] = since
        self._keyless_since = keyless
        return verdicts


class StoreUpkeep:
    """Compacts, defragments, disarms and sweeps leases on a pool's etcd (module docstring).

    Args (keyword-only):
        host, port: the etcd client endpoint.
        credentials: makes the root TLS credentials (called per round).
        pool: the pool (for logs).
        quota_bytes: etcd's ``--quota-backend-bytes``.
        high_water: the fraction of the quota past which the store is compacted (default 0.5).
        interval_s: time between two rounds, seconds (default 15 s).
        lease_every: rounds between two lease sweeps (default 2).
        max_lease_checks: leases looked at per sweep (default 2,000).
        timeout_s: bound of each etcd call, seconds (defragmenting: ten times it).
        on_action: told ``compacted``, ``defragmented``, ``disarmed``, ``long_lease``,
            ``keyless``, ``error``; must not raise.
        keyless_grace_s: how long a lease may stay keyless, seconds (:data:`KEYLESS_GRACE_S`).
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(self, *, host: str, port: int, credentials: Callable[[], grpc.ChannelCredentials], pool: str,
                 quota_bytes: int, high_water: float = 0.5, interval_s: float = 15.0, lease_every: int = 2,
                 max_lease_checks: int = 2000, timeout_s: float = 5.0,
                 on_action: Callable[[str], None] = lambda _a: None, keyless_grace_s: float = KEYLESS_GRACE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not 0 < high_water < 1:
            raise ValueError(f"high_water must be in (0, 1), got {high_water}")
        self.host, self.port, self.pool = host, port, pool
        self.quota_bytes, self.high_water = quota_bytes, high_water
        self.interval_s, self.lease_every, self.max_lease_checks = interval_s, lease_every, max_lease_checks
        self.timeout_s = timeout_s
        self._credentials = credentials
        self._on_action = on_action
        self.judge = LeaseJudge(grace_s=keyless_grace_s)
        self._clock = clock
        self.rounds = 0

    async def run(self) -> None:
        """Rounds until cancelled; never raises for etcd errors (logged, counted)."""
        await asyncio.sleep(self.interval_s)
        await keep_sessions(host=self.host, port=self.port, timeout_s=self.timeout_s, credentials=self._credentials,
                            session=self.round, on_error=self._failed, pause_s=self.interval_s)

    def _failed(self, exc: Exception) -> None:
        self._on_action("error")
        log.warning("pool store upkeep: %s", f"{type(exc).__name__}: {exc}"[:300], extra={"pool": self.pool})

    async def _call(self, call: Any, *, timeout_s: float | None = None) -> Any:
        async with asyncio.timeout(timeout_s or self.timeout_s):
            return await call

    async def round(self, client: EtcdClient) -> None:
        """One round (module docstring)."""
        await self._call(client.connect())
        self.rounds += 1
        status = await self._call(client.maintenancestub.Status(etcd_rpc.StatusRequest(), timeout=self.timeout_s))
        alarms = await self._call(client.maintenancestub.Alarm(
            etcd_rpc.AlarmRequest(action=etcd_rpc.AlarmRequest.GET), timeout=self.timeout_s))
        raised = [int(a.alarm) for a in alarms.alarms]
        if needs_compaction(db_size=int(status.dbSize), quota_bytes=self.quota_bytes, alarms=raised,
                            high_water=self.high_water):
            await self._compact(client, int(status.header.revision), int(status.dbSize), raised)
        if self.rounds % self.lease_every == 0:
            await self._sweep_leases(client)

    async def _compact(self, client: EtcdClient, revision: int, db_size: int, alarms: list[int]) -> None:
        log.warning("pool store upkeep: etcd's file is %d bytes of a %d-byte quota%s: compacting to revision %d "
                    "and defragmenting", db_size, self.quota_bytes, " (NOSPACE raised)" if _NOSPACE in alarms else "",
                    revision, extra={"pool": self.pool, "db_size": db_size})
        try:
            await self._call(client.kvstub.Compact(etcd_rpc.CompactionRequest(revision=revision, physical=True),
                                                   timeout=self.timeout_s))
            self._on_action("compacted")
        except grpc.RpcError:  # already compacted to it: only the defragmenting is left to do
            pass
        await self._call(client.maintenancestub.Defragment(etcd_rpc.DefragmentRequest(),
                                                           timeout=10 * self.timeout_s),
                         timeout_s=10 * self.timeout_s)
        self._on_action("defragmented")
        if _NOSPACE in alarms:
            await self._call(client.maintenancestub.Alarm(etcd_rpc.AlarmRequest(
                action=etcd_rpc.AlarmRequest.DEACTIVATE, memberID=0, alarm=_NOSPACE), timeout=self.timeout_s))
            self._on_action("disarmed")

    async def _sweep_leases(self, client: EtcdClient) -> None:
        listed = await self._call(client.leasestub.LeaseLeases(etcd_rpc.LeaseLeasesRequest(), timeout=self.timeout_s))
        looks: list[tuple[int, int, bool]] = []
        for lease in list(listed.leases)[: self.max_lease_checks]:
            reply = await self._call(client.leasestub.LeaseTimeToLive(
                etcd_rpc.LeaseTimeToLiveRequest(ID=int(lease.ID), keys=True), timeout=self.timeout_s))
            if int(reply.TTL) > 0:
                looks.append((int(lease.ID), int(reply.grantedTTL), bool(reply.keys)))
        for lease, reason in sorted(self.judge.judge(looks, now=self._clock()).items()):
            with contextlib.suppress(grpc.RpcError):  # gone already
                await self._call(client.leasestub.LeaseRevoke(etcd_rpc.LeaseRevokeRequest(ID=lease),
                                                              timeout=self.timeout_s))
            self._on_action(reason)
        if len(listed.leases) > self.max_lease_checks:
            log.warning("pool store upkeep: %d leases, %d looked at this round", len(listed.leases),
                        self.max_lease_checks, extra={"pool": self.pool})

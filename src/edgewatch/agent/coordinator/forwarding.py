"""Forwarding delegated heartbeats to the cloud (``Forwarding``, a part of ``PoolCoordinator``):
the leader lists and watches ``heartbeats/``, times each put as it observes it (never by the value),
and renews a delegated node's cloud Lease through a bounded, deduplicated queue with per-node
backoff and a re-forward at least every ``forward_interval_s`` (package docstring, "Forwarding")."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from typing import Any

from aetcd import utils as etcd_utils

from edgewatch.agent.coordinator.backoff import next_backoff
from edgewatch.agent.coordinator.errors import CoordinatorError
from edgewatch.agent.coordinator.schema import Heartbeat, HeartbeatRejected, parse_heartbeat
from edgewatch.agent.coordinator.state import CoordinatorState
from edgewatch.waits import bounded
from edgewatch.core.types import is_dns1123_subdomain
from edgewatch.kube.leases import RenewOutcome, renew_on_behalf
from edgewatch.pooletcd.client import EtcdClient

__all__ = ["Forwarding"]

log = logging.getLogger(__name__)


class Forwarding(CoordinatorState):
    """The leader's forwarding of delegated heartbeats (run by ``Election`` while leading)."""

    async def _forward(self, client: EtcdClient) -> None:
        """List the heartbeats, forward the delegated ones at once, then follow the watch."""
        self._queue = asyncio.Queue(maxsize=self.config.queue_size)
        self._queued.clear()
        self._heartbeats.clear()
        self._put_at.clear()
        self._due.clear()
        self._backoff.clear()
        listing = await self._rpc(client.get_prefix(self.heartbeat_prefix))
        for kv in listing:
            age = await self._listed_age(client, kv)
            self._ingest(kv.key, kv.value, deleted=False,
                         put_at=None if age is None else asyncio.get_running_loop().time() - age)
        watch = await self._rpc(client.watch(self.heartbeat_prefix,
                                             range_end=etcd_utils.prefix_range_end(self.heartbeat_prefix),
                                             start_revision=listing.header.revision + 1))
        try:
            async with asyncio.TaskGroup() as tg:
                for _ in range(self.config.forward_workers):
                    tg.create_task(self._forward_worker())
                tg.create_task(self._forward_ticker())
                async for event in watch:
                    deleted = event.kind == "DELETE"
                    self._ingest(event.kv.key, event.kv.value, deleted=deleted,
                                 put_at=asyncio.get_running_loop().time())
                raise CoordinatorError("unreachable", f"coordinator {self.endpoint.url}: heartbeat watch ended")
        finally:
            with contextlib.suppress(Exception):
                await bounded(watch.cancel(), 1.0)

    async def _listed_age(self, client: EtcdClient, kv: Any) -> float | None:
        """Seconds since a listed heartbeat was put, measured by etcd: the time since its lease was
        last refreshed (``grantedTTL - TTL``; the agent refreshes it right before each put; etcd
        reports whole seconds, so this errs up to 1 s on the old side). None when it cannot be told
        (no lease, lease gone, or not a delegated heartbeat: only those are forwarded) — such a
        heartbeat waits for its next put (at most ``heartbeat_interval_s``)."""
        lease = getattr(kv, "lease", 0)
        if not lease:
            return None
        try:
            hb = parse_heartbeat(kv.key[len(self.heartbeat_prefix):].decode(errors="replace"), kv.value,
                                 key=kv.key, verifier=self.signer, max_bytes=self.config.max_value_bytes)
        except HeartbeatRejected:
            return None  # _ingest reports it
        if not hb.delegate:
            return None
        info = await self._rpc(client.get_lease_info(lease, keys=False))
        ttl, granted = int(getattr(info, "TTL", -1)), int(getattr(info, "grantedTTL", 0))
        if ttl <= 0 or granted <= 0:
            return None
        return float(max(0, granted - ttl) + 1)

    def _ingest(self, key: bytes, value: bytes, *, deleted: bool, put_at: float | None = None) -> None:
        """Take in one heartbeat (listing or watch event). ``put_at``: loop time it was put, as
        measured here (None: unknown, then it is not forwarded until its next put)."""
        node = key[len(self.heartbeat_prefix):].decode(errors="replace")
        if deleted:
            for table in (self._heartbeats, self._put_at, self._due, self._backoff, self._forwarded):
                table.pop(node, None)  # type: ignore[attr-defined]
        else:
            try:
                if not is_dns1123_subdomain(node):
                    raise HeartbeatRejected("key", f"{node[:80]!r} is not a node name")
                hb = parse_heartbeat(node, value, key=key, verifier=self.signer,
                                     max_bytes=self.config.max_value_bytes)
            except HeartbeatRejected as exc:
                self.metrics.rejected.labels(reason=exc.reason).inc()
                log.warning("rejected heartbeat from the coordinator: %s", exc,
                            extra={"pool": self.pool, "node": self.node, "peer": node[:80], "reason": exc.reason})
                self._heartbeats.pop(node, None)  # never keep forwarding an older, valid one
                self._put_at.pop(node, None)
                return
            self._heartbeats[node] = hb
            if put_at is None:
                self._put_at.pop(node, None)
            else:
                age_s = max(0.0, asyncio.get_running_loop().time() - put_at)
                self._put_at[node] = self._wall() - dt.timedelta(seconds=age_s)
            if not hb.delegate:
                self._forwarded.pop(node, None)
            elif put_at is not None:  # a new put: a new life sign to forward
                if asyncio.get_running_loop().time() >= self._due.get(node, 0.0) or node not in self._backoff:
                    self._enqueue(node)
        self.metrics.delegated.set(sum(1 for h in self._heartbeats.values() if h.delegate))

    def _enqueue(self, node: str) -> None:
        assert self._queue is not None
        if node in self._queued:
            return  # deduplicated: the worker reads the newest heartbeat when it gets to it
        try:
            self._queue.put_nowait(node)
            self._queued.add(node)
        except asyncio.QueueFull:
            log.warning("forward queue full; %s waits for the next tick", node, extra={"pool": self.pool})

    async def _forward_ticker(self) -> None:
        """Re-forward every delegated node when due (interval, or backoff after a failure)."""
        tick = min(1.0, self.config.forward_interval_s / 2)
        while True:
            await asyncio.sleep(tick)
            now = asyncio.get_running_loop().time()
            for node, hb in list(self._heartbeats.items()):
                if hb.delegate and node in self._put_at and now >= self._due.get(node, 0.0):
                    self._enqueue(node)

    async def _forward_worker(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            node = await self._queue.get()
            self._queued.discard(node)
            hb = self._heartbeats.get(node)
            if hb is None or not hb.delegate or node == self.node or node not in self._put_at:
                continue
            outcome = await self._forward_one(node, hb)
            self.metrics.forwards.labels(outcome=outcome).inc()
            if node not in self._heartbeats:
                continue  # its heartbeat went away meanwhile: nothing to schedule
            now = loop.time()
            if outcome == RenewOutcome.RENEWED.value:
                self._forwarded[node] = now
            else:
                self._forwarded.pop(node, None)
            if outcome in ("skipped_unhealthy", "verdict_error", "no_life_sign"):
                # A local check, cheap to repeat: look again soon, without growing a backoff.
                self._due[node] = now + self.config.forward_backoff_initial_s
            elif outcome in (RenewOutcome.RENEWED.value, RenewOutcome.NODE_RENEWED_ITSELF.value,
                             RenewOutcome.NO_LEASE.value):
                self._backoff.pop(node, None)
                self._due[node] = now + self.config.forward_interval_s
            else:
                delay = next_backoff(self._backoff.get(node, 0.0), initial=self.config.forward_backoff_initial_s,
                                     cap=self.config.forward_backoff_max_s)
                self._backoff[node] = delay
                self._due[node] = now + delay

    async def _forward_one(self, node: str, hb: Heartbeat) -> str:
        extra = {"pool": self.pool, "node": self.node, "peer": node}
        try:
            verdict = self._verdict_of(node)
        except Exception:  # noqa: BLE001 - no verdict, no vouching
            log.exception("verdict_of(%s) failed; not forwarding", node, extra=extra)
            return "verdict_error"
        if verdict == "unhealthy":
            first = node not in self._skipped
            self._skipped.add(node)
            log.log(logging.INFO if first else logging.DEBUG, "not forwarding for %s: peers judge it unhealthy",
                    node, extra=extra)
            return "skipped_unhealthy"
        self._skipped.discard(node)
        alive_at = self._put_at.get(node)  # the leader's clock minus an age it measured
        if alive_at is None:
            return "no_life_sign"
        try:
            async with asyncio.timeout(self.config.api_timeout_s):
                result = await renew_on_behalf(client=self.kube, node=node, delegate=self.node, via="coordinator",
                                               alive_at=alive_at)
        except TimeoutError:
            log.warning("forward for %s timed out", node, extra=extra)
            return RenewOutcome.FAILED.value
        if result.outcome in (RenewOutcome.FAILED, RenewOutcome.CONFLICT):
            log.warning("forward for %s: %s %s", node, result.outcome.value, result.detail,
                        extra={**extra, "outcome": result.outcome.value})
        else:
            log.debug("forward for %s: %s", node, result.outcome.value, extra={**extra, "outcome": result.outcome.value})
        return result.outcome.value

"""The leader key as observed (``LeaderKeyWatch``, a part of ``PoolCoordinator``): ``leader`` and
``leader-informer-sync`` (one prefix) from a snapshot, then the watch; a health probe that re-reads
them (proves the coordinator answers, repairs a missed event) and deletes a leader key that would
block the election (malformed, lease-less, or left by this node's previous incarnation)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from aetcd import utils as etcd_utils

from edgewatch.agent.coordinator.errors import CoordinatorError
from edgewatch.agent.coordinator.etcd import _EtcdClient
from edgewatch.agent.coordinator.state import CoordinatorState, _LeaderKey
from edgewatch.waits import bounded
from edgewatch.core.types import is_dns1123_subdomain

__all__ = ["LeaderKeyWatch"]

log = logging.getLogger(__name__)


class LeaderKeyWatch(CoordinatorState):
    """Who leads and whether the pool data is synced, as seen in etcd; wakes the election and the
    step-down watch on every change."""

    def _apply_snapshot(self, snapshot: Any) -> None:
        revision = snapshot.header.revision
        if revision < self._state_rev:
            return  # older than what the watch already applied
        leader = sync = None
        for kv in snapshot:
            if kv.key == self.leader_key:
                leader = kv
            elif kv.key == self.sync_key:
                sync = kv
        self._leader_kv = None if leader is None else _LeaderKey(leader.value, leader.lease, leader.create_revision,
                                                                 leader.mod_revision)
        self._note_sync(sync.mod_revision if sync is not None else 0)
        self._state_rev = revision
        self._leader_state_changed()

    def _apply_event(self, event: Any) -> None:
        kv = event.kv
        if kv.mod_revision <= self._state_rev:
            return
        deleted = event.kind == "DELETE"
        if kv.key == self.leader_key:
            self._leader_kv = None if deleted else _LeaderKey(kv.value, kv.lease, kv.create_revision, kv.mod_revision)
        elif kv.key == self.sync_key:
            self._note_sync(0 if deleted else kv.mod_revision)
        else:
            return
        self._state_rev = kv.mod_revision
        self._leader_state_changed()

    def _note_sync(self, mod_revision: int) -> None:
        """The sync key is at ``mod_revision`` (0: absent); note when we saw it change."""
        self._sync_present = mod_revision != 0
        if mod_revision and mod_revision != self._sync_rev:
            self._sync_seen_at = time.monotonic()
        self._sync_rev = mod_revision

    def _leader_state_changed(self) -> None:
        kv = self._leader_kv
        if kv is not None and kv.create_revision != self._term:
            self._term = kv.create_revision
            self.metrics.leader_changes.inc()
            log.info("pool leader elected", extra={"pool": self.pool, "node": self.node, "leader": self.leader,
                                                   "term": kv.create_revision})
        self.metrics.ready.set(1 if self.ready else 0)
        if self._election_wake is not None:
            self._election_wake.set()
        if self._stepdown_wake is not None:
            self._stepdown_wake.set()

    async def _observe_leader(self, client: _EtcdClient, revision: int) -> None:
        """Watch ``leader`` and ``leader-informer-sync`` (one prefix) from ``revision`` + 1."""
        watch = await self._rpc(client.watch(self.leader_key, range_end=etcd_utils.prefix_range_end(self.leader_key),
                                             start_revision=revision + 1))
        try:
            async for event in watch:
                self._apply_event(event)
        finally:
            with contextlib.suppress(Exception):
                await bounded(watch.cancel(), 1.0)
        raise CoordinatorError("unreachable", f"coordinator {self.endpoint.url}: leader watch ended")

    async def _health_probe(self, client: _EtcdClient) -> None:
        """Re-read the leader keys every ``health_interval_s``: proves the coordinator answers,
        repairs a missed watch event, and removes a leader key that would block the election."""
        while True:
            await asyncio.sleep(self.config.health_interval_s)
            snapshot = await self._rpc(client.get_prefix(self.leader_key))
            self._apply_snapshot(snapshot)
            self.metrics.ready.set(1 if self.ready else 0)  # staleness comes with time, not events
            await self._repair_leader_key(client)

    async def _repair_leader_key(self, client: _EtcdClient) -> None:
        kv = self._leader_kv
        if kv is None or self._campaigning or self._elected:
            return
        name = kv.value.decode(errors="replace")
        if kv.lease == 0 or not is_dns1123_subdomain(name) or len(kv.value) > 253:
            reason = "leader_key"
            why = "malformed or without a lease (it would block the election for ever)"
        elif name == self.node and kv.lease != self._leader_lease:
            reason = ""
            why = "left by this node's previous incarnation"
        else:
            return
        if reason:
            self.metrics.rejected.labels(reason=reason).inc()
        deleted, _ = await self._rpc(client.transaction(
            compare=[client.transactions.mod(self.leader_key) == kv.mod_revision],
            success=[client.transactions.delete(self.leader_key)], failure=[]))
        if deleted:
            log.warning("deleted the pool leader key: %s", why,
                        extra={"pool": self.pool, "node": self.node, "value": name[:80], "lease": kv.lease})

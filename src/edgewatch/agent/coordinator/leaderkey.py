"""The election as observed (``LeaderKeyWatch``, a part of ``PoolCoordinator``): the candidacies
``leader/election/<node>`` and the sync keys ``leader/sync/<node>`` (one prefix, ``leader/``) from
a snapshot, then the watch; a health probe that re-reads them (proves the coordinator answers,
repairs a missed event) and deletes this node's own candidacy left by its previous incarnation.

Who leads is ``poolkeys.leader_of`` over the candidacies (lowest create revision), never one the
coordinator disqualified (``leader/disqualified/<node>``: a candidacy put while another led, or
under a long lease; ``edgewatch.pooletcd.janitor``); only the leader's sync key counts. A node can
write only its own candidacy and sync key (etcd's access control, ``edgewatch.pooletcd``), so no node can hold or end another's leadership; a malformed
candidacy (no lease, a bad name) is counted and ignored, never obeyed and never needed to delete.
Both values are sealed by the node the key names (``edgewatch.core.seal``): a sync key that is not
is counted and treated as absent; a candidacy that is not (a forgery by the coordinator's host, a
member's deliberately bad seal, a key this node has not read yet) is counted and keeps its place
in the election, so every node and the coordinator agree on who leads, but it is *untrusted*: this
node reads nothing of it and does not let it cover delegation (``leader`` is None)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from aetcd import utils as etcd_utils

from edgewatch.agent.coordinator.errors import CoordinatorError
from edgewatch.agent.coordinator.state import CoordinatorState, LeaderKey
from edgewatch.core.seal import SealRejected, unseal
from edgewatch.core.types import is_dns1123_subdomain
from edgewatch.pooletcd.client import EtcdClient
from edgewatch.waits import bounded

__all__ = ["LeaderKeyWatch"]

log = logging.getLogger(__name__)


class LeaderKeyWatch(CoordinatorState):
    """Who leads and whether the leader's pool data is synced, as seen in etcd; wakes the election
    and the step-down watch on every change."""

    def _apply_snapshot(self, snapshot: Any) -> None:
        revision = snapshot.header.revision
        if revision < self._state_rev:
            return  # older than what the watch already applied
        self._candidates.clear()
        self._syncs.clear()
        self._disqualified.clear()
        self._untrusted.clear()
        for kv in snapshot:
            self._apply_kv(kv.key, kv, deleted=False)
        self._state_rev = revision
        self._leader_state_changed()

    def _apply_event(self, event: Any) -> None:
        kv = event.kv
        if kv.mod_revision <= self._state_rev:
            return
        if not self._apply_kv(kv.key, kv, deleted=event.kind == "DELETE"):
            return
        self._state_rev = kv.mod_revision
        self._leader_state_changed()

    def _apply_kv(self, key: bytes, kv: Any, *, deleted: bool) -> bool:
        """Record one candidacy, sync key or disqualification; False if the key is none of them."""
        candidates, syncs = self.keys.candidates, self.keys.syncs
        if key.startswith(candidates):
            name = key[len(candidates):].decode(errors="replace")
            if deleted:
                self._candidates.pop(name, None)
                self._untrusted.discard(name)
            else:
                # A candidacy whose seal this node refuses still takes its place in the election
                # (every node, and the coordinator, must agree on who leads), but this node neither
                # reads its area nor lets it cover delegation: ``leader`` is None then.
                if self._refused(key, kv.value, name, "candidacy"):
                    self._untrusted.add(name)
                else:
                    self._untrusted.discard(name)
                if kv.lease == 0 or not is_dns1123_subdomain(name):
                    self.metrics.rejected.labels(reason="leader_key").inc()
                    log.warning("ignoring a malformed candidacy (no lease or a bad node name)",
                                extra={"pool": self.pool, "node": self.node, "candidate": name[:80]})
                self._candidates[name] = LeaderKey(kv.lease, kv.create_revision, kv.mod_revision)
            return True
        if key.startswith(self.keys.disqualifications):
            name = key[len(self.keys.disqualifications):].decode(errors="replace")
            value = b"" if deleted else bytes(kv.value)
            if value.isdigit() and len(value) <= 20:
                self._disqualified[name] = int(value)
            else:
                if not deleted:
                    self.metrics.rejected.labels(reason="disqualification").inc()
                self._disqualified.pop(name, None)
            return True
        if key.startswith(syncs):
            name = key[len(syncs):].decode(errors="replace")
            if deleted or self._refused(key, kv.value, name, "sync"):
                self._syncs.pop(name, None)
            else:
                self._syncs[name] = kv.mod_revision
            return True
        return False

    def _refused(self, key: bytes, value: bytes, name: str, what: str) -> bool:
        """False if ``value`` is sealed by node ``name`` for ``key``; else True, the reason counted
        (``edgewatch_coordinator_rejected_total{reason="<what>_<reason>"}``) and logged."""
        try:
            unseal(value, key=key, writer=name, verifier=self.signer, max_bytes=self.config.max_value_bytes)
        except SealRejected as exc:
            self.metrics.rejected.labels(reason=f"{what}_{exc.reason}").inc()
            log.warning("ignoring a %s not sealed by its node: %s", what, exc,
                        extra={"pool": self.pool, "node": self.node, "candidate": name[:80], "reason": exc.reason})
            return True
        return False

    def _note_sync(self) -> None:
        """The current leader's sync key is at its observed mod revision (0: absent); note when we
        saw it change, by our own clock."""
        leader = self._observed_leader()
        mod_revision = self._syncs.get(leader, 0) if leader is not None and leader not in self._untrusted else 0
        self._sync_present = mod_revision != 0
        if mod_revision and mod_revision != self._sync_rev:
            self._sync_seen_at = time.monotonic()
        self._sync_rev = mod_revision

    def _leader_state_changed(self) -> None:
        self._note_sync()
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

    async def _observe_leader(self, client: EtcdClient, revision: int) -> None:
        """Watch the candidacies and sync keys (prefix ``leader/``) from ``revision`` + 1."""
        prefix = self.keys.leadership
        watch = await self._rpc(client.watch(prefix, range_end=etcd_utils.prefix_range_end(prefix),
                                             start_revision=revision + 1))
        try:
            async for event in watch:
                self._apply_event(event)
        finally:
            with contextlib.suppress(Exception):
                await bounded(watch.cancel(), 1.0)
        raise CoordinatorError("unreachable", f"coordinator {self.endpoint.url}: leader watch ended")

    async def _health_probe(self, client: EtcdClient) -> None:
        """Re-read the election every ``health_interval_s``: proves the coordinator answers,
        repairs a missed watch event, and removes this node's stale candidacy."""
        while True:
            await asyncio.sleep(self.config.health_interval_s)
            snapshot = await self._rpc(client.get_prefix(self.keys.leadership))
            self._apply_snapshot(snapshot)
            self.metrics.ready.set(1 if self.ready else 0)  # staleness comes with time, not events
            await self._repair_leader_key(client)

    async def _repair_leader_key(self, client: EtcdClient) -> None:
        """Delete this node's candidacy if it is not this incarnation's (left by the previous one,
        it would make every node wait for a leader that is not running): the only candidacy a
        node may delete."""
        kv = self._candidates.get(self.node)
        if kv is None or self._campaigning or self._elected or kv.lease == self._leader_lease:
            return
        deleted, _ = await self._rpc(client.transaction(
            compare=[client.transactions.mod(self.candidate_key) == kv.mod_revision],
            success=[client.transactions.delete(self.candidate_key)], failure=[]))
        if deleted:
            log.warning("deleted this node's candidacy left by its previous incarnation",
                        extra={"pool": self.pool, "node": self.node, "lease": kv.lease})

"""Leader election (``Election``, a part of ``PoolCoordinator``): campaign for the leader key when
nobody leads and the own cloud link is up, lead (keep-alive, forwarding, the pool-cache informer)
until stepping down (cloud link lost, displaced, lease lost or unconfirmed), keep leading after a
reconnect if the leader lease survived."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

import aetcd

from edgewatch.agent.coordinator.etcd import _EtcdClient
from edgewatch.agent.coordinator.forwarding import Forwarding
from edgewatch.agent.coordinator.leaderkey import LeaderKeyWatch
from edgewatch.agent.coordinator.roles import Role, decide_role
from edgewatch.waits import apart, wait_event

__all__ = ["Election"]

log = logging.getLogger(__name__)


class _StepDown(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Election(LeaderKeyWatch, Forwarding):
    """Campaign, lead and step down; a leader forwards (``Forwarding``) and runs the pool cache."""

    async def _election_loop(self, client: _EtcdClient) -> None:
        assert self._election_wake is not None
        if self._leader_lease is not None:  # leader before a reconnect: keep leading if the lease survived
            kv, lease = self._leader_kv, self._leader_lease
            if kv is not None and kv.lease == lease and kv.value == self.node.encode() and self._cloud:
                sent = asyncio.get_running_loop().time()
                reply = await self._rpc(client.refresh_lease(lease))
                if reply is not None and reply.TTL > 0:
                    log.info("pool leadership survived the reconnect", extra={"pool": self.pool, "node": self.node})
                    self._leader_valid_until = sent + reply.TTL
                    await self._lead(client, lease)
            if self._leader_lease is not None:  # not resumed: let the others elect at once
                with contextlib.suppress(aetcd.ClientError, TimeoutError):
                    await self._rpc(client.revoke_lease(lease))
                self._leader_lease = None
        while True:
            self._election_wake.clear()
            decision = decide_role(reachable=True, elected=False, leader_present=self._leader_kv is not None,
                                   cloud_ok=self._cloud)
            self._set_role(decision.role)
            if decision.campaign and not self._closing:
                lease = await self._campaign(client)
                if lease is not None:
                    await self._lead(client, lease)
                    continue
            await wait_event(self._election_wake, self.config.health_interval_s)

    async def _campaign(self, client: _EtcdClient) -> int | None:
        """Create the leader key if absent; the lease id if we won."""
        self._campaigning = True
        try:
            lease = int((await self._rpc(client.lease(self.config.leader_ttl_s))).id)
            started = asyncio.get_running_loop().time()
            won, responses = await self._rpc(client.transaction(
                compare=[client.transactions.create(self.leader_key) == 0],
                success=[client.transactions.put(self.leader_key, self.node.encode(), lease=lease)],
                failure=[client.transactions.get(self.leader_key)]))
            if not won:
                with contextlib.suppress(Exception):
                    await self._rpc(client.revoke_lease(lease))
                for _value, kv in (responses[0] if responses else []):
                    self._apply_event(_PutEvent(kv))
                return None
            self._leader_lease = lease
            self._leader_valid_until = started + self.config.leader_ttl_s
            revision = responses[0].response_put.header.revision
            self._apply_event(_PutEvent(_KV(self.leader_key, self.node.encode(), lease, revision, revision)))
            return lease
        finally:
            self._campaigning = False

    async def _lead(self, client: _EtcdClient, lease: int) -> None:
        """Be the leader until stepping down; release the lease if the cloud link went."""
        assert self._stepdown_wake is not None
        self._elected = True
        self._set_role(Role.LEADER)
        extra = {"pool": self.pool, "node": self.node}
        log.info("leading the pool", extra=extra)
        try:
            # In a task of its own: our cancellation must not be taken for a step-down (see
            # _lead_until_step_down) -- it always propagates from here.
            reason = await apart(self._lead_until_step_down(client, lease), name=f"pool-leader-{self.pool}")
        finally:
            self._elected = False
            self._heartbeats.clear()
            self._put_at.clear()
            self._forwarded.clear()
            self.metrics.delegated.set(0)
        log.info("stepping down as pool leader: %s", reason, extra={**extra, "reason": reason})
        self._set_role(Role.FOLLOWER)
        if reason != "lease_lost":
            with contextlib.suppress(aetcd.ClientError, TimeoutError):
                await self._rpc(client.revoke_lease(lease))  # deletes leader + sync keys at once
        self._leader_lease = None

    async def _lead_until_step_down(self, client: _EtcdClient, lease: int) -> str:
        """Keep-alive, step-down watch, forwarding and the pool cache until one of them steps down;
        the reason. Run apart from ``_lead``'s task: if the task running this were cancelled as a
        part stepped down, the TaskGroup would raise the step-down and drop the cancellation."""
        reason = ""
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._keepalive(client, lease))
                tg.create_task(self._watch_step_down())
                tg.create_task(self._forward(client))
                tg.create_task(self.cache_leader.run(etcd=client, rpc=self._rpc, lease=lease))
        except* _StepDown as group:
            reason = group.exceptions[0].reason  # type: ignore[attr-defined]
        return reason

    async def _keepalive(self, client: _EtcdClient, lease: int) -> None:
        loop = asyncio.get_running_loop()
        while True:
            sent = loop.time()
            reply = await self._rpc(client.refresh_lease(lease))
            if reply is None or reply.TTL <= 0:
                raise _StepDown("lease_lost")
            self._leader_valid_until = sent + reply.TTL
            await asyncio.sleep(self.config.leader_keepalive_s)

    async def _watch_step_down(self) -> None:
        """Step down when the own cloud link goes, the key is no longer ours, or the lease could
        have expired without us knowing."""
        assert self._stepdown_wake is not None
        loop = asyncio.get_running_loop()
        while True:
            self._stepdown_wake.clear()
            decision = decide_role(reachable=True, elected=True, leader_present=True, cloud_ok=self._cloud)
            if decision.release:
                raise _StepDown("cloud_lost")
            kv = self._leader_kv
            if kv is None or kv.value != self.node.encode() or kv.lease != self._leader_lease:
                raise _StepDown("displaced")
            if loop.time() > self._leader_valid_until:
                raise _StepDown("lease_unconfirmed")
            await wait_event(self._stepdown_wake, self.config.cloud_poll_interval_s)


@dataclass
class _KV:
    """The fields of an etcd KeyValue we read (for synthesized events)."""

    key: bytes
    value: bytes
    lease: int
    create_revision: int
    mod_revision: int


@dataclass
class _PutEvent:
    kv: Any
    kind: str = "PUT"

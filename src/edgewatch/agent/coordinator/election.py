"""Leader election (``Election``, a part of ``PoolCoordinator``): when nobody leads and the own
cloud link is up, put this node's candidacy ``leader/election/<node>`` under a short leader lease
and lead if it is the lowest create revision of the pool (``poolkeys.leader_of``; else withdraw);
lead (keep-alive, forwarding, the pool-cache informer) until stepping down (cloud link lost,
displaced, lease lost or unconfirmed); keep leading after a reconnect if the leader lease survived.

Each node writes only its own candidacy (etcd's access control, ``edgewatch.pooletcd``): etcd's
election recipe with one key per node, so no node can take, hold or end another's leadership."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import aetcd

from edgewatch.agent.coordinator.forwarding import Forwarding
from edgewatch.agent.coordinator.leaderkey import LeaderKeyWatch
from edgewatch.agent.coordinator.roles import Role, decide_role
from edgewatch.core.seal import seal
from edgewatch.pooletcd.client import EtcdClient
from edgewatch.waits import apart, wait_event

__all__ = ["Election"]

log = logging.getLogger(__name__)


class _StepDown(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Election(LeaderKeyWatch, Forwarding):
    """Campaign, lead and step down; a leader forwards (``Forwarding``) and runs the pool cache."""

    async def _election_loop(self, client: EtcdClient) -> None:
        assert self._election_wake is not None
        if self._leader_lease is not None:  # leader before a reconnect: keep leading if the lease survived
            kv, lease = self._candidates.get(self.node), self._leader_lease
            if kv is not None and kv.lease == lease and self._observed_leader() == self.node and self._cloud:
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
            decision = decide_role(reachable=True, elected=False, leader_present=self._observed_leader() is not None,
                                   cloud_ok=self._cloud)
            self._set_role(decision.role)
            if decision.campaign and not self._closing:
                lease = await self._campaign(client)
                if lease is not None:
                    await self._lead(client, lease)
                    continue
            await wait_event(self._election_wake, self.config.health_interval_s)

    async def _campaign(self, client: EtcdClient) -> int | None:
        """Put this node's candidacy if absent; the lease id if it is the lowest of the pool (we
        lead), else withdraw it (revoke) and None."""
        self._campaigning = True
        key = self.candidate_key
        try:
            lease = int((await self._rpc(client.lease(self.config.leader_ttl_s))).id)
            started = asyncio.get_running_loop().time()
            won, responses = await self._rpc(client.transaction(
                compare=[client.transactions.create(key) == 0],
                success=[client.transactions.put(key, seal(self.node.encode(), key=key, signer=self.signer),
                                                 lease=lease)],
                failure=[client.transactions.get(key)]))
            if won:  # our candidacy is in: are we the lowest? (re-read: others may be newer to us)
                self._apply_snapshot(await self._rpc(client.get_prefix(self.keys.leadership)))
            if not won or self._observed_leader() != self.node:
                with contextlib.suppress(Exception):
                    await self._rpc(client.revoke_lease(lease))
                if won:
                    self._candidates.pop(self.node, None)
                    self._leader_state_changed()
                return None
            self._leader_lease = lease
            self._leader_valid_until = started + self.config.leader_ttl_s
            return lease
        finally:
            self._campaigning = False

    async def _lead(self, client: EtcdClient, lease: int) -> None:
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
                await self._rpc(client.revoke_lease(lease))  # deletes candidacy + sync key at once
        self._leader_lease = None

    async def _lead_until_step_down(self, client: EtcdClient, lease: int) -> str:
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

    async def _keepalive(self, client: EtcdClient, lease: int) -> None:
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
            kv = self._candidates.get(self.node)
            if kv is None or kv.lease != self._leader_lease or self._observed_leader() != self.node:
                raise _StepDown("displaced")
            if loop.time() > self._leader_valid_until:
                raise _StepDown("lease_unconfirmed")
            await wait_event(self._stepdown_wake, self.config.cloud_poll_interval_s)


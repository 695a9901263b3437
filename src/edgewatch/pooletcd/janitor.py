"""The pool coordinator keeps its election honest (``ElectionJanitor``): no queue, no long leases, no
keys of departed nodes.

What it stops
    A pool member (root on one node, its own certificate and key) may write its own candidacy at
    any time, under a lease of any length. etcd's election recipe queues candidates by create
    revision, so a candidacy put while another node leads, kept alive, is next in line: it leads
    after the next routine leader change (a restart, a rollout, a blip on the leader's link) and,
    under a 30-day lease, never steps down, while every follower serves the pool cache it writes.
    edgewatch's agents stand only when nobody leads and withdraw at once when they lose, so such a
    candidacy is never honest.

How
    The coordinator (root credentials, beside its etcd) follows every change under ``leader/`` in
    revision order from one snapshot (:class:`ElectionBook`, pure) and *disqualifies*:

    * a candidacy put while an eligible candidacy with a lower create revision exists (standing in
      line; an honest loser of a simultaneous campaign is one too, and has withdrawn already);
    * a candidacy whose lease was granted for more than ``poolkeys.MAX_LEADER_TTL_S`` (15 s), or
      that has no lease.

    A disqualification is the key ``leader/disqualified/<node>`` = the candidacy's create revision,
    which only root can write and which every agent reads with the election (it never lets that
    candidacy lead), followed by revoking the candidacy's lease (its keys go with it). Every
    ``sweep_s`` it also deletes every key of a node that is no longer a member (heartbeat,
    candidacy, sync key, disqualification, its ``nodes/<node>/`` area; a former member is one with
    such keys, or one of the members at the previous sweep) and revokes that candidacy's lease, and
    drops disqualifications whose candidacy is gone.

Limits
    Judgements are made in revision order from the janitor's first snapshot (a coordinator start),
    on which every candidacy behind the eligible leader is disqualified; a broken session resumes
    right after the last change judged (a new snapshot only if etcd compacted past it: the
    coordinator's etcd keeps 5 minutes of history, and every sweep moves the judged revision up
    while the election is quiet). A member can
    still win an election race held while nobody leads (as any member can) and lead while its
    cloud link is up. With an etcd not run by edgewatch's coordinator pod (``poolCoordinators: {pool:
    URL}``) nothing disqualifies: run ``edgewatch pool-etcd-acl`` and accept the queue. Every call
    has ``timeout_s``; a failed session is retried after ``retry_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aetcd
import grpc
from aetcd import utils as etcd_utils

from edgewatch.core.types import is_decimal
from edgewatch.poolkeys import MAX_LEADER_TTL_S, Candidate, PoolKeys, leader_of, prefix_end
from edgewatch.pooletcd.client import EtcdClient, keep_sessions

__all__ = ["ElectionBook", "ElectionJanitor", "Verdict"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Verdict:
    """What to do with one candidacy: ``reason`` is ``standing``, ``long_lease`` or ``no_lease``."""

    node: str
    create_revision: int
    lease: int
    reason: str


@dataclass
class ElectionBook:
    """The election as the coordinator judges it, change by change in revision order (pure).

    ``candidates``: node -> its candidacy; ``disqualified``: node -> the create revision of its
    disqualified candidacy. Judgements follow ``poolkeys.leader_of`` over the eligible candidacies.
    """

    candidates: dict[str, Candidate] = field(default_factory=dict)
    disqualified: dict[str, int] = field(default_factory=dict)

    def eligible(self) -> dict[str, Candidate]:
        """The candidacies not disqualified."""
        return {n: c for n, c in self.candidates.items() if self.disqualified.get(n) != c.create_revision}

    def leader(self) -> str | None:
        """The eligible leader (``poolkeys.leader_of``), or None."""
        return leader_of(self.eligible())

    def put(self, node: str, candidate: Candidate, *, granted_ttl_s: int | None) -> Verdict | None:
        """A candidacy was put (created or rewritten); the verdict if it must be disqualified.
        ``granted_ttl_s``: its lease's granted TTL, seconds (None: unknown, not judged)."""
        before = self.leader()
        self.candidates[node] = candidate
        if self.disqualified.get(node) == candidate.create_revision:
            return None  # judged already
        if candidate.lease == 0:
            return self._disqualify(node, candidate, "no_lease")
        if granted_ttl_s is not None and granted_ttl_s > MAX_LEADER_TTL_S:
            return self._disqualify(node, candidate, "long_lease")
        if before is not None and before != node and self.candidates[before].create_revision < candidate.create_revision:
            return self._disqualify(node, candidate, "standing")
        return None

    def delete(self, node: str) -> None:
        """A candidacy was deleted."""
        self.candidates.pop(node, None)

    def snapshot(self, candidates: Mapping[str, Candidate], disqualified: Mapping[str, int],
                 granted_ttl_s: Mapping[str, int | None]) -> list[Verdict]:
        """Start over from a snapshot: the verdicts for every candidacy behind the eligible leader,
        without a lease, or under a long lease."""
        self.candidates = dict(candidates)
        self.disqualified = dict(disqualified)
        verdicts = []
        for node, c in sorted(self.candidates.items(), key=lambda item: item[1].create_revision):
            if self.disqualified.get(node) == c.create_revision:
                continue
            reason = ("no_lease" if c.lease == 0 else
                      "long_lease" if (granted_ttl_s.get(node) or 0) > MAX_LEADER_TTL_S else None)
            if reason is None:
                leader = self.leader()
                if leader is not None and leader != node and self.candidates[leader].create_revision < c.create_revision:
                    reason = "standing"
            if reason is not None:
                verdicts.append(self._disqualify(node, c, reason))
        return verdicts

    def _disqualify(self, node: str, candidate: Candidate, reason: str) -> Verdict:
        self.disqualified[node] = candidate.create_revision
        return Verdict(node=node, create_revision=candidate.create_revision, lease=candidate.lease, reason=reason)


def _describe(exc: BaseException) -> str:
    """One line for a failure, the first of a group (a TaskGroup raises an ExceptionGroup)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _name(key: bytes, prefix: bytes) -> str:
    return key[len(prefix):].decode(errors="replace")


class ElectionJanitor:
    """Follows a pool's election with root credentials and disqualifies (module docstring).

    Args (keyword-only):
        host, port: the etcd client endpoint.
        credentials: makes the root TLS credentials (called per session: a rotated certificate is used).
        pool: the pool.
        members: the pool's member nodes now (None while unknown: nothing is deleted for leaving).
        timeout_s: bound of each etcd call, seconds.
        retry_s: pause after a failed session, seconds.
        sweep_s: how often keys of departed nodes are looked for, seconds.
        on_action: told each action (``standing``, ``long_lease``, ``no_lease``, ``departed``, ``error``); must not raise.
    """

    def __init__(self, *, host: str, port: int, credentials: Callable[[], grpc.ChannelCredentials], pool: str,
                 members: Callable[[], frozenset[str] | None], timeout_s: float = 5.0, retry_s: float = 2.0,
                 sweep_s: float = 30.0, on_action: Callable[[str], None] = lambda _a: None) -> None:
        self.host, self.port, self.pool = host, port, pool
        self.keys = PoolKeys(pool)
        self._credentials = credentials
        self._members = members
        self.timeout_s, self.retry_s, self.sweep_s = timeout_s, retry_s, sweep_s
        self._on_action = on_action
        self.book = ElectionBook()
        self.synced = asyncio.Event()  # set once the first snapshot is judged
        self._former: set[str] = set()  # the members at the last sweep
        self._revision: int | None = None  # the last etcd revision judged (None: judge a snapshot)

    async def run(self) -> None:
        """Sessions until cancelled; never raises for etcd errors (logged, counted, retried)."""
        await keep_sessions(host=self.host, port=self.port, timeout_s=self.timeout_s, credentials=self._credentials,
                            session=self._session, on_error=self._failed, pause_s=self.retry_s)

    def _failed(self, exc: Exception) -> None:
        """A session failed (an etcd failure, also grouped by its TaskGroup, or a bug): retried."""
        self._on_action("error")
        log.warning("pool election janitor: %s; retrying in %.1f s", _describe(exc), self.retry_s,
                    extra={"pool": self.pool})

    async def _call(self, call: Any) -> Any:
        async with asyncio.timeout(self.timeout_s):
            return await call

    async def _session(self, client: EtcdClient) -> None:
        """One session: judge a snapshot the first time (or when etcd compacted past where the last
        session stopped), else resume the watch right after the last change judged, so a broken
        session leaves no gap in which a candidacy could be put in line unseen."""
        await self._call(client.connect())
        if self._revision is None:
            self._revision = await self._judge_snapshot(client)
        self.synced.set()
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._sweep_loop(client))
                tg.create_task(self._follow(client, self._revision))
        except* aetcd.exceptions.RevisionCompactedError:
            log.warning("pool election janitor: etcd compacted past the last change judged; judging a snapshot",
                        extra={"pool": self.pool})
            self._revision = None

    async def _granted(self, client: EtcdClient, lease: int) -> int | None:
        if lease == 0:
            return None
        reply = await self._call(client.get_lease_info(lease, keys=False))
        return int(reply.grantedTTL) if reply.TTL > 0 else None

    async def _judge_snapshot(self, client: EtcdClient) -> int:
        prefix = self.keys.leadership
        snapshot = await self._call(client.get_prefix(prefix))
        candidates: dict[str, Candidate] = {}
        disqualified: dict[str, int] = {}
        for kv in snapshot:
            if kv.key.startswith(self.keys.candidates):
                candidates[_name(kv.key, self.keys.candidates)] = Candidate(kv.lease, kv.create_revision)
            elif kv.key.startswith(self.keys.disqualifications):
                value = kv.value.decode(errors="replace")
                if is_decimal(value):
                    disqualified[_name(kv.key, self.keys.disqualifications)] = int(value)
        ttls = {n: await self._granted(client, c.lease) for n, c in candidates.items()}
        for verdict in self.book.snapshot(candidates, disqualified, ttls):
            await self._act(client, verdict)
        return int(snapshot.header.revision)

    async def _follow(self, client: EtcdClient, revision: int) -> None:
        prefix = self.keys.candidates
        watch = await self._call(client.watch(prefix, range_end=etcd_utils.prefix_range_end(prefix),
                                              start_revision=revision + 1))
        try:
            async for event in watch:
                name = _name(event.kv.key, prefix)
                if event.kind == "DELETE":
                    self.book.delete(name)
                else:
                    candidate = Candidate(event.kv.lease, event.kv.create_revision)
                    verdict = self.book.put(name, candidate,
                                            granted_ttl_s=await self._granted(client, candidate.lease))
                    if verdict is not None:
                        await self._act(client, verdict)
                self._revision = max(self._revision or 0, int(event.kv.mod_revision))
        finally:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1.0):
                    await watch.cancel()
        raise TimeoutError("the election watch ended")

    async def _act(self, client: EtcdClient, verdict: Verdict) -> None:
        """Write the disqualification, then revoke the lease (or delete a lease-less candidacy). A
        disqualification that could not be written is forgotten, so the change that caused it is
        judged again when the next session replays it (the judged revision has not moved past it)."""
        try:
            await self._call(client.put(self.keys.disqualified(verdict.node), str(verdict.create_revision).encode()))
        except BaseException:
            if self.book.disqualified.get(verdict.node) == verdict.create_revision:
                del self.book.disqualified[verdict.node]
            raise
        if verdict.lease:
            with contextlib.suppress(aetcd.ClientError):  # already gone: nothing to revoke
                await self._call(client.revoke_lease(verdict.lease))
        else:
            await self._call(client.delete(self.keys.candidate(verdict.node)))
        self._on_action(verdict.reason)
        # a standing candidacy is mostly an honest loser of a simultaneous campaign (withdrawing anyway)
        log.log(logging.INFO if verdict.reason == "standing" else logging.WARNING, "pool election: disqualified %s's candidacy (revision %d): %s", verdict.node,
                    verdict.create_revision, verdict.reason,
                    extra={"pool": self.pool, "candidate": verdict.node[:80], "reason": verdict.reason})

    async def _sweep_loop(self, client: EtcdClient) -> None:
        while True:
            await self.sweep(client)
            await asyncio.sleep(self.sweep_s)

    def _advance(self, candidacies: Any) -> None:
        """Move the judged revision up to a listing's when the book already holds exactly the
        candidacies listed: no change up to it is left to judge. So a quiet election (no change for
        hours) never lets etcd's periodic compaction pass the judged revision, and a broken session
        resumes its watch instead of judging a snapshot blind to what happened in between."""
        seen = {(_name(kv.key, self.keys.candidates), int(kv.create_revision)) for kv in candidacies}
        if seen == {(n, c.create_revision) for n, c in self.book.candidates.items()} and self._revision is not None:
            self._revision = max(self._revision, int(candidacies.header.revision))

    async def sweep(self, client: EtcdClient) -> list[str]:
        """Delete every key of nodes that are no longer members, and disqualifications whose
        candidacy is gone; the departed nodes' names (nothing while the members are unknown or none)."""
        members = self._members()
        departed: set[str] = set()
        by_node: dict[str, list[Any]] = {}
        listed: dict[bytes, Any] = {}
        for prefix in (self.keys.heartbeats, self.keys.candidates, self.keys.syncs, self.keys.disqualifications):
            listed[prefix] = listing = await self._call(client.get_prefix(prefix, keys_only=True))
            for kv in listing:
                by_node.setdefault(_name(kv.key, prefix), []).append(kv)
        self._advance(listed[self.keys.candidates])
        if members:
            # a former member: keys under its name, or a member seen before (its area may be all it wrote)
            departed = {n for n in set(by_node) | self._former if n not in members}
            self._former = set(members)
        for node in sorted(departed):
            for kv in by_node.get(node, ()):
                if kv.lease:
                    with contextlib.suppress(aetcd.ClientError):
                        await self._call(client.revoke_lease(kv.lease))
                await self._call(client.delete(kv.key))
            area = self.keys.writer(node).encode()
            await self._call(client.delete_range(area, prefix_end(area)))
            self._on_action("departed")
            log.warning("pool election: removed the keys of %s, no longer a member of the pool", node[:80],
                        extra={"pool": self.pool, "candidate": node[:80], "reason": "departed"})
        for node, revision in list(self.book.disqualified.items()):
            if node not in departed and self.book.candidates.get(node, Candidate(0, 0)).create_revision != revision:
                await self._call(client.delete(self.keys.disqualified(node)))
                self.book.disqualified.pop(node, None)
        return sorted(departed)

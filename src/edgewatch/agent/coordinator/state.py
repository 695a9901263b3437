"""What every part of ``PoolCoordinator`` shares (``CoordinatorState``): the constructor (names,
keys, the pool-cache leader, the observed state and the leases kept across sessions), the
read-only view the agent uses, one etcd call under its timeout, and the role as reported."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from prometheus_client import CollectorRegistry

from edgewatch.agent.coordinator.config import ClientTLS, CoordinatorConfig, parse_coordinator_url
from edgewatch.agent.coordinator.errors import CoordinatorError
from edgewatch.agent.coordinator.metrics import AgentCoordinatorMetrics
from edgewatch.agent.coordinator.roles import Role
from edgewatch.agent.coordinator.schema import Heartbeat
from edgewatch.core.signing import Signer
from edgewatch.core.types import is_dns1123_label, is_dns1123_subdomain
from edgewatch.kube.api import AsyncClient
from edgewatch.poolcache.layout import CacheArea
from edgewatch.poolcache.leader import CacheLeaderConfig, LeaderMetrics, PoolCacheLeader
from edgewatch.poolcache.resources import PoolResource
from edgewatch.kube.http import http_client_of
from edgewatch.poolkeys import Candidate, PoolKeys, leader_of

__all__ = ["CoordinatorState", "LeaderKey"]

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass
class LeaderKey:
    """A candidacy (``leader/election/<node>``) as observed."""

    lease: int
    create_revision: int
    mod_revision: int


class CoordinatorState:
    """The state every part of ``PoolCoordinator`` reads and writes, and what they all use (the
    constructor's arguments are ``PoolCoordinator``'s, see there)."""

    def __init__(
        self,
        *,
        url: str,
        pool: str,
        node: str,
        kube: AsyncClient,
        cloud_ok: Callable[[], bool],
        verdict_of: Callable[[str], str],
        signer: Signer,
        config: CoordinatorConfig | None = None,
        tls: ClientTLS | None = None,
        registry: CollectorRegistry | None = None,
        pool_resources: tuple[PoolResource, ...] = (),
        cache_config: CacheLeaderConfig | None = None,
        wall: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.endpoint = parse_coordinator_url(url)
        self._wall = wall
        if not is_dns1123_label(pool):
            raise CoordinatorError("config", f"pool name {pool!r} is not a DNS-1123 label")
        if not is_dns1123_subdomain(node):
            raise CoordinatorError("config", f"node name {node!r} is not a DNS-1123 subdomain")
        if tls is not None and self.endpoint.scheme != "https":
            raise CoordinatorError("config", f"client TLS given but the coordinator URL {url!r} is not https://")
        self.pool = pool
        self.node = node
        self.signer = signer
        self.kube = kube
        self._cloud_ok_fn = cloud_ok
        self._verdict_of = verdict_of
        self.config = config or CoordinatorConfig()
        self.tls = tls
        registry = registry if registry is not None else CollectorRegistry()
        self.metrics = AgentCoordinatorMetrics(registry)
        self.incarnation = time.time_ns() // 1000

        self.keys = PoolKeys(pool)
        self.prefix = self.keys.prefix
        self.heartbeat_prefix = self.keys.heartbeats
        self.candidate_key = self.keys.candidate(node)
        self.pool_resources = tuple(pool_resources)
        http = http_client_of(kube)
        if http is None and self.pool_resources:
            raise CoordinatorError("config", "the pool cache needs a lightkube AsyncClient (its HTTP client)")
        self.cache_leader = PoolCacheLeader(resources=self.pool_resources, http=http, prefix=self.keys.writer(node),
                                            sync_key=self.keys.sync(node), node=node, signer=signer,
                                            metrics=LeaderMetrics(registry), config=cache_config)

        # Observed state (written only from the event loop).
        self._role = Role.PENDING
        self._healthy = False
        self._candidates: dict[str, LeaderKey] = {}  # leader/election/<node>, as observed
        self._disqualified: dict[str, int] = {}  # leader/disqualified/<node>: that create revision never leads
        self._untrusted: set[str] = set()  # candidacies whose seal this node refused (they keep their place)
        self._syncs: dict[str, int] = {}  # leader/sync/<node> -> its mod revision
        self._sync_present = False
        self._sync_rev = 0
        self._sync_seen_at = 0.0  # monotonic time the sync key was last seen to change
        self._state_rev = 0
        self._term = 0
        self._elected = False
        self._campaigning = False
        self._cloud = True
        self._cloud_changed = asyncio.Event()  # set by cloud_link_changed()
        self._closing = False
        self.last_error: str | None = None
        # Leases remembered across sessions (reused after a reconnect if etcd still has them).
        self._hb_lease: int | None = None
        self._leader_lease: int | None = None
        self._leader_valid_until = 0.0
        # Leader-only state.
        self._heartbeats: dict[str, Heartbeat] = {}
        # When each current heartbeat was put: the leader's wall clock at ingest minus the age measured
        # here (watch: 0; listing: etcd's lease age) -- never a time read from the value.
        self._put_at: dict[str, dt.datetime] = {}
        self._due: dict[str, float] = {}
        self._backoff: dict[str, float] = {}
        self._forwarded: dict[str, float] = {}
        self._queue: asyncio.Queue[str] | None = None
        self._queued: set[str] = set()
        self._skipped: set[str] = set()  # nodes last skipped as unhealthy (to log once per episode)
        # Wake-ups (created lazily in run(): no event loop is needed to construct this object).
        self._hb_wake: asyncio.Event | None = None
        self._election_wake: asyncio.Event | None = None
        self._stepdown_wake: asyncio.Event | None = None
        self._run_task: asyncio.Task[None] | None = None
        # The client certificate's life (``certlife``; monotonic seconds): when the one in the files
        # now expires, and when it was last replaced / when older sessions must end.
        self._cert_expires_at: float | None = None
        self._cert_rotated_at: float | None = None
        self._cert_reconnect_at: float | None = None
        self._trust_changed_at: float | None = None  # the same for a new trust root (pool CA)
        self._trust_reconnect_at: float | None = None
        self._cert_wake = asyncio.Event()  # set when any of these change

    # -- read-only view ------------------------------------------------------------------------------

    @property
    def role(self) -> Role:
        """Current role."""
        return self._role

    @property
    def healthy(self) -> bool:
        """The coordinator is reachable (a session is up)."""
        return self._healthy

    @property
    def ready(self) -> bool:
        """Pool-scope data is synced: reachable, ``leader-informer-sync`` exists and was seen to
        change within ``sync_stale_s`` by our own clock (OpenYurt's Yurt-Coordinator "Ready")."""
        return (self._healthy and self._sync_present
                and time.monotonic() - self._sync_seen_at < self.config.sync_stale_s)

    @property
    def leader(self) -> str | None:
        """The current leader's node name as seen in etcd: the valid candidacy with the lowest
        create revision (``poolkeys.leader_of``) that the coordinator did not disqualify; None if
        none, if its seal is refused here (untrusted: it leads, but nothing of it is used), or
        unreachable."""
        if not self._healthy:
            return None
        leader = self._observed_leader()
        return None if leader is None or leader in self._untrusted else leader

    @property
    def cache_area(self) -> CacheArea | None:
        """The current leader and where it keeps the pool cache (``nodes/<leader>/``), read at once;
        None without a leader. Only the leader can write there: a node serves nothing else."""
        leader = self.leader
        return None if leader is None else CacheArea(leader, self.keys.writer(leader))

    def _observed_leader(self) -> str | None:
        return leader_of(self._eligible())

    def _eligible(self) -> dict[str, Candidate]:
        """The candidacies that may lead: all but those the coordinator disqualified
        (``leader/disqualified/<node>``, written by the coordinator only: ``edgewatch.pooletcd.janitor``)."""
        return {name: Candidate(kv.lease, kv.create_revision) for name, kv in self._candidates.items()
                if self._disqualified.get(name) != kv.create_revision}

    @property
    def _leader_kv(self) -> LeaderKey | None:
        """The current leader's candidacy as observed (None: nobody leads)."""
        name = self._observed_leader()
        return None if name is None else self._candidates[name]

    def covers_delegation(self) -> bool:
        """True while the coordinator is reachable and some node is elected: the leader forwards
        delegated heartbeats, so the agent's peer-path delegation can stand back."""
        return self.leader is not None

    @property
    def forwarded(self) -> dict[str, float]:
        """Node -> monotonic time of this leader's last successful forward for it (a copy)."""
        return dict(self._forwarded)

    # -- shared by the parts -------------------------------------------------------------------------

    async def _rpc(self, call: Awaitable[T]) -> T:
        """One etcd call under ``rpc_timeout_s`` (aetcd also sets it as the gRPC deadline)."""
        async with asyncio.timeout(self.config.rpc_timeout_s):
            return await call

    def _set_role(self, role: Role) -> None:
        if role is not self._role:
            log.info("pool role %s -> %s", self._role.value, role.value,
                     extra={"pool": self.pool, "node": self.node, "role": role.value, "leader": self.leader})
        self._role = role
        for r in Role:
            self.metrics.role.labels(role=r.value).set(1 if r is role else 0)
        self.metrics.healthy.set(1 if self._healthy else 0)
        self.metrics.ready.set(1 if self.ready else 0)

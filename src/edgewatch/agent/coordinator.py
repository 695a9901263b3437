"""The pool coordinator (seed 002) on a small etcd per node pool: heartbeats, leader election, and
the leader forwarding cut-off nodes' heartbeats to the cloud (seeds 000/001). Enabled on an agent
by ``--coordinator URL``.

How it works
------------
Every agent of a pool keeps a session with the pool's etcd (``PoolCoordinator.run``):

* **Heartbeat.** ``heartbeats/<node>`` holds ``{"node", "renew_time", "delegate", "cloud_ok",
  "incarnation"}`` (JSON, ``renew_time`` RFC 3339 with microseconds, UTC, the writer's own clock:
  informational only, never compared with the reader's clock; ``incarnation`` is the agent's start
  time in µs, so a restarted agent is told apart). It is attached to an etcd lease
  of ``heartbeat_ttl_s`` (40 s, the kubelet Lease duration) and re-put every
  ``heartbeat_interval_s`` (10 s, the kubelet's renew rate) and at once when the node's own cloud
  link changes; ``delegate`` is true while the link is down. A dead node's heartbeat therefore
  vanishes on its own, with no clock comparison.
* **Election.** ``leader`` holds the leader's node name, created in a transaction only if absent
  (``create_revision == 0``) and attached to a short etcd lease (``leader_ttl_s`` = 5 s, kept alive
  every ``leader_keepalive_s`` = 1 s). Followers watch the key and campaign the moment it is
  deleted. A node whose own cloud link is down never campaigns; a leader that loses its link
  revokes its lease at once (the key goes, the others campaign within milliseconds).
* **Forwarding.** The leader lists ``heartbeats/`` and watches it from the listed revision, and for
  every heartbeat with ``delegate: true`` renews that node's cloud Lease through
  ``edgewatch.leases.renew_on_behalf(via="coordinator", alive_at=<when the heartbeat was put>)``:
  only ``renewTime`` and the delegate mark change, and the cloud never sees a later life sign than
  the node itself gave. *When it was put* is measured by the leader, never read from the value: a
  watch event is observed the moment it arrives (leader's monotonic clock); a heartbeat found by the
  initial listing is as old as the time since its etcd lease was last refreshed (the agent refreshes
  it right before every put), ``grantedTTL - TTL`` from etcd's LeaseTimeToLive — a duration
  measured by etcd alone. ``alive_at`` is then the controller's clock as the leader estimates it
  (``edgewatch.agent.cloudclock``) minus that age, so a node whose clock is off — the leader
  included — is carried exactly like any other (issue #9), within the apiserver's carry-clock bound. Work goes
  through a bounded queue, one entry per node (deduplicated), with per-node exponential backoff on
  failure and a re-forward at least every ``forward_interval_s`` while the heartbeat exists. It
  never forwards for a node whose peer verdict is ``"unhealthy"``, nor for itself.
* **Pool cache and Ready.** The leader runs the pool-scope cache's informer
  (``edgewatch.poolcache.leader``: one cloud watch per resource, written into this etcd). After
  every resource's initial sync it puts ``leader-informer-sync`` under its leader lease, so the key
  lives exactly as long as that leadership, and renews it every 10 s while its informers are
  synced. Every agent (leader included) reports ``ready`` only while the key exists and was seen
  to change within ``sync_stale_s`` (30 s) on its own monotonic clock (seed 002 "Ready"; no
  timestamp written by the leader is compared with ours).

Roles (``decide_role``, a pure function tested exhaustively): PENDING while etcd is unreachable
(no pool features at all; the agent's peer path carries heartbeats then, see
``covers_delegation``), LEADER when holding the leader key with the own cloud link up, FOLLOWER
otherwise.

Keys, all under ``/edgewatch/pools/<pool>/``::

    heartbeats/<node>       heartbeat JSON, lease heartbeat_ttl_s (one per node)
    leader                  leader node name, lease leader_ttl_s
    leader-informer-sync    {"leader", "synced_at", "resources": {name: rv}}, the leader's lease
    cache/...               the pool-scope cache (edgewatch.poolcache.layout)

Hand-over without a gap (the fault OpenYurt had: 15-20 s, nodes evicted)
------------------------------------------------------------------------
The cloud judges a delegated node by the renewTime the leader writes, which is when the node's
own heartbeat was put (as the leader measured it). Worst case when the leader process dies: it renewed its lease just before dying
and a delegated node put a fresh heartbeat just after, so that heartbeat is not forwarded until a
successor leads. The previous renewTime the cloud saw is then at most ``heartbeat_interval_s`` old
when the unforwarded heartbeat is written, plus the time to a new leader::

    heartbeat_interval_s                       10 s   (previous heartbeat, already forwarded)
  + leader_ttl_s                                5 s   (dead leader's lease expires)
  + etcd's expiry check period                ~0.5 s
  + watch delete event + campaign (2 RPCs)    ~0.1 s
  + list heartbeats + first forward (GET+PUT) ~0.2 s
  = about 16 s  <  40 s Lease duration (and the stock 50 s node-monitor-grace-period)

``CoordinatorConfig.handover_bound_s`` computes it from the settings. A leader that loses its
cloud link hands over faster: the link loss is seen the moment the agent's cloud-link monitor says
so (``PoolCoordinator.cloud_link_changed``), the lease is revoked at once and a follower campaigns on the
delete event: about 1 s plus the agent's own link-detection time. Clock skew between nodes plays no
part: the renewTime written is the leader's clock minus an age the leader (or etcd) measured.

Coordinator down or restarted
-----------------------------
Any failed etcd call (every one has a timeout, ``rpc_timeout_s``) or broken watch ends the session:
all its tasks are cancelled, the role goes PENDING, and the agent reconnects with a fresh gRPC
channel after a capped, jittered exponential backoff (``connect_backoff_*``). On reconnect the
heartbeat and leader leases are reused if etcd still has them (etcd keeps leases across a restart
with the data dir and re-arms each to its full TTL), otherwise new ones are granted; a leader whose
lease survived keeps leading without an election. A leader key left by this node's previous
incarnation is removed within ``health_interval_s`` instead of waiting for its TTL. A coordinator
that stops answering without closing the connection is noticed within ``health_interval_s`` +
``rpc_timeout_s`` (5 s) by the health probe; a killed one at once (the watch stream breaks).

Errors
------
A bad URL (scheme other than http/https, no host, credentials or a path in it) raises
``CoordinatorError`` from the constructor. Run-time failures never escape ``run()``: each attempt
logs one WARNING with a classified reason (``unreachable``, ``tls``, ``auth``, ``timeout``,
``etcd``, ``internal``) and a hint, counts ``edgewatch_coordinator_errors_total{reason}`` and keeps
the text in ``last_error``.

TLS with client certificates (how a production pool etcd should be run)
-----------------------------------------------------------------------
Start etcd with ``--cert-file``/``--key-file`` (serving certificate whose SANs cover the address
agents dial), ``--trusted-ca-file`` (the CA that signs agent certificates) and
``--client-cert-auth=true``; give each agent ``https://<host>:<port>`` and
``CoordinatorTLS(ca_file=..., cert_file=..., key_file=...)`` with a certificate of its own
(CN = node name), not one shared admin certificate. With etcd auth enabled, etcd maps the CN to an
etcd user: grant each node's user write access to ``heartbeats/<node>`` and ``leader*`` of its pool
and read access to the pool prefix only. The files are read at every (re)connect, so rotated
certificates are picked up without a restart.

Untrusted input: values read from etcd are validated (size, JSON, schema, node name matching the
key); rejects are logged and counted in ``edgewatch_coordinator_rejected_total{reason}``. A malformed
or lease-less ``leader`` key (which would block the election for ever) is deleted.

Limits: one etcd endpoint per pool (no client-side failover between members); forwarding renews
the Lease only (no NodeStatus); the cloud-link state is polled, not pushed.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import enum
import json
import logging
import random
import re
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aetcd
import grpc
from aetcd import rpc as etcd_rpc
from aetcd import utils as etcd_utils
from aetcd import watcher as etcd_watcher
from lightkube import AsyncClient
from prometheus_client import CollectorRegistry, Counter, Gauge
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from edgewatch.leases import RenewOutcome, renew_on_behalf
from edgewatch.poolcache.leader import CacheLeaderConfig, LeaderMetrics, PoolCacheLeader
from edgewatch.poolcache.resources import PoolResource
from edgewatch.core.types import DNS1123_SUBDOMAIN_PATTERN, is_dns1123_label, is_dns1123_subdomain
from edgewatch.timefmt import format_micro_time

log = logging.getLogger(__name__)

T = TypeVar("T")

KEY_ROOT = "/edgewatch/pools/"
DEFAULT_ETCD_PORT = 2379
# Node names are DNS-1123 subdomains, pool names DNS-1123 labels (no dots or slashes, so keys
# cannot nest): the checks of edgewatch.core.types.


# -- errors ------------------------------------------------------------------------------------------


class CoordinatorError(RuntimeError):
    """A coordinator problem with a clear message for the operator.

    Attributes:
        reason: short class for metrics/logs: ``config``, ``unreachable``, ``tls``, ``auth``,
            ``timeout``, ``etcd``, ``internal``.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


# -- the pure state machine --------------------------------------------------------------------------


class Role(enum.StrEnum):
    """Role of this agent in its pool (seed 002)."""

    PENDING = "pending"     # coordinator unreachable: no pool features
    FOLLOWER = "follower"   # not elected, or own cloud link down
    LEADER = "leader"       # elected and own cloud link up: forwards delegated heartbeats


@dataclass(frozen=True)
class RoleDecision:
    """What ``decide_role`` says to be and to do.

    Attributes:
        role: the role to report.
        campaign: try to create the leader key now.
        release: give the leader key up now (revoke its lease).
    """

    role: Role
    campaign: bool = False
    release: bool = False


def decide_role(*, reachable: bool, elected: bool, leader_present: bool, cloud_ok: bool) -> RoleDecision:
    """The role state machine, pure.

    Args:
        reachable: the coordinator answers.
        elected: this node holds the leader key (implies a leader is present).
        leader_present: some node holds the leader key.
        cloud_ok: this node's own cloud link is up.

    Rules: unreachable -> PENDING, nothing to do (a held lease expires by itself); elected with the
    cloud -> LEADER; elected without it -> FOLLOWER and release at once; not elected -> FOLLOWER,
    campaigning only if nobody leads and the own cloud link is up (a cut-off agent cannot forward,
    so it must never lead).
    """
    if not reachable:
        return RoleDecision(Role.PENDING)
    if elected:
        return RoleDecision(Role.LEADER) if cloud_ok else RoleDecision(Role.FOLLOWER, release=True)
    return RoleDecision(Role.FOLLOWER, campaign=cloud_ok and not leader_present)


def next_backoff(previous: float, *, initial: float, cap: float) -> float:
    """Exponential backoff step: ``initial`` first, then doubling, never above ``cap``."""
    return min(cap, initial if previous <= 0 else previous * 2)


# -- configuration -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CoordinatorConfig:
    """Timings and limits of the pool coordinator; all durations in seconds.

    Attributes:
        heartbeat_ttl_s: etcd lease of a heartbeat key: 40 s like the kubelet Lease, so a node's
            heartbeat lives in the pool exactly as long as the cloud would believe a Lease renewal.
        heartbeat_interval_s: re-put of the heartbeat: 10 s, the kubelet's renew rate (25 % of
            the TTL, so three puts may be lost before it expires). Also the dominant term of the
            hand-over bound (module docstring).
        leader_ttl_s: etcd lease of the leader key: 5 s. The time a dead leader blocks the
            election; short enough that hand-over fits well inside the 40 s Lease, long enough to
            ride out a GC pause or a slow etcd on a 2-core edge box (etcd's minimum is 1.5 s).
        leader_keepalive_s: keep-alive of the leader lease: 1 s, a fifth of the TTL, so four
            keep-alives may be lost before the lease expires.
        forward_interval_s: re-forward every delegated node at least this often: 10 s, the
            kubelet's rate; also re-checks that the mark is still in place.
        forward_workers: concurrent forwards (each is one GET and one PUT to the cloud).
        queue_size: bound of the forward queue (one entry per node at most).
        forward_backoff_initial_s, forward_backoff_max_s: per-node backoff after a failed forward:
            1 s doubling up to 10 s (not above forward_interval_s, so a failing node is retried at
            least as often as a healthy one is renewed).
        rpc_timeout_s: timeout of every etcd call: 3 s, below leader_ttl_s so a stuck call is
            noticed before the lease could have expired.
        api_timeout_s: timeout of one forward or one pool-sync list against the cloud API.
        health_interval_s: re-read of the leader keys (health probe and fallback to the watch).
        cloud_poll_interval_s: how often a leader re-checks that it may go on leading (its lease
            still confirmed; its own cloud link): 0.5 s.
        cloud_recheck_s: the own cloud link is re-read this often even without a change notice
            (:meth:`PoolCoordinator.cloud_link_changed`, which the agent's link monitor calls the
            moment the link flips): 5 s, a safety net for a ``cloud_ok`` source that gives none.
        connect_backoff_initial_s, connect_backoff_max_s: reconnect backoff (jittered, capped at
            10 s so a restarted coordinator is back in use within seconds).
        sync_stale_s: ``leader-informer-sync`` unchanged this long (by this agent's own clock) is
            stale and the coordinator not Ready: 30 s, three of the leader's 10 s renewals (seed
            002 / OpenYurt's figures).
        max_value_bytes: larger values read from etcd are rejected (a heartbeat is ~150 bytes).
    """

    heartbeat_ttl_s: int = 40
    heartbeat_interval_s: float = 10.0
    leader_ttl_s: int = 5
    leader_keepalive_s: float = 1.0
    forward_interval_s: float = 10.0
    forward_workers: int = 4
    queue_size: int = 1024
    forward_backoff_initial_s: float = 1.0
    forward_backoff_max_s: float = 10.0
    rpc_timeout_s: float = 3.0
    api_timeout_s: float = 10.0
    health_interval_s: float = 2.0
    cloud_poll_interval_s: float = 0.5
    cloud_recheck_s: float = 5.0
    connect_backoff_initial_s: float = 0.5
    connect_backoff_max_s: float = 10.0
    sync_stale_s: float = 30.0
    max_value_bytes: int = 4096

    def __post_init__(self) -> None:
        problems = []
        if self.leader_ttl_s < 2:
            problems.append("leader_ttl_s must be >= 2 (etcd's minimum lease TTL is about 1.5 s)")
        if not 0 < self.leader_keepalive_s <= self.leader_ttl_s / 3:
            problems.append("leader_keepalive_s must be in (0, leader_ttl_s / 3]")
        if not 0 < self.heartbeat_interval_s <= self.heartbeat_ttl_s / 3:
            problems.append("heartbeat_interval_s must be in (0, heartbeat_ttl_s / 3]")
        if self.rpc_timeout_s <= 0 or self.api_timeout_s <= 0:
            problems.append("timeouts must be positive")
        if self.forward_workers < 1 or self.queue_size < 1:
            problems.append("forward_workers and queue_size must be >= 1")
        if self.forward_backoff_max_s < self.forward_backoff_initial_s:
            problems.append("forward_backoff_max_s must be >= forward_backoff_initial_s")
        if problems:
            raise CoordinatorError("config", "invalid CoordinatorConfig: " + "; ".join(problems))

    def handover_bound_s(self, *, expiry_check_s: float = 0.5, overhead_s: float = 0.5) -> float:
        """Worst-case age of a delegated node's last forwarded renewTime when a successor
        forwards its next heartbeat after the leader died (module docstring): heartbeat interval +
        leader TTL + etcd's expiry check + campaign/list/forward overhead."""
        return self.heartbeat_interval_s + self.leader_ttl_s + expiry_check_s + overhead_s


@dataclass(frozen=True)
class CoordinatorTLS:
    """Client TLS to a production etcd: the CA that signed etcd's serving certificate and this
    agent's client certificate and key (PEM files; read at every connect)."""

    ca_file: Path
    cert_file: Path
    key_file: Path

    def credentials(self) -> grpc.ChannelCredentials:
        """gRPC channel credentials from the files.

        Raises:
            CoordinatorError: a file cannot be read.
        """
        try:
            return grpc.ssl_channel_credentials(
                root_certificates=Path(self.ca_file).read_bytes(),
                private_key=Path(self.key_file).read_bytes(),
                certificate_chain=Path(self.cert_file).read_bytes(),
            )
        except OSError as exc:
            raise CoordinatorError("tls", f"cannot read coordinator TLS file: {exc}") from exc


@dataclass(frozen=True)
class CoordinatorEndpoint:
    """A parsed coordinator URL."""

    scheme: str
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def parse_coordinator_url(url: str) -> CoordinatorEndpoint:
    """Parse ``http://host[:port]`` or ``https://host[:port]`` (port defaults to 2379).

    Raises:
        CoordinatorError: (reason ``config``) anything else, with what was wrong and the form expected.
    """
    expected = "expected http://HOST:PORT or https://HOST:PORT (the pool's etcd client URL)"
    try:
        parts = urllib.parse.urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise CoordinatorError("config", f"invalid coordinator URL {url!r}: {exc}; {expected}") from exc
    if parts.scheme not in ("http", "https"):
        raise CoordinatorError("config", f"unsupported scheme {parts.scheme!r} in coordinator URL {url!r}; {expected}")
    if not parts.hostname:
        raise CoordinatorError("config", f"no host in coordinator URL {url!r}; {expected}")
    if parts.username or parts.password:
        raise CoordinatorError("config", f"credentials in the coordinator URL are not supported; use client "
                                         f"certificates (CoordinatorTLS); {expected}")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise CoordinatorError("config", f"coordinator URL {url!r} must not have a path or query; {expected}")
    return CoordinatorEndpoint(scheme=parts.scheme, host=parts.hostname, port=port or DEFAULT_ETCD_PORT)


# -- values in etcd ----------------------------------------------------------------------------------


class Heartbeat(BaseModel):
    """A node's heartbeat in the coordinator (validated on read: etcd content is untrusted).

    Unknown fields are ignored so a newer agent can add some without a leader of an older version
    rejecting every heartbeat.
    """

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)

    node: str = Field(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN_PATTERN)
    renew_time: AwareDatetime
    delegate: bool
    cloud_ok: bool
    incarnation: int = Field(ge=0)

    def to_json(self) -> bytes:
        """The stored form (renew_time as Kubernetes MicroTime text)."""
        return json.dumps({"node": self.node, "renew_time": format_micro_time(self.renew_time),
                           "delegate": self.delegate, "cloud_ok": self.cloud_ok,
                           "incarnation": self.incarnation}, separators=(",", ":")).encode()


class HeartbeatRejected(ValueError):
    """A heartbeat value failed validation; ``reason`` is the metric label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def parse_heartbeat(node: str, value: bytes, *, max_bytes: int = 4096) -> Heartbeat:
    """Validate the value of ``heartbeats/<node>``.

    Raises:
        HeartbeatRejected: reason ``too_large``, ``json``, ``schema`` or ``node_mismatch``.
    """
    if len(value) > max_bytes:
        raise HeartbeatRejected("too_large", f"{len(value)} bytes > {max_bytes}")
    try:
        json.loads(value)  # only to tell bad JSON from a bad schema
    except (ValueError, UnicodeDecodeError) as exc:
        raise HeartbeatRejected("json", str(exc)) from exc
    try:
        hb = Heartbeat.model_validate_json(value)
    except ValidationError as exc:
        raise HeartbeatRejected("schema", "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
                                                    for e in exc.errors())) from exc
    if hb.node != node:
        raise HeartbeatRejected("node_mismatch", f"key names {node!r}, value names {hb.node!r}")
    return hb


# -- etcd client with TLS --------------------------------------------------------------------------


_CHANNEL_OPTIONS = {
    # Detect a silently dead TCP path under long-lived watches; etcd's server-side minimum ping
    # interval is 5 s (--grpc-keepalive-min-time), so stay above it.
    "grpc.keepalive_time_ms": 10_000,
    "grpc.keepalive_timeout_ms": 5_000,
    "grpc.keepalive_permit_without_calls": 0,
    # We retry at the session level; gRPC's own reconnect backoff would only add delay.
    "grpc.initial_reconnect_backoff_ms": 200,
    "grpc.max_reconnect_backoff_ms": 2_000,
    "grpc.enable_retries": 0,
    # The pool cache reads a resource's whole prefix in one range (gRPC's default cap is 4 MiB).
    "grpc.max_receive_message_length": 256 * 2**20,
}


class _EtcdClient(aetcd.Client):
    """aetcd's client, plus TLS channel credentials (aetcd 1.0 only opens insecure channels)."""

    def __init__(self, *, host: str, port: int, timeout: float,
                 credentials: grpc.ChannelCredentials | None) -> None:
        super().__init__(host=host, port=port, timeout=timeout, options=dict(_CHANNEL_OPTIONS))  # type: ignore[arg-type]
        self._credentials = credentials

    async def connect(self) -> None:  # same steps as aetcd.Client.connect, with a secure channel
        if self._connected.is_set():
            return
        target = f"{self._host}:{self._port}"
        options = list(self._options.items())
        if self._credentials is None:
            self.channel = etcd_rpc.insecure_channel(target, options=options)
        else:
            self.channel = etcd_rpc.secure_channel(target, self._credentials, options=options)
        self.kvstub = etcd_rpc.KVStub(self.channel)
        self.clusterstub = etcd_rpc.ClusterStub(self.channel)
        self.leasestub = etcd_rpc.LeaseStub(self.channel)
        self.maintenancestub = etcd_rpc.MaintenanceStub(self.channel)
        self._watcher = etcd_watcher.Watcher(etcd_rpc.WatchStub(self.channel), timeout=self._timeout,
                                             metadata=self.metadata)
        self._connected.set()


def classify_error(exc: BaseException, *, url: str) -> CoordinatorError:
    """Turn an exception from a session into a ``CoordinatorError`` with a reason and a hint."""
    leaf = exc
    while isinstance(leaf, BaseExceptionGroup) and leaf.exceptions:
        leaf = leaf.exceptions[0]
    if isinstance(leaf, CoordinatorError):
        return leaf
    cause = leaf.__cause__
    detail = str(leaf) or type(leaf).__name__
    code = cause.code() if isinstance(cause, grpc.aio.AioRpcError) else (
        leaf.code() if isinstance(leaf, grpc.aio.AioRpcError) else None)
    low = detail.lower()
    if isinstance(leaf, aetcd.exceptions.UnauthenticatedError) or code in (
            grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED) or "permission denied" in low:
        return CoordinatorError("auth", f"coordinator {url} refused this agent: {detail}; check its client "
                                        f"certificate and the etcd user/role for this node")
    # A client certificate the server rejects shows up as "Unwrap failed (TSI_DATA_CORRUPTED)".
    if any(word in low for word in ("ssl", "tls", "handshake", "certificate", "tsi_", "unwrap failed")):
        return CoordinatorError("tls", f"TLS with coordinator {url} failed: {detail}; check the CA, client "
                                       f"certificate and key, and that the scheme matches the server "
                                       f"(https:// for a TLS etcd)")
    if isinstance(leaf, (TimeoutError, aetcd.ConnectionTimeoutError, aetcd.WatchTimeoutError)) or \
            code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return CoordinatorError("timeout", f"coordinator {url} did not answer in time: {detail}")
    if isinstance(leaf, aetcd.ConnectionFailedError) or code == grpc.StatusCode.UNAVAILABLE:
        return CoordinatorError("unreachable", f"coordinator {url} unreachable: {detail}; check --coordinator "
                                               f"and that the pool's etcd is running (a TLS etcd needs https://)")
    if isinstance(leaf, aetcd.ClientError):
        return CoordinatorError("etcd", f"coordinator {url} returned an error: {detail}")
    return CoordinatorError("internal", f"coordinator session failed: {type(leaf).__name__}: {detail}")


# -- metrics -----------------------------------------------------------------------------------------


class _Metrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.role = Gauge("edgewatch_coordinator_role", "1 for this agent's current pool role",
                          ["role"], registry=registry)
        self.healthy = Gauge("edgewatch_coordinator_healthy", "1 while the pool coordinator is reachable",
                             registry=registry)
        self.ready = Gauge("edgewatch_coordinator_ready",
                           "1 while the leader-informer-sync key exists (pool data synced)", registry=registry)
        self.forwards = Counter("edgewatch_coordinator_forwards_total",
                                "Delegated heartbeat forwards by this agent as leader, by outcome",
                                ["outcome"], registry=registry)
        self.leader_changes = Counter("edgewatch_coordinator_leader_changes_total",
                                      "New leadership terms observed in the pool", registry=registry)
        self.rejected = Counter("edgewatch_coordinator_rejected_total",
                                "Values read from the coordinator that failed validation", ["reason"],
                                registry=registry)
        self.errors = Counter("edgewatch_coordinator_errors_total",
                              "Coordinator session failures, by reason", ["reason"], registry=registry)
        self.delegated = Gauge("edgewatch_coordinator_delegated_nodes",
                               "Delegated heartbeats the leader currently forwards", registry=registry)
        for role in Role:
            self.role.labels(role=role.value).set(1 if role is Role.PENDING else 0)
        for outcome in [*(o.value for o in RenewOutcome), "skipped_unhealthy", "verdict_error", "no_life_sign"]:
            self.forwards.labels(outcome=outcome)


# -- the coordinator ---------------------------------------------------------------------------------


class _StepDown(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class _LeaderKey:
    value: bytes
    lease: int
    create_revision: int
    mod_revision: int


class PoolCoordinator:
    """One agent's membership in its pool's coordinator (see the module docstring).

    Args (keyword-only):
        url: the pool etcd's client URL, ``http://host:port`` or ``https://host:port``.
        pool: node pool name (DNS-1123 label).
        node: this node's name.
        kube: cloud API client; used only by the leader, to forward and to sync.
        cloud_ok: this node's own cloud link state (cheap; read on :meth:`cloud_link_changed` and
            every ``cloud_recheck_s``).
        verdict_of: the peer verdict of a node: "healthy", "unhealthy" or "unknown".
        config: timings, see ``CoordinatorConfig``.
        tls: client-certificate TLS (required by a production etcd); needs an https URL.
        registry: where the metrics are registered.
        pool_resources: the pool-scope resources the leader caches (``edgewatch.poolcache``);
            empty: no cache (the leader still writes ``leader-informer-sync``).
        cache_config: the leader informer's settings.
        wall: the clock forwarded renewTimes are written in (aware UTC datetime; the agent passes
            its estimate of the controller's clock, ``edgewatch.agent.cloudclock``).

    Raises:
        CoordinatorError: (reason ``config``) bad URL, names, or TLS with an http URL.

    ``run()`` works until cancelled; cancelling it leaves this node's etcd leases to expire as if
    the process died. ``close(graceful=True)`` stops it and releases leadership at once.
    """

    def __init__(
        self,
        *,
        url: str,
        pool: str,
        node: str,
        kube: AsyncClient,
        cloud_ok: Callable[[], bool],
        verdict_of: Callable[[str], str],
        config: CoordinatorConfig | None = None,
        tls: CoordinatorTLS | None = None,
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
            raise CoordinatorError("config", f"CoordinatorTLS given but the coordinator URL {url!r} is not https://")
        self.pool = pool
        self.node = node
        self.kube = kube
        self._cloud_ok_fn = cloud_ok
        self._verdict_of = verdict_of
        self.config = config or CoordinatorConfig()
        self.tls = tls
        registry = registry if registry is not None else CollectorRegistry()
        self.metrics = _Metrics(registry)
        self.incarnation = time.time_ns() // 1000

        prefix = f"{KEY_ROOT}{pool}/"
        self.prefix = prefix
        self.heartbeat_prefix = f"{prefix}heartbeats/".encode()
        self.leader_key = f"{prefix}leader".encode()
        self.sync_key = f"{prefix}leader-informer-sync".encode()
        self.pool_resources = tuple(pool_resources)
        http = getattr(getattr(kube, "_client", None), "_client", None)  # lightkube's httpx client
        if http is None and self.pool_resources:
            raise CoordinatorError("config", "the pool cache needs a lightkube AsyncClient (its HTTP client)")
        self.cache_leader = PoolCacheLeader(resources=self.pool_resources, http=http, prefix=prefix, node=node,
                                            metrics=LeaderMetrics(registry), config=cache_config)

        # Observed state (written only from the event loop).
        self._role = Role.PENDING
        self._healthy = False
        self._leader_kv: _LeaderKey | None = None
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
        change within ``sync_stale_s`` by our own clock (seed 002)."""
        return (self._healthy and self._sync_present
                and time.monotonic() - self._sync_seen_at < self.config.sync_stale_s)

    @property
    def leader(self) -> str | None:
        """The current leader's node name as seen in etcd (None if none, or unreachable)."""
        if not self._healthy or self._leader_kv is None:
            return None
        name = self._leader_kv.value.decode(errors="replace")
        return name if is_dns1123_subdomain(name) else None

    def covers_delegation(self) -> bool:
        """True while the coordinator is reachable and some node is elected: the leader forwards
        delegated heartbeats, so the agent's peer-path delegation can stand back."""
        return self.leader is not None

    @property
    def forwarded(self) -> dict[str, float]:
        """Node -> monotonic time of this leader's last successful forward for it (a copy)."""
        return dict(self._forwarded)

    # -- lifecycle -----------------------------------------------------------------------------------

    async def run(self) -> None:
        """Keep a session with the coordinator until cancelled; reconnect after any failure."""
        if self._closing:
            return
        self._run_task = asyncio.current_task()
        self._hb_wake, self._election_wake, self._stepdown_wake = asyncio.Event(), asyncio.Event(), asyncio.Event()
        loop = asyncio.get_running_loop()
        backoff = 0.0
        while not self._closing:
            started = loop.time()
            try:
                await self._session()
            except Exception as exc:  # noqa: BLE001 - classified, logged and counted; never escapes
                error = classify_error(exc, url=self.endpoint.url)
                self.last_error = str(error)
                self.metrics.errors.labels(reason=error.reason).inc()
                extra = {"pool": self.pool, "node": self.node, "reason": error.reason, "url": self.endpoint.url}
                if error.reason == "internal":
                    log.error("coordinator session failed: %s", error, exc_info=exc, extra=extra)
                else:
                    log.warning("coordinator session failed: %s", error, extra=extra)
            if loop.time() - started > self.config.connect_backoff_max_s:
                backoff = 0.0  # the session lived a while: this is a new failure, start small
            backoff = next_backoff(backoff, initial=self.config.connect_backoff_initial_s,
                                   cap=self.config.connect_backoff_max_s)
            await asyncio.sleep(backoff * random.uniform(0.5, 1.0))

    async def close(self, graceful: bool = True) -> None:
        """Stop ``run()`` and, if ``graceful``, revoke the leader lease so a follower takes over at
        once (the heartbeat is left to expire: it states this node was alive until then). Never
        raises for coordinator errors."""
        self._closing = True
        task = self._run_task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
            await asyncio.wait({task})  # its outcome is not ours to raise; our own cancellation still is
        self._set_pending()
        if graceful and self._leader_lease is not None:
            lease, self._leader_lease = self._leader_lease, None
            try:
                client = self._new_client()
            except CoordinatorError as exc:
                log.warning("could not release pool leadership: %s", exc, extra={"pool": self.pool, "node": self.node})
                return
            try:
                await self._rpc(client.revoke_lease(lease))
                log.info("released pool leadership", extra={"pool": self.pool, "node": self.node})
            except Exception as exc:  # noqa: BLE001 - best effort: the lease expires anyway
                gone = "lease not found" in str(exc)
                log.log(logging.INFO if gone else logging.WARNING, "could not release pool leadership: %s",
                        "its lease already expired" if gone else classify_error(exc, url=self.endpoint.url),
                        extra={"pool": self.pool, "node": self.node})
            finally:
                await self._close_client(client)

    # -- session -------------------------------------------------------------------------------------

    def new_client(self) -> aetcd.Client:
        """A new etcd client for this pool's coordinator (same URL and TLS), for other readers of
        the pool's etcd (the pool cache); the caller closes it."""
        return self._new_client()

    def _new_client(self) -> _EtcdClient:
        creds = None
        if self.endpoint.scheme == "https":
            creds = self.tls.credentials() if self.tls is not None else grpc.ssl_channel_credentials()
        host = f"[{self.endpoint.host}]" if ":" in self.endpoint.host else self.endpoint.host  # IPv6 literal
        return _EtcdClient(host=host, port=self.endpoint.port, timeout=self.config.rpc_timeout_s, credentials=creds)

    @staticmethod
    async def _close_client(client: _EtcdClient) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.close(), 2.0)

    async def _rpc(self, call: Awaitable[T]) -> T:
        """One etcd call under ``rpc_timeout_s`` (aetcd also sets it as the gRPC deadline)."""
        async with asyncio.timeout(self.config.rpc_timeout_s):
            return await call

    async def _session(self) -> None:
        client = self._new_client()
        cancelled = False
        try:
            snapshot = await self._rpc(client.get_prefix(self.leader_key))
            self._healthy = True
            self.last_error = None
            self._cloud = self._cloud_ok()
            self._apply_snapshot(snapshot)
            self._set_role(Role.FOLLOWER)
            log.info("coordinator reachable", extra={"pool": self.pool, "node": self.node, "url": self.endpoint.url,
                                                     "leader": self.leader})
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._cloud_monitor())
                tg.create_task(self._health_probe(client))
                tg.create_task(self._observe_leader(client, snapshot.header.revision))
                tg.create_task(self._heartbeat_loop(client))
                tg.create_task(self._election_loop(client))
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:
            was_healthy = self._healthy
            self._set_pending()
            if was_healthy:
                log.log(logging.INFO if cancelled else logging.WARNING, "coordinator session ended; role pending",
                        extra={"pool": self.pool, "node": self.node, "cancelled": cancelled})
            await self._close_client(client)

    def _set_pending(self) -> None:
        self._healthy = False
        self._elected = False
        self._leader_kv = None
        self._sync_present = False
        self._state_rev = 0
        self._forwarded.clear()
        self.metrics.delegated.set(0)
        self._set_role(Role.PENDING)

    def _set_role(self, role: Role) -> None:
        if role is not self._role:
            log.info("pool role %s -> %s", self._role.value, role.value,
                     extra={"pool": self.pool, "node": self.node, "role": role.value, "leader": self.leader})
        self._role = role
        for r in Role:
            self.metrics.role.labels(role=r.value).set(1 if r is role else 0)
        self.metrics.healthy.set(1 if self._healthy else 0)
        self.metrics.ready.set(1 if self.ready else 0)

    def _cloud_ok(self) -> bool:
        try:
            return bool(self._cloud_ok_fn())
        except Exception:  # noqa: BLE001 - a broken callback must not make us lead blind
            log.exception("cloud_ok() failed; treating the cloud link as down", extra={"node": self.node})
            return False

    def cloud_link_changed(self) -> None:
        """Tell the coordinator that this node's own cloud link may have flipped (the agent's link
        monitor calls it on every change): the heartbeat, the election and a leader's step-down
        react at once instead of at the next :attr:`CoordinatorConfig.cloud_recheck_s`."""
        self._cloud_changed.set()

    async def _cloud_monitor(self) -> None:
        """Follow the own cloud link (on :meth:`cloud_link_changed`, and every ``cloud_recheck_s``);
        on a change wake the heartbeat, the election and the leader."""
        assert self._hb_wake and self._election_wake and self._stepdown_wake
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._cloud_changed.wait(), self.config.cloud_recheck_s)
            self._cloud_changed.clear()
            now = self._cloud_ok()
            if now != self._cloud:
                self._cloud = now
                log.info("own cloud link %s", "up" if now else "down",
                         extra={"pool": self.pool, "node": self.node, "cloud_ok": now})
                self._hb_wake.set()
                self._election_wake.set()
                self._stepdown_wake.set()

    # -- leader key observation ----------------------------------------------------------------------

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
                await asyncio.wait_for(watch.cancel(), 1.0)
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

    # -- heartbeat -----------------------------------------------------------------------------------

    def heartbeat_key(self, node: str) -> bytes:
        """Key of ``node``'s heartbeat."""
        return self.heartbeat_prefix + node.encode()

    async def _ensure_lease(self, client: _EtcdClient, lease_id: int | None, ttl: int) -> int:
        """Reuse ``lease_id`` if etcd still has it (after a reconnect or restart), else grant one."""
        if lease_id is not None:
            reply = await self._rpc(client.refresh_lease(lease_id))
            if reply is not None and reply.TTL > 0:
                return lease_id
        lease = await self._rpc(client.lease(ttl))
        return int(lease.id)

    async def _heartbeat_loop(self, client: _EtcdClient) -> None:
        assert self._hb_wake is not None
        self._hb_lease = await self._ensure_lease(client, self._hb_lease, self.config.heartbeat_ttl_s)
        while True:
            self._hb_wake.clear()
            cloud = self._cloud
            hb = Heartbeat(node=self.node, renew_time=dt.datetime.now(dt.timezone.utc), delegate=not cloud,
                           cloud_ok=cloud, incarnation=self.incarnation)
            await self._rpc(client.put(self.heartbeat_key(self.node), hb.to_json(), lease=self._hb_lease))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._hb_wake.wait(), self.config.heartbeat_interval_s)
            reply = await self._rpc(client.refresh_lease(self._hb_lease))
            if reply is None or reply.TTL <= 0:
                log.warning("heartbeat lease expired; granting a new one", extra={"pool": self.pool, "node": self.node})
                self._hb_lease = int((await self._rpc(client.lease(self.config.heartbeat_ttl_s))).id)

    # -- election ------------------------------------------------------------------------------------

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
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._election_wake.wait(), self.config.health_interval_s)

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
        reason = ""
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._keepalive(client, lease))
                tg.create_task(self._watch_step_down())
                tg.create_task(self._forward(client))
                tg.create_task(self.cache_leader.run(etcd=client, rpc=self._rpc, lease=lease))
        except* _StepDown as group:
            reason = group.exceptions[0].reason  # type: ignore[attr-defined]
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
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stepdown_wake.wait(), self.config.cloud_poll_interval_s)

    # -- forwarding ----------------------------------------------------------------------------------

    async def _forward(self, client: _EtcdClient) -> None:
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
                await asyncio.wait_for(watch.cancel(), 1.0)

    async def _listed_age(self, client: _EtcdClient, kv: Any) -> float | None:
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
                                 max_bytes=self.config.max_value_bytes)
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
                hb = parse_heartbeat(node, value, max_bytes=self.config.max_value_bytes)
            except HeartbeatRejected as exc:
                self.metrics.rejected.labels(reason=exc.reason).inc()
                log.warning("rejected heartbeat from the coordinator: %s", exc,
                            extra={"pool": self.pool, "node": self.node, "peer": node[:80], "reason": exc.reason})
                self._heartbeats.pop(node, None)  # never keep forwarding an older, valid one
                self._put_at.pop(node, None)
                return
            previous = self._heartbeats.get(node)
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


__all__ = [
    "CoordinatorConfig", "CoordinatorEndpoint", "CoordinatorError", "CoordinatorTLS", "Heartbeat",
    "HeartbeatRejected", "PoolCoordinator", "Role", "RoleDecision", "classify_error", "decide_role",
    "next_backoff", "parse_coordinator_url", "parse_heartbeat",
]

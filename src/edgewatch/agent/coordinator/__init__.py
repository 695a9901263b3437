"""The pool coordinator (OpenYurt's Yurt-Coordinator design) on a small etcd per node pool: heartbeats,
leader election, and the leader forwarding cut-off nodes' heartbeats to the cloud (heartbeat delegation,
docs/how-it-decides.md). Enabled on an agent
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
  ``edgewatch.kube.leases.renew_on_behalf(via="coordinator", alive_at=<when the heartbeat was put>)``:
  only ``renewTime`` and the delegate mark change, and the cloud never sees a later life sign than
  the node itself gave. *When it was put* is measured by the leader, never read from the value: a
  watch event is observed the moment it arrives (leader's monotonic clock); a heartbeat found by the
  initial listing is as old as the time since its etcd lease was last refreshed (the agent refreshes
  it right before every put), ``grantedTTL - TTL`` from etcd's LeaseTimeToLive — a duration
  measured by etcd alone. ``alive_at`` is then the control plane's clock as the leader estimates it
  (``edgewatch.agent.cloudclock``) minus that age, so a node whose clock is off — the leader
  included — is carried exactly like any other (docs/clock-skew.md), within the apiserver's carry-clock
  bound. Work goes through a bounded queue, one entry per node (deduplicated), with per-node exponential
  backoff on failure and a re-forward at least every ``forward_interval_s`` while the heartbeat exists.
  It never forwards for a node whose peer verdict is ``"unhealthy"``, nor for itself.
* **Pool cache and Ready.** The leader runs the pool-scope cache's informer
  (``edgewatch.poolcache.leader``: one cloud watch per resource, written into this etcd). After
  every resource's initial sync it puts ``leader-informer-sync`` under its leader lease, so the key
  lives exactly as long as that leadership, and renews it every 10 s while its informers are
  synced. Every agent (leader included) reports ``ready`` only while the key exists and was seen
  to change within ``sync_stale_s`` (30 s) on its own monotonic clock (OpenYurt's "Ready"; no
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

Stopping: cancelling ``run()`` or ``close()`` ends the session within about ``rpc_timeout_s``, the
coordinator reachable or not: every wait in it ends on cancellation (``edgewatch.waits``: not
``asyncio.wait_for``, which on Python 3.11 drops a cancellation that arrives as what it waits for
completes) and its clean-up is bounded (closing the client at most 2 s); ``close(graceful=True)``
adds one revoke under ``rpc_timeout_s``. A task that still does not end is cancelled again, and
given up on after ``edgewatch.waits.STOP_GIVE_UP_S``.

Errors
------
A bad URL (scheme other than http/https, no host, credentials or a path in it) raises
``CoordinatorError`` from the constructor. Run-time failures never escape ``run()``: each attempt
logs one WARNING with a classified reason (``unreachable``, ``tls``, ``auth``, ``timeout``,
``etcd``, ``certificate_expired``, ``internal``) and a hint, counts
``edgewatch_coordinator_errors_total{reason}`` and keeps the text in ``last_error``. A session
ended on purpose to reconnect (a rotated certificate or pool CA) is no error: it is counted in
``edgewatch_coordinator_reconnects_total{reason}`` and reconnects after the smallest backoff.

TLS with client certificates (how a production pool etcd should be run)
-----------------------------------------------------------------------
Start etcd with ``--cert-file``/``--key-file`` (serving certificate whose SANs cover the address
agents dial), ``--trusted-ca-file`` (the CA that signs agent certificates) and
``--client-cert-auth=true``; give each agent ``https://<host>:<port>`` and
``CoordinatorTLS(ca_file=..., cert_file=..., key_file=...)`` with a certificate of its own
(CN = node name), not one shared admin certificate. With ``--coordinator-certificate`` the agent
does this itself (``NodeCertificateTLS``: the certificate the controller signed for this node, the
pool CA from its ConfigMap as the only root; ``edgewatch.agent.coordinating``). With etcd auth enabled, etcd maps the CN to an
etcd user: grant each node's user write access to ``heartbeats/<node>`` and ``leader*`` of its pool
and read access to the pool prefix only. The files are read at every (re)connect, so rotated
certificates are picked up without a restart; a session opened before a rotation is ended within
30 s of it, and none outlives its certificate (``certlife``, ``PoolCoordinator.certificate_changed``).

Untrusted input: values read from etcd are validated (size, JSON, schema, node name matching the
key); rejects are logged and counted in ``edgewatch_coordinator_rejected_total{reason}``. A malformed
or lease-less ``leader`` key (which would block the election for ever) is deleted.

Limits: one etcd endpoint per pool (no client-side failover between members); forwarding renews
the Lease only (no NodeStatus); the cloud-link state is pushed by the agent (``cloud_link_changed``) and re-read every ``cloud_recheck_s`` (5 s) as a safety net.

Modules
-------
One concept each. ``PoolCoordinator`` (``pool``) is composed of the parts indented under it, each a
class building on the ones it calls (``Session`` on ``Election``, ``Election`` on ``LeaderKeyWatch``
and ``Forwarding``, all of them on ``CoordinatorState``)::

    config        CoordinatorConfig (timings, limits), CoordinatorTLS, NodeCertificateTLS, check_pool_ca,
                  parse_coordinator_url, KEY_ROOT
    errors        CoordinatorError and classify_error (the reasons under "Errors"), Reconnect
    certlife      how long a session may live on its client certificate: pure decisions
    roles         Role, RoleDecision, decide_role: the pure state machine
    backoff       next_backoff (reconnects, failed forwards)
    schema        Heartbeat and its validation on read (parse_heartbeat, HeartbeatRejected)
    metrics       the edgewatch_coordinator_* metrics
    pool          PoolCoordinator, composed of:
      session     run/close, the session and its reconnects, the own cloud link, heartbeat puts
      election    campaign, lead (keep-alive, forwarding, pool-cache informer), step down
      leaderkey   the leader and leader-informer-sync keys as seen: watch, health probe, repair
      forwarding  the delegated-heartbeat queue and the forwards to the cloud
      state       the constructor, the shared state, the read-only view, one etcd call, the role
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from edgewatch.agent.coordinator.backoff import next_backoff
from edgewatch.agent.coordinator.config import (
    DEFAULT_ETCD_PORT,
    KEY_ROOT,
    CoordinatorConfig,
    CoordinatorEndpoint,
    CoordinatorTLS,
    NodeCertificateTLS,
    check_pool_ca,
    parse_coordinator_url,
)
from edgewatch.agent.coordinator.errors import CoordinatorError, classify_error
from edgewatch.agent.coordinator.roles import Role, RoleDecision, decide_role
from edgewatch.agent.coordinator.schema import Heartbeat, HeartbeatRejected, parse_heartbeat

__all__ = [
    "CoordinatorConfig", "CoordinatorEndpoint", "CoordinatorError", "CoordinatorTLS", "Heartbeat",
    "HeartbeatRejected", "NodeCertificateTLS", "PoolCoordinator", "Role", "RoleDecision", "check_pool_ca",
    "classify_error", "decide_role",
    "next_backoff", "parse_coordinator_url", "parse_heartbeat",
    "DEFAULT_ETCD_PORT", "KEY_ROOT",
    "EtcdClient",  # the integration tests' raw etcd client (edgewatch.pooletcd.client)
]

if TYPE_CHECKING:
    from edgewatch.agent.coordinator.pool import PoolCoordinator
    from edgewatch.pooletcd.client import EtcdClient


def __getattr__(name: str) -> Any:
    """``PoolCoordinator`` and the raw etcd client, imported on first use (PEP 562): they load
    gRPC, protobuf and aetcd (about 11 MiB), which an agent in a pool without a coordinator never
    needs."""
    if name == "PoolCoordinator":
        from edgewatch.agent.coordinator.pool import PoolCoordinator
        return PoolCoordinator
    if name == "EtcdClient":
        from edgewatch.pooletcd.client import EtcdClient
        return EtcdClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

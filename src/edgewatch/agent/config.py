"""The agent's settings, one frozen object passed explicitly (no globals). Every field documents
its default and why; the CLI (``edgewatch agent --help``) maps one flag to each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from edgewatch.agent.cloudlink import CloudLinkConfig
from edgewatch.agent.coordinator import CoordinatorTLS
from edgewatch.agent.peerserver import PeerServerConfig
from edgewatch.core.detector import DetectorConfig
from edgewatch.core.suspicion import SuspicionConfig
from edgewatch.core.quorum import VoteConfig
from edgewatch.core.topology import DEFAULT_RINGS
from edgewatch.core.types import NodeName
from edgewatch.core.wire import WireConfig
from edgewatch.names import DEFAULT_PEER_PORT, DEFAULT_POOL_CACHE_PORT, IDENTITY_NAMESPACE


@dataclass(frozen=True, kw_only=True)
class AgentConfig:
    """Settings of one agent.

    Attributes:
        node: this node's name (the downward API's spec.nodeName in the DaemonSet).
        identity_file: this node's private signing keys (Ed25519, PKCS#8 PEM, signing key first),
            created with a new key on first start (``edgewatch.core.identity``). Keep it on the
            node (the DaemonSet's hostPath state folder) so the node keeps its identity across
            agent restarts, also while it is cut off from the cloud.
        identity_namespace: where every node's public key record lives (default
            ``edgewatch-nodes``; see ``edgewatch.agent.identity``).
        listen_address: address the peer/ops server binds (default 0.0.0.0; the playground binds
            the node's own address).
        port: peer port (51005, the same as TKE Edge's edge-health), also serving /healthz, /readyz, /metrics.
        namespace: where the ``edgewatch-config`` ConfigMap lives (default "edgewatch").
        kubelet_healthz_url: the local kubelet's health endpoint (kubelet's default
            http://127.0.0.1:10248/healthz).
        probe_timeout_s: timeout of one peer exchange, seconds (default 0.8 s: a LAN answers in
            milliseconds; the slack absorbs a busy node without calling it dead).
        peer_kubelet_port: the kubelet server port of the peers (default 10250, kubelet's ``--port``,
            Kubernetes docs "Ports and Protocols"; 0 = off). Once a period the agent makes one TCP
            connect (handshake only, no credentials) to it on each neighbour its failure detector
            stopped seeing alive in the last 20 s, and once a minute on each other one. A dead vote on a neighbour
            whose port answers (its agent is down, not its host) or never answered (the check
            cannot tell) is *unconfirmed*: the evidence Lease says so, and the controller does not
            fail that node on an unanswered challenge, only once its kubelet's Lease is overdue
            (``edgewatch.agent.hostcheck``, ``edgewatch.core.hostalive``). Off: every dead vote is
            unconfirmed (no fast failing of the nodes this agent votes dead).
        rings: rings of the monitoring topology (``edgewatch.core.topology``, default 3) used only
            when the membership has no grouping config (tests, the simulator); deployed agents and
            the controller both take ``monitoringRings`` from the ``edgewatch-config`` ConfigMap.
        publish_refresh_s: rewrite an unchanged EdgeHealthy condition this often, seconds
            (default 15 s: well inside the controller's 60 s edge-view TTL, so a live writer never
            looks stale, at one small write per node per 15 s).
        carry_interval_s: renew a carried Lease this often, seconds (default 5 s: the kubelet renews
            every 10 s; half that leaves margin for a lost write inside the 40 s Lease).
        api_timeout_s: bound of one cloud operation, seconds: an EdgeHealthy write, a carried Lease's
            renewal (GET + UPDATE with conflict retries), the role condition, the own-mark check
            (default 5 s: as long as a carry interval, so a renewal that hangs is abandoned and
            retried with a fresh life sign before the next one is due; each request inside also
            has the API client's own timeout).
        state_dir: where to persist the group roster for restarts during a cut (None = memory only).
        coordinator_url: the pool coordinator (etcd) URL, or None: then the ConfigMap's
            ``poolCoordinators`` entry for this node's pool, if any (live), else the peer path only.
        coordinator_tls: client certificates for an https:// coordinator (production etcd with
            --client-cert-auth), or None.
        pool: this node's pool (for the coordinator's keys); default: the ``edgewatch.io/pool`` label.
        kubeconfig: kubeconfig path (None = in-cluster ServiceAccount).
        pool_cache_address: where the pool cache's read-only API endpoint listens (default
            127.0.0.1: only this node's own clients, kube-proxy and CoreDNS, read it).
        pool_cache_port: its HTTPS port (default 51007; 0 turns the node side of the cache off).
        coordinator_client_certificate: obtain, store (in ``state_dir``, which it needs) and rotate this
            node's client certificate for the pool coordinator from the controller's signer
            (``edgewatch.agent.certrequester``; default off). When on, the pool coordinator connects
            with it, trusting only the pool CA (``edgewatch.agent.coordinating``).
        coordinator_certificate_lifetime_s: the ``expirationSeconds`` it asks for (600 .. 86400;
            default 86400, the signer's maximum: renewed after 2/3 of it, 16 h).
        server: bounds of the peer port's server against slow and flooding clients: the read
            deadline of a whole request (default 3 s), the idle time of a keep-alive connection
            (30 s), connections per source (8) and of strangers in all (64); each default and why
            in ``edgewatch.agent.peerserver.PeerServerConfig``.
        suspicion: when a silent neighbour is named on the evidence Lease as suspected, so that
            the controller challenges it before the failure detector's DEAD (1.5 s of silence and
            two failed periods on a clean link; each default and why in
            ``edgewatch.core.suspicion.SuspicionConfig``).
    """

    node: NodeName
    identity_file: Path
    identity_namespace: str = IDENTITY_NAMESPACE
    listen_address: str = "0.0.0.0"
    port: int = DEFAULT_PEER_PORT
    namespace: str = "edgewatch"
    kubelet_healthz_url: str = "http://127.0.0.1:10248/healthz"
    probe_timeout_s: float = 0.8
    peer_kubelet_port: int = 10250
    rings: int = DEFAULT_RINGS
    publish_refresh_s: float = 15.0
    carry_interval_s: float = 5.0
    api_timeout_s: float = 5.0
    state_dir: Path | None = None
    coordinator_url: str | None = None
    coordinator_tls: CoordinatorTLS | None = None
    pool: str | None = None
    kubeconfig: str | None = None
    pool_cache_address: str = "127.0.0.1"
    pool_cache_port: int = DEFAULT_POOL_CACHE_PORT
    coordinator_client_certificate: bool = False
    coordinator_certificate_lifetime_s: int = 86400
    detector: DetectorConfig = field(default_factory=DetectorConfig)
    suspicion: SuspicionConfig = field(default_factory=SuspicionConfig)
    votes: VoteConfig = field(default_factory=VoteConfig)
    wire: WireConfig = field(default_factory=WireConfig)
    cloud_link: CloudLinkConfig = field(default_factory=CloudLinkConfig)
    server: PeerServerConfig = field(default_factory=PeerServerConfig)

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ValueError(f"port out of range: {self.port}")
        if not 0 <= self.pool_cache_port < 65536 or (self.pool_cache_port and self.pool_cache_port == self.port):
            raise ValueError(f"pool cache port out of range or equal to the peer port: {self.pool_cache_port}")
        if isinstance(self.peer_kubelet_port, bool) or not isinstance(self.peer_kubelet_port, int) \
                or not 0 <= self.peer_kubelet_port < 65536:
            raise ValueError(f"peer_kubelet_port out of range (0 = off): {self.peer_kubelet_port!r}")
        if self.probe_timeout_s <= 0 or self.probe_timeout_s >= self.votes.exchange_period_s * 2:
            raise ValueError("probe_timeout_s must be > 0 and below two exchange periods")
        if isinstance(self.rings, bool) or not isinstance(self.rings, int) or self.rings < 1:
            raise ValueError("rings must be an int >= 1")
        if self.api_timeout_s <= 0 or self.carry_interval_s <= 0:
            raise ValueError("api_timeout_s and carry_interval_s must be > 0 seconds")
        if self.coordinator_client_certificate and self.state_dir is None:
            raise ValueError("the coordinator client certificate needs a state folder (--state-dir)")
        if not 600 <= self.coordinator_certificate_lifetime_s <= 86400:
            raise ValueError("coordinator_certificate_lifetime_s must be 600 .. 86400 seconds")

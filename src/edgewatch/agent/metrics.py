"""The agent's Prometheus metrics, registered on a registry passed in (no global registry), so
many agents can share one process in scale runs.

Names follow Prometheus conventions (``_total`` counters, base units). Labels are bounded: peer
names (group size), reject reasons (an enum), outcomes (an enum).

``AgentMetrics`` also implements the event protocols the agent's parts are handed
(``edgewatch.agent.ports``: watch events, refused configuration and key records, failed state
saves, evidence writes, cloud-link flips): what the agent counts is what its parts tell it.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class AgentMetrics:
    """Every metric the agent exports.

    Attributes:
        probes: each period's evidence about a peer, by ``result``: a v5 exchange (ok, failed,
            rejected, no_address, unencodable) or, for a peer whose liveness datagrams speak for it,
            their judgement (datagram_ok; fallback_ok: no datagram proof, but the TCP exchange made
            for it succeeded; datagram_missed).
        statement_exchanges: statement exchanges started, by ``reason`` (``v5``: every period to a
            peer the datagrams do not speak for; ``changed``, ``pull``, ``beacon``, ``refresh``,
            ``fallback``: ``edgewatch.core.cadence``), whether over HTTP or, for ``changed`` and
            ``refresh``, pushed one way in a statement datagram.
        statement_datagrams_sent: those pushed in a statement datagram.
        statement_datagrams: statements received by datagram, by ``result`` (what the heartbeat
            book made of them: new, duplicate, older; or a ``RejectReason`` value).
        messages: messages received, by ``result`` (accepted or a ``RejectReason`` value).
        relayed: relayed heartbeats received, by ``result`` (new, duplicate, older or a reason).
        verdict: 1 for the current verdict of each ``node`` (labels node, verdict).
        peer_health: 1 for this agent's failure-detector state of each ``node``.
        peer_dead_after: failures in a row this agent's detector needs now before it judges
            ``node`` DEAD (3 on a clean link; more where that peer's failures come in bursts:
            ``edgewatch.core.detector.required_failures``).
        cloud_link_up: 1 while this node reaches the apiserver.
        delegations: Lease renewals done for cut-off peers, by ``outcome`` (a ``RenewOutcome`` value,
            ``timeout`` or ``error``).
        carrying: number of peers whose heartbeat this agent carries now.
        config_rejected: ConfigMap updates refused, by ``reason`` (``invalid_config``,
            ``invalid_pool_coordinators``, ``invalid_pool_coordinator``, ``invalid_roster``,
            ``invalid_discovered_coordinator``: a bad entry of ``edgewatch-pool-coordinators``).
        state_save_failures: failed saves of the group roster to ``--state-dir``, by ``reason`` (the
            exception class, e.g. PermissionError).
        period_seconds: duration of the last exchange period's work.
        evidence_writes: writes of this node's signed evidence Lease, by ``result`` (``ok``, ``failed``,
            ``conflict``, ``timeout``).
        key_records_rejected: other nodes' published key records refused, by ``reason``
            (``bad_key_record``; ``bad_key_proof``: a key without a valid proof of possession for that
            node, e.g. another node's key copied; ``key_conflict``: a key another node already
            published).
        watch_events: API watch events received, by ``resource`` (``node``: the own Node;
            ``config``; ``roster``: the group's roster; ``beacon``; ``keys``: the key records): the
            cloud API load this agent causes, which must not grow with the group (docs/scaling.md).
        peer_connections_refused: connections to the peer port refused before a byte was read, by
            ``reason`` (``per_source``: its source already held its bound; ``total``: strangers
            already held theirs; ``edgewatch.agent.peerserver``).
        peer_read_timeouts: peer-port connections closed because a whole request did not arrive
            within the read deadline, by ``phase`` (``headers``: nothing or part of a request's
            head had come; ``body``: the head had, the whole body had not).
        peer_connections: peer-port connections open now, by ``source`` (``known``: this node or a
            group member; ``stranger``).
        liveness_sent: peer protocol v6 liveness datagrams sent (``edgewatch.agent.datagrams``).
        liveness_received: liveness datagrams received, by ``result`` (``alive``: authentic, new
            and proving the peer alive; ``new``: authentic, no proof yet; ``replayed``;
            ``unknown_source``: not from a peer's address; ``no_key``: the peer's exchange key is
            not known; ``bad_signature``, ``malformed``, ``oversized``, ``version``).
        liveness_peers_alive: peers that proved themselves alive by datagram in the last two
            periods.
        control_plane_clock_reads: reads of kube-controller-manager's leader Lease while carrying,
            by ``outcome`` (``edgewatch.agent.clockreader``).
        host_checks: TCP connects to the kubelet server port of neighbours the failure detector does
            not see alive, by ``result`` (``open``: the host is alive; ``refused``; ``timeout``;
            ``unreachable``: another socket error; ``edgewatch.agent.hostcheck``).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.probes = Counter("edgewatch_agent_probes", "Evidence about peers by result.", ["result"], registry=registry)
        self.statement_exchanges = Counter("edgewatch_agent_statement_exchanges", "Statement exchanges by reason.",
                                           ["reason"], registry=registry)
        self.messages = Counter("edgewatch_agent_messages_received", "Peer messages by result.", ["result"],
                                registry=registry)
        self.relayed = Counter("edgewatch_agent_relayed_heartbeats", "Relayed heartbeats by result.", ["result"],
                               registry=registry)
        self.verdict = Gauge("edgewatch_agent_verdict", "Group verdict per node (1 = current).", ["node", "verdict"],
                             registry=registry)
        self.peer_health = Gauge("edgewatch_agent_peer_health", "Detector state per peer (1 = current).",
                                 ["node", "health"], registry=registry)
        self.peer_dead_after = Gauge("edgewatch_agent_peer_dead_after_failures",
                                     "Failures in a row the detector needs now before it judges a peer dead.",
                                     ["node"], registry=registry)
        self.cloud_link_up = Gauge("edgewatch_agent_cloud_link_up", "1 while this node reaches the apiserver.",
                                   registry=registry)
        self.state_save_failures = Counter("edgewatch_agent_state_save_failures",
                                           "Failed saves of the group roster to the state folder.", ["reason"],
                                           registry=registry)
        self.delegations = Counter("edgewatch_agent_delegations", "Lease renewals for cut-off peers by outcome.",
                                   ["outcome"], registry=registry)
        self.carrying = Gauge("edgewatch_agent_carrying", "Peers whose heartbeat this agent carries now.",
                              registry=registry)
        self.config_rejected = Counter("edgewatch_agent_config_rejected", "ConfigMap updates refused.",
                                       ["reason"], registry=registry)
        self.period_seconds = Gauge("edgewatch_agent_period_seconds", "Work time of the last period, seconds.",
                                    registry=registry)
        self.evidence_writes = Counter("edgewatch_agent_evidence_writes", "Evidence Lease writes by result.",
                                       ["result"], registry=registry)
        self.key_records_rejected = Counter("edgewatch_agent_key_records_rejected", "Refused key records by reason.",
                                            ["reason"], registry=registry)
        self.watch_events = Counter("edgewatch_agent_watch_events", "API watch events received, by resource.",
                                    ["resource"], registry=registry)
        self.peer_connections_refused = Counter("edgewatch_agent_peer_connections_refused",
                                                "Peer-port connections refused on arrival, by reason.", ["reason"],
                                                registry=registry)
        self.peer_read_timeouts = Counter("edgewatch_agent_peer_read_timeouts",
                                          "Peer-port connections closed for a request not read in time, by phase.",
                                          ["phase"], registry=registry)
        self.peer_connections = Gauge("edgewatch_agent_peer_connections", "Peer-port connections open, by source.",
                                      ["source"], registry=registry)
        self.liveness_sent = Counter("edgewatch_agent_liveness_datagrams_sent", "Liveness datagrams sent.",
                                     registry=registry)
        self.liveness_received = Counter("edgewatch_agent_liveness_datagrams_received",
                                         "Liveness datagrams received, by result.", ["result"], registry=registry)
        self.statement_datagrams_sent = Counter("edgewatch_agent_statement_datagrams_sent",
                                                "Statement datagrams sent (a statement pushed instead of an "
                                                "HTTP exchange).", registry=registry)
        self.statement_datagrams = Counter("edgewatch_agent_statement_datagrams_received",
                                           "Statements received by datagram, by what the heartbeat book made "
                                           "of them (new, duplicate, older) or why refused.", ["result"],
                                           registry=registry)
        self.liveness_peers_alive = Gauge("edgewatch_agent_liveness_peers_alive",
                                          "Peers proven alive by liveness datagram in the last two periods.",
                                          registry=registry)
        self.control_plane_clock_reads = Counter("edgewatch_agent_control_plane_clock_reads",
                                                 "Reads of kube-controller-manager's leader Lease, by outcome.",
                                                 ["outcome"], registry=registry)
        self.host_checks = Counter("edgewatch_agent_host_checks",
                                   "Connects to silent neighbours' kubelet server port, by result.", ["result"],
                                   registry=registry)

    # -- the parts' events (edgewatch.agent.ports and the protocols of the parts' own modules) ---------

    def control_plane_clock_read(self, outcome: str) -> None:
        """One read of the control plane's clock (``control_plane_clock_reads``)."""
        self.control_plane_clock_reads.labels(outcome=outcome).inc()

    def host_checked(self, result: str) -> None:
        """One connect to a neighbour's kubelet server port ended with ``result`` (``host_checks``)."""
        self.host_checks.labels(result=result).inc()

    def watch_event_received(self, resource: str) -> None:
        """One API watch event on ``resource`` (``watch_events``)."""
        self.watch_events.labels(resource=resource).inc()

    def config_refused(self, reason: str) -> None:
        """The ConfigMap or a roster was refused (``config_rejected``)."""
        self.config_rejected.labels(reason=reason).inc()

    def state_not_saved(self, reason: str) -> None:
        """Saving the state folder failed, ``reason`` the exception class (``state_save_failures``)."""
        self.state_save_failures.labels(reason=reason).inc()

    def key_record_refused(self, reason: str) -> None:
        """Another node's key record was refused (``key_records_rejected``)."""
        self.key_records_rejected.labels(reason=reason).inc()

    def evidence_written(self, result: str) -> None:
        """One write of the evidence Lease ended with ``result`` (``evidence_writes``)."""
        self.evidence_writes.labels(result=result).inc()

    def datagram_sent(self) -> None:
        """One liveness datagram was sent (``liveness_sent``)."""
        self.liveness_sent.inc()

    def datagram_received(self, result: str) -> None:
        """One liveness datagram was judged ``result`` (``liveness_received``)."""
        self.liveness_received.labels(result=result).inc()

    def statement_datagram_sent(self) -> None:
        """One statement datagram was sent (``statement_datagrams_sent``)."""
        self.statement_datagrams_sent.inc()

    def cloud_link_changed(self, up: bool) -> None:
        """The own cloud link is now ``up`` (``cloud_link_up``: 1 or 0)."""
        self.cloud_link_up.set(1 if up else 0)

    # -- per-node series -------------------------------------------------------------------------------

    def forget(self, node: str, *, verdicts: tuple[str, ...], healths: tuple[str, ...]) -> None:
        """Drop ``node``'s label sets (it left the group): per-node series stay bounded by the group."""
        for gauge, values in ((self.verdict, verdicts), (self.peer_health, healths)):
            for v in values:
                try:
                    gauge.remove(node, v)
                except KeyError:
                    pass
        try:
            self.peer_dead_after.remove(node)
        except KeyError:
            pass

    def set_state(self, gauge: Gauge, *, node: str, label: str, value: str, values: tuple[str, ...]) -> None:
        """Set a one-hot state gauge: 1 for ``value``, 0 for the other ``values``."""
        for v in values:
            gauge.labels(**{"node": node, label: v}).set(1 if v == value else 0)

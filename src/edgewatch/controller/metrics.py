"""The controller's Prometheus metrics, on a registry passed in (no global registry)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class ControllerMetrics:
    """Every metric the controller exports.

    Attributes:
        nodes: covered nodes by enforced ``state`` (normal, disconnected, failed, unknown).
        transitions: state transitions recorded (one Event each), by target ``to``.
        evictions: pod evictions by ``result`` (evicted; blocked by a PodDisruptionBudget; failed;
            timeout).
        reconciles: reconciles by ``result`` (ok, error, crash).
        reconciles_skipped: Lease renewals that only moved a normal node's heartbeat deadline, so no
            reconcile ran (``edgewatch.controller.quiet``).
        plans_reused: looks at a node (resync, Node event, ...) that found its plan's inputs unchanged
            and no deadline due, so its last plan stood: no plan, no write
            (``edgewatch.controller.quiet``, ``edgewatch.controller.planbook``).
        reconcile_seconds: duration of one node's reconcile, seconds.
        holds: autonomy-hold Lease renewals by ``outcome``.
        config_rejected: edgewatch-config ConfigMap versions refused (the previous one stays).
        queue_depth: nodes waiting for a worker.
        leader: 1 while this replica holds the controller Lease.
        control_plane_clock: 1 while the leader reads kube-controller-manager's leader Lease (the carry
            clock; ``edgewatch.controller.carrywindow``), 0 while it cannot (no leader election there:
            the admission policy's clock bound is off).
        evidence: signed statements and key records looked at, by ``result`` (``new``, ``older``,
            ``duplicate``, ``unknown_beacon``, a refusal reason such as ``bad_signature`` or
            ``sender_mismatch``, ``bad_key_record``, ``bad_key_proof``, ``key_conflict``).
        api_reads: Nodes and Leases a reconcile read from the API, by ``kind``, because the watched
            copy was missing or awaiting our own write (``edgewatch.controller.seen``).
        roster_writes: group roster ConfigMap writes by ``result`` (``created``, ``updated``,
            ``deleted``, ``conflict``, ``error``, ``too_big``; ``edgewatch.controller.roster``).
        unproven_carries: carriers whose Lease renewals were not believed (the carried node's own
            fresh signed statement does not name them), one per node and carrier (a Warning Event each).
        csr_decisions: coordinator-client CertificateSigningRequests decided, by ``result``
            (``signed``, ``denied``, ``failed``: approved by someone else, refused by the policy) and
            ``reason`` (``ok``, or the policy's: ``edgewatch.controller.csrpolicy``).
        agent_silent: per covered node whose agent is silent now (its kubelet renews its Lease,
            no fresh signed statement of its own: the agent is not running, not ready or cannot
            reach the API), labels ``node`` and ``pool``: seconds since (``edgewatch.controller.cutoff``).
        node_cut_off: per covered node the controller judges cut off now (state ``disconnected`` or
            ``unknown``), labels ``node`` and ``pool`` (its ``edgewatch.io/pool``): seconds since it
            was first judged so; no series for any other node (``edgewatch.controller.cutoff``).
        pool_coordinator_ready: per pool whose coordinator edgewatch runs (``poolCoordinators``
            value ``auto``), label ``pool``: 1 if a Ready coordinator pod of it is discovered (its URL
            published), else 0; no series for any other pool (``edgewatch.controller.coordinators``).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.nodes = Gauge("edgewatch_controller_nodes", "Covered nodes by enforced state.", ["state"],
                           registry=registry)
        self.transitions = Counter("edgewatch_controller_transitions", "State transitions.", ["to"], registry=registry)
        self.node_moves = Counter("edgewatch_controller_node_moves", "Nodes whose pool or group label changed after "
                                  "the controller first saw them (a Warning Event NodeMovedPool each).",
                                  registry=registry)
        self.evictions = Counter("edgewatch_controller_evictions", "Pod evictions by result.", ["result"],
                                 registry=registry)
        self.reconciles = Counter("edgewatch_controller_reconciles", "Reconciles by result.", ["result"],
                                  registry=registry)
        self.reconcile_seconds = Histogram("edgewatch_controller_reconcile_seconds", "One reconcile, seconds.",
                                           registry=registry)
        self.holds = Counter("edgewatch_controller_autonomy_holds", "Autonomy-hold Lease renewals by outcome.",
                             ["outcome"], registry=registry)
        self.config_rejected = Counter("edgewatch_controller_config_rejected",
                                       "edgewatch-config versions refused.", registry=registry)
        self.queue_depth = Gauge("edgewatch_controller_queue_depth", "Nodes waiting for a worker.",
                                 registry=registry)
        self.leader = Gauge("edgewatch_controller_leader", "1 while this replica leads.", registry=registry)
        self.control_plane_clock = Gauge("edgewatch_controller_control_plane_clock",
                                         "1 while kube-controller-manager's leader Lease (the carry clock) is readable.",
                                         registry=registry)
        self.evidence = Counter("edgewatch_controller_evidence", "Signed statements and key records looked at, by "
                                "result.", ["result"], registry=registry)
        self.challenges = Counter("edgewatch_controller_challenges", "Challenges through the beacon by outcome: "
                                  "issued, answered (the node proved itself alive), unanswered (failed without "
                                  "waiting for its Lease).", ["result"], registry=registry)
        self.roster_writes = Counter("edgewatch_controller_roster_writes", "Group roster writes by result.",
                                     ["result"], registry=registry)
        self.reconciles_skipped = Counter("edgewatch_controller_reconciles_skipped",
                                          "Own Lease renewals of normal nodes that only moved the heartbeat "
                                          "deadline (no reconcile needed).", registry=registry)
        self.plans_reused = Counter("edgewatch_controller_plans_reused",
                                    "Looks at a node whose plan inputs were unchanged and no deadline due, "
                                    "so its last plan stood (no plan, no write).", registry=registry)
        self.unproven_carries = Counter("edgewatch_controller_unproven_carries",
                                        "Carriers whose Lease renewals of a node were not believed (the node's own "
                                        "signed statement does not name them), one per node and carrier.",
                                        registry=registry)
        self.api_reads = Counter("edgewatch_controller_api_reads", "Nodes and Leases read from the API by a "
                                 "reconcile (no watched copy to use), by kind.", ["kind"], registry=registry)
        self.csr_decisions = Counter("edgewatch_controller_csr_decisions",
                                     "Coordinator-client certificate requests decided, by result and reason.",
                                     ["result", "reason"], registry=registry)
        self.node_cut_off = Gauge("edgewatch_controller_node_cut_off_seconds",
                                  "Seconds since the controller judged the node cut off (disconnected or "
                                  "unknown); no series while it is not.", ["node", "pool"], registry=registry)
        self.agent_silent = Gauge("edgewatch_controller_agent_silent_seconds",
                                  "Seconds since the controller found the node's agent silent (the node "
                                  "renews its own Lease, no fresh signed statement of its own); no series "
                                  "while it is not.", ["node", "pool"], registry=registry)
        self.pool_coordinator_ready = Gauge("edgewatch_controller_pool_coordinator_ready",
                                            "1 if the auto pool's coordinator pod is Ready and published, else "
                                            "0; no series for other pools.", ["pool"], registry=registry)

"""The coordinator's metrics (``edgewatch_coordinator_*``): role, reachability, Ready, forwards by
outcome, leadership terms, rejected values, session errors by reason, reconnects on purpose,
delegated nodes."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from edgewatch.agent.coordinator.roles import Role
from edgewatch.kube.leases import RenewOutcome

__all__ = ["AgentCoordinatorMetrics"]


class AgentCoordinatorMetrics:
    """The ``edgewatch_coordinator_*`` metrics above, on ``registry`` (the agent's)."""

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
        self.reconnects = Counter("edgewatch_coordinator_reconnects_total",
                                  "Sessions ended on purpose to reconnect, by reason (certificate_rotated, "
                                  "trust_changed)", ["reason"], registry=registry)
        self.delegated = Gauge("edgewatch_coordinator_delegated_nodes",
                               "Delegated heartbeats the leader currently forwards", registry=registry)
        for role in Role:
            self.role.labels(role=role.value).set(1 if role is Role.PENDING else 0)
        for outcome in [*(o.value for o in RenewOutcome), "skipped_unhealthy", "verdict_error", "no_life_sign"]:
            self.forwards.labels(outcome=outcome)
        self.errors.labels(reason="certificate_expired")
        for reason in ("certificate_rotated", "trust_changed"):
            self.reconnects.labels(reason=reason)

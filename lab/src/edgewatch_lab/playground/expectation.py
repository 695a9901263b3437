"""What a scenario expects of a run: the ``expect`` entries of a scenario file, and the count
comparisons they use (``evictions: 0``, ``">0"``, ``"<=2"``).

The keys and their meaning are documented in ``edgewatch_lab.playground.scenario`` (the file format);
``edgewatch_lab.playground.checks`` judges a report against them. This module only parses and
validates one entry; cross-checks against the topology (unknown nodes, kube-proxy and real-node
keys on nodes that have neither) are the scenario's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Final

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, model_validator

if TYPE_CHECKING:
    from edgewatch_lab.playground.scenario import Scenario

__all__ = ["ALERT_KEYS", "BASELINE_STATES", "CHECK_KEYS", "NODE_ALERTS", "NODE_FAILED_ALERT",
           "COORDINATOR_KEYS", "EDGEWATCH_STATES", "STATEFULSET_KEYS", "UNINSTALL_KEYS", "Comparison", "CountSpec", "Expectation",
           "StrictModel"]

#: Node states in edgewatch runs (the controller's ``edgewatch.io/state`` annotation).
EDGEWATCH_STATES: Final = ("normal", "disconnected", "failed", "unknown")
#: Node states in baseline runs (stock Kubernetes: the Node's Ready condition).
BASELINE_STATES: Final = ("normal", "not_ready")


class StrictModel(BaseModel):
    """A pydantic model that refuses unknown keys (every scenario part)."""

    model_config = ConfigDict(extra="forbid")


# --------------------------------------------------------------------------------------------------
# Comparisons: evictions: 0 | ">0" | "<=2"

_COMPARISON = re.compile(r"^\s*(==|>=|<=|>|<)?\s*(\d+)\s*$")


@dataclass(frozen=True)
class Comparison:
    """``op value``: how an observed count is judged (an int in a scenario means ``== int``)."""

    op: str
    value: int

    @classmethod
    def parse(cls, spec: int | str) -> Comparison:
        """Parse an int (exact) or ``"[op]N"``; raises ``ValueError`` with the grammar on a bad spec."""
        if isinstance(spec, bool):
            raise ValueError(f"expected a count like 0 or a comparison like \">0\", got {spec!r}")
        if isinstance(spec, int):
            if spec < 0:
                raise ValueError(f"a count cannot be negative, got {spec}")
            return cls("==", spec)
        if isinstance(spec, str):
            m = _COMPARISON.match(spec)
            if m is None:
                raise ValueError(
                    f"bad comparison {spec!r}: expected an optional operator (==, >, >=, <, <=) "
                    "then a non-negative int, like \">0\" or \"<=2\""
                )
            c = cls(m.group(1) or "==", int(m.group(2)))
            if c.op == "<" and c.value == 0:
                raise ValueError(f"comparison {spec!r} can never hold (counts are never negative)")
            return c
        raise ValueError(f"expected a count like 0 or a comparison like \">0\", got {spec!r}")

    def __call__(self, observed: int) -> bool:
        v = self.value
        return {
            "==": observed == v, ">": observed > v, ">=": observed >= v,
            "<": observed < v, "<=": observed <= v,
        }[self.op]

    def __str__(self) -> str:
        return f"{self.op} {self.value}"


def _count_spec(value: Any) -> int | str:
    Comparison.parse(value)  # raises ValueError with the grammar
    return value


CountSpec = Annotated[Any, BeforeValidator(_count_spec)]


# --------------------------------------------------------------------------------------------------
# Expectations

CHECK_KEYS: Final = (
    "evictions", "endpoint_removals", "never_not_ready", "evicted_within_s", "detected_within_s",
    "state_at_end", "untouched", "never_tainted", "kube_proxy_follows_within_s", "kube_proxy_misses",
    "coredns_follows_within_s", "coredns_misses", "lease_carried", "containers_stopped", "replaced_within_s",
    "coordinator_moved_within_s", "led_within_s", "cache_from_coordinator_within_s", "alert_within_s", "no_alerts",
    "out_of_service_taint", "moved_within_s", "moved", "stays",
    "agents_updated", "clean_at_end", "evicted_after_uninstall_within_s",
)
#: The keys judged on an ``uninstall`` step's outcome (edgewatch runs with that step only).
UNINSTALL_KEYS: Final = ("clean_at_end", "evicted_after_uninstall_within_s")
#: The keys judged on one declared StatefulSet's pod (``statefulset`` targets only, and only these).
STATEFULSET_KEYS: Final = ("moved_within_s", "moved", "stays")
#: The keys judged on a pool's coordinator after each ``kill-coordinator`` (``pool`` targets only).
COORDINATOR_KEYS: Final = ("coordinator_moved_within_s", "led_within_s", "cache_from_coordinator_within_s")
#: The keys judged on the alerts a real Prometheus fired (runs with ``--prometheus`` only).
ALERT_KEYS: Final = ("alert_within_s", "no_alerts")
#: The alerts about one node (their ``node`` label): what ``no_alerts`` forbids on the targets.
NODE_ALERTS: Final = ("EdgewatchNodeCutOff", "EdgewatchAgentNotReady")
#: The alert about failed nodes; per namespace (no ``node`` label), so any firing counts for
#: ``alert_within_s``.
NODE_FAILED_ALERT: Final = "EdgewatchNodeFailed"


class Expectation(StrictModel):
    """What should be seen on the targeted nodes in one kind of run (see the module docstring)."""

    pool: str | None = None
    nodes: Annotated[list[str], Field(min_length=1)] | None = None
    #: A StatefulSet of the scenario's ``statefulsets`` (its one pod), for the StatefulSet keys.
    statefulset: str | None = None
    #: False: checked on edgewatch runs only; True: on baseline (stock Kubernetes) runs only.
    baseline: StrictBool = False
    evictions: CountSpec | None = None
    endpoint_removals: CountSpec | None = None
    never_not_ready: StrictBool | None = None
    evicted_within_s: Annotated[float, Field(gt=0)] | None = None
    detected_within_s: Annotated[float, Field(gt=0)] | None = None
    state_at_end: str | None = None
    untouched: StrictBool | None = None
    never_tainted: StrictBool | None = None
    #: After every ``scale`` step, the node's kube-proxy programs the Service's new endpoints within
    #: this many seconds of the cloud showing them (nodes must run kube-proxy).
    kube_proxy_follows_within_s: Annotated[float, Field(gt=0)] | None = None
    #: True: after some ``scale`` step the node's kube-proxy never programs the new endpoints before
    #: the next step (what a cut-off node without the pool cache shows).
    kube_proxy_misses: StrictBool | None = None
    #: After every ``scale`` step, the node's CoreDNS answers the headless Service ``sample-headless``
    #: with the addresses of the Service's new endpoints within this many seconds of the cloud
    #: showing them (nodes must run CoreDNS, pool key ``coredns``).
    coredns_follows_within_s: Annotated[float, Field(gt=0)] | None = None
    #: True: after some ``scale`` step the node's CoreDNS never answers the new addresses before the
    #: next step (what a cut-off node without the pool cache shows).
    coredns_misses: StrictBool | None = None
    #: True: the node's Lease was carried by a peer and is the node's own again at the end.
    lease_carried: StrictBool | None = None
    #: True: at every kill of the (real) node its containers ran before and none after.
    containers_stopped: StrictBool | None = None
    #: After every kill, the Service's ready endpoints on live nodes are back to their count before
    #: the kill within this many seconds.
    replaced_within_s: Annotated[float, Field(gt=0)] | None = None
    #: Which of the targeted nodes the entry is about, known only at run time: True = those killed
    #: during the run (e.g. the node the coordinator pod ran on), False = those never killed.
    killed: StrictBool | None = None
    #: After every ``kill-coordinator`` of the pool, its coordinator pod is Ready on another node
    #: within this many seconds (``coordinators: pods``).
    coordinator_moved_within_s: Annotated[float, Field(gt=0)] | None = None
    #: After every ``kill-coordinator`` of the pool, a live node of the pool leads it within this
    #: many seconds (what the agents publish: their ``EdgePoolCoordinator`` Node condition).
    led_within_s: Annotated[float, Field(gt=0)] | None = None
    #: After every ``kill-coordinator`` of the pool, every live node of the pool serves its pool
    #: cache from the coordinator again within this many seconds (the agents' metric
    #: ``edgewatch_poolcache_source``).
    cache_from_coordinator_within_s: Annotated[float, Field(gt=0)] | None = None
    #: After every kill of each targeted node, an alert naming the node (its ``node`` label), or
    #: ``EdgewatchNodeFailed`` (per namespace: any firing), fires within this many seconds (runs
    #: with ``--prometheus``; others fail the check).
    alert_within_s: Annotated[float, Field(gt=0)] | None = None
    #: True: neither ``EdgewatchNodeCutOff`` nor ``EdgewatchAgentNotReady`` fires for a targeted
    #: node during the run; false: one of them does (runs with ``--prometheus``).
    no_alerts: StrictBool | None = None
    #: True: every targeted node got the out-of-service taint (``node.kubernetes.io/out-of-service``,
    #: any value) at some point; false: none ever did.
    out_of_service_taint: StrictBool | None = None
    #: The StatefulSet's pod is recreated and Ready on another node than the one it ran on at the
    #: start within this many seconds of that node's first kill (of the start if it is never killed,
    #: or if the pod had left it before the kill).
    moved_within_s: Annotated[float, Field(gt=0)] | None = None
    #: True: a replacement of the StatefulSet's pod was Ready on another node before the end;
    #: false: never (e.g. stock Kubernetes: the dead node's pod stays Terminating).
    moved: StrictBool | None = None
    #: True: the StatefulSet's pod at the start was never deleted and is the same pod (uid) at the
    #: end; false: it was deleted (or replaced) at some point.
    stays: StrictBool | None = None
    #: For each ``rollout`` step, how many of the targeted nodes ran an agent of the rollout's
    #: version (Ready) before the next rollout or the end: one count for every rollout, or a list
    #: with one per rollout in order; counts as for ``evictions`` (``">=3"``, ``5``). Edgewatch runs
    #: only: a baseline run has no edgewatch to roll.
    agents_updated: CountSpec | Annotated[list[CountSpec], Field(min_length=1)] | None = None
    #: True: at the end no targeted node (nor its Lease) carries a mark of edgewatch
    #: (``edgewatch_lab.playground.marks``), nothing of edgewatch is left in its namespaces nor
    #: cluster-wide, and ``edgewatch uninstall`` exited 0; false: something is left. Needs an
    #: ``uninstall`` step.
    clean_at_end: StrictBool | None = None
    #: Stock Kubernetes is back after the ``uninstall`` step: no targeted node's pod was evicted
    #: before it, and each targeted node's pods were evicted within this many seconds after it (a
    #: node cut off from the cloud, held by edgewatch until then).
    evicted_after_uninstall_within_s: Annotated[float, Field(gt=0)] | None = None

    @model_validator(mode="after")
    def _check(self) -> Expectation:
        if [self.pool, self.nodes, self.statefulset].count(None) != 2:
            raise ValueError("give exactly one of 'pool', 'nodes' or 'statefulset'")
        statefulset_keys = [k for k in STATEFULSET_KEYS if getattr(self, k) is not None]
        if statefulset_keys and self.statefulset is None:
            raise ValueError(f"{', '.join(statefulset_keys)}: give the statefulset (its pod), not nodes or a pool")
        if self.statefulset is not None:
            other = [k for k in self.checks() if k not in STATEFULSET_KEYS]
            if self.killed is not None:
                other.append("killed")
            if other:
                raise ValueError(f"{', '.join(other)}: not about a StatefulSet (with statefulset give only "
                                 f"{', '.join(STATEFULSET_KEYS)})")
        if self.nodes is not None and len(set(self.nodes)) != len(self.nodes):
            raise ValueError(f"nodes: a node is listed twice: {self.nodes}")
        coordinator_keys = [k for k in COORDINATOR_KEYS if getattr(self, k) is not None]
        if coordinator_keys and self.pool is None:
            raise ValueError(f"{', '.join(coordinator_keys)}: give the pool (its coordinator), not nodes")
        if self.agents_updated is not None and self.baseline:
            raise ValueError("agents_updated: baseline (stock Kubernetes) runs have no edgewatch to roll")
        uninstall_keys = [k for k in UNINSTALL_KEYS if getattr(self, k) is not None]
        if uninstall_keys and self.baseline:
            raise ValueError(f"{', '.join(uninstall_keys)}: baseline (stock Kubernetes) runs have no edgewatch "
                             "to uninstall")
        alert_keys = [k for k in ALERT_KEYS if getattr(self, k) is not None]
        if alert_keys and self.baseline:
            raise ValueError(f"{', '.join(alert_keys)}: the alerts read edgewatch's controller; baseline "
                             "(stock Kubernetes) runs have none")
        if not self.checks():
            raise ValueError(f"nothing to check: give at least one of {', '.join(CHECK_KEYS)}")
        if self.state_at_end is not None:
            allowed = BASELINE_STATES if self.baseline else EDGEWATCH_STATES
            if self.state_at_end not in allowed:
                kind = "baseline (stock Kubernetes)" if self.baseline else "edgewatch"
                raise ValueError(
                    f"state_at_end: {self.state_at_end!r} is not a state of {kind} runs "
                    f"(one of {', '.join(allowed)})"
                )
        return self

    def checks(self) -> list[str]:
        """The check keys this entry sets, in a fixed order."""
        return [k for k in CHECK_KEYS if getattr(self, k) is not None]

    def target_nodes(self, scenario: Scenario) -> list[str]:
        """The nodes named by ``pool`` / ``nodes`` (before the run-time ``killed`` filter); none for
        a ``statefulset`` target."""
        return scenario.nodes_of(self.pool) if self.pool is not None else list(self.nodes or [])

    def comparison(self, key: str) -> Comparison:
        """The parsed comparison of ``evictions`` or ``endpoint_removals``."""
        return Comparison.parse(getattr(self, key))



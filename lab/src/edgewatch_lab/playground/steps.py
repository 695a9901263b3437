"""The timed faults of a playground scenario (its ``steps``): one pydantic model per action.

The actions and their fields are documented in ``edgewatch_lab.playground.scenario`` (the file
format). This module only parses one step; cross-checks against the topology and the other steps
(unknown nodes, kill/revive order, coordinator actions on pools without one) are the scenario's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Final, Literal, Union

from pydantic import Field, model_validator

from edgewatch.core.types import DNS1123_LABEL_PATTERN
from edgewatch_lab.playground.expectation import StrictModel as _Model

if TYPE_CHECKING:
    from edgewatch_lab.playground.scenario import Scenario

_NAME = DNS1123_LABEL_PATTERN

class _Step(_Model):
    at: Annotated[float, Field(ge=0)]

    def referenced_nodes(self) -> list[str]:
        """Node names this step names explicitly."""
        return []

    def referenced_pool(self) -> str | None:
        return getattr(self, "pool", None)

    def target_key(self) -> tuple:
        """What the step acts on, for duplicate detection."""
        return ()

    def nodes_affected(self, scenario: Scenario) -> list[str]:
        """The nodes this step acts on (empty for cluster-wide steps and kill-leader)."""
        return self.referenced_nodes()

    def describe(self) -> str:
        return self.action  # type: ignore[attr-defined]


class _PoolOrNodes(_Step):
    pool: str | None = None
    nodes: Annotated[list[str], Field(min_length=1)] | None = None

    @model_validator(mode="after")
    def _one_target(self) -> _PoolOrNodes:
        if (self.pool is None) == (self.nodes is None):
            raise ValueError("give exactly one of 'pool' or 'nodes'")
        if self.nodes is not None and len(set(self.nodes)) != len(self.nodes):
            raise ValueError(f"nodes: a node is listed twice: {self.nodes}")
        return self

    def referenced_nodes(self) -> list[str]:
        return list(self.nodes or [])

    def target_key(self) -> tuple:
        return ("pool", self.pool) if self.pool is not None else ("nodes", tuple(sorted(self.nodes or [])))

    def nodes_affected(self, scenario: Scenario) -> list[str]:
        return scenario.nodes_of(self.pool) if self.pool is not None else list(self.nodes or [])

    def describe(self) -> str:
        return f"{self.action} {self.pool if self.pool is not None else ','.join(self.nodes or [])}"  # type: ignore[attr-defined]


class CutCloud(_PoolOrNodes):
    """Cut the nodes off from the cloud (control plane); they still reach each other."""

    action: Literal["cut-cloud"]


class RestoreCloud(_PoolOrNodes):
    """Give the nodes their cloud link back."""

    action: Literal["restore-cloud"]


class Loss(_PoolOrNodes):
    """Drop ``percent`` % of the nodes' packets (0 removes the loss)."""

    action: Literal["loss"]
    percent: Annotated[int, Field(ge=0, le=100)]

    def describe(self) -> str:
        return super().describe() + f" {self.percent}%"


class Split(_Step):
    """Split a pool's LAN into sides that cannot reach each other."""

    action: Literal["split"]
    pool: str
    sides: Annotated[list[list[str]], Field(min_length=2)]

    @model_validator(mode="after")
    def _sides(self) -> Split:
        seen: set[str] = set()
        for i, side in enumerate(self.sides):
            if not side:
                raise ValueError(f"sides[{i}] is empty")
            for n in side:
                if n in seen:
                    raise ValueError(f"sides are not disjoint: {n!r} is on more than one side")
                seen.add(n)
        return self

    def referenced_nodes(self) -> list[str]:
        return [n for side in self.sides for n in side]

    def target_key(self) -> tuple:
        return ("pool", self.pool)

    def describe(self) -> str:
        return f"split {self.pool} " + " | ".join(",".join(s) for s in self.sides)


class _NodeStep(_Step):
    node: str

    def referenced_nodes(self) -> list[str]:
        return [self.node]

    def target_key(self) -> tuple:
        return ("node", self.node)

    def describe(self) -> str:
        return f"{self.action} {self.node}"  # type: ignore[attr-defined]


class Kill(_NodeStep):
    """Kill the node (agent, kubelet and workload stop; the node is dead)."""

    action: Literal["kill"]


class Revive(_NodeStep):
    """Bring a killed node back."""

    action: Literal["revive"]


class Skew(_NodeStep):
    """From now on the node's clock (its kubelet's and its agent's) is off by ``seconds``
    (negative: slow); 0 ends the skew. ``heal`` does not end it. At ``at: 0`` the clock is off
    from the node's boot on (a box whose clock is simply wrong); later, the clock *steps* — and a
    backward step makes stock kube-controller-manager, which counts only a renewTime that
    increases, see no renewal until the clock has caught up (that is Kubernetes, not edgewatch)."""

    action: Literal["skew"]
    seconds: Annotated[float, Field(ge=-3600, le=3600)]

    def describe(self) -> str:
        return f"skew {self.node} {self.seconds:+g} s"


class _CoordinatorPoolStep(_Step):
    pool: str

    def target_key(self) -> tuple:
        return ("pool", self.pool)

    def nodes_affected(self, scenario: Scenario) -> list[str]:
        return []

    def describe(self) -> str:
        return f"{self.action} {self.pool}"  # type: ignore[attr-defined]


class KillLeader(_CoordinatorPoolStep):
    """Kill the node that is the pool's coordinator leader at that moment."""

    action: Literal["kill-leader"]


class KillCoordinator(_CoordinatorPoolStep):
    """Stop the pool's coordinator store."""

    action: Literal["kill-coordinator"]


class ReviveCoordinator(_CoordinatorPoolStep):
    """Start the pool's coordinator store again."""

    action: Literal["revive-coordinator"]


class RestartController(_Step):
    """Restart the edgewatch controller (no-op in baseline runs)."""

    action: Literal["restart-controller"]


class KillControllerLeader(_Step):
    """The pod of the edgewatch controller replica that leads now (the holder of the Lease
    ``edgewatch/edgewatch-controller``, a pod name) dies: its container SIGKILLed on its node (no
    goodbye), the pod force-deleted, as when its node dies (no-op in baseline runs). A standby
    takes over once the Lease has expired (15 s); the Deployment's new pod is a new candidate."""

    action: Literal["kill-controller-leader"]


class ScaleController(_Step):
    """Scale the edgewatch controller Deployment to ``replicas`` (no-op in baseline runs): 0 is an
    outage of every controller replica (a bad image, the cloud nodes drained), a later step with the
    count the install runs (2) ends it. The cluster's own Deployment controller does the rest."""

    action: Literal["scale-controller"]
    replicas: Annotated[int, Field(ge=0, le=10)]

    def target_key(self) -> tuple:
        return (self.replicas,)

    def describe(self) -> str:
        return f"scale the controller to {self.replicas}"


class Rollout(_Step):
    """Roll edgewatch's agent DaemonSet and controller Deployment through the cluster's own
    rolling update (no-op in baseline runs): to ``release`` (a git revision of this repository,
    e.g. the previous release's commit; its ``deploy/`` is applied with the image of its code,
    ``edgewatch_lab.testing.revisions``), or, without one, to this checkout — an upgrade when the
    scenario's ``topology.release`` installed another, else a restart rollout (``kubectl rollout
    restart``). The report's ``rollout`` says when each node's new agent was Ready
    (``edgewatch_lab.playground.rollout``)."""

    action: Literal["rollout"]
    release: Annotated[str, Field(pattern=r"^[0-9a-f]{7,40}$")] | None = None

    def describe(self) -> str:
        return f"rollout to {self.release or 'this checkout'}"


class Uninstall(_Step):
    """Remove edgewatch as docs/uninstall.md tells an operator (no-op in baseline runs): delete the
    install the way it was made (``kubectl delete -k ... --wait=false``, or ``helm uninstall``),
    then run ``edgewatch uninstall`` with the operator's kubeconfig. The report's ``uninstall``
    records both and what of edgewatch is left at the end (``edgewatch_lab.playground.uninstalling``)."""

    action: Literal["uninstall"]


class Scale(_Step):
    """Scale the sample Deployment to ``replicas`` (a Service change made in the cloud)."""

    action: Literal["scale"]
    replicas: Annotated[int, Field(ge=0, le=1000)]

    def target_key(self) -> tuple:
        return (self.replicas,)

    def describe(self) -> str:
        return f"scale to {self.replicas}"


class Heal(_Step):
    """End every network fault: cuts, splits, losses (killed nodes stay dead)."""

    action: Literal["heal"]


class End(_Step):
    """The end of the scenario: the recording stops here."""

    action: Literal["end"]


Step = Annotated[
    Union[CutCloud, RestoreCloud, Split, Loss, Kill, Revive, Skew, KillLeader, KillCoordinator,
          ReviveCoordinator, RestartController, KillControllerLeader, ScaleController, Rollout, Uninstall, Scale,
          Heal, End],
    Field(discriminator="action"),
]

ACTIONS: Final = (
    "cut-cloud", "restore-cloud", "split", "loss", "kill", "revive", "skew", "kill-leader", "kill-coordinator",
    "revive-coordinator", "restart-controller", "kill-controller-leader", "scale-controller", "rollout",
    "uninstall", "scale", "heal", "end",
)



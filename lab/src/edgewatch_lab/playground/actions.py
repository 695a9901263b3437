"""What each timed step of a scenario does: one small handler per action, in one registry.

:func:`perform` looks a step's ``action`` up in :data:`ACTIONS` and awaits its handler with a
:class:`StepContext`; the handler acts on the cluster and fills the fault record (a dict the
report keeps under ``faults``: ``t``, ``action``, what the step acted on, ``done_at``). Adding a
fault is one step model (``edgewatch_lab.playground.steps``) and one handler here.

Blocking lab work (namespaces, nftables, processes) runs in the default executor, so the observer
keeps recording while a step acts. Steps that only make sense with edgewatch installed (rollout,
uninstall, the controller faults) do nothing on a baseline run, whose record then only says when
they were due.

Limits: a handler runs as long as its fault takes (a kill waits for the processes to die; a
``revive-coordinator`` with coordinator pods waits up to :data:`REVIVE_COORDINATOR_WAIT_S`); the
next step waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

from lightkube import AsyncClient
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Node

from edgewatch.kube.errors import API_ERRORS
from edgewatch.names import ROLE_CONDITION_TYPE
from edgewatch_lab.playground.cluster import EDGEWATCH_NAMESPACE, WORKLOAD_NAMESPACE, PlaygroundCluster
from edgewatch_lab.playground.controllerpods import kill_controller_leader, scale_controller
from edgewatch_lab.playground.coordinators import leader_from_conditions
from edgewatch_lab.playground.coordinatorwatch import coordinator_node, wait_coordinator_ready
from edgewatch_lab.playground.observer import Observer
from edgewatch_lab.playground.report import Recording
from edgewatch_lab.playground.rollout import RolloutWatch, start_rollout
from edgewatch_lab.playground.scenario import Scenario

__all__ = ["ACTIONS", "REVIVE_COORDINATOR_WAIT_S", "ActionState", "StepContext", "leader_of", "perform",
           "published_leader"]

#: The longest a ``revive-coordinator`` step waits for the rescheduled coordinator pod
#: (``coordinators: pods``), seconds; the next steps wait with it.
REVIVE_COORDINATOR_WAIT_S: Final = 120.0


@dataclass
class ActionState:
    """What steps leave for later steps and for the report, kept by the player across a run."""

    #: ``coordinators: pods``: the node each pool's last kill-coordinator killed.
    coordinator_killed: dict[str, str] = field(default_factory=dict)
    #: Every rollout started, polled by the player until the run ends.
    rollouts: list[RolloutWatch] = field(default_factory=list)
    #: The uninstall step's fault record, if one ran.
    uninstall: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class StepContext:
    """What a handler acts on: the cluster and its API, the scenario, the recording (kills are
    recorded with the pods they took), the observer (``None`` before the run starts) and the
    state shared between steps."""

    cluster: PlaygroundCluster
    client: AsyncClient
    scenario: Scenario
    recording: Recording
    observer: Observer | None
    state: ActionState

    def targets(self, step: Any) -> list[str]:
        """The nodes a ``pool``/``nodes`` step names (``[]`` for any other step)."""
        if getattr(step, "nodes", None):
            return list(step.nodes)
        if getattr(step, "pool", None):
            return [n for n in self.scenario.node_names() if self.scenario.pool_of(n) == step.pool]
        return []

    async def in_executor(self, work: Callable[..., Any], *args: Any) -> Any:
        """Run blocking lab work off the event loop; returns what ``work`` returns."""
        return await asyncio.get_running_loop().run_in_executor(None, work, *args)


Handler = Callable[[StepContext, Any, float, dict[str, Any]], Awaitable[None]]


async def published_leader(cluster: PlaygroundCluster, client: AsyncClient, pool: str) -> str | None:
    """The node leading ``pool`` as its live agents publish it (their ``EdgePoolCoordinator`` Node
    conditions, ``coordinators.leader_from_conditions``): what the lab can read once the
    coordinator admits only the pool's nodes (``coordinators: pods``)."""
    lab = cluster.lab
    members = cluster.scenario.nodes_of(pool)
    alive = [n for n in members if lab is None or not lab.faults(n).killed]
    messages: dict[str, str | None] = {}
    async for node in client.list(Node):
        if node.metadata.name in members and node.status is not None:
            cond = next((c for c in node.status.conditions or [] if c.type == ROLE_CONDITION_TYPE), None)
            messages[node.metadata.name] = cond.message if cond is not None else None
    return leader_from_conditions(messages, alive=alive)


async def leader_of(cluster: PlaygroundCluster, pool: str, client: AsyncClient | None = None) -> str | None:
    """The node whose agent leads ``pool``: with ``coordinators: pods`` as the agents publish it
    (:func:`published_leader`); else read from the lab's etcd (the candidacy with the lowest
    create revision, ``edgewatch.poolkeys.leader_of``). ``None`` when no one leads."""
    import aetcd

    from edgewatch.poolkeys import Candidate, PoolKeys
    from edgewatch.poolkeys import leader_of as lowest_candidacy

    if cluster.coordinator_pods and client is not None:
        return await published_leader(cluster, client, pool)
    etcd = cluster.coordinators.get(pool)
    if etcd is None:
        return None
    keys = PoolKeys(pool)
    async with aetcd.Client(host=etcd.address, port=etcd.client_port, timeout=3) as etcd_client:
        listing = await etcd_client.get_prefix(keys.candidates)
    return lowest_candidacy({kv.key[len(keys.candidates):].decode(errors="replace"):
                             Candidate(kv.lease, kv.create_revision) for kv in listing})


async def _kill_node(ctx: StepContext, node: str, t: float) -> None:
    """Kill ``node`` (its machine dies) and record it with the pods bound to it."""
    observer, cluster = ctx.observer, ctx.cluster
    pods = observer.views[node].pods if observer and node in observer.views else None
    before = cluster.container_count(node)
    await ctx.in_executor(cluster.kill_node, node)
    ctx.recording.nodes[node].record_kill(t, pods=pods)
    if before is not None:
        ctx.recording.nodes[node].containers_at_kill[t] = [before, cluster.container_count(node) or 0]


async def _leader_or_first(ctx: StepContext, pool: str) -> str:
    """The pool's leader. Without one (baseline, or none elected) the pool's last node that is
    neither killed nor cut from the cloud — the node a leader would be — deterministic."""
    with contextlib.suppress(Exception):
        leader = await leader_of(ctx.cluster, pool, ctx.client)
        if leader:
            return leader
    lab = ctx.cluster.lab
    assert lab is not None
    nodes = [n for n in ctx.scenario.node_names() if ctx.scenario.pool_of(n) == pool]
    able = [n for n in nodes if not lab.faults(n).killed and not lab.faults(n).cloud_cut]
    return (able or nodes)[-1]


# -- the network ---------------------------------------------------------------------------------

async def _cut_cloud(ctx: StepContext, step: Any, t: float, fault: dict[str, Any]) -> None:
    assert ctx.cluster.lab is not None
    fault["nodes"] = ctx.targets(step)
    await ctx.in_executor(ctx.cluster.lab.cut_cloud, fault["nodes"])


async def _restore_cloud(ctx: StepContext, step: Any, t: float, fault: dict[str, Any]) -> None:
    assert ctx.cluster.lab is not None
    fault["nodes"] = ctx.targets(step)
    await ctx.in_executor(ctx.cluster.lab.restore_cloud, fault["nodes"])


async def _split(ctx: StepContext, step: Any, t: float, fault: dict[str, Any]) -> None:
    assert ctx.cluster.lab is not None
    sides = [list(s) for s in step.sides]
    await ctx.in_executor(ctx.cluster.lab.split, step.pool, sides)
    fault.update(pool=step.pool, sides=sides)


async def _loss(ctx: StepContext, step: Any, t: float, fault: dict[str, Any]) -> None:
    assert ctx.cluster.lab is not None
    fault.update(nodes=ctx.targets(step), percent=step.percent)
    await ctx.in_executor(ctx.cluster.lab.loss, fault["nodes"], step.percent)


async def _heal(ctx: StepContext, step: Any, t: float, fault: dict[str, Any]) -> None:
    assert ctx.cluster.lab is not None
    await ctx.in_executor(ctx.cluster.lab.heal)


# -- nodes ---------------------------------------------------------------------------------------

async def _kill(ctx: StepContext, step: Any, t: float, fault: dict[str, Any]) -> None:
    fault["node"] = step.node
    await _kill_node(ctx, step.node, t)


async def _kill_leader(ctx: StepContext, step: Any, t: float, fault: dict[str, Any]) -> None:
    fault["node"] = await _leader_or_first(ctx, step.pool)
    await _kill_node(ctx, fault["node"], t)


async def _revive(ctx: StepContext, step: Any, t: float, fault: dict[str, Any]) -> None:
    await ctx.in_executor(ctx.cluster.revive_node, step.node)
    ctx.recording.nodes[step.node].record_revive(t)
    fault["node"] = step.node


async def _skew(ctx: StepContext, step: Any, t: float, fault: dict[str, Any]) -> None:
    await ctx.in_executor(ctx.cluster.skew, step.node, step.seconds)
    fault.update(node=step.node, seconds=step.seconds)


# -- pool coordinators ---------------------------------------------------------------------------

async def _kill_coordinator(ctx: StepContext, step: Any, t: float, fault: dict[str, Any]) -> None:
    """As shipped (``coordinators: pods``) the node the coordinator pod runs on dies; with lab
    processes (``coordinators: process``) the pool's etcd process is killed."""
    cluster = ctx.cluster
    fault["pool"] = step.pool
    if not cluster.coordinator_pods:
        if step.pool in cluster.coordinators:
            await ctx.in_executor(cluster.kill_coordinator, step.pool)
        return
    node = None
    for _ in range(3):  # bounded: each look is one API call with the client's timeout
        with contextlib.suppress(*API_ERRORS):
            node = await coordinator_node(ctx.client, namespace=EDGEWATCH_NAMESPACE, pool=step.pool)
            break
    assert cluster.lab is not None
    if node is not None and not cluster.lab.faults(node).killed:
        await _kill_node(ctx, node, t)
        ctx.state.coordinator_killed[step.pool] = node
    fault["node"] = node


async def _revive_coordinator(ctx: StepContext, step: Any, t: float, fault: dict[str, Any]) -> None:
    """With coordinator pods there is nothing to start: wait (bounded) for the Deployment's pod
    Ready on another node; with lab processes, start the pool's etcd again."""
    cluster = ctx.cluster
    fault["pool"] = step.pool
    if not cluster.coordinator_pods:
        if step.pool in cluster.coordinators:
            await ctx.in_executor(cluster.start_coordinator, step.pool)
        return
    node, waited = await wait_coordinator_ready(
        ctx.client, namespace=EDGEWATCH_NAMESPACE, pool=step.pool,
        not_on=ctx.state.coordinator_killed.get(step.pool), timeout_s=REVIVE_COORDINATOR_WAIT_S)
    fault.update(node=node, waited_s=round(waited, 1))


# -- edgewatch itself (nothing on a baseline run) ------------------------------------------------

async def _rollout(ctx: StepContext, step: Any, t: float, fault: dict[str, Any]) -> None:
    cluster = ctx.cluster
    if not cluster.edgewatch:
        return
    watch = RolloutWatch(namespace=EDGEWATCH_NAMESPACE, started_s=t, nodes=ctx.scenario.node_names())
    await watch.begin(ctx.client)
    fault["from"] = cluster.release or "this checkout"
    if step.release is None and cluster.release is None:  # a restart rollout
        fault["stamp"] = await start_rollout(ctx.client, namespace=EDGEWATCH_NAMESPACE)
    else:  # to another release, or back to this checkout: apply its install
        await ctx.in_executor(cluster.roll_to, step.release)
    fault["to"] = cluster.release or "this checkout"
    ctx.state.rollouts.append(watch)  # polled from now on: the new spec is in the API


async def _uninstall(ctx: StepContext, step: Any, t: float, fault: dict[str, Any]) -> None:
    if ctx.cluster.edgewatch:
        fault.update(await ctx.in_executor(ctx.cluster.uninstall))
        ctx.state.uninstall = fault


async def _restart_controller(ctx: StepContext, step: Any, t: float, fault: dict[str, Any]) -> None:
    if ctx.cluster.edgewatch:
        fault["killed"] = await ctx.in_executor(ctx.cluster.restart_controller)


async def _kill_controller_leader(ctx: StepContext, step: Any, t: float, fault: dict[str, Any]) -> None:
    if ctx.cluster.edgewatch:
        fault.update(await kill_controller_leader(ctx.client, ctx.cluster))


async def _scale_controller(ctx: StepContext, step: Any, t: float, fault: dict[str, Any]) -> None:
    if ctx.cluster.edgewatch:
        fault.update(await scale_controller(ctx.client, step.replicas))


# -- the workload and the run --------------------------------------------------------------------

async def _scale(ctx: StepContext, step: Any, t: float, fault: dict[str, Any]) -> None:
    await ctx.client.patch(Deployment, "sample", {"spec": {"replicas": step.replicas}}, namespace=WORKLOAD_NAMESPACE)
    fault["replicas"] = step.replicas


async def _end(ctx: StepContext, step: Any, t: float, fault: dict[str, Any]) -> None:
    """The run ends here (the player stops after recording it)."""


#: Every step action (``edgewatch_lab.playground.steps``) and its handler.
ACTIONS: Final[dict[str, Handler]] = {
    "cut-cloud": _cut_cloud,
    "restore-cloud": _restore_cloud,
    "split": _split,
    "loss": _loss,
    "heal": _heal,
    "kill": _kill,
    "kill-leader": _kill_leader,
    "revive": _revive,
    "skew": _skew,
    "kill-coordinator": _kill_coordinator,
    "revive-coordinator": _revive_coordinator,
    "rollout": _rollout,
    "uninstall": _uninstall,
    "restart-controller": _restart_controller,
    "kill-controller-leader": _kill_controller_leader,
    "scale-controller": _scale_controller,
    "scale": _scale,
    "end": _end,
}


async def perform(ctx: StepContext, step: Any, *, t: float) -> dict[str, Any]:
    """Do ``step`` at scenario time ``t`` (seconds) and return its fault record, ``done_at`` set
    to the observer's time when the handler returned.

    Raises:
        KeyError: the step's action has no handler (every parsed step has one; a unit test keeps
            :data:`ACTIONS` in step with the step models).
    """
    handler = ACTIONS[step.action]
    fault: dict[str, Any] = {"t": t, "action": step.action}
    await handler(ctx, step, t, fault)
    fault["done_at"] = ctx.observer.now() if ctx.observer else t
    return fault

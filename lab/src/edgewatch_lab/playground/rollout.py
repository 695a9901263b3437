"""The playground's ``rollout`` step: roll edgewatch's agent DaemonSet and controller Deployment
through the cluster's own rolling update, and record what each node saw.

``start_rollout`` does what ``kubectl rollout restart`` does: it stamps the pod templates with the
annotation ``kubectl.kubernetes.io/restartedAt``, so the DaemonSet controller replaces the agent
pods ``maxUnavailable`` at a time (deploy/30-agent.yaml: 10 %) and the Deployment controller the
controller replicas (leader election hands over). Nothing else changes: the image is this
checkout's (a restart rollout).

``RolloutWatch`` is polled by the runner while the scenario plays, once the rollout has started.
It remembers which agent pod ran on each node when the rollout began (by uid) and notes, by the
runner's clock (seconds since t=0):

- ``old_gone_s``: the node's old agent pod is no longer in the API (deleted, and its kubelet
  confirmed it — a node cut off from the cloud cannot, so its old pod stays Terminating);
- ``updated_s``: an agent pod of the rollout's version (the DaemonSet's newest ControllerRevision
  hash) is Ready on the node — at once for a node already on it (a rollback to the version a node
  never left);

and when the DaemonSet and the controller Deployment are done as ``kubectl rollout status`` says
(``agents_done_s``, ``controller_done_s``). ``summary()`` is the report's ``rollout`` section.

Limits: each ``rollout`` step gets a record of its own and only the newest is polled; the watch
reads pods through the API, so what a node cut off from the cloud does locally (its old agent keeps
running) is not visible until its link is back.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.apps_v1 import ControllerRevision, DaemonSet, Deployment
from lightkube.resources.core_v1 import Pod

from edgewatch_lab.testing.kubeletsim import pod_ready

__all__ = ["RESTARTED_AT", "RolloutWatch", "daemonset_rolled", "rollout_complete", "start_rollout"]

#: The annotation ``kubectl rollout restart`` stamps on a pod template.
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
AGENT_LABELS = {"app.kubernetes.io/name": "edgewatch-agent"}
#: The label the DaemonSet controller puts on its pods and ControllerRevisions: the template's hash.
REVISION_HASH = "controller-revision-hash"


async def start_rollout(client: AsyncClient, *, namespace: str, now: dt.datetime | None = None) -> str:
    """Stamp the agent DaemonSet's and the controller Deployment's pod templates (a restart
    rollout); returns the timestamp written. Raises lightkube.ApiError on a refusal."""
    stamp = (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: stamp}}}}}
    await client.patch(DaemonSet, "edgewatch-agent", body, namespace=namespace)
    await client.patch(Deployment, "edgewatch-controller", body, namespace=namespace)
    return stamp


@dataclass
class NodeRollout:
    """One node's agent across the rollout (seconds on the runner's clock; None: not yet)."""

    old_uid: str | None
    old_gone_s: float | None = None
    updated_s: float | None = None


@dataclass
class RolloutWatch:
    """What the rollout did, node by node (see the module docstring).

    Args:
        namespace: edgewatch's namespace.
        started_s: when the rollout step ran (runner's clock, seconds).
        nodes: the covered nodes whose agents roll.
    """

    namespace: str
    started_s: float
    nodes: list[str]
    agents: dict[str, NodeRollout] = field(default_factory=dict)
    agents_done_s: float | None = None
    controller_done_s: float | None = None

    async def begin(self, client: AsyncClient) -> None:
        """Remember the agent pod running on each node now (call right before the rollout starts)."""
        by_node: dict[str, str] = {}
        async for pod in client.list(Pod, namespace=self.namespace, labels=AGENT_LABELS):
            if pod.spec and pod.spec.nodeName and pod.metadata and pod.metadata.uid:
                by_node[pod.spec.nodeName] = pod.metadata.uid
        self.agents = {n: NodeRollout(old_uid=by_node.get(n)) for n in self.nodes}

    async def poll(self, client: AsyncClient, *, t: float) -> None:
        """One look (four API calls): the DaemonSet and its newest ControllerRevision, the agent
        pods, the controller Deployment. Call only once the rollout has been started."""
        ds = (await client.get(DaemonSet, "edgewatch-agent", namespace=self.namespace)).to_dict()
        revisions = [r async for r in client.list(ControllerRevision, namespace=self.namespace, labels=AGENT_LABELS)]
        newest = max(revisions, key=lambda r: r.revision, default=None)
        current = (newest.metadata.labels or {}).get(REVISION_HASH) if newest and newest.metadata else None
        pods: dict[str, list[Pod]] = {}
        async for pod in client.list(Pod, namespace=self.namespace, labels=AGENT_LABELS):
            if pod.spec and pod.spec.nodeName:
                pods.setdefault(pod.spec.nodeName, []).append(pod)
        for node, seen in self.agents.items():
            here = pods.get(node, [])
            if seen.old_gone_s is None and seen.old_uid not in {p.metadata.uid for p in here if p.metadata}:
                seen.old_gone_s = t
            if seen.updated_s is None and current is not None and any(
                    p.metadata and (p.metadata.labels or {}).get(REVISION_HASH) == current
                    and p.metadata.deletionTimestamp is None and pod_ready(p) for p in here):
                seen.updated_s = t
        if self.agents_done_s is None and daemonset_rolled(ds):
            self.agents_done_s = t
        if self.controller_done_s is None:
            dep = await client.get(Deployment, "edgewatch-controller", namespace=self.namespace)
            if rollout_complete(dep.to_dict()):
                self.controller_done_s = t

    def summary(self) -> dict[str, Any]:
        """The report's ``rollout`` section: per node, seconds from the rollout step to its old
        agent pod gone and to an agent of the rollout's version Ready on it (a node already on that
        version counts at the first look; None: not within the run); the DaemonSet's and the
        controller Deployment's rollouts done (``kubectl rollout status``)."""
        def since(x: float | None) -> float | None:
            return None if x is None else round(x - self.started_s, 1)

        nodes = {n: {"old_gone_s": since(r.old_gone_s), "updated_s": since(r.updated_s)}
                 for n, r in sorted(self.agents.items())}
        return {"started_at": round(self.started_s, 1), "nodes": nodes,
                "agents_updated": sum(v["updated_s"] is not None for v in nodes.values()), "agents": len(nodes),
                "agents_done_s": since(self.agents_done_s), "controller_done_s": since(self.controller_done_s)}


def daemonset_rolled(daemonset: dict[str, Any]) -> bool:
    """``kubectl rollout status``'s test for a DaemonSet (as a dict): the controller has seen the
    newest spec and every scheduled node runs an updated, available pod."""
    meta, status = daemonset.get("metadata") or {}, daemonset.get("status") or {}
    want = status.get("desiredNumberScheduled", 0)
    return (status.get("observedGeneration", 0) >= meta.get("generation", 0)
            and status.get("updatedNumberScheduled", 0) == want
            and status.get("numberAvailable", 0) == want)


def rollout_complete(deployment: dict[str, Any]) -> bool:
    """``kubectl rollout status``'s test for a Deployment (as a dict): the controller has seen
    the newest spec, every replica is updated and available, and no old replica is left."""
    spec, status = deployment.get("spec") or {}, deployment.get("status") or {}
    meta = deployment.get("metadata") or {}
    want = spec.get("replicas", 1)
    return (status.get("observedGeneration", 0) >= meta.get("generation", 0)
            and status.get("updatedReplicas", 0) == want
            and status.get("replicas", 0) == want
            and status.get("availableReplicas", 0) == want)

"""The playground's faults on edgewatch's controller replicas (the steps ``kill-controller-leader``
and ``scale-controller``): found and acted on through the API, the process killed on its node."""

from __future__ import annotations

import asyncio
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Pod

from edgewatch_lab.playground.cluster import EDGEWATCH_NAMESPACE, PlaygroundCluster

__all__ = ["kill_controller_leader", "scale_controller"]

CONTROLLER = "edgewatch-controller"


async def kill_controller_leader(client: AsyncClient, cluster: PlaygroundCluster) -> dict[str, Any]:
    """The leading replica's pod dies: the holder of the Lease ``edgewatch/edgewatch-controller``
    (its pod name, the controller's ``--identity``) is SIGKILLed on its node, then the pod is
    force-deleted, so its Deployment makes a new pod (a new candidate, not the old leader). Returns
    what the fault record keeps: ``leader``, ``node``, ``killed``."""
    lease = await client.get(Lease, CONTROLLER, namespace=EDGEWATCH_NAMESPACE)
    holder = (lease.spec.holderIdentity if lease.spec else None) or ""
    pod = await client.get(Pod, holder, namespace=EDGEWATCH_NAMESPACE)
    node = pod.spec.nodeName if pod.spec else None
    killed = await asyncio.get_running_loop().run_in_executor(None, cluster.kill_controller_on, node or "")
    await client.delete(Pod, holder, namespace=EDGEWATCH_NAMESPACE, grace_period=0)
    return {"leader": holder, "node": node, "killed": killed}


async def scale_controller(client: AsyncClient, replicas: int) -> dict[str, Any]:
    """Scale the controller Deployment to ``replicas``; returns the fault record's ``replicas``."""
    await client.patch(Deployment, CONTROLLER, {"spec": {"replicas": replicas}}, namespace=EDGEWATCH_NAMESPACE)
    return {"replicas": replicas}

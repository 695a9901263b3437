"""Placing a scenario's StatefulSets before it plays (``statefulsets: [{name, node}]``): create
each one-replica StatefulSet (``edgewatch_lab.testing.workload.pinned_statefulset``, preferring its
node) and wait until its pod is Ready on that node.

The preference is only preferred, so the scheduler may put a pod elsewhere (its node not yet
schedulable, say); such a pod is deleted at once and the StatefulSet recreates it, to be scheduled
again. What happens to the pods during the run is the observer's
(``edgewatch_lab.playground.statefulsets``).

Limits: one API list per look (every 0.5 s); a pod that cannot reach its node fails the wait with
``TimeoutError`` naming every StatefulSet and its node.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from edgewatch.kube.errors import API_ERRORS
from edgewatch_lab.testing.kubeletsim import pod_ready
from edgewatch_lab.testing.smoke import create_until_done, wait_for
from edgewatch_lab.testing.workload import STATEFULSET_LABEL, pinned_statefulset

__all__ = ["place_statefulsets"]

log = logging.getLogger(__name__)


async def place_statefulsets(client: AsyncClient, wanted: Mapping[str, str], *, namespace: str,
                             timeout_s: float) -> None:
    """Create the StatefulSets ``wanted`` (name -> node) in ``namespace`` and wait (``timeout_s``
    seconds) until each one's pod is Ready on its node.

    Raises:
        TimeoutError: not all placed in time.
        lightkube.ApiError: a create refused (other than AlreadyExists).
    """
    for name, node in wanted.items():
        await create_until_done(client, pinned_statefulset(namespace=namespace, name=name, node=node), timeout_s=60)

    async def placed() -> bool:
        ok = set()
        async for pod in client.list(Pod, namespace=namespace, labels={STATEFULSET_LABEL: list(wanted)}):
            name = (pod.metadata.labels or {}).get(STATEFULSET_LABEL, "")
            node = pod.spec.nodeName if pod.spec else None
            if not node or pod.metadata.deletionTimestamp is not None or name not in wanted:
                continue
            if node != wanted[name]:
                log.info("StatefulSet %s: its pod %s was scheduled on %s, not %s; deleting it",
                         name, pod.metadata.name, node, wanted[name])
                with contextlib.suppress(*API_ERRORS):
                    await client.delete(Pod, pod.metadata.name, namespace=namespace, grace_period=0)
                continue
            if pod_ready(pod):
                ok.add(name)
        return ok == set(wanted)

    await wait_for(placed, timeout_s=timeout_s, what="each StatefulSet's pod Ready on its node ("
                   + ", ".join(f"{n} on {node}" for n, node in wanted.items()) + ")")

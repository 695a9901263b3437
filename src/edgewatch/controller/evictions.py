"""Evicting a failed node's pods: through the Eviction API (policy/v1, so PodDisruptionBudgets
apply), several at once but bounded, each call with its timeout, skipping what ``kubectl drain``
skips (DaemonSet pods come straight back; mirror pods cannot be evicted; pods already deleting).

A pod is due once the failed taint is older than its toleration of it
(``edgewatch.controller.taints.pod_eviction_due``); the rest are looked at again when due.

Limits: one LIST of the node's pods per call (field selector ``spec.nodeName``); evicted pods of a
dead node stay Terminating until it returns or is deleted, as in stock Kubernetes (no force
delete), but they leave every Service's endpoints at once.
"""

from __future__ import annotations

import asyncio
import logging

from edgewatch.controller.metrics import ControllerMetrics
from edgewatch.controller.snapshots import pod_tolerations
from edgewatch.controller.taints import pod_eviction_due
from edgewatch.controller.workqueue import sooner
from edgewatch.kube.api import ApiError, AsyncClient, HttpError, ObjectMeta, Pod
from edgewatch.kube.errors import is_not_found, is_too_many_requests

__all__ = ["PodEvictor", "skip_eviction"]

log = logging.getLogger(__name__)


def skip_eviction(pod: Pod) -> bool:
    """DaemonSet pods come straight back; mirror pods cannot be evicted; a pod already deleting needs
    nothing (kubectl drain's rules)."""
    meta = pod.metadata
    if meta.deletionTimestamp is not None:
        return True
    if (meta.annotations or {}).get("kubernetes.io/config.mirror"):
        return True
    return any(ref.kind == "DaemonSet" for ref in meta.ownerReferences or [])


class PodEvictor:
    """Evicts the due pods of failed nodes.

    Args (keyword-only):
        client: the controller's API client (list pods, create pods/eviction).
        metrics: ``evictions{result}`` (evicted, blocked by a PodDisruptionBudget, failed, timeout).
        api_timeout_s: bound of every API call, seconds.
        in_flight: evictions at once per node.
    """

    def __init__(self, *, client: AsyncClient, metrics: ControllerMetrics, api_timeout_s: float,
                 in_flight: int) -> None:
        if in_flight < 1 or api_timeout_s <= 0:
            raise ValueError("in_flight must be >= 1 and api_timeout_s > 0 seconds")
        self.client = client
        self.metrics = metrics
        self.api_timeout_s = api_timeout_s
        self.in_flight = in_flight

    async def evict_due(self, node: str, *, taint_added_at: float, now: float) -> float | None:
        """Evict ``node``'s pods that are due at ``now`` (controller clock, seconds; the failed taint
        was added at ``taint_added_at``); returns seconds until the next pod is due or a refused one
        is retried, or None. Raises the API error of the LIST (the caller retries)."""
        async with asyncio.timeout(self.api_timeout_s):
            pods = [pod async for pod in self.client.list(Pod, namespace="*", fields={"spec.nodeName": node})]
        next_due: float | None = None
        due_now: list[Pod] = []
        for pod in pods:
            if skip_eviction(pod):
                continue
            due = pod_eviction_due(tolerations=pod_tolerations(pod), taint_added_at=taint_added_at, now=now)
            if due is None:
                continue
            if due > now:
                next_due = sooner(next_due, due - now)
            else:
                due_now.append(pod)
        slots = asyncio.Semaphore(self.in_flight)
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(self._evict_one(pod, node=node, slots=slots)) for pod in due_now]
        for task in tasks:
            next_due = sooner(next_due, task.result())
        return next_due

    async def _evict_one(self, pod: Pod, *, node: str, slots: asyncio.Semaphore) -> float | None:
        """One eviction; never raises. Returns a retry delay (blocked, timed out, failed) or None."""
        meta = pod.metadata
        async with slots:
            try:
                async with asyncio.timeout(self.api_timeout_s):
                    await self.client.create(Pod.Eviction(metadata=ObjectMeta(name=meta.name, namespace=meta.namespace)),
                                             name=meta.name, namespace=meta.namespace)
            except ApiError as exc:
                if is_not_found(exc):
                    return None
                result = "blocked" if is_too_many_requests(exc) else "failed"  # 429: a PodDisruptionBudget
                self.metrics.evictions.labels(result=result).inc()
                if result == "failed":
                    log.info("evicting %s/%s from %s failed: %s", meta.namespace, meta.name, node, exc)
                return 5.0
            except (HttpError, OSError, TimeoutError) as exc:
                self.metrics.evictions.labels(result="timeout" if isinstance(exc, TimeoutError) else "failed").inc()
                log.info("evicting %s/%s from %s: %s", meta.namespace, meta.name, node, exc or type(exc).__name__)
                return 1.0
        self.metrics.evictions.labels(result="evicted").inc()
        log.info("evicted %s/%s from failed node %s", meta.namespace, meta.name, node,
                 extra={"kind": "evicted", "node": node, "pod": f"{meta.namespace}/{meta.name}"})
        return None

"""Watching each pool's coordinator during a playground run, from what edgewatch publishes: the
coordinator pods and the discovery ConfigMap (API), the agents' ``EdgePoolCoordinator`` Node
conditions (API) and their ``/metrics`` (each live node's peer port). What is recorded and why:
``edgewatch_lab.playground.coordinators``.

:class:`CoordinatorWatch` is polled by the runner (about once a second); :func:`coordinator_node`
and :func:`wait_coordinator_ready` serve the ``kill-coordinator`` / ``revive-coordinator`` steps
with ``coordinators: pods``.

Errors: every call is bounded (API client timeout; metrics ``metrics_timeout_s``); an API error
skips that look (counted in ``errors``), an unreachable agent counts as not served from the
coordinator. Limits: a node cut from the cloud (or killed) cannot be reached from the cloud side,
so ``live`` counts only the pool's nodes the lab reaches (neither killed nor cut off).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.resources.core_v1 import ConfigMap, Node, Pod

from edgewatch.kube.errors import API_ERRORS, status_code
from edgewatch.names import (
    COORDINATOR_COMPONENT,
    DEFAULT_PEER_PORT,
    POOL_COORDINATORS_CONFIGMAP,
    POOL_LABEL,
    ROLE_CONDITION_TYPE,
)
from edgewatch_lab.playground.coordinators import (
    CoordinatorSeries,
    cache_source_is_coordinator,
    leader_from_conditions,
    newest_placement,
)

__all__ = ["CoordinatorWatch", "coordinator_node", "coordinator_pods", "wait_coordinator_ready"]


async def coordinator_pods(client: AsyncClient, *, namespace: str, pool: str) -> list[dict[str, Any]]:
    """The pool's coordinator pods (JSON mappings)."""
    labels = {"app.kubernetes.io/component": COORDINATOR_COMPONENT, POOL_LABEL: pool}
    return [p.to_dict() async for p in client.list(Pod, namespace=namespace, labels=labels)]


async def coordinator_node(client: AsyncClient, *, namespace: str, pool: str) -> str | None:
    """The node the pool's (newest, not deleted) coordinator pod is bound to, or None."""
    node, _ready = newest_placement(await coordinator_pods(client, namespace=namespace, pool=pool))
    return node


async def wait_coordinator_ready(client: AsyncClient, *, namespace: str, pool: str, not_on: str | None,
                                 timeout_s: float) -> tuple[str | None, float]:
    """Wait until the pool's coordinator pod is Ready on a node other than ``not_on``; returns
    ``(node, seconds waited)``, node None if ``timeout_s`` passed first."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        with contextlib.suppress(*API_ERRORS):
            node, ready = newest_placement(await coordinator_pods(client, namespace=namespace, pool=pool))
            if ready and node != not_on:
                return node, time.monotonic() - start
        await asyncio.sleep(0.5)
    return None, time.monotonic() - start


class CoordinatorWatch:
    """Records every coordinator pool's :class:`CoordinatorSeries` (see the module docstring).

    Args (keyword-only):
        client: admin API client.
        namespace: edgewatch's namespace.
        pools: pool -> its nodes, for each pool with a coordinator.
        addresses: node -> the address its agent's peer port listens on.
        reachable: node -> whether the lab reaches it now (not killed, not cut from the cloud).
        metrics_timeout_s: bound of one ``/metrics`` read.
        metrics_headers: the headers of a ``/metrics`` read (the lab's scraper token,
            ``PlaygroundCluster.metrics_headers``; called in a thread, it may run kubectl).
    """

    def __init__(self, *, client: AsyncClient, namespace: str, pools: dict[str, list[str]],
                 addresses: dict[str, str], reachable: Any, metrics_timeout_s: float = 1.0,
                 metrics_headers: Callable[[], dict[str, str]] = dict) -> None:
        self.client = client
        self.metrics_headers = metrics_headers
        self.namespace = namespace
        self.pools = pools
        self.addresses = addresses
        self.reachable = reachable
        self.metrics_timeout_s = metrics_timeout_s
        self.series: dict[str, CoordinatorSeries] = {pool: CoordinatorSeries() for pool in pools}
        self.errors = 0
        self._http = httpx.AsyncClient(timeout=metrics_timeout_s)

    async def close(self) -> None:
        """Close the metrics client."""
        await self._http.aclose()

    async def _served(self, node: str) -> bool:
        try:
            headers = await asyncio.to_thread(self.metrics_headers)
            resp = await self._http.get(f"http://{self.addresses[node]}:{DEFAULT_PEER_PORT}/metrics",
                                        timeout=self.metrics_timeout_s, headers=headers)
        except (httpx.HTTPError, OSError):
            return False
        return resp.status_code == 200 and cache_source_is_coordinator(resp.text)

    async def poll(self, t: float) -> None:
        """Look once (``t``: scenario seconds) and append what changed."""
        try:
            nodes = [n async for n in self.client.list(Node)]
            try:
                cm = await self.client.get(ConfigMap, POOL_COORDINATORS_CONFIGMAP, namespace=self.namespace)
                urls = dict(cm.data or {})
            except API_ERRORS as exc:
                if status_code(exc) != 404:
                    raise
                urls = {}
            pods = {pool: await coordinator_pods(self.client, namespace=self.namespace, pool=pool)
                    for pool in self.pools}
        except API_ERRORS:
            self.errors += 1
            return
        messages: dict[str, str | None] = {}
        for node in nodes:
            cond = next((c for c in (node.status.conditions or []) if c.type == ROLE_CONDITION_TYPE), None) \
                if node.status else None
            messages[node.metadata.name] = cond.message if cond is not None else None
        for pool, members in self.pools.items():
            series = self.series[pool]
            series.note("pods", t, *newest_placement(pods[pool]))
            series.note("urls", t, urls.get(pool))
            alive = [n for n in members if self.reachable(n)]
            series.note("leader", t, leader_from_conditions({n: messages.get(n) for n in members}, alive=alive))
            served = await asyncio.gather(*(self._served(n) for n in alive))
            series.note("cache", t, sum(served), len(alive))

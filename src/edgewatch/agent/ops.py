"""The agent's ops endpoints on the peer port: ``/healthz``, ``/readyz`` and ``/metrics``.

- ``/healthz``: 200 ``ok`` once every loop of the agent runs (``started`` is set), else 503;
- ``/readyz``: 200 ``ok`` once the group roster is known and an exchange period has completed,
  else 503 saying which is missing (the DaemonSet's readiness probe);
- ``/metrics``: the Prometheus text of every registry handed in, in order (the agent's own, then
  the pool cache's, whose registry is replaced with each of its generations and read anew each
  time), to a scraper the cloud allows to ``get /edgewatch/metrics`` (:mod:`edgewatch.metricsauth`; 401,
  403 or 503 otherwise).

What it is handed: the ``started`` event, the roster (:class:`RosterState`: the membership), the
exchange (:class:`PeriodCount`: the peer exchange) and what to export (:class:`Exported`).

Limits: the peer server in front (``edgewatch.agent.peerserver``) bounds who may connect; these
handlers do no I/O of their own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from edgewatch.metricsauth import MetricsGuard

__all__ = ["Exported", "OpsEndpoints", "PeriodCount", "RosterState"]


class RosterState(Protocol):
    """Whether the group's roster is known (``edgewatch.agent.membership``)."""

    def roster_known(self) -> bool:
        """True once the roster is known (synced, or kept from before a restart)."""
        ...


class PeriodCount(Protocol):
    """How many exchange periods have completed (``edgewatch.agent.peers.PeerExchange``)."""

    @property
    def periods(self) -> int:
        """Completed periods since start."""
        ...


class Exported(Protocol):
    """Something with metrics to export (``AgentMetrics``; the pool cache host)."""

    @property
    def registry(self) -> CollectorRegistry:
        """Its current registry."""
        ...


class OpsEndpoints:
    """The handlers of ``/healthz``, ``/readyz`` and ``/metrics`` (see the module docstring).

    Args (keyword-only):
        started: set once every loop of the agent runs.
        roster: the roster's state (:class:`RosterState`).
        exchange: the completed periods (:class:`PeriodCount`).
        exported: what ``/metrics`` shows, in order (:class:`Exported`).
        guard: who may read ``/metrics``; None serves it to anyone (tests of the handlers only).
    """

    def __init__(self, *, started: asyncio.Event, roster: RosterState, exchange: PeriodCount,
                 exported: Sequence[Exported], guard: MetricsGuard | None) -> None:
        self._guard = guard
        self._started = started
        self._roster = roster
        self._exchange = exchange
        self._exported = tuple(exported)

    def add_routes(self, app: web.Application) -> None:
        """Add the three GET routes to ``app``."""
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/metrics", self.metrics)

    async def healthz(self, _req: web.Request) -> web.Response:
        """GET /healthz."""
        return web.Response(text="ok\n") if self._started.is_set() else web.Response(status=503, text="starting\n")

    async def readyz(self, _req: web.Request) -> web.Response:
        """GET /readyz."""
        known = self._roster.roster_known()
        if known and self._exchange.periods > 0:
            return web.Response(text="ok\n")
        return web.Response(status=503, text="group roster not known yet\n" if not known else "no period yet\n")

    async def metrics(self, req: web.Request) -> web.Response:
        """GET /metrics."""
        if self._guard is not None:
            refusal = await self._guard.check(req.headers.get("Authorization"), origin=req.remote or "")
            if refusal is not None:
                headers = {"Retry-After": str(refusal.retry_after_s)} if refusal.retry_after_s else {}
                return web.Response(status=refusal.code, text=refusal.message + "\n", headers=headers)
        body = b"".join(generate_latest(source.registry) for source in self._exported)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

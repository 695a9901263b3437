"""Carrying cut-off peers' heartbeats on the peer path: one independent task per carried node.

For every node in the agent's current ``duties.carry`` (``edgewatch.core.duties``: a peer the group
judges healthy whose own heartbeat says its cloud link is down, and for which this agent is the
chosen carrier) a task renews that node's Lease every ``interval_s`` through the renewal function
it is given (``renew_on_behalf`` of the Lease module, ``via="peer"``). Each renewal — a GET and an
UPDATE, with conflict retries — runs under ``timeout_s``; a slow or stuck apiserver call for one
node never delays another node's renewal, nor the agent's EdgeHealthy writes (their own loop).

Clocks: the node's last sign of life is taken on this agent's monotonic clock (the local receipt
of its newest heartbeat minus the age it came with, see ``edgewatch.core.wire.BookEntry``) and
turned into the wall-clock ``renewTime`` only at the moment of writing (this agent's own wall
clock minus the locally measured age). No timestamp written by another machine is compared with
our clock here.

What it is handed: the nodes to carry now (:class:`CarryWanted`: the agent's exchange loop, from
its duties), each node's last sign of life (:class:`LifeSigns`: the peer exchange's heartbeat book),
the renewal (:class:`Renew`; the agent's is :class:`PeerPathRenewal`), the metrics and a wall clock
(the controller's, as the agent estimates it: ``edgewatch.agent.cloudclock``).

Limits: a renewal that fails is retried after ``retry_s`` (default 1 s), not backed off further:
the Lease lasts 40 s and the kubelet's own renewal is every 10 s, so trying again soon is what keeps
the node Ready. The set of carried nodes is polled every ``poll_s``, not pushed.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from edgewatch.agent.metrics import AgentMetrics
from edgewatch.core.types import NodeName
from edgewatch.kube.api import AsyncClient
from edgewatch.kube.leases import DelegatedRenewal, renew_on_behalf

log = logging.getLogger(__name__)

__all__ = ["CarryWanted", "HeartbeatCarrier", "LifeSigns", "PeerPathRenewal", "Renew"]


class Renew(Protocol):
    """``renew(node=..., alive_at=...)`` -> an object with ``outcome`` (a str enum: ``renewed``,
    ``self``, ``no_lease``, ``conflict``, ``failed``, ...) and ``detail`` (str)."""

    def __call__(self, *, node: NodeName, alive_at: dt.datetime) -> Awaitable[Any]: ...


class CarryWanted(Protocol):
    """Which cut-off peers this agent carries now (its duties; empty while its own link is down)."""

    def carry_wanted(self) -> frozenset[NodeName]:
        """The nodes whose Lease this agent should renew now (cheap; read every ``poll_s``)."""
        ...


class LifeSigns(Protocol):
    """When each peer last gave a sign of life, on this agent's monotonic clock."""

    def life_sign(self, node: NodeName) -> float | None:
        """Monotonic seconds of ``node``'s last sign of life, or None if none is known."""
        ...


class PeerPathRenewal:
    """The peer path's Lease renewal (a :class:`Renew`): ``renew_on_behalf`` with ``via="peer"``,
    this node as the delegate.

    Args (keyword-only):
        client: the agent's API client.
        delegate: this node (named in the delegate mark on the carried Lease).
    """

    def __init__(self, *, client: AsyncClient, delegate: NodeName) -> None:
        self._client = client
        self._delegate = delegate

    async def __call__(self, *, node: NodeName, alive_at: dt.datetime) -> DelegatedRenewal:
        """Renew ``node``'s Lease with ``alive_at`` (aware UTC) as its renewTime; never bounded
        here (the carrier bounds it). Errors are the Lease module's (see
        ``edgewatch.kube.leases.renew_on_behalf``)."""
        return await renew_on_behalf(client=self._client, node=node, delegate=self._delegate, via="peer",
                                     alive_at=alive_at)


class HeartbeatCarrier:
    """Keeps one renewal task per carried node.

    Args (keyword-only):
        renew: the Lease renewal (see :class:`Renew`); its exceptions are logged, never fatal.
        life_signs: each node's last sign of life (:class:`LifeSigns`; a node without one gets
            nothing written until one is known).
        wanted: the nodes to carry now (:class:`CarryWanted`), read every ``poll_s``.
        metrics: ``delegations{outcome}`` and ``carrying`` are kept here.
        interval_s: renew a carried Lease this often (seconds).
        timeout_s: bound of one renewal (seconds); a renewal that takes longer counts as
            ``timeout`` and is retried.
        retry_s: pause after a failed renewal (seconds), doubled with each failure in a row up to
            ``interval_s``.
        poll_s: how often the wanted set is read (seconds).
        monotonic, wall: clocks (injectable for tests): seconds, and aware UTC datetime.
        before_renew: awaited right before each renewal computes its renewTime (the agent's: a
            fresh reading of the control plane's clock, ``edgewatch.agent.clockreader``), within
            half of ``timeout_s``; its failure is logged and the renewal goes on; None: nothing.
    """

    def __init__(self, *, renew: Renew, life_signs: LifeSigns, wanted: CarryWanted, metrics: AgentMetrics,
                 interval_s: float, timeout_s: float, retry_s: float = 1.0, poll_s: float = 0.5,
                 monotonic: Callable[[], float] = time.monotonic,
                 wall: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc),
                 before_renew: Callable[[], Awaitable[None]] | None = None) -> None:
        if min(interval_s, timeout_s, retry_s, poll_s) <= 0:
            raise ValueError("carrier intervals and timeouts must be > 0 seconds")
        self._renew = renew
        self._life_signs = life_signs
        self._wanted = wanted
        self._metrics = metrics
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.retry_s = retry_s
        self.poll_s = poll_s
        self._monotonic = monotonic
        self._wall = wall
        self._before_renew = before_renew
        self.tasks: dict[NodeName, asyncio.Task[None]] = {}
        self.renewed_at: dict[NodeName, float] = {}  # monotonic time of each node's last successful renewal

    async def run(self) -> None:
        """Follow ``wanted.carry_wanted()`` (the nodes to carry now) until cancelled: start a task
        for each new node, cancel and await the task of each node no longer wanted. On cancellation
        every task is cancelled and awaited (TaskGroup)."""
        try:
            async with asyncio.TaskGroup() as tg:
                while True:
                    want = self._wanted.carry_wanted()
                    for node in sorted(want - self.tasks.keys()):
                        self.tasks[node] = tg.create_task(self._carry(node), name=f"carry-{node}")
                    for node in sorted(self.tasks.keys() - want):
                        task = self.tasks.pop(node)
                        task.cancel()
                        await asyncio.wait({task})
                        self.renewed_at.pop(node, None)
                        log.info("stopped carrying %s", node, extra={"kind": "carry_stop", "peer": node})
                    self._metrics.carrying.set(len(self.tasks))
                    await asyncio.sleep(self.poll_s)
        finally:
            self.tasks.clear()
            self._metrics.carrying.set(0)

    async def _carry(self, node: NodeName) -> None:
        """Renew ``node``'s Lease every ``interval_s`` until cancelled; after a failure retry in
        ``retry_s``, doubling with each failure in a row up to ``interval_s`` (a refusal that lasts,
        e.g. past the carry deadline during a controller outage, costs one request per interval)."""
        failures = 0
        while True:
            started = self._monotonic()
            ok = await self.renew_once(node)
            failures = 0 if ok else failures + 1
            pause = self.interval_s if ok else min(self.interval_s, self.retry_s * 2 ** min(failures - 1, 16))
            await asyncio.sleep(max(0.0, pause - (self._monotonic() - started)))

    async def renew_once(self, node: NodeName) -> bool:
        """One bounded renewal of ``node``'s Lease; True if renewed (or nothing was due)."""
        seen = self._life_signs.life_sign(node)
        if seen is None:
            return False
        if self._before_renew is not None:
            try:  # bounded apart: a slow or failing read never stops the renewal (it keeps the reading held)
                async with asyncio.timeout(self.timeout_s / 2):
                    await self._before_renew()
            except Exception as exc:  # noqa: BLE001 - see above
                log.debug("carrying %s: no fresh clock reading: %s", node, exc or type(exc).__name__)
        try:
            async with asyncio.timeout(self.timeout_s):
                age_s = max(0.0, self._monotonic() - seen)
                alive_at = self._wall() - dt.timedelta(seconds=age_s)
                result = await self._renew(node=node, alive_at=alive_at)
        except TimeoutError:
            self._metrics.delegations.labels(outcome="timeout").inc()
            log.warning("carrying %s: the Lease renewal took longer than %.1f s; retrying", node, self.timeout_s,
                        extra={"kind": "carry_timeout", "peer": node})
            return False
        except Exception as exc:  # noqa: BLE001 - one node's failure must never stop the others
            self._metrics.delegations.labels(outcome="error").inc()
            log.error("carrying %s failed: %s", node, exc or type(exc).__name__,
                      extra={"kind": "carry_error", "peer": node})
            return False
        outcome = str(getattr(result, "outcome", "failed"))
        self._metrics.delegations.labels(outcome=outcome).inc()
        if outcome == "renewed":
            if node not in self.renewed_at:
                log.info("carrying the heartbeat of %s", node, extra={"kind": "carry_start", "peer": node})
            self.renewed_at[node] = self._monotonic()
            return True
        log.info("carrying %s: %s %s", node, outcome, getattr(result, "detail", ""),
                 extra={"kind": "carry_outcome", "peer": node, "outcome": outcome})
        return outcome in ("self", "no_lease", "not_due")

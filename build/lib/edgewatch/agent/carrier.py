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

log = logging.getLogger(__name__)

__all__ = ["HeartbeatCarrier", "Renew"]


class Renew(Protocol):
    """``renew(node=..., alive_at=...)`` -> an object with ``outcome`` (a str enum: ``renewed``,
    ``self``, ``no_lease``, ``conflict``, ``failed``, ...) and ``detail`` (str)."""

    def __call__(self, *, node: NodeName, alive_at: dt.datetime) -> Awaitable[Any]: ...


class HeartbeatCarrier:
    """Keeps one renewal task per carried node.

    Args (keyword-only):
        renew: the Lease renewal (see :class:`Renew`); its exceptions are logged, never fatal.
        life_sign: monotonic time (seconds) of a node's last sign of life, or None if unknown (then
            nothing is written for it until one is known).
        metrics: ``delegations{outcome}`` and ``carrying`` are kept here.
        interval_s: renew a carried Lease this often (seconds).
        timeout_s: bound of one renewal (seconds); a renewal that takes longer counts as
            ``timeout`` and is retried.
        retry_s: pause after a failed renewal (seconds).
        poll_s: how often the wanted set is read (seconds).
        monotonic, wall: clocks (injectable for tests): seconds, and aware UTC datetime.
    """

    def __init__(self, *, renew: Renew, life_sign: Callable[[NodeName], float | None], metrics: AgentMetrics,
                 interval_s: float, timeout_s: float, retry_s: float = 1.0, poll_s: float = 0.5,
                 monotonic: Callable[[], float] = time.monotonic,
                 wall: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc)) -> None:
        if min(interval_s, timeout_s, retry_s, poll_s) <= 0:
            raise ValueError("carrier intervals and timeouts must be > 0 seconds")
        self._renew = renew
        self._life_sign = life_sign
        self._metrics = metrics
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.retry_s = retry_s
        self.poll_s = poll_s
        self._monotonic = monotonic
        self._wall = wall
        self.tasks: dict[NodeName, asyncio.Task[None]] = {}
        self.renewed_at: dict[NodeName, float] = {}  # monotonic time of each node's last successful renewal

    async def run(self, wanted: Callable[[], frozenset[NodeName]]) -> None:
        """Follow ``wanted()`` (the nodes to carry now) until cancelled: start a task for each new
        node, cancel and await the task of each node no longer wanted. On cancellation every task is
        cancelled and awaited (TaskGroup)."""
        try:
            async with asyncio.TaskGroup() as tg:
                while True:
                    want = wanted()
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
        """Renew ``node``'s Lease every ``interval_s`` (after a failure: ``retry_s``) until cancelled."""
        while True:
            started = self._monotonic()
            ok = await self.renew_once(node)
            pause = self.interval_s if ok else self.retry_s
            await asyncio.sleep(max(0.0, pause - (self._monotonic() - started)))

    async def renew_once(self, node: NodeName) -> bool:
        """One bounded renewal of ``node``'s Lease; True if renewed (or nothing was due)."""
        seen = self._life_sign(node)
        if seen is None:
            return False
        age_s = max(0.0, self._monotonic() - seen)
        alive_at = self._wall() - dt.timedelta(seconds=age_s)
        try:
            async with asyncio.timeout(self.timeout_s):
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

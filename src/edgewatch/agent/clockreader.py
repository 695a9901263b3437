"""Reads the control plane's clock while this agent carries: the renewTime of kube-controller-manager's
leader Lease (``kube-system/kube-controller-manager``), fed to :class:`~edgewatch.agent.cloudclock.CloudClock`.

Why this Lease: the apiserver bounds every carried renewTime by it (``deploy/15-policy-agent.yaml``,
policy ``edgewatch-agent-carry-clock``), and kube-controller-manager's leader renews it every retry
period (2 s by default, client-go ``leaderelection``) with its own clock. Reading the clock the
policy judges by, rather than the edgewatch controller's beacon, keeps carries admitted while no
edgewatch controller replica runs.

Cost: nothing while this agent carries nobody (no watch: a watch would bring an event every 2 s to
every node). While it carries, or leads its pool's coordinator (which forwards carried heartbeats),
one GET of one Lease every ``period_s`` (2 s): about 1 KiB each way; the peer path's carrier also
asks for a fresh reading right before a carry (:meth:`ControlPlaneClockReader.fresh`).

Errors: a missing Lease (kube-controller-manager without leader election), a refusal (an install
without the ``edgewatch-agent-clock`` Role) or a timeout is logged when the outcome changes and
counted in ``edgewatch_agent_control_plane_clock_reads_total{outcome}``; the clock then keeps its
last reading, or the beacon's.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable
from typing import Protocol

from edgewatch.agent.cloudclock import CloudClock
from edgewatch.kube.api import ApiError, AsyncClient, HttpError, Lease
from edgewatch.kube.errors import is_not_found, status_code
from edgewatch.names import CONTROL_PLANE_CLOCK_LEASE

__all__ = ["ClockReadEvents", "ControlPlaneClockReader"]

log = logging.getLogger(__name__)


class ClockReadEvents(Protocol):
    """Where the reader reports each read's outcome (``AgentMetrics`` implements it)."""

    def control_plane_clock_read(self, outcome: str) -> None:
        """One read: ``ok``, ``no_time`` (the Lease has no renewTime), ``not_found``, ``forbidden``,
        ``failed`` or ``timeout``."""


class ControlPlaneClockReader:
    """Reads the leader Lease every ``period_s`` while ``wanted()`` is true.

    Args (keyword-only):
        client: the agent's API client (its ServiceAccount may ``get`` only this Lease).
        clock: where each reading goes (:meth:`CloudClock.observe_control_plane`).
        wanted: true while this agent needs the clock (it carries a peer or leads its pool's
            coordinator); read every ``period_s``.
        events: each read's outcome (:class:`ClockReadEvents`).
        timeout_s: bound of one read, seconds.
        period_s: pause between reads while wanted, seconds (default 2: the Lease's own renewal
            period, so a reading is never more than about two periods old).
        lease: (namespace, name) of the Lease (default kube-system/kube-controller-manager).

    Raises:
        ValueError: a period or timeout that is not positive.
    """

    def __init__(self, *, client: AsyncClient, clock: CloudClock, wanted: Callable[[], bool],
                 events: ClockReadEvents, timeout_s: float, period_s: float = 2.0,
                 lease: tuple[str, str] = CONTROL_PLANE_CLOCK_LEASE) -> None:
        if min(timeout_s, period_s) <= 0:
            raise ValueError("the clock reader's period and timeout must be > 0 seconds")
        self._client = client
        self._clock = clock
        self._wanted = wanted
        self._events = events
        self.timeout_s = timeout_s
        self.period_s = period_s
        self.namespace, self.name = lease
        self.last_outcome: str | None = None
        self._read_at: float | None = None  # loop time of the last successful read

    async def run(self) -> None:
        """Read while wanted, every ``period_s``, until cancelled."""
        while True:
            if self._wanted():
                await self.read_once()
            await asyncio.sleep(self.period_s)

    async def fresh(self) -> None:
        """Read now unless a read succeeded within ``period_s``: called before a carry, so the first
        carry after a while without carrying (a new carrier, a restart during a controller outage)
        is written on a current reading, not on one capped minutes in the past."""
        now = asyncio.get_running_loop().time()
        if self._read_at is None or now - self._read_at >= self.period_s:
            await self.read_once()

    async def read_once(self) -> str:
        """One bounded read; returns its outcome (see :class:`ClockReadEvents`). Never raises
        anything but cancellation."""
        try:
            async with asyncio.timeout(self.timeout_s):
                lease = await self._client.get(Lease, self.name, namespace=self.namespace)
        except TimeoutError:
            return self._note("timeout", f"no answer within {self.timeout_s:g} s")
        except ApiError as exc:
            if is_not_found(exc):
                return self._note("not_found", "the Lease does not exist (kube-controller-manager without "
                                  "leader election?); carried renewTimes use the beacon's clock")
            if status_code(exc) == 403:
                return self._note("forbidden", "this agent may not read it (the Role edgewatch-agent-clock "
                                  "is missing?); carried renewTimes use the beacon's clock")
            return self._note("failed", str(exc))
        except (HttpError, OSError) as exc:
            return self._note("failed", str(exc) or type(exc).__name__)
        renew_time = lease.spec.renewTime if lease.spec is not None else None
        if not isinstance(renew_time, dt.datetime) or renew_time.tzinfo is None:
            return self._note("no_time", "the Lease has no renewTime")
        self._clock.observe_control_plane(renew_time)
        self._read_at = asyncio.get_running_loop().time()
        return self._note("ok", "")

    def _note(self, outcome: str, detail: str) -> str:
        self._events.control_plane_clock_read(outcome)
        if outcome != self.last_outcome:
            level = logging.INFO if outcome == "ok" else logging.WARNING
            log.log(level, "reading the control plane's clock (%s/%s): %s%s", self.namespace, self.name, outcome,
                    f": {detail}" if detail else "", extra={"kind": "control_plane_clock", "outcome": outcome})
        self.last_outcome = outcome
        return outcome

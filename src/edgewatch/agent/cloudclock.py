"""The cloud's clock as an agent can know it: a reading of the control plane's clock (the
``renewTime`` of kube-controller-manager's leader Lease, or, before one was read, of the edgewatch
controller's beacon Lease) plus the time this agent measured on its own monotonic clock since it saw
that reading.

What it is for
    A carried Lease renewal (peer path and pool coordinator) writes a ``renewTime``. The apiserver
    refuses an agent's renewTime more than 5 s past the renewTime of kube-controller-manager's leader
    Lease (``deploy/15-policy-agent.yaml``, policy ``edgewatch-agent-carry-clock``: one compromised
    node cannot push a Lease into the future, where kube-controller-manager, which counts a renewal
    only when renewTime grows, would ignore every real renewal after it). So honest carriers write
    renewTimes on that clock, not their own wall clock: a carrier whose clock is off by minutes
    carries exactly like one whose clock is right, and no timestamp written by another machine is
    compared with this machine's clock (docs/clock-skew.md) — the control plane's time is taken as a
    reference and only *durations measured here* are added to it.

Two sources, one clock: kube-controller-manager's leader Lease is read while this agent carries
(``edgewatch.agent.clockreader``: it needs no edgewatch controller, so carrying survives a controller
outage); the beacon Lease, which the agent watches anyway, is used only while no leader-Lease reading
is fresh (:data:`CONTROL_PLANE_FRESH_S`): the two are different machines' clocks, and an estimate that
jumped between them could go backwards.

Never past the bound: :meth:`CloudClock.now` never answers later than the last reading plus
``edgewatch.carryahead.CONTROL_PLANE_AHEAD_S`` (and the bound the controller published, if smaller),
less :data:`AHEAD_MARGIN_S`, so an honest carrier is not refused while the reading stays fresh (it
answers the same time until the next one).

Limits: the estimate is as old as the reading's way here (milliseconds) behind the control plane's
clock; before any reading is seen :meth:`CloudClock.now` falls back to this machine's wall clock.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable

from edgewatch.carryahead import CONTROL_PLANE_AHEAD_S

__all__ = ["AHEAD_MARGIN_S", "CONTROL_PLANE_FRESH_S", "CloudClock"]

#: Kept below the published bound, seconds: the apiserver may judge by a beacon Lease a moment older
#: than the one this agent saw last (its admission reads parameters through an informer).
AHEAD_MARGIN_S = 1.0

#: A leader-Lease reading this recent (seconds, this machine's monotonic clock) keeps the beacon's
#: readings out: the reader refreshes it every 2 s while this agent carries.
CONTROL_PLANE_FRESH_S = 30.0


class CloudClock:
    """Estimates the control plane's clock from its last observed reading.

    Args (keyword-only):
        monotonic: this machine's monotonic clock, seconds (injectable for tests).
        wall: this machine's wall clock, an aware UTC datetime (the fallback).
    """

    def __init__(self, *, monotonic: Callable[[], float] = time.monotonic,
                 wall: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)) -> None:
        self._monotonic = monotonic
        self._wall = wall
        self._reference: tuple[dt.datetime, float] | None = None  # (reading, our monotonic then)
        self._ahead_s: float | None = None  # the published carry-ahead bound, seconds
        self._control_plane_at: float | None = None  # our monotonic time of the last leader-Lease reading

    def limit(self, ahead_s: float | None) -> None:
        """Note the carry-ahead bound the controller published, seconds (None: none published; the
        admission bound alone applies). Only a smaller bound than the admission policy's matters."""
        self._ahead_s = ahead_s

    @property
    def known(self) -> bool:
        """True once a reading (leader Lease or beacon) was observed."""
        return self._reference is not None

    def observe(self, controller_time: dt.datetime | None) -> None:
        """Note a reading of the edgewatch controller's clock seen just now (the beacon Lease's
        renewTime; None or a naive datetime: ignored). Ignored too while a leader-Lease reading is
        fresh (:data:`CONTROL_PLANE_FRESH_S`). A reading equal to the one held changes nothing."""
        if self._control_plane_at is not None and self._monotonic() - self._control_plane_at < CONTROL_PLANE_FRESH_S:
            return
        self._take(controller_time)

    def observe_control_plane(self, renew_time: dt.datetime | None) -> None:
        """Note a reading of the control plane's clock seen just now: the renewTime of
        kube-controller-manager's leader Lease (None or a naive datetime: ignored)."""
        if renew_time is None or renew_time.tzinfo is None:
            return
        self._control_plane_at = self._monotonic()
        self._take(renew_time)

    def _take(self, reading: dt.datetime | None) -> None:
        if reading is None or reading.tzinfo is None:
            return
        if self._reference is not None and self._reference[0] == reading:
            return
        self._reference = (reading, self._monotonic())

    def now(self) -> dt.datetime:
        """The control plane's current time as estimated here (aware UTC datetime): the last reading
        plus the seconds this machine's monotonic clock advanced since, never more than the admission
        bound (and the published one, if smaller) less :data:`AHEAD_MARGIN_S`; the wall clock if no
        reading was seen."""
        if self._reference is None:
            return self._wall()
        reading, seen_at = self._reference
        elapsed = max(0.0, self._monotonic() - seen_at)
        bound = CONTROL_PLANE_AHEAD_S if self._ahead_s is None else min(self._ahead_s, CONTROL_PLANE_AHEAD_S)
        elapsed = min(elapsed, max(0.0, bound - AHEAD_MARGIN_S))
        return reading + dt.timedelta(seconds=elapsed)

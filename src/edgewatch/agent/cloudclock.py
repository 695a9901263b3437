"""The controller's clock as an agent can know it: the beacon Lease's ``renewTime`` (the controller's
clock when it issued the beacon) plus the time this agent measured on its own monotonic clock since
it saw that Lease.

What it is for
    A carried Lease renewal (peer path and pool coordinator) writes a ``renewTime``. The apiserver
    refuses an agent's renewTime more than a few seconds past the beacon Lease's own
    (``deploy/15-policy-agent.yaml``, policy ``edgewatch-agent-carry-clock``: one compromised node
    cannot push a Lease into the future, where kube-controller-manager, which counts a renewal only
    when renewTime grows, would ignore every real renewal after it). So honest carriers write
    renewTimes on the controller's timeline, not their own wall clock: a carrier whose clock is off
    by minutes carries exactly like one whose clock is right, and no timestamp written by another
    machine is compared with this machine's clock (docs/clock-skew.md) — the controller's time is
    taken as a reference and only *durations measured here* are added to it.

Never past the bound: the controller publishes with the beacon how far past its renewTime an
agent's renewTime may be (``edgewatch.io/carry-ahead``, derived from the kubelet's and
kube-controller-manager's timings: ``edgewatch.carryahead``). :meth:`CloudClock.now` never answers
later than the last reading plus that bound, less :data:`AHEAD_MARGIN_S`, so an honest carrier is
never refused while the controller writes beacons (it answers the same time until the next one).

Limits: the estimate is as old as the network delay of the watch event (milliseconds) behind the
controller's clock; before the first beacon Lease is seen (or with a controller that writes no
renewTime) :meth:`CloudClock.now` falls back to this machine's wall clock.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable

__all__ = ["AHEAD_MARGIN_S", "CloudClock"]

#: Kept below the published bound, seconds: the apiserver may judge by a beacon Lease a moment older
#: than the one this agent saw last (its admission reads parameters through an informer).
AHEAD_MARGIN_S = 1.0


class CloudClock:
    """Estimates the controller's clock from its last observed reading.

    Args (keyword-only):
        monotonic: this machine's monotonic clock, seconds (injectable for tests).
        wall: this machine's wall clock, an aware UTC datetime (the fallback).
    """

    def __init__(self, *, monotonic: Callable[[], float] = time.monotonic,
                 wall: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)) -> None:
        self._monotonic = monotonic
        self._wall = wall
        self._reference: tuple[dt.datetime, float] | None = None  # (controller time, our monotonic then)
        self._ahead_s: float | None = None  # the published carry-ahead bound, seconds

    def limit(self, ahead_s: float | None) -> None:
        """Note the carry-ahead bound the controller published, seconds (None: none published, no limit)."""
        self._ahead_s = ahead_s

    @property
    def known(self) -> bool:
        """True once a controller reading was observed."""
        return self._reference is not None

    def observe(self, controller_time: dt.datetime | None) -> None:
        """Note a reading of the controller's clock seen just now (the beacon Lease's renewTime; None
        or a naive datetime: ignored). A reading equal to the one held changes nothing (the same
        Lease seen again is no new reading)."""
        if controller_time is None or controller_time.tzinfo is None:
            return
        if self._reference is not None and self._reference[0] == controller_time:
            return
        self._reference = (controller_time, self._monotonic())

    def now(self) -> dt.datetime:
        """The controller's current time as estimated here (aware UTC datetime): its last reading
        plus the seconds this machine's monotonic clock advanced since, never more than the published
        bound less :data:`AHEAD_MARGIN_S`; the wall clock if no reading was seen."""
        if self._reference is None:
            return self._wall()
        reading, seen_at = self._reference
        elapsed = max(0.0, self._monotonic() - seen_at)
        if self._ahead_s is not None:
            elapsed = min(elapsed, max(0.0, self._ahead_s - AHEAD_MARGIN_S))
        return reading + dt.timedelta(seconds=elapsed)

"""Who may carry a node's heartbeat, as the controller counts it (edgewatch.controller.views.unproven_carry)
and the clock carried renewals are written in (edgewatch.agent.cloudclock): tables, no I/O."""

from __future__ import annotations

import datetime as dt

import pytest

from edgewatch.agent.cloudclock import CloudClock
from edgewatch.controller.model import CloudView, LeaseSnapshot
from edgewatch.controller.views import cloud_view, unproven_carry

RENEW = "2026-11-25T15:00:00.000000Z"


def _lease(**annotations: str) -> LeaseSnapshot:
    return LeaseSnapshot(renew_time=RENEW, observed_at=100.0, annotations=annotations)


def _mark(by: str, via: str = "peer", renew: str = RENEW) -> LeaseSnapshot:
    return _lease(**{"edgewatch.io/delegate-heartbeat": "true", "edgewatch.io/delegated-by": by,
                     "edgewatch.io/delegated-renew-time": renew, "edgewatch.io/delegated-via": via})


@pytest.mark.parametrize(("lease", "own_carrier", "believed", "says"), [
    (None, None, True, ""),                                         # no Lease
    (_lease(), None, True, ""),                                     # the kubelet's own renewal
    (_mark("a-1", renew="2026-11-25T14:59:50.000000Z"), None, True, ""),  # a stale mark: the kubelet's renewal
    (_mark("ctl", via="autonomy"), None, True, ""),                 # the controller's own hold
    (_mark("a-1"), "a-1", True, ""),                                # the node named a-1: a proven carry
    (_mark("a-1", via="coordinator"), "a-1", True, ""),             # ... through the pool leader a-1
    (_mark("a-1"), None, False, "no fresh signed statement"),       # a dead node kept "alive" by a-1
    (_mark("a-1"), "", False, "names no carrier"),                  # a connected node "carried" by a-1
    (_mark("a-1"), "a-3", False, "names a-3 as its carrier"),       # someone else's carry taken over
    (_mark(""), "", False, "an unnamed carrier"),
])
def test_a_carry_counts_only_when_the_node_named_its_carrier(lease: LeaseSnapshot | None, own_carrier: str | None,
                                                             believed: bool, says: str) -> None:
    why = unproven_carry(node="a-5", lease=lease, own_carrier=own_carrier)
    assert (why is None) is believed
    if not believed:
        assert why is not None and says in why and "a-5" in why


def test_an_unproven_carry_is_no_heartbeat() -> None:
    lease = _mark("a-1")
    assert cloud_view(lease=lease, now=101.0, grace_s=12.0) is CloudView.DELEGATED
    unproven = LeaseSnapshot(renew_time=lease.renew_time, observed_at=lease.observed_at,
                             annotations=lease.annotations, delegation_proven=False)
    assert cloud_view(lease=unproven, now=101.0, grace_s=12.0) is CloudView.LOST


class _Mono:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_the_cloud_clock_is_the_controllers_reading_plus_what_we_measured() -> None:
    mono = _Mono()
    ours = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)  # this machine's wall clock: years off
    clock = CloudClock(monotonic=mono, wall=lambda: ours)
    assert not clock.known and clock.now() == ours  # nothing observed yet: the wall clock
    controller = dt.datetime(2026, 11, 25, 15, 0, tzinfo=dt.UTC)
    clock.observe(controller)
    mono.t += 3.5  # within the admission bound (5 s less the 1 s margin): nothing capped
    assert clock.known and clock.now() == controller + dt.timedelta(seconds=3.5)
    clock.observe(controller)  # the same Lease seen again is no new reading
    assert clock.now() == controller + dt.timedelta(seconds=3.5)
    clock.observe(controller + dt.timedelta(seconds=5))
    mono.t += 1
    assert clock.now() == controller + dt.timedelta(seconds=6)
    clock.observe(None)
    clock.observe(dt.datetime(2026, 1, 1))  # naive: not a reading
    assert clock.now() == controller + dt.timedelta(seconds=6)

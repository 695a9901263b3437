"""edgewatch.carryahead and the agent's CloudClock under it: the carried-renewTime bound derived from
the kubelet's renew interval and kube-controller-manager's grace."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgewatch.agent.cloudclock import AHEAD_MARGIN_S, CONTROL_PLANE_FRESH_S, CloudClock
from edgewatch.carryahead import (CLOCK_SLACK_S, CONTROL_PLANE_AHEAD_S, MAX_AHEAD_S, MIN_AHEAD_S, carry_ahead_s,
                                  format_ahead, parse_ahead)
from edgewatch.controller.model import ControllerConfig


@pytest.mark.parametrize(("grace", "interval", "ahead"), [
    (50, 10, 30),   # stock since Kubernetes 1.32: capped
    (40, 10, 25),   # stock before
    (21.5, 10, 6),  # whole seconds, rounded down
    (20, 10, 5),    # the least that can be carried: the admission policy's fixed bound
])
def test_examples(grace: float, interval: float, ahead: int) -> None:
    assert carry_ahead_s(node_monitor_grace_s=grace, kubelet_renew_interval_s=interval) == ahead


@pytest.mark.parametrize("grace", [19.9, 17, 10, 5])
def test_a_grace_too_short_to_carry_safely_is_refused(grace: float) -> None:
    with pytest.raises(ValueError, match="no safe carry bound"):
        carry_ahead_s(node_monitor_grace_s=grace, kubelet_renew_interval_s=10)
    with pytest.raises(ValueError, match="no safe carry bound"):
        ControllerConfig(node_monitor_grace_s=grace)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), True, "40"])
def test_bad_inputs(bad: object) -> None:
    with pytest.raises(ValueError):
        carry_ahead_s(node_monitor_grace_s=bad, kubelet_renew_interval_s=10)  # type: ignore[arg-type]


@given(st.floats(min_value=15, max_value=600), st.floats(min_value=1, max_value=60))
def test_no_carry_hides_a_kubelet_renewal_past_the_grace(grace: float, interval: float) -> None:
    """The worst case of the derivation: a renewTime A ahead, then the kubelet's first renewal past
    it up to one interval later, with its clock up to the slack behind: never past the grace."""
    try:
        ahead = carry_ahead_s(node_monitor_grace_s=grace, kubelet_renew_interval_s=interval)
    except ValueError:
        assert grace < interval + CLOCK_SLACK_S + MIN_AHEAD_S
        return
    assert MIN_AHEAD_S <= ahead <= MAX_AHEAD_S
    assert ahead + interval + CLOCK_SLACK_S <= grace
    # the admission policy's fixed bound past the control plane's clock is as safe for every grace
    # the controller accepts
    assert CONTROL_PLANE_AHEAD_S + interval + CLOCK_SLACK_S <= grace


def test_the_annotation_round_trips_and_is_capped() -> None:
    assert format_ahead(25) == "25s" and parse_ahead("25s") == 25
    assert parse_ahead("99s") == MAX_AHEAD_S
    for bad in (None, "", "5m", "-5s", "1.5s", "100s", " 5s", "5s\n", "５s"):
        assert parse_ahead(bad) is None, bad


def test_the_controller_config_derives_it() -> None:
    assert ControllerConfig().carry_ahead_s == 25
    assert ControllerConfig(node_monitor_grace_s=20).carry_ahead_s == 5


def test_an_honest_carrier_never_writes_past_the_bound() -> None:
    """CloudClock.now() stops at the last beacon reading + bound - margin until the next beacon."""
    mono = [100.0]
    clock = CloudClock(monotonic=lambda: mono[0])
    reading = dt.datetime(2026, 11, 28, 10, 0, 0, tzinfo=dt.timezone.utc)
    clock.observe(reading)
    clock.limit(5)
    mono[0] += 3
    assert clock.now() == reading + dt.timedelta(seconds=3)
    mono[0] += 60  # the controller stopped writing beacons: never past 5 - margin
    assert clock.now() == reading + dt.timedelta(seconds=5 - AHEAD_MARGIN_S)
    clock.observe(reading + dt.timedelta(seconds=5))  # the next beacon
    assert clock.now() == reading + dt.timedelta(seconds=5)
    clock.limit(None)  # no bound published (an older controller): the admission policy's own
    mono[0] += 60
    assert clock.now() == reading + dt.timedelta(seconds=5 + CONTROL_PLANE_AHEAD_S - AHEAD_MARGIN_S)
    clock.limit(25)  # a published bound larger than the admission policy's changes nothing
    assert clock.now() == reading + dt.timedelta(seconds=5 + CONTROL_PLANE_AHEAD_S - AHEAD_MARGIN_S)


def test_the_control_planes_clock_keeps_the_beacons_out_while_fresh() -> None:
    """Two machines' clocks, one estimate: once kube-controller-manager's leader Lease was read, the
    beacon's readings are ignored until that reading is CONTROL_PLANE_FRESH_S old, so the estimate
    never jumps between them (it could go backwards, and a carry that does not grow is refused)."""
    mono = [100.0]
    clock = CloudClock(monotonic=lambda: mono[0])
    beacon = dt.datetime(2026, 11, 28, 10, 0, 0, tzinfo=dt.timezone.utc)
    clock.observe(beacon)
    assert clock.now() == beacon
    control_plane = beacon - dt.timedelta(seconds=3)  # the control plane's clock is 3 s behind
    clock.observe_control_plane(control_plane)
    assert clock.now() == control_plane
    mono[0] += 2
    clock.observe(beacon + dt.timedelta(seconds=2))  # ignored: the leader Lease's reading is fresh
    assert clock.now() == control_plane + dt.timedelta(seconds=2)
    mono[0] += CONTROL_PLANE_FRESH_S
    clock.observe(beacon + dt.timedelta(seconds=32))  # the leader Lease went unread: the beacon again
    assert clock.now() == beacon + dt.timedelta(seconds=32)
    clock.observe_control_plane(None)  # no reading: nothing changes
    clock.observe_control_plane(dt.datetime(2026, 11, 28, 10, 0, 40))  # naive: ignored
    assert clock.now() == beacon + dt.timedelta(seconds=32)

"""edgewatch.controller.carrywindow: the group index's carry deadline, on the control plane's clock.

The apiserver is the in-memory FakeKube; tests/integration/test_policy.py checks the admission
policy that reads the deadline against the real kube-apiserver."""

from __future__ import annotations

import datetime as dt

import pytest
from _fakekube import FakeKube, api_error

from edgewatch.controller.carrywindow import CARRY_WINDOW_S, CarryWindow, carry_until

CP = "2026-11-28T10:00:00.000000Z"


def _world(renew: str | None = CP) -> FakeKube:
    kube = FakeKube()
    if renew is not None:
        kube.put("Lease", {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                           "metadata": {"name": "kube-controller-manager", "namespace": "kube-system"},
                           "spec": {"holderIdentity": "cp_1", "renewTime": renew}})
    kube.put("ConfigMap", {"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "edgewatch-groups", "namespace": "edgewatch",
                                        "annotations": {"example.com/keep": "yes"}},
                           "data": {"a-1": "edgewatch-roster"}})
    return kube


def test_the_deadline_is_the_window_past_the_reading() -> None:
    now = dt.datetime(2026, 11, 28, 10, 0, tzinfo=dt.UTC)
    assert carry_until(now) == "2026-11-28T10:05:00.000000Z" and CARRY_WINDOW_S == 300
    assert carry_until(now, window_s=0.5) == "2026-11-28T10:00:00.500000Z"
    with pytest.raises(ValueError):
        carry_until(dt.datetime(2026, 11, 28, 10, 0))
    with pytest.raises(ValueError):
        carry_until(now, window_s=0)


async def test_move_writes_on_the_control_planes_clock_and_keeps_the_rest() -> None:
    kube = _world()
    ours = dt.datetime(2031, 1, 1, tzinfo=dt.UTC)  # this controller's clock, years off: not used
    window = CarryWindow(client=kube, namespace="edgewatch", wall=lambda: ours)  # type: ignore[arg-type]
    assert await window.move() == "2026-11-28T10:05:00.000000Z"
    index = kube.obj("ConfigMap", "edgewatch-groups", "edgewatch")
    assert index["metadata"]["annotations"] == {"example.com/keep": "yes",
                                                "edgewatch.io/carry-until": "2026-11-28T10:05:00.000000Z"}
    assert index["data"] == {"a-1": "edgewatch-roster"}


async def test_without_the_leader_lease_the_own_clock_is_used() -> None:
    readable: list[bool] = []
    kube = _world(renew=None)
    ours = dt.datetime(2026, 11, 28, 11, 0, tzinfo=dt.UTC)
    window = CarryWindow(client=kube, namespace="edgewatch", wall=lambda: ours,  # type: ignore[arg-type]
                         on_clock=readable.append)
    assert await window.move() == "2026-11-28T11:05:00.000000Z"
    assert readable == [False]  # the metric behind EdgewatchCarryClockMissing
    kube = _world()
    window = CarryWindow(client=kube, namespace="edgewatch", on_clock=readable.append)  # type: ignore[arg-type]
    await window.move()
    assert readable == [False, True]


async def test_no_group_index_or_a_failed_write_writes_nothing_and_raises_nothing() -> None:
    kube = FakeKube()
    window = CarryWindow(client=kube, namespace="edgewatch")  # type: ignore[arg-type]
    assert await window.move() is None
    kube = _world()

    async def conflict(*_: object) -> None:
        raise api_error(409)

    kube.hooks["replace"] = conflict
    window = CarryWindow(client=kube, namespace="edgewatch")  # type: ignore[arg-type]
    assert await window.move() is None and window.written is None


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        CarryWindow(client=FakeKube(), namespace="edgewatch", refresh_s=300, window_s=300)  # type: ignore[arg-type]

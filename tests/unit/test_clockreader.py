"""edgewatch.agent.clockreader: reads kube-controller-manager's leader Lease only while wanted, feeds
its renewTime to the CloudClock, and turns every failure into an outcome (never an exception).

The apiserver is faked here (FakeKube) to make a read fail on demand; tests/integration/test_policy.py
and the controller-outage scenario read the real Lease of a real kube-controller-manager."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
from _fakekube import FakeKube, api_error

from edgewatch.agent.clockreader import ControlPlaneClockReader
from edgewatch.agent.cloudclock import CloudClock
from edgewatch.kube.api import HttpError

T0 = dt.datetime(2026, 11, 28, 10, 0, 0, tzinfo=dt.UTC)


class Outcomes:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def control_plane_clock_read(self, outcome: str) -> None:
        self.seen.append(outcome)


def _leader_lease(kube: FakeKube, renew_time: str | None) -> None:
    spec = {"holderIdentity": "cp_1234", "leaseDurationSeconds": 15}
    if renew_time is not None:
        spec["renewTime"] = renew_time
    kube.objects[("Lease", "kube-system", "kube-controller-manager")] = {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "kube-controller-manager", "namespace": "kube-system", "resourceVersion": "1"},
        "spec": spec}


def _reader(kube: FakeKube, clock: CloudClock, wanted: list[bool], outcomes: Outcomes) -> ControlPlaneClockReader:
    return ControlPlaneClockReader(client=kube, clock=clock, wanted=lambda: wanted[0],  # type: ignore[arg-type]
                                   events=outcomes, timeout_s=1.0, period_s=0.01)


async def test_a_reading_becomes_the_clocks_reference() -> None:
    kube, outcomes, mono = FakeKube(), Outcomes(), [50.0]
    clock = CloudClock(monotonic=lambda: mono[0])
    _leader_lease(kube, "2026-11-28T10:00:00.000000Z")
    assert await _reader(kube, clock, [True], outcomes).read_once() == "ok"
    mono[0] += 2.5
    assert clock.now() == T0 + dt.timedelta(seconds=2.5)
    assert outcomes.seen == ["ok"]


async def test_nothing_is_read_while_not_wanted() -> None:
    kube, outcomes = FakeKube(), Outcomes()
    _leader_lease(kube, "2026-11-28T10:00:00.000000Z")
    wanted = [False]
    reader = _reader(kube, CloudClock(), wanted, outcomes)
    task = asyncio.create_task(reader.run())
    await asyncio.sleep(0.1)
    assert outcomes.seen == []
    wanted[0] = True
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert outcomes.seen and set(outcomes.seen) == {"ok"}


@pytest.mark.parametrize(("failure", "outcome"), [
    (api_error(404), "not_found"),
    (api_error(403), "forbidden"),
    (api_error(500), "failed"),
    (HttpError("connection reset"), "failed"),
    (OSError("network unreachable"), "failed"),
])
async def test_a_failed_read_is_an_outcome_and_keeps_the_last_reading(failure: BaseException, outcome: str) -> None:
    kube, outcomes, mono = FakeKube(), Outcomes(), [50.0]
    clock = CloudClock(monotonic=lambda: mono[0])
    _leader_lease(kube, "2026-11-28T10:00:00.000000Z")
    reader = _reader(kube, clock, [True], outcomes)
    assert await reader.read_once() == "ok"

    async def fail(*_: object, **__: object) -> None:
        raise failure

    kube.hooks["get"] = fail
    assert await reader.read_once() == outcome
    assert clock.now() == T0  # the last reading stays
    assert outcomes.seen == ["ok", outcome]


async def test_a_read_that_hangs_times_out() -> None:
    kube, outcomes = FakeKube(), Outcomes()
    _leader_lease(kube, "2026-11-28T10:00:00.000000Z")

    async def hang(*_: object, **__: object) -> None:
        await asyncio.sleep(60)

    kube.hooks["get"] = hang
    reader = ControlPlaneClockReader(client=kube, clock=CloudClock(), wanted=lambda: True,  # type: ignore[arg-type]
                                     events=outcomes, timeout_s=0.05)
    assert await reader.read_once() == "timeout"


async def test_a_lease_without_renew_time_is_no_reading() -> None:
    kube, outcomes = FakeKube(), Outcomes()
    _leader_lease(kube, None)
    clock = CloudClock()
    assert await _reader(kube, clock, [True], outcomes).read_once() == "no_time"
    assert not clock.known


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        ControlPlaneClockReader(client=FakeKube(), clock=CloudClock(), wanted=lambda: True,  # type: ignore[arg-type]
                                events=Outcomes(), timeout_s=0)


async def test_fresh_reads_only_when_the_last_read_is_older_than_a_period() -> None:
    kube, outcomes = FakeKube(), Outcomes()
    _leader_lease(kube, "2026-11-28T10:00:00.000000Z")
    reader = ControlPlaneClockReader(client=kube, clock=CloudClock(), wanted=lambda: True,  # type: ignore[arg-type]
                                     events=outcomes, timeout_s=1.0, period_s=0.2)
    await reader.fresh()
    await reader.fresh()  # within the period: no second read
    assert outcomes.seen == ["ok"]
    await asyncio.sleep(0.25)
    await reader.fresh()
    assert outcomes.seen == ["ok", "ok"]

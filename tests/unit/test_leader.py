"""Leader election between controller replicas, judged by what this replica observed (client-go's
``observedTime``), never by comparing another replica's renewTime with our own clock."""

from __future__ import annotations

import asyncio
import datetime as dt
import time

import pytest
from _fakekube import FakeKube

from edgewatch.controller.leader import ElectionConfig, LeaderElector
from edgewatch.timefmt import format_micro_time

pytestmark = pytest.mark.timeout(60)

HOUR = 3600.0
CFG = ElectionConfig(duration_s=2, renew_s=0.2, deadline_s=1.0)


def lease(holder: str, *, skew_s: float) -> dict:
    now = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=skew_s)
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "edgewatch-controller", "namespace": "edgewatch"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": CFG.duration_s,
                     "acquireTime": format_micro_time(now), "renewTime": format_micro_time(now),
                     "leaseTransitions": 0}}


async def other_replica(kube: FakeKube, *, skew_s: float, stop: asyncio.Event) -> None:
    """Another replica leading with a skewed clock: renews every 0.2 s until ``stop``."""
    while not stop.is_set():
        current = kube.obj("Lease", "edgewatch-controller", "edgewatch")
        now = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=skew_s)
        current["spec"]["renewTime"] = format_micro_time(now)
        kube.put("Lease", current)
        await asyncio.sleep(0.2)


@pytest.mark.parametrize("skew_s", [-HOUR, HOUR])
async def test_a_renewing_leader_is_never_taken_over_and_a_silent_one_after_the_duration(skew_s: float) -> None:
    kube = FakeKube()
    kube.put("Lease", lease("b", skew_s=skew_s))
    me = LeaderElector(client=kube, namespace="edgewatch", name="edgewatch-controller", identity="a",  # type: ignore[arg-type]
                       config=CFG)
    stop = asyncio.Event()
    task = asyncio.create_task(other_replica(kube, skew_s=skew_s, stop=stop))
    try:
        started = time.monotonic()
        while time.monotonic() - started < 2 * CFG.duration_s:
            assert not await me.try_acquire_or_renew(), "took the Lease from a leader that renews it"
            await asyncio.sleep(CFG.renew_s)
    finally:
        stop.set()
        await task
    stopped = time.monotonic()
    while not await me.try_acquire_or_renew():
        assert time.monotonic() - stopped < CFG.duration_s + 2, "never took over from a silent leader"
        await asyncio.sleep(CFG.renew_s)
    waited = time.monotonic() - stopped
    assert waited >= CFG.duration_s - 0.25, f"took over after {waited:.2f} s, before the lease duration"
    assert kube.obj("Lease", "edgewatch-controller", "edgewatch")["spec"]["holderIdentity"] == "a"


async def test_a_new_candidate_waits_a_full_duration_after_its_first_look() -> None:
    """A replica that starts (no history) and finds a record it has never seen changing gives the
    holder a full lease duration from its own first look, whatever the renewTime says."""
    kube = FakeKube()
    kube.put("Lease", lease("b", skew_s=-HOUR))  # b's renewTime looks an hour old to us
    me = LeaderElector(client=kube, namespace="edgewatch", name="edgewatch-controller", identity="a",  # type: ignore[arg-type]
                       config=CFG)
    first = time.monotonic()
    assert not await me.try_acquire_or_renew()
    while not await me.try_acquire_or_renew():
        await asyncio.sleep(0.1)
    assert time.monotonic() - first >= CFG.duration_s - 0.1

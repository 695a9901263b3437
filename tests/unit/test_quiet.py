"""When a Lease event needs no reconcile (edgewatch.controller.quiet.only_renewed) and how the
work queue moves a deadline (WorkQueue.reschedule): tables, no I/O."""

from __future__ import annotations

import asyncio

import pytest

from edgewatch.controller.decision import plan
from edgewatch.controller.model import ControllerConfig, LeaseSnapshot, NodeSnapshot
from edgewatch.controller.quiet import only_renewed
from edgewatch.controller.workqueue import WorkQueue

T1, T2 = "2026-11-25T15:00:00.000000Z", "2026-11-25T15:00:10.000000Z"
MARK = {"edgewatch.io/delegate-heartbeat": "true", "edgewatch.io/delegated-by": "a-2",
        "edgewatch.io/delegated-renew-time": T2, "edgewatch.io/delegated-via": "peer"}
CONFIG = ControllerConfig()


def _lease(renew: str | None = T1, **kw) -> LeaseSnapshot:  # type: ignore[no-untyped-def]
    return LeaseSnapshot(renew_time=renew, observed_at=None if renew is None else 100.0, duration_s=40.0,
                         holder="n", **kw)


NORMAL = plan(node=NodeSnapshot(name="n"), lease=_lease(), now=101.0, config=CONFIG)
LOST = plan(node=NodeSnapshot(name="n"), lease=_lease(), now=200.0, config=CONFIG)
RECORDED_DISCONNECTED = plan(node=NodeSnapshot(name="n", annotations={"edgewatch.io/state": "disconnected"}),
                             lease=_lease(), now=101.0, config=CONFIG)  # back to normal: an Event to write


@pytest.mark.parametrize(("before", "after", "last", "quiet"), [
    (_lease(), _lease(T2), NORMAL, True),                                  # the kubelet renewed: quiet
    (_lease(), _lease(T2), None, False),                                   # never planned yet
    (_lease(), _lease(T2), LOST, False),                                   # a node back from an outage
    (_lease(), _lease(T2), RECORDED_DISCONNECTED, False),                  # its Event is still due
    (_lease(), _lease(), NORMAL, False),                                   # nothing renewed
    (_lease(), _lease(None), NORMAL, False),                               # renewTime removed
    (_lease(), _lease(T2, annotations=MARK), NORMAL, False),               # a carry: judged by a reconcile
    (_lease(T2, annotations=MARK), _lease(T1, annotations=MARK), NORMAL, False),  # the mark went stale
    (_lease(), _lease(T2, annotations={"x": "y"}), NORMAL, False),         # anything else changed too
    (_lease(), LeaseSnapshot(renew_time=T2, observed_at=1.0, duration_s=400.0, holder="n"), NORMAL, False),
    (None, _lease(T2), NORMAL, False),
])
def test_only_an_own_renewal_of_a_quiet_normal_node_skips_its_reconcile(before, after, last, quiet) -> None:  # type: ignore[no-untyped-def]
    assert NORMAL.requeue_after_s is not None and LOST.cloud.value == "lost"
    assert only_renewed(before=before, after=after, plan=last) is quiet


async def test_reschedule_moves_a_deadline_later_or_sooner_but_not_a_waiting_key() -> None:
    q = WorkQueue()
    q.add_after("a", 0.05)
    assert q.reschedule("a", 0.3)          # later: not due at 0.05 any more
    await asyncio.sleep(0.15)
    assert len(q) == 0
    assert q.reschedule("a", 0.0)          # sooner
    await asyncio.sleep(0.02)
    assert len(q) == 1
    assert not q.reschedule("a", 5.0)      # waiting: it will be handled anyway
    assert await q.get() == "a"
    assert not q.reschedule("a", 5.0)      # being handled: likewise
    q.done("a")
    assert q.reschedule("b", 0.01)         # no deadline yet: one is set
    await asyncio.sleep(0.05)
    assert len(q) == 1
    q.close()

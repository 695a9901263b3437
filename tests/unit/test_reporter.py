"""Tests of edgewatch.agent.reporter: when an agent writes its evidence Lease, what it holds, what
it costs the apiserver, and how it follows the controller's beacon Lease (on the in-memory API)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import json
from collections.abc import Callable, Sequence
from types import SimpleNamespace

from lightkube.resources.coordination_v1 import Lease

from _events import Recorded
from _fakekube import FakeKube
from _keys import ring

from edgewatch.agent.reporter import EvidenceReporter
from edgewatch.core.beacon import Beacon, BeaconHolder, sign_beacon
from edgewatch.core.identity import NodeKey
from edgewatch.core.types import NodeName
from edgewatch.core.wire import Heartbeat, sign_heartbeat
from edgewatch.names import (BEACON_ANNOTATION, BEACON_KEY_ANNOTATION, BEACON_LEASE_NAME, EVIDENCE_ANNOTATION,
                             IDENTITY_NAMESPACE)

ME, PEER = NodeName("r-1"), NodeName("r-2")


UP = SimpleNamespace(up=True)  # the cloud link


class Said:
    """What this node states (``own``, ``carried``): the reporter's ``Statements``."""

    def __init__(self, own: Heartbeat | None = None, carried: Sequence[Heartbeat] = ()) -> None:
        self.own, self.carried = own, carried

    def own_statement(self) -> Heartbeat | None:
        return self.own

    def carried_statements(self) -> Sequence[Heartbeat]:
        return self.carried


def hb(origin: NodeName, beacon: str, *, dead: tuple[str, ...] = (), seq: int = 1) -> Heartbeat:
    return sign_heartbeat(origin=origin, incarnation=1, seq=seq, kubelet_ok=True, cloud_ok=origin == ME,
                          alive=[ME, PEER], dead=[NodeName(d) for d in dead], keyring=ring(origin), beacon=beacon)


async def test_writes_on_change_and_refresh_with_one_request_each() -> None:
    kube = FakeKube()
    key = NodeKey.generate()
    holder = BeaconHolder()
    state = Said()
    rep = EvidenceReporter(client=kube, node=ME, beacon=holder, statements=state, link=UP,  # type: ignore[arg-type]
                           refresh_s=10.0)
    assert rep.due(now=0.0) is None  # nothing signed yet
    state.own = hb(ME, "")
    assert rep.due(now=0.0) is None  # no beacon yet: a statement nobody can date is not written
    holder.trust(key.public_raw)
    holder.offer(sign_beacon(Beacon(1, "a" * 32), key))
    state.own = hb(ME, holder.value)
    wanted = rep.due(now=0.0)
    assert wanted is not None and await rep.write(*wanted, now=0.0) == "ok"
    state.own = hb(ME, holder.value, seq=2)
    assert rep.due(now=1.0) is None  # only the seq changed
    state.carried = [hb(PEER, holder.value)]  # a cut-off peer to carry: a change, written at once
    wanted = rep.due(now=1.0)
    assert wanted is not None and await rep.write(*wanted, now=1.0) == "ok"
    lease = kube.obj("Lease", ME, IDENTITY_NAMESPACE)
    items = json.loads(lease["metadata"]["annotations"][EVIDENCE_ANNOTATION])
    assert [i["origin"] for i in items] == [ME, PEER] and lease["spec"]["holderIdentity"] == ME
    assert rep.due(now=20.0) is None  # refresh due, but the beacon did not move: nothing newer to say
    holder.offer(sign_beacon(Beacon(2, "b" * 32), key))
    state.own = hb(ME, holder.value, seq=3)
    state.carried = [hb(PEER, holder.value, seq=2)]
    wanted = rep.due(now=20.0)
    assert wanted is not None and await rep.write(*wanted, now=20.0) == "ok"
    calls = [c[0] for c in kube.calls if c[1] == "Lease"]
    assert calls == ["get", "create", "replace", "replace"], calls  # one request per write after the first


async def test_a_conflict_reads_the_lease_again() -> None:
    kube = FakeKube()
    key = NodeKey.generate()
    holder = BeaconHolder()
    holder.trust(key.public_raw)
    holder.offer(sign_beacon(Beacon(1, "a" * 32), key))
    own = hb(ME, holder.value)
    rep = EvidenceReporter(client=kube, node=ME, beacon=holder, statements=Said(own), link=UP)  # type: ignore[arg-type]
    assert await rep.write(own, []) == "ok"
    lease = kube.obj("Lease", ME, IDENTITY_NAMESPACE)
    kube.put("Lease", lease)  # someone else wrote it: our resourceVersion is stale
    assert await rep.write(own, []) == "conflict"
    assert await rep.write(own, []) == "ok"
    assert [c[0] for c in kube.calls if c[1] == "Lease"][-3:] == ["replace", "get", "replace"]


async def _wait(predicate: Callable[[], bool], timeout_s: float = 3.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.01)


async def test_the_beacon_lease_is_followed_counted_and_kept_when_deleted() -> None:
    kube = FakeKube()
    key = NodeKey.generate()
    tokens = [sign_beacon(Beacon(g, f"{g:032x}"), key) for g in (1, 2)]
    renewed = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)

    def issue(token: str) -> None:  # what the controller writes
        kube.put("Lease", {"metadata": {"name": BEACON_LEASE_NAME, "namespace": "edgewatch", "annotations": {
            BEACON_KEY_ANNOTATION: base64.b64encode(key.public_raw).decode(), BEACON_ANNOTATION: token}},
            "spec": {"renewTime": renewed.isoformat().replace("+00:00", "Z")}})

    issue(tokens[0])
    holder, recorded = BeaconHolder(), Recorded()
    rep = EvidenceReporter(client=kube, node=ME, beacon=holder, statements=Said(), link=UP,  # type: ignore[arg-type]
                           retry_s=0.01, events=recorded)
    task = asyncio.create_task(rep._watch_beacon())
    try:
        await _wait(lambda: holder.token == tokens[0])
        assert holder.trusted_key == key.public_raw and rep.cloud_clock.known
        assert recorded.watch_events == []  # read by the list: no watch event yet
        issue(tokens[1])
        await _wait(lambda: holder.token == tokens[1])
        await kube.delete(Lease, BEACON_LEASE_NAME, namespace="edgewatch")
        await _wait(lambda: len(recorded.watch_events) == 2)
        assert recorded.watch_events == ["beacon", "beacon"]
        assert holder.token == tokens[1] and holder.trusted_key == key.public_raw  # deleted: nothing changes
        assert [c[0] for c in kube.calls if c[1] == "Lease" and c[0] in ("list", "watch")] == ["list", "watch"]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

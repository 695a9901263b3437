"""Tests of edgewatch.agent.reporter: when an agent writes its evidence Lease, what it holds, what
it costs the apiserver, and how it follows the controller's beacon Lease (on the in-memory API)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
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
from edgewatch.names import (ANSWERS_CHALLENGES_ANNOTATION, BEACON_ANNOTATION, BEACON_KEY_ANNOTATION,
                             BEACON_LEASE_NAME, CHALLENGE_ANNOTATION, EVIDENCE_ANNOTATION, IDENTITY_NAMESPACE,
                             SUSPECTS_ANNOTATION, UNCONFIRMED_DEAD_ANNOTATION)

ME, PEER = NodeName("r-1"), NodeName("r-2")


UP = SimpleNamespace(up=True)  # the cloud link


class Said:
    """What this node states (``own``, ``carried``): the reporter's ``Statements``."""

    def __init__(self, own: Heartbeat | None = None, carried: Sequence[Heartbeat] = ()) -> None:
        self.own, self.carried = own, carried
        self.unconfirmed: frozenset[NodeName] = frozenset()
        self.suspects: frozenset[NodeName] = frozenset()

    def own_statement(self) -> Heartbeat | None:
        return self.own

    def carried_statements(self) -> Sequence[Heartbeat]:
        return self.carried

    def unconfirmed_dead(self) -> frozenset[NodeName]:
        return self.unconfirmed

    def suspected(self) -> frozenset[NodeName]:
        return self.suspects


def hb(origin: NodeName, beacon: str, *, dead: tuple[str, ...] = (), seq: int = 1) -> Heartbeat:
    alive = [n for n in (ME, PEER) if n not in dead]
    return sign_heartbeat(origin=origin, incarnation=1, seq=seq, kubelet_ok=True, cloud_ok=origin == ME,
                          alive=alive, dead=[NodeName(d) for d in dead], keyring=ring(origin), beacon=beacon)


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


def _holding_a_beacon() -> BeaconHolder:
    """A beacon holder that trusts a new controller key and holds its beacon 1."""
    key = NodeKey.generate()
    holder = BeaconHolder()
    holder.trust(key.public_raw)
    holder.offer(sign_beacon(Beacon(1, "a" * 32), key))
    return holder


async def test_unconfirmed_dead_votes_are_written_at_once_and_removed_when_confirmed() -> None:
    kube = FakeKube()
    holder = _holding_a_beacon()
    state = Said(hb(ME, holder.value, dead=(PEER,)))
    rep = EvidenceReporter(client=kube, node=ME, beacon=holder, statements=state, link=UP)  # type: ignore[arg-type]
    wanted = rep.due(now=0.0)
    assert wanted is not None and await rep.write(*wanted, now=0.0) == "ok"
    assert UNCONFIRMED_DEAD_ANNOTATION not in kube.obj("Lease", ME, IDENTITY_NAMESPACE)["metadata"]["annotations"]
    state.unconfirmed = frozenset({PEER})  # its kubelet port answers: a change, written at once
    wanted = rep.due(now=1.0)
    assert wanted is not None and await rep.write(*wanted, now=1.0) == "ok"
    annotations = kube.obj("Lease", ME, IDENTITY_NAMESPACE)["metadata"]["annotations"]
    assert annotations[UNCONFIRMED_DEAD_ANNOTATION] == PEER
    state.unconfirmed = frozenset()
    wanted = rep.due(now=2.0)
    assert wanted is not None and await rep.write(*wanted, now=2.0) == "ok"
    assert UNCONFIRMED_DEAD_ANNOTATION not in kube.obj("Lease", ME, IDENTITY_NAMESPACE)["metadata"]["annotations"]


async def test_suspicions_are_written_as_soon_as_news_comes_not_at_the_tick() -> None:
    kube = FakeKube()
    holder = _holding_a_beacon()
    state = Said(hb(ME, holder.value))
    news = asyncio.Event()
    rep = EvidenceReporter(client=kube, node=ME, beacon=holder, statements=state, link=UP,  # type: ignore[arg-type]
                           tick_s=30.0, news=news)

    def suspects() -> str | None:
        return kube.obj("Lease", ME, IDENTITY_NAMESPACE)["metadata"]["annotations"].get(SUSPECTS_ANNOTATION)

    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(rep._report_loop())
        news.set()  # the first statement: written at once though the tick is 30 s
        await _wait(lambda: rep.writes == 1)
        assert suspects() is None
        state.suspects = frozenset({PEER})
        news.set()
        await _wait(lambda: suspects() == PEER)
        state.suspects = frozenset()
        news.set()
        await _wait(lambda: rep.writes == 3)
        assert suspects() is None
        task.cancel()


async def test_a_conflict_reads_the_lease_again() -> None:
    kube = FakeKube()
    holder = _holding_a_beacon()
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


class Signing(Said):
    """A node that signs on demand with the holder's newest beacon (the exchange loop's ``sign_now``)."""

    def __init__(self, holder: BeaconHolder) -> None:
        super().__init__()
        self.holder, self.seq = holder, 0

    def sign_now(self) -> Heartbeat | None:
        if self.own is None:
            return None
        self.seq += 1
        self.own = hb(ME, self.holder.value, seq=self.seq + 1)
        return self.own


async def test_a_beacon_naming_this_node_is_answered_at_once_with_that_beacon() -> None:
    """The controller's challenge: the answer is written without waiting for the tick (10 s here),
    names the challenging beacon and says the agent answers challenges; a beacon naming others is
    not answered, nor the same challenge twice."""
    kube = FakeKube()
    key = NodeKey.generate()
    tokens = [sign_beacon(Beacon(g, f"{g:032x}"), key) for g in (1, 2, 3)]

    def issue(token: str, challenged: str | None) -> None:
        annotations = {BEACON_KEY_ANNOTATION: base64.b64encode(key.public_raw).decode(), BEACON_ANNOTATION: token}
        if challenged is not None:
            annotations[CHALLENGE_ANNOTATION] = challenged
        kube.put("Lease", {"metadata": {"name": BEACON_LEASE_NAME, "namespace": "edgewatch",
                                        "annotations": annotations}, "spec": {}})

    def written() -> dict[str, str]:
        leases = [o for (kind, _ns, _n), o in kube.objects.items() if kind == "Lease" and o["metadata"]["name"] == ME]
        return leases[0]["metadata"]["annotations"] if leases else {}

    holder, recorded = BeaconHolder(), Recorded()
    state = Signing(holder)
    rep = EvidenceReporter(client=kube, node=ME, beacon=holder, statements=state, link=UP,  # type: ignore[arg-type]
                           retry_s=0.01, tick_s=10.0, events=recorded)
    issue(tokens[0], None)
    task = asyncio.create_task(rep.run())
    try:
        await _wait(lambda: holder.token == tokens[0])
        state.own = hb(ME, holder.value)
        issue(tokens[1], f"{PEER},other")
        await _wait(lambda: holder.token == tokens[1])
        await asyncio.sleep(0.2)
        assert rep.writes == 0  # others challenged: nothing to answer
        issue(tokens[2], f"{PEER},{ME}")
        await _wait(lambda: rep.writes == 1, timeout_s=2.0)
        annotations = written()
        assert annotations[ANSWERS_CHALLENGES_ANNOTATION] == "v1:1"  # the incarnation of its statements
        statements = json.loads(annotations[EVIDENCE_ANNOTATION])
        assert f"{3:032x}" in json.dumps(statements)  # the answer names the challenging beacon
        assert recorded.evidence_writes == ["ok"]
        kube.put("Lease", copy.deepcopy(kube.objects[("Lease", "edgewatch", BEACON_LEASE_NAME)]))  # the same again
        await asyncio.sleep(0.2)
        assert rep.writes == 1
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

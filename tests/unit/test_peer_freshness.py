"""Peer exchanges over loopback HTTP: freshness must not depend on synchronized clocks (docs/clock-skew.md),
replays are refused and counted, and a restarted peer (even one whose clock went back) is heard
again within a period or two.

Two real peer exchanges whose wall clocks disagree: Node a-1 runs in the main thread, node a-2 in its own thread
with its own event loop; ``time.time`` (and ``datetime.now``) in the agent's modules read a-2's
skewed clock when called from a-2's thread. Monotonic clocks are left alone (each node has its own
anyway).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from _keys import ring
from _peers import FixedMembership, close, free_port, peer_exchange, serve

from edgewatch.agent import peers as peers_module
from edgewatch.agent.config import AgentConfig
from edgewatch.agent.metrics import AgentMetrics
from edgewatch.agent.peers import EXCHANGE_PATH, REFUSED_HEADER, PeerExchange
from edgewatch.core.types import Health, NodeName
from edgewatch.core.wire import Rejected, RejectReason

A, B = NodeName("a-1"), NodeName("a-2")
ADDRESSES = {A: "127.0.0.1", B: "127.0.0.2"}


class Node:
    """One peer exchange with its server and client session, on a given event loop."""

    def __init__(self, name: NodeName, port: int) -> None:
        self.name = name
        self.config = AgentConfig(node=name, identity_file=Path("/nonexistent"), listen_address=ADDRESSES[name], port=port)
        self.metrics = AgentMetrics(CollectorRegistry())
        self.peers = peer_exchange(self.config, membership=FixedMembership(ADDRESSES), metrics=self.metrics)
        self.runner: web.AppRunner | None = None
        self.session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self.runner, self.session = await serve(self.peers, ADDRESSES[self.name], self.config.port)

    async def stop(self) -> None:
        await close(self.runner, self.session)

    async def period(self) -> None:
        assert self.session is not None
        await self.peers.run_period(self.session)

    def count(self, metric: str, result: str) -> float:
        value = self.metrics.registry.get_sample_value(metric, {"result": result})
        return value or 0.0


class SkewedClocks:
    """``time.time`` / ``datetime.now`` that read ``skew_s`` ahead in one thread."""

    def __init__(self, thread: Callable[[], threading.Thread | None], skew_s: float) -> None:
        self._thread = thread
        self.skew_s = skew_s

    def offset(self) -> float:
        return self.skew_s if threading.current_thread() is self._thread() else 0.0

    def time(self) -> float:
        return time.time() + self.offset()

    def time_ns(self) -> int:
        return time.time_ns() + int(self.offset() * 1e9)


class LoopThread:
    """An event loop in its own thread (node a-2 lives here)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Any, timeout: float = 10) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture
def other() -> Iterator[LoopThread]:
    lt = LoopThread()
    yield lt
    lt.close()


@pytest.mark.parametrize("skew_s", [0.0, -3600.0, -45.0, 45.0, 86400.0])
async def test_peers_with_skewed_wall_clocks_hear_each_other(monkeypatch: pytest.MonkeyPatch, other: LoopThread,
                                                             skew_s: float) -> None:
    clocks = SkewedClocks(lambda: other.thread, skew_s)
    fake_time = types.SimpleNamespace(time=clocks.time, time_ns=clocks.time_ns, monotonic=time.monotonic,
                                      monotonic_ns=time.monotonic_ns)
    monkeypatch.setattr(peers_module, "time", fake_time)
    port = free_port()
    a = Node(A, port)
    b = other.run(_make(B, port))
    await a.start()
    try:
        await a.period()  # warm-up: until a node has signed its first heartbeat it answers 503
        await asyncio.to_thread(other.run, b.period())
        before = {n.name: (n.count("edgewatch_agent_probes_total", "ok"),
                           n.count("edgewatch_agent_messages_received_total", "accepted")) for n in (a, b)}
        for _ in range(3):  # a few periods each way: requests and answers in both directions
            await a.period()
            await asyncio.to_thread(other.run, b.period())
        for node in (a, b):
            probes, accepted = before[node.name]
            assert node.count("edgewatch_agent_probes_total", "ok") - probes == 3
            assert node.count("edgewatch_agent_messages_received_total", "accepted") - accepted == 6
            assert node.count("edgewatch_agent_messages_received_total", "stale") == 0
        # Each sees the other alive and holds its vote (observed on its own monotonic clock).
        assert a.peers.book.get(B) is not None and b.peers.book.get(A) is not None
        assert a.peers.decisions[A].verdict.value == "healthy"
        assert b.peers.decisions[B].verdict.value == "healthy"
    finally:
        await a.stop()
        other.run(b.stop())


async def _make(name: NodeName, port: int) -> Node:
    node = Node(name, port)
    await node.start()
    return node


async def test_replayed_request_is_refused_counted_and_still_answered(other: LoopThread) -> None:
    port = free_port()
    a = Node(A, port)
    b = other.run(_make(B, port))
    await a.start()
    try:
        await a.period()
        await asyncio.to_thread(other.run, b.period())
        nonce = "ab" * 16
        raw = a.peers.envelope_for(B, now_mono=time.monotonic(), nonce=nonce)
        url = f"http://{ADDRESSES[B]}:{port}{EXCHANGE_PATH}"
        assert a.session is not None
        answers = []
        for _ in range(2):  # the same bytes twice: the second is a replay
            async with a.session.post(url, data=raw) as resp:
                answers.append((resp.status, resp.headers.get(REFUSED_HEADER), await resp.read()))
        assert [(s, h) for s, h, _ in answers] == [(200, None), (409, "replayed")]
        assert b.count("edgewatch_agent_messages_received_total", "replayed") == 1
        # Both answers are B's genuine envelope bound to the request's nonce.
        for _s, _h, body in answers:
            env = a.peers.decode(body, sender_allowed=lambda s: s == B, reply_to=nonce)
            assert env.sender == B and env.reply_to == nonce
        # An answer replayed to a later probe is refused (its reply_to is an older nonce).
        with pytest.raises(Rejected) as info:
            a.peers.decode(answers[0][2], sender_allowed=lambda s: s == B, reply_to="cd" * 16)
        assert info.value.reason is RejectReason.REPLAYED
    finally:
        await a.stop()
        other.run(b.stop())


@pytest.mark.parametrize("epoch_shift_s", [3600.0, -3600.0])
async def test_restarted_peer_is_heard_again_even_if_its_clock_went_back(other: LoopThread,
                                                                         epoch_shift_s: float) -> None:
    port = free_port()
    a = Node(A, port)
    b = other.run(_make(B, port))
    await a.start()
    try:
        for _ in range(2):
            await a.period()
            await asyncio.to_thread(other.run, b.period())
        old_epoch = a.peers.incarnation
        await a.stop()
        # A restarts: a new process, a new epoch (its wall clock moved forward, or went back).
        a = Node(A, port)
        a.peers.incarnation = old_epoch + int(epoch_shift_s * 1e9)
        await a.start()
        before = b.count("edgewatch_agent_messages_received_total", "accepted")
        for _ in range(2):
            await a.period()
            await asyncio.to_thread(other.run, b.period())
        entry = b.peers.book.get(A)
        assert entry is not None and entry.heartbeat.incarnation == a.peers.incarnation
        assert b.count("edgewatch_agent_messages_received_total", "accepted") - before >= 3
        # From now on every request of the new run is accepted, both ways.
        accepted = (a.count("edgewatch_agent_messages_received_total", "accepted"),
                    b.count("edgewatch_agent_messages_received_total", "accepted"))
        for _ in range(2):
            await a.period()
            await asyncio.to_thread(other.run, b.period())
        assert a.count("edgewatch_agent_messages_received_total", "accepted") - accepted[0] == 4
        assert b.count("edgewatch_agent_messages_received_total", "accepted") - accepted[1] == 4
        assert a.count("edgewatch_agent_probes_total", "ok") == 4  # every probe of the new run succeeded
        state = b.peers.guard.state_of(A)
        assert state is not None and state.epoch == a.peers.incarnation and state.confirmed
        assert old_epoch in state.retired  # a replay from the old run stays refused
    finally:
        await a.stop()
        other.run(b.stop())


def test_datetime_is_not_used_for_freshness_in_the_peer_path() -> None:
    # The receive path must not read the wall clock at all: freshness is local and monotonic.
    source = Path(peers_module.__file__).read_text()
    assert "time.time()" not in source and "datetime" not in source and dt is not None


async def test_a_request_split_across_tcp_segments_is_read_whole(other: LoopThread) -> None:
    """``StreamReader.read(n)`` returns what is buffered; a request trickled in over several TCP
    segments must still be read whole (and one over the limit refused as oversized)."""
    port = free_port()
    a = Node(A, port)
    b = other.run(_make(B, port))
    await a.start()
    try:
        await a.period()
        await asyncio.to_thread(other.run, b.period())
        raw = a.peers.envelope_for(B, now_mono=time.monotonic(), nonce="ef" * 16)
        assert len(raw) > 64

        async def trickle() -> Any:
            for i in range(0, len(raw), 37):
                yield raw[i:i + 37]
                await asyncio.sleep(0.02)  # each piece its own segment

        assert a.session is not None
        url = f"http://{ADDRESSES[B]}:{port}{EXCHANGE_PATH}"
        async with a.session.post(url, data=trickle()) as resp:  # chunked: no Content-Length
            assert resp.status == 200, await resp.text()
            env = a.peers.decode(await resp.read(), sender_allowed=lambda s: s == B, reply_to="ef" * 16)
        assert env.sender == B

        async def too_much() -> Any:
            for _ in range(a.config.wire.max_bytes // 4096 + 2):
                yield b"x" * 4096

        async with a.session.post(url, data=too_much()) as resp:
            assert resp.status != 200
        assert b.count("edgewatch_agent_messages_received_total", "oversized") >= 1
    finally:
        await a.stop()
        other.run(b.stop())


async def test_an_envelope_too_large_to_send_is_refused_not_fatal(other: LoopThread,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    a = Node(A, port)
    b = other.run(_make(B, port))
    await a.start()
    try:
        def too_big(*_args: Any, **_kwargs: Any) -> bytes:
            raise ValueError("envelope is 300000 bytes, more than max_bytes=262144")

        monkeypatch.setattr(peers_module, "encode_envelope", too_big)
        await a.period()  # must not raise: the probe fails, is counted and logged
        assert a.count("edgewatch_agent_probes_total", "unencodable") == 1
        assert a.peers.periods == 1
    finally:
        await a.stop()
        other.run(b.stop())


def test_the_topology_follows_the_group_size() -> None:
    """A group that grows past the full mesh (2 * rings + 1) switches to the ring topology: the agent
    watches and probes at most 2 * rings neighbours, drops the detectors of the others and keeps
    the evidence of those it still watches; when the group shrinks back everyone is a neighbour
    again. The detector settings do not scale: every piece of evidence is direct."""
    names = [NodeName(f"a-{i}") for i in range(1, 201)]

    class Growing:
        size = 3

        def group_of(self, node: NodeName) -> frozenset[NodeName]:
            return frozenset(names[: self.size])

        def address_of(self, node: NodeName) -> str | None:
            return "127.0.0.1"

    members = Growing()
    config = AgentConfig(node=A, identity_file=Path("/nonexistent"))
    peers = PeerExchange(me=A, config=config, keyring=ring(A), membership=members,  # type: ignore[arg-type]
                         metrics=AgentMetrics(CollectorRegistry()), link=types.SimpleNamespace(up=True))
    now = time.monotonic()
    peers.refresh_group(now=now)
    assert peers.targets(now=now) == sorted(names[1:3])
    for peer in names[1:3]:
        peers.record(peer, ok=True, now=now)
    members.size = 200
    peers.refresh_group(now=now)
    assert len(peers.near) <= 2 * config.rings and set(peers.targets(now=now)) == set(peers.near)
    assert set(peers.detectors) <= peers.near
    kept = [p for p in names[1:3] if p in peers.near]
    assert all(peers.detectors[p].config == config.detector for p in peers.detectors)
    for p in kept:
        assert peers.detectors[p].state(now=now) is Health.ALIVE  # evidence kept
    members.size = 3
    peers.refresh_group(now=now)
    assert peers.near == frozenset(names[1:3])


def exchange(src: PeerExchange, dst: PeerExchange, nonce: str) -> tuple[Any, Any]:
    """One probe of ``dst`` by ``src`` without sockets: the request as ``dst`` read it, the answer as
    ``src`` did (both absorbed as the server and the client do)."""
    now = time.monotonic()
    for p in (src, dst):
        p.sign_own(now_mono=now)
    request = dst.decode(src.envelope_for(dst.me, now_mono=now, nonce=nonce), sender_allowed=lambda s: s == src.me)
    dst.absorb(request, now_mono=now, direct=True)
    raw = dst.envelope_for(src.me, now_mono=now, nonce="f" + nonce[1:], reply_to=nonce)
    answer = src.decode(raw, sender_allowed=lambda s: s == dst.me, reply_to=nonce)
    src.absorb(answer, now_mono=now, direct=True)
    return request, answer


def test_the_beacon_token_goes_only_to_a_peer_that_does_not_hold_it() -> None:
    """The controller's beacon token rides in an envelope only until the peer signs with its value:
    a-1 holds the token, a-2 does not; a-2 adopts it from a-1's first envelope, and once a-1 holds
    a heartbeat of a-2 naming it, a-1 sends none. A newer beacon goes out again only to a peer cut
    off from the cloud (a connected one watches the beacon itself)."""
    from edgewatch.core.beacon import Beacon, sign_beacon
    from edgewatch.core.identity import NodeKey

    controller = NodeKey.generate()
    b_link = types.SimpleNamespace(up=True)
    a = peer_exchange(AgentConfig(node=A, identity_file=Path("/nonexistent")), membership=FixedMembership(ADDRESSES))
    b = peer_exchange(AgentConfig(node=B, identity_file=Path("/nonexistent")), membership=FixedMembership(ADDRESSES),
                      link=b_link)
    for p in (a, b):
        p.beacon.trust(controller.public_raw)
    first = sign_beacon(Beacon(generation=1, value="1" * 32), controller)
    assert a.beacon.offer(first)

    request, answer = exchange(a, b, "1" * 32)
    assert request.beacon == first and b.beacon.token == first  # a-2 named no beacon yet: it got the token
    assert answer.beacon == ""  # a-1's heartbeat names it: a-2 sends none back
    request, answer = exchange(b, a, "2" * 32)  # a-2 signed with the beacon since: nothing to send either way
    assert request.beacon == "" and answer.beacon == ""
    second = sign_beacon(Beacon(generation=2, value="2" * 32), controller)
    assert a.beacon.offer(second)
    request, _ = exchange(a, b, "3" * 32)
    assert request.beacon == "" and b.beacon.token == first  # a-2 is connected: it reads the beacon itself
    b_link.up = False
    exchange(b, a, "4" * 32)  # a-2 now says it is cut off
    request, _ = exchange(a, b, "5" * 32)
    assert request.beacon == second and b.beacon.token == second  # a newer beacon goes out again



def test_probes_missed_while_a_peer_restarted_are_not_taken_for_a_lossy_link() -> None:
    """a-2's agent restarts (a rolling upgrade): a-1's probes fail meanwhile, then a-2 answers with a
    new incarnation. a-1's detector learns no loss from it (the peer's next death is found as fast
    as before); the same failures ended by the same incarnation would count as loss."""
    config = {n: AgentConfig(node=n, identity_file=Path("/nonexistent")) for n in (A, B)}
    a = peer_exchange(config[A], membership=FixedMembership(ADDRESSES))
    b = peer_exchange(config[B], membership=FixedMembership(ADDRESSES))
    exchange(a, b, "1" * 32)
    now = time.monotonic()
    for k in range(1, 5):
        a.record(B, ok=False, now=now + k)
    restarted = peer_exchange(config[B], membership=FixedMembership(ADDRESSES))
    restarted.incarnation = b.incarnation + 1
    restarted.kubelet_ok = False  # its first heartbeat says its kubelet is not up yet: one more failure
    exchange(restarted, a, "2" * 32)
    restarted.kubelet_ok = True
    exchange(a, restarted, "4" * 32)
    assert a.detectors[B].snapshot.repeat == 0.0

    for k in range(5, 9):
        a.record(B, ok=False, now=now + k)
    exchange(a, restarted, "3" * 32)  # the same incarnation answers: those failures were loss
    assert a.detectors[B].snapshot.repeat > 0.2  # 3 of 4 failures were followed by another

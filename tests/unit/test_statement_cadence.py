"""Peer protocol v6's cadence: liveness datagrams decide the failure detector's evidence and
statements travel only on change, on a pull and on the slow refresh.

The rules alone (``edgewatch.core.cadence``, properties), the book's confirmation of a held
statement, and two or three real agents' peer exchanges on loopback (their HTTP servers and their
liveness datagram endpoints on real sockets, periods driven as the exchange loop drives them, at a
fifth of the deployed period so a node's death is seen within seconds)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from _keys import ring
from _peers import FixedMembership, close, free_port, peer_exchange, serve

from edgewatch.agent.config import AgentConfig
from edgewatch.agent.datagrams import LivenessEndpoint
from edgewatch.agent.metrics import AgentMetrics
from edgewatch.agent.statementcadence import StatementCadence
from edgewatch.core.book import HeartbeatBook, holds
from edgewatch.core.cadence import ExchangeReason, datagram_success, exchange_reason
from edgewatch.core.detector import DetectorConfig
from edgewatch.core.identity import NodeKey
from edgewatch.core.pairkey import ExchangeKey
from edgewatch.core.quorum import VoteConfig
from edgewatch.core.types import Health, NodeName
from edgewatch.core.wire import sign_heartbeat
from edgewatch.core.wireconfig import WireConfig

A, B, C = NodeName("a-1"), NodeName("a-2"), NodeName("a-3")
ADDRESSES = {A: "127.0.0.1", B: "127.0.0.2", C: "127.0.0.3"}
PERIOD_S = 0.2


# -- the rules -----------------------------------------------------------------------------------------

@given(told=st.booleans(), hold=st.booleans(), since=st.floats(0, 1e6), refresh=st.floats(0.01, 1e3))
def test_a_peer_the_datagrams_do_not_speak_for_gets_v5_every_period(told: bool, hold: bool, since: float,
                                                                     refresh: float) -> None:
    assert exchange_reason(by_datagram=False, told_current=told, hold_theirs=hold, since_exchange_s=since,
                           refresh_s=refresh) is ExchangeReason.V5


@given(told=st.booleans(), hold=st.booleans(), beacon=st.booleans(), since=st.floats(0, 1e6),
       refresh=st.floats(0.01, 1e3))
def test_nothing_is_sent_only_when_both_sides_hold_each_others_newest_within_the_refresh(
        told: bool, hold: bool, beacon: bool, since: float, refresh: float) -> None:
    reason = exchange_reason(by_datagram=True, told_current=told, hold_theirs=hold, since_exchange_s=since,
                             refresh_s=refresh, beacon_wanted=beacon)
    assert (reason is None) == (told and hold and not beacon and since < refresh)
    if not told:
        assert reason is ExchangeReason.CHANGED
    elif not hold:
        assert reason is ExchangeReason.PULL
    elif beacon:
        assert reason is ExchangeReason.BEACON


def test_a_first_exchange_is_due_at_once() -> None:
    assert exchange_reason(by_datagram=True, told_current=True, hold_theirs=True, since_exchange_s=math.inf,
                           refresh_s=10) is ExchangeReason.REFRESH


@pytest.mark.parametrize(("since", "refresh"), [(-1.0, 10.0), (math.nan, 10.0), (1.0, 0.0), (1.0, math.inf)])
def test_bad_times_are_refused(since: float, refresh: float) -> None:
    with pytest.raises(ValueError):
        exchange_reason(by_datagram=True, told_current=True, hold_theirs=True, since_exchange_s=since,
                        refresh_s=refresh)


@given(age=st.floats(0, 100), window=st.floats(0.01, 10))
def test_a_datagram_success_needs_a_recent_proof_and_a_healthy_kubelet(age: float, window: float) -> None:
    assert datagram_success(proof_age_s=age, kubelet_ok=True, window_s=window) == (age <= window)
    assert not datagram_success(proof_age_s=age, kubelet_ok=False, window_s=window)
    assert not datagram_success(proof_age_s=None, kubelet_ok=True, window_s=window)


def test_a_datagram_judgement_refuses_bad_windows() -> None:
    with pytest.raises(ValueError):
        datagram_success(proof_age_s=1.0, kubelet_ok=True, window_s=0.0)
    with pytest.raises(ValueError):
        datagram_success(proof_age_s=math.nan, kubelet_ok=True, window_s=1.0)


def test_the_refresh_must_leave_room_inside_the_heartbeat_age() -> None:
    WireConfig(statement_refresh_s=15.0)
    with pytest.raises(ValueError, match="statement_refresh_s"):
        WireConfig(statement_refresh_s=16.0)
    with pytest.raises(ValueError):
        StatementCadence(period_s=1.0, refresh_s=0.0, anti_entropy_s=60.0)


# -- the book ---------------------------------------------------------------------------------------

def _heartbeat(seq: int, origin: NodeName = B):  # type: ignore[no-untyped-def]
    return sign_heartbeat(origin=origin, incarnation=1, seq=seq, kubelet_ok=True, cloud_ok=True, alive=[origin],
                          dead=[], keyring=ring(origin))


@pytest.mark.parametrize(("held", "named", "expected"), [
    (7, 7, True), (8, 7, True), (6, 7, False), (0x1_0002, 0xFFFE, True), (0xFFFE, 2, False),
    (7 + 0x7FFF, 7, True), (7 + 0x8000, 7, False)])
def test_a_held_statement_holds_a_named_one_by_16_bit_serial_arithmetic(held: int, named: int,
                                                                      expected: bool) -> None:
    assert holds(held, named) is expected


def test_a_confirmed_statement_votes_from_its_confirmation() -> None:
    book = HeartbeatBook()
    book.offer(_heartbeat(0x1_0007), now=100.0, age_s=2.0)
    assert not book.confirm(B, statement=0x0008, now=105.0)  # a later statement: fetch it, change nothing
    assert book.votes()[B].observed_at == 100.0
    assert book.confirm(B, statement=0x0007, now=105.0)      # the low 16 bits name it
    assert book.votes()[B].observed_at == 105.0
    assert book.get(B).heard_at == 105.0 and book.get(B).signed_at == 98.0
    assert book.confirm(B, statement=7, now=104.0)           # an earlier confirmation moves nothing back
    assert book.votes()[B].observed_at == 105.0
    assert not book.confirm(C, statement=7, now=106.0)       # none held


class _Proof:
    def __init__(self, *, at: float, statement: int, epoch: int) -> None:
        self.at, self.statement, self.epoch, self.kubelet_ok = at, statement, epoch, True


class _Proofs:
    def __init__(self, **proofs: _Proof) -> None:
        self.proofs = {NodeName(k.replace("_", "-")): v for k, v in proofs.items()}

    def last_proof(self, peer: NodeName) -> _Proof | None:
        return self.proofs.get(peer)


def test_a_new_datagram_epoch_confirms_nothing_before_an_exchange() -> None:
    book = HeartbeatBook()
    book.offer(_heartbeat(40), now=10.0)
    cadence = StatementCadence(period_s=1.0, refresh_s=10.0, anti_entropy_s=60.0)
    cadence.start_period([B], _Proofs(a_2=_Proof(at=10.0, statement=40, epoch=111)), now=10.5)
    assert not cadence.holds_theirs(B, book)  # nothing exchanged in this epoch yet
    assert cadence.due([B], announced=(1, 5), book=book, beacon="", now=10.5) == {B: ExchangeReason.CHANGED}
    cadence.told(B, (1, 5), beacon="", now=10.6, theirs=1)
    assert cadence.holds_theirs(B, book)
    assert cadence.due([B], announced=(1, 5), book=book, beacon="", now=11.0) == {}
    # its agent restarted: a new epoch, and its new statement number happens to be the held one's
    cadence.start_period([B], _Proofs(a_2=_Proof(at=12.0, statement=40, epoch=222)), now=12.5)
    assert not cadence.holds_theirs(B, book)
    assert cadence.due([B], announced=(1, 5), book=book, beacon="", now=12.5) == {B: ExchangeReason.PULL}
    # silent for two refreshes: a v5 probe, then one a refresh (dead, or an older agent again)
    for now, expected in ((32.5, {B: ExchangeReason.V5}), (33.5, {}), (42.0, {}), (42.5, {B: ExchangeReason.V5})):
        cadence.start_period([B], _Proofs(a_2=_Proof(at=12.0, statement=40, epoch=222)), now=now)
        assert cadence.by_datagram == frozenset()
        assert cadence.due([B], announced=(1, 5), book=book, beacon="", now=now) == expected
    # never proved anything (an agent older than v6): v5 every period
    cadence.start_period([C], _Proofs(), now=50.0)
    assert cadence.due([C], announced=(1, 5), book=book, beacon="", now=50.0) == {C: ExchangeReason.V5}
    assert cadence.due([C], announced=(1, 5), book=book, beacon="", now=50.1) == {C: ExchangeReason.V5}


# -- real agents on loopback -----------------------------------------------------------------------------

class Agent:
    """One node's peer exchange (HTTP on its address) and liveness endpoint (UDP, same port)."""

    def __init__(self, name: NodeName, port: int, *, group: dict[NodeName, str], refresh_s: float = 10.0,
                 anti_entropy_s: float = 60.0, datagrams: bool = True,
                 exchange_key: ExchangeKey | None = None, push: bool = True) -> None:
        self.name = name
        self.push = push
        self.port = port
        self.config = AgentConfig(
            node=name, identity_file=Path("/nonexistent"), listen_address=group[name], port=port,
            probe_timeout_s=0.3, votes=VoteConfig(exchange_period_s=PERIOD_S, vote_ttl_s=1.0),
            detector=DetectorConfig(suspect_timeout_s=0.4, dead_timeout_s=0.8),
            wire=WireConfig(statement_refresh_s=refresh_s, anti_entropy_s=anti_entropy_s))
        self.metrics = AgentMetrics(CollectorRegistry())
        self.peers = peer_exchange(self.config, membership=FixedMembership(group), metrics=self.metrics)
        self.exchange_key = (exchange_key or ExchangeKey.derived_from(NodeKey.generate())) if datagrams else None
        self.liveness: LivenessEndpoint | None = None
        self.datagrams = _Tally()
        self.runner: web.AppRunner | None = None
        self.session: aiohttp.ClientSession | None = None

    async def start(self, keys: dict[NodeName, bytes]) -> None:
        self.runner, self.session = await serve(self.peers, ADDRESSES[self.name], self.port)
        if self.exchange_key is not None:
            view = type("Keys", (), {"exchange_key_of": staticmethod(lambda n: keys.get(n))})()
            self.liveness = LivenessEndpoint(me=self.name, key=self.exchange_key, keys=view,
                                             host=ADDRESSES[self.name], port=self.port, events=self.datagrams,
                                             statements=self.peers)
            await self.liveness.start()

    async def stop(self) -> None:
        if self.liveness is not None:
            self.liveness.close()
        await close(self.runner, self.session)

    async def period(self) -> None:
        """What ``ExchangeLoop.run`` does in one period, without the kubelet and the cloud."""
        assert self.session is not None
        await self.peers.run_period(self.session, proofs=self.liveness,
                                    pusher=self.liveness if self.push else None)
        if self.liveness is not None:
            self.liveness.send({p: ADDRESSES[p] for p in self.peers.last_targets},
                               statement=self.peers.announced, kubelet_ok=True, cloud_ok=True)

    def exchanges(self, reason: str) -> float:
        value = self.metrics.registry.get_sample_value("edgewatch_agent_statement_exchanges_total",
                                                       {"reason": reason})
        return value or 0.0

    def health_of(self, peer: NodeName) -> Health:
        detector = self.peers.detectors.get(peer)
        return detector.state(now=asyncio.get_running_loop().time()) if detector else Health.UNKNOWN


class _Tally:
    """The liveness endpoint's events, counted (``LivenessEvents``)."""

    def __init__(self) -> None:
        self.sent = 0
        self.statements_sent = 0
        self.received: collections.Counter[str] = collections.Counter()

    def datagram_sent(self) -> None:
        self.sent += 1

    def datagram_received(self, result: str) -> None:
        self.received[result] += 1

    def statement_datagram_sent(self) -> None:
        self.statements_sent += 1


def _free_port_on_all() -> int:
    while True:
        port = free_port()
        try:
            for address in ADDRESSES.values():
                for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
                    with socket.socket(socket.AF_INET, kind) as probe:
                        probe.bind((address, port))
            return port
        except OSError:
            continue


async def _agents(names: tuple[NodeName, ...], **kwargs: object) -> list[Agent]:
    port = _free_port_on_all()
    group = {n: ADDRESSES[n] for n in names}
    agents = [Agent(n, port, group=group, **kwargs) for n in names]  # type: ignore[arg-type]
    keys = {a.name: a.exchange_key.public_raw for a in agents if a.exchange_key is not None}
    for agent in agents:
        await agent.start(keys)
    return agents


@contextlib.asynccontextmanager
async def _running(names: tuple[NodeName, ...], **kwargs: object) -> AsyncIterator[list[Agent]]:
    """:func:`_agents`, each stopped on the way out (also one a test stopped already)."""
    agents = await _agents(names, **kwargs)
    try:
        yield agents
    finally:
        for agent in agents:
            await agent.stop()


async def _run(agents: list[Agent], periods: int) -> None:
    for _ in range(periods):
        await asyncio.gather(*(a.period() for a in agents))
        await asyncio.sleep(PERIOD_S)


async def test_datagrams_take_over_and_statements_stop_flowing_while_nothing_changes() -> None:
    async with _running((A, B)) as (a, b):
        await _run([a, b], 6)
        assert a.peers.cadence.by_datagram == {B} and b.peers.cadence.by_datagram == {A}
        assert a.health_of(B) is Health.ALIVE and b.health_of(A) is Health.ALIVE
        before = sum(a.exchanges(r.value) for r in ExchangeReason)
        sent, alive = a.datagrams.sent, b.datagrams.received["alive"]
        await _run([a, b], 15)  # 3 s and more, inside the 10 s refresh
        steady = sum(a.exchanges(r.value) for r in ExchangeReason) - before
        assert steady <= 1, f"{steady} statement exchanges while nothing changed"
        assert a.datagrams.sent - sent == 15 and b.datagrams.received["alive"] - alive >= 13  # liveness rode on them
        assert a.health_of(B) is Health.ALIVE and b.health_of(A) is Health.ALIVE
        # the vote each holds stays current: the datagrams confirm the statement held
        assert a.peers.decide(now=asyncio.get_running_loop().time())[B].verdict.value == "healthy"


async def test_a_dead_peer_is_found_by_datagram_silence_and_the_change_is_sent_at_once() -> None:
    async with _running((A, B, C)) as (a, b, c):
        await _run([a, b, c], 6)
        assert a.health_of(C) is Health.ALIVE
        await c.stop()
        changed = a.exchanges("changed")
        for _ in range(25):
            await _run([a, b], 1)
            if a.health_of(C) is Health.DEAD:
                break
        assert a.health_of(C) is Health.DEAD
        await _run([a, b], 1)
        assert a.exchanges("changed") > changed  # a-1's statement now names a-3 dead: sent to a-2 at once
        held = b.peers.book.get(A)
        assert held is not None and C in held.heartbeat.dead


async def test_an_agent_without_datagrams_gets_the_v5_exchange_every_period() -> None:
    port = _free_port_on_all()
    group = {A: ADDRESSES[A], B: ADDRESSES[B]}
    a, old = Agent(A, port, group=group), Agent(B, port, group=group, datagrams=False)
    await a.start({A: a.exchange_key.public_raw})  # type: ignore[union-attr]
    await old.start({})
    try:
        await _run([a, old], 10)
        assert a.peers.cadence.by_datagram == frozenset()
        assert a.exchanges("v5") == 10 and a.health_of(B) is Health.ALIVE and old.health_of(A) is Health.ALIVE
        assert old.peers.book.get(A) is not None and old.peers.book.get(A).heartbeat.seq > 0
    finally:
        for agent in (a, old):
            await agent.stop()


async def test_a_statement_signed_again_with_nothing_new_is_not_sent_but_stays_confirmed() -> None:
    async with _running((A, B), refresh_s=1.0) as (a, b):
        await _run([a, b], 6)
        before = sum(a.exchanges(r.value) + b.exchanges(r.value) for r in ExchangeReason)
        seq, held = a.peers.seq, b.peers.book.get(A).heartbeat.seq  # type: ignore[union-attr]
        await _run([a, b], 15)  # at least 3 s: a-1 signs two or three times for its evidence
        assert a.peers.seq > seq
        assert sum(a.exchanges(r.value) + b.exchanges(r.value) for r in ExchangeReason) == before
        assert b.peers.book.get(A).heartbeat.seq == held  # not fetched: a-1 says nothing new
        assert b.peers.decide(now=asyncio.get_running_loop().time())[A].verdict.value == "healthy"


async def test_anti_entropy_exchanges_statements_on_its_slow_timer() -> None:
    async with _running((A, B), anti_entropy_s=1.0) as (a, b):
        await _run([a, b], 6)
        before = a.exchanges("refresh") + b.exchanges("refresh")
        await _run([a, b], 15)  # at least 3 s
        assert 2 <= a.exchanges("refresh") + b.exchanges("refresh") - before <= 6  # one per pair a second


async def test_a_dead_peer_does_not_set_the_survivors_signing_every_period() -> None:
    async with _running((A, B, C), refresh_s=1.0) as (a, b, c):
        await _run([a, b, c], 6)
        await c.stop()
        await _run([a, b], 20)  # 4 s: a-3 dead, and out of the datagram peers after 2 refreshes
        assert C not in a.peers.cadence.by_datagram and a.health_of(C) is Health.DEAD
        seq, before, v5 = a.peers.seq, a.exchanges("changed"), a.exchanges("v5")
        await _run([a, b], 10)  # 2 s: two refreshes, not ten new statements
        assert a.peers.seq - seq <= 3
        assert a.exchanges("changed") - before <= 2 * 3  # to a-2 and (failing) to a-3
        # the dead peer gets a v5 probe a refresh (in case it is an older agent now), not one a period
        assert 1 <= a.exchanges("v5") - v5 <= 3


async def test_a_restarted_peer_is_fetched_again_even_when_its_statement_number_collides() -> None:
    async with _running((A, B)) as agents:
        a, b = agents
        await _run([a, b], 6)
        old = a.peers.book.get(B).heartbeat  # type: ignore[union-attr]
        await b.stop()
        # b-2's agent starts again: same node key, new datagram epoch, and (the worst case) its
        # statement numbers start where the old run's held one is, so 16 bits cannot tell them apart
        again = Agent(B, b.port, group={A: ADDRESSES[A], B: ADDRESSES[B]}, exchange_key=b.exchange_key)
        again.peers.seq = again.peers.announced = old.seq - 1
        agents.append(again)  # stopped on the way out too
        await again.start({A: a.exchange_key.public_raw})  # type: ignore[union-attr]
        b = again
        await _run([a, b], 6)
        held = a.peers.book.get(B).heartbeat  # type: ignore[union-attr]
        assert held.incarnation == b.peers.incarnation != old.incarnation


async def test_a_peer_whose_datagrams_stop_but_answers_over_tcp_is_never_failed() -> None:
    """What a flood of a node's UDP port, or a filter on it, does: no datagram proof either way.
    Each missed proof makes the exchange a TCP probe at once, and after two refreshes of silence
    the peer is on the v5 exchange every period; it is ALIVE all along."""
    async with _running((A, B), refresh_s=1.0) as (a, b):
        await _run([a, b], 6)
        assert a.peers.cadence.by_datagram == {B}
        b.liveness.close()  # type: ignore[union-attr]
        seen = set()
        for _ in range(20):  # 4 s: past the 2 s of silence after which b-2 is not by datagram
            await _run([a, b], 1)
            seen.add(a.health_of(B))
        assert seen == {Health.ALIVE}
        assert B not in a.peers.cadence.by_datagram and a.exchanges("fallback") >= 3
        assert a.peers.decide(now=asyncio.get_running_loop().time())[B].verdict.value == "healthy"


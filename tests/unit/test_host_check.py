"""A dead vote on a neighbour whose agent is down but whose host and kubelet run is unconfirmed: the
rule (``edgewatch.core.hostalive``, properties), the connect (``edgewatch.agent.hostcheck``), a real
peer exchange on loopback whose neighbour's agent is not served while a plain listener stands in
for its kubelet's server port, and the lab's simulated kubelet listening on that port."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from pathlib import Path

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from _peers import FixedMembership, free_port_on, peer_exchange
from _peers import listening as kubelet_listener

from edgewatch.agent.config import AgentConfig
from edgewatch.agent.hostcheck import DEFAULT_TIMEOUT_S, REVERIFY_S, SILENT_EVERY_PERIOD_S, HostChecks, connect_once
from edgewatch.agent.metrics import AgentMetrics
from edgewatch.core.detector import DetectorConfig
from edgewatch.core.hostalive import (HOST_VERIFY_S, HOST_WINDOW_PERIODS, confirms_dead, host_known_alive,
                                     host_window_s)
from edgewatch.core.quorum import VoteConfig
from edgewatch.core.types import Health, NodeName
from edgewatch_lab.testing.kubeletsim import KubeletFleet, KubeletSimConfig, SimNode

A, B = NodeName("h-1"), NodeName("h-2")
ADDRESSES = {A: "127.0.0.41", B: "127.0.0.42"}
PERIOD_S = 0.2


# -- the rule ------------------------------------------------------------------------------------------

@given(at=st.floats(-1e6, 1e6), age=st.floats(0, 1e3), window=st.floats(0.001, 1e3))
def test_a_host_is_known_alive_exactly_within_the_window_after_its_answer(at: float, age: float,
                                                                         window: float) -> None:
    now = at + age
    assert host_known_alive(answered_at=at, now=now, window_s=window) == (now - at <= window)


@given(now=st.floats(-1e6, 1e6), window=st.floats(0.001, 1e3), ahead=st.floats(0, 1e3))
def test_no_answer_is_never_alive_and_an_answer_after_now_is_fresh(now: float, window: float, ahead: float) -> None:
    assert not host_known_alive(answered_at=None, now=now, window_s=window)
    assert host_known_alive(answered_at=now + ahead, now=now, window_s=window)


@given(at=st.floats(-1e6, 1e6), age=st.floats(0, 1e3), window=st.floats(0.001, 10), verify=st.floats(10, 1e3))
def test_a_death_is_confirmed_only_between_the_window_and_the_verify_time(at: float, age: float, window: float,
                                                                           verify: float) -> None:
    now = at + age
    assert confirms_dead(answered_at=at, now=now, window_s=window, verify_s=verify) == (
        window < now - at <= verify)
    assert not confirms_dead(answered_at=None, now=now, window_s=window, verify_s=verify)


@given(period=st.floats(0.01, 60))
def test_the_window_is_three_periods(period: float) -> None:
    assert host_window_s(period_s=period) == HOST_WINDOW_PERIODS * period == 3 * period


@pytest.mark.parametrize("kwargs", [
    {"answered_at": 1.0, "now": 2.0, "window_s": 0.0}, {"answered_at": 1.0, "now": 2.0, "window_s": math.inf},
    {"answered_at": math.nan, "now": 2.0, "window_s": 1.0}, {"answered_at": 1.0, "now": math.inf, "window_s": 1.0},
    {"answered_at": None, "now": 2.0, "window_s": -1.0}])
def test_bad_times_are_refused(kwargs: dict[str, float | None]) -> None:
    with pytest.raises(ValueError):
        host_known_alive(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        host_window_s(period_s=0.0)


# -- the connect -----------------------------------------------------------------------------------------

def _free_port_on_all() -> int:
    """A TCP port free on every test address just now."""
    return free_port_on(ADDRESSES.values())


class _Tally:
    def __init__(self) -> None:
        self.results: list[str] = []

    def host_checked(self, result: str) -> None:
        self.results.append(result)


async def test_a_connect_says_open_or_refused_and_never_raises() -> None:
    port = _free_port_on_all()
    assert await connect_once(host=ADDRESSES[B], port=port, timeout_s=0.5) == "refused"
    async with kubelet_listener(ADDRESSES[B], port):
        assert await connect_once(host=ADDRESSES[B], port=port, timeout_s=0.5) == "open"
    # TCP to a multicast address: Linux refuses it at once (ENETUNREACH)
    assert await connect_once(host="224.0.0.1", port=port, timeout_s=0.5) == "unreachable"


async def test_checks_remember_answers_and_confirm_a_death_only_after_the_port_answered_once(
        caplog: pytest.LogCaptureFixture) -> None:
    port, clock = _free_port_on_all(), [100.0]
    tally = _Tally()
    checks = HostChecks(port=port, period_s=1.0, events=tally, clock=lambda: clock[0])
    async with kubelet_listener(ADDRESSES[B], port):
        await checks.check({B: ADDRESSES[B], A: ADDRESSES[A]})
    assert sorted(tally.results) == ["open", "refused"]
    assert checks.answered_at(B) == 100.0 and checks.answered_at(A) is None
    with caplog.at_level(logging.INFO, logger="edgewatch.agent.hostcheck"):
        # B's port answers (its agent is down, not its host); A's never did (the check cannot tell)
        assert checks.unconfirmed([A, B], now=101.0) == {A, B}
        assert checks.unconfirmed([A, B], now=102.0) == {A, B}  # no second line
        assert checks.unconfirmed([A, B], now=103.5) == {A}  # B silent past 3 periods: confirmed
        assert checks.unconfirmed([A, B], now=100.0 + HOST_VERIFY_S + 1) == {A, B}  # too long ago to tell
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 4, lines
    assert "agent is down" in lines[1] or "agent is down" in lines[0]
    assert "confirmed" in lines[2] and "cannot tell" in lines[3], lines


def test_neighbours_gone_silent_are_checked_every_period_for_a_while_the_others_once_a_minute() -> None:
    checks = HostChecks(port=10250, period_s=1.0, events=_Tally())
    neighbours = {A: (ADDRESSES[A], True), B: (ADDRESSES[B], False)}
    assert checks.due(neighbours, now=0.0) == ADDRESSES
    assert checks.due(neighbours, now=1.0) == {B: ADDRESSES[B]}
    assert checks.due(neighbours, now=SILENT_EVERY_PERIOD_S) == {B: ADDRESSES[B]}
    assert checks.due(neighbours, now=SILENT_EVERY_PERIOD_S + 1) == {B: ADDRESSES[B]}  # once a minute from here
    assert checks.due(neighbours, now=SILENT_EVERY_PERIOD_S + 2) == {}
    assert checks.due(neighbours, now=REVERIFY_S) == {A: ADDRESSES[A]}
    assert checks.due(neighbours, now=SILENT_EVERY_PERIOD_S + 1 + REVERIFY_S) == {B: ADDRESSES[B]}
    assert checks.due({}, now=200.0) == {}  # no neighbours: what was kept of them is dropped
    assert checks.due(neighbours, now=201.0) == ADDRESSES
    off = HostChecks(port=0, period_s=1.0, events=_Tally())
    assert off.due(neighbours, now=0.0) == {} and off.unconfirmed([A, B], now=0.0) == {A, B}


async def test_no_check_is_made_when_off() -> None:
    tally = _Tally()
    checks = HostChecks(port=0, period_s=1.0, events=tally)
    await checks.check({B: ADDRESSES[B]})
    assert tally.results == [] and not checks.enabled and not checks.alive(B, now=0.0)


def test_the_agent_bounds_a_connect_by_its_probe_timeout_and_refuses_bad_ports() -> None:
    config = AgentConfig(node=A, identity_file=Path("/nonexistent"), probe_timeout_s=0.3)
    checks = HostChecks.of_agent(config, events=_Tally())
    assert checks.port == 10250 and checks.timeout_s == 0.3 and checks.window_s == 3.0
    assert HostChecks.of_agent(AgentConfig(node=A, identity_file=Path("/x")), events=_Tally()).timeout_s == \
        DEFAULT_TIMEOUT_S
    for bad in (-1, 65536, True):
        with pytest.raises(ValueError, match="peer_kubelet_port"):
            AgentConfig(node=A, identity_file=Path("/x"), peer_kubelet_port=bad)  # type: ignore[arg-type]


# -- a real peer exchange whose neighbour's agent is down --------------------------------------------------

class _Node:
    """Node h-1's peer exchange, sending from its address; h-2's agent is never served."""

    def __init__(self, *, peer_port: int, kubelet_port: int) -> None:
        self.config = AgentConfig(
            node=A, identity_file=Path("/nonexistent"), listen_address=ADDRESSES[A], port=peer_port,
            peer_kubelet_port=kubelet_port, probe_timeout_s=0.3,
            votes=VoteConfig(exchange_period_s=PERIOD_S, vote_ttl_s=1.0),
            detector=DetectorConfig(suspect_timeout_s=0.4, dead_timeout_s=0.8))
        self.metrics = AgentMetrics(CollectorRegistry())
        self.peers = peer_exchange(self.config, membership=FixedMembership(ADDRESSES), metrics=self.metrics)

    async def until_dead(self) -> None:
        """Periods until h-2 is DEAD to h-1's detector, then one more (the vote is signed at a
        period's start)."""
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(ADDRESSES[A], 0))) as session:
            for _ in range(30):
                await self.peers.run_period(session)
                detector = self.peers.detectors.get(B)
                if detector is not None and detector.state(now=asyncio.get_running_loop().time()) is Health.DEAD:
                    break
                await asyncio.sleep(PERIOD_S)
            assert self.peers.detectors[B].state(now=asyncio.get_running_loop().time()) is Health.DEAD
            await asyncio.sleep(PERIOD_S)
            await self.peers.run_period(session)

    def checks(self, result: str) -> float:
        return self.metrics.registry.get_sample_value("edgewatch_agent_host_checks_total", {"result": result}) or 0.0


async def test_a_neighbour_whose_agent_is_down_but_whose_kubelet_port_answers_is_voted_dead_unconfirmed() -> None:
    """The dead vote stays (an open port is anyone's claim); the evidence Lease will say it is
    unconfirmed, so the controller keeps the node on the Lease path."""
    peer_port, kubelet_port = _free_port_on_all(), _free_port_on_all()
    node = _Node(peer_port=peer_port, kubelet_port=kubelet_port)
    async with kubelet_listener(ADDRESSES[B], kubelet_port):
        await node.until_dead()
    own = node.peers.own
    assert own is not None and B in own.dead and B not in own.alive
    assert node.peers.unconfirmed_dead == {B}
    assert node.checks("open") >= 2 and node.checks("refused") == 0


async def test_a_neighbour_whose_kubelet_port_answered_and_then_fell_silent_is_confirmed_dead() -> None:
    peer_port, kubelet_port = _free_port_on_all(), _free_port_on_all()
    node = _Node(peer_port=peer_port, kubelet_port=kubelet_port)
    async with kubelet_listener(ADDRESSES[B], kubelet_port), \
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(ADDRESSES[A], 0))) as session:
        await node.peers.run_period(session)  # the port answers once: the check works for h-2
    await node.until_dead()
    own = node.peers.own
    assert own is not None and B in own.dead and node.peers.unconfirmed_dead == frozenset()
    assert node.checks("open") == 1 and node.checks("refused") >= 2


@pytest.mark.parametrize("listening", [False, True], ids=["no kubelet listener", "checks off"])
async def test_without_an_answer_ever_the_dead_vote_is_unconfirmed(listening: bool) -> None:
    peer_port, kubelet_port = _free_port_on_all(), _free_port_on_all()
    node = _Node(peer_port=peer_port, kubelet_port=0 if listening else kubelet_port)
    async with contextlib.AsyncExitStack() as stack:
        if listening:  # a kubelet answers, but the agent does not look
            await stack.enter_async_context(kubelet_listener(ADDRESSES[B], kubelet_port))
        await node.until_dead()
    own = node.peers.own
    assert own is not None and B in own.dead and B not in own.alive
    assert node.peers.unconfirmed_dead == {B}  # a firewall, or the check off: it cannot tell
    if listening:
        assert node.checks("open") == node.checks("refused") == 0  # no connect at all
    else:
        assert node.checks("open") == 0 and node.checks("refused") >= 2


# -- the lab's simulated kubelet ----------------------------------------------------------------------------

async def test_the_simulated_kubelet_listens_on_its_server_port_while_alive() -> None:
    port = _free_port_on_all()
    fleet = KubeletFleet(client=object(), nodes=[SimNode(name=B, address=ADDRESSES[B])],  # type: ignore[arg-type]
                         config=KubeletSimConfig(healthz_port=None, server_port=port))
    loop = asyncio.create_task(fleet.kubelets[B].server_port_loop(port))
    try:
        async def answer() -> str:
            for _ in range(50):
                result = await connect_once(host=ADDRESSES[B], port=port, timeout_s=0.5)
                if result == "open":
                    return result
                await asyncio.sleep(0.01)
            return result

        assert await answer() == "open"
        fleet.kill(B)
        assert await connect_once(host=ADDRESSES[B], port=port, timeout_s=0.5) == "refused"  # closed at once
        fleet.revive(B)
        assert await answer() == "open"
    finally:
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop
    assert await connect_once(host=ADDRESSES[B], port=port, timeout_s=0.5) == "refused"  # the fleet stopped

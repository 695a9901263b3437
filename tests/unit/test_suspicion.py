"""Suspicion, the refutable verdict that lets the controller challenge a node before its peers'
dead votes: the pure rule (edgewatch.core.suspicion, properties), the host check's confirmation
(edgewatch.core.hostalive.confirms_suspicion), a real peer exchange on loopback whose neighbour is
killed, and the controller's count with suspicions (edgewatch.controller.verified.VerifiedEdge.accused)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from _peers import FixedMembership, close, free_port_on, listening, peer_exchange, serve
from test_verified import B1, B2, Fleet

from edgewatch.agent.config import AgentConfig
from edgewatch.controller.challenges import Challenges
from edgewatch.controller.model import ChallengeSnapshot, CloudView, EdgeView, LeaseSnapshot, VerifiedVerdict
from edgewatch.controller.views import challenged_verdict
from edgewatch.agent.suspecting import Suspicions
from edgewatch.core.detector import DetectorConfig, PeerDetector, evaluate, initial_state, record
from edgewatch.core.hostalive import confirms_suspicion
from edgewatch.core.quorum import VoteConfig
from edgewatch.core.suspicion import SuspicionConfig, suspects, suspicion_failures
from edgewatch.core.types import Health, NodeName, Verdict
from edgewatch.timefmt import format_micro_time

DET = DetectorConfig()
SUS = SuspicionConfig()

# -- the rule ------------------------------------------------------------------------------------------

events = st.lists(st.tuples(st.booleans(), st.floats(min_value=0.0, max_value=3.0)), max_size=60)


def _run(history: list[tuple[bool, float]]):  # type: ignore[no-untyped-def]
    state, now = initial_state(now=0.0), 0.0
    for ok, gap in history:
        now += gap
        state = record(state, ok=ok, config=DET, now=now)
    return state, now


@given(events, st.floats(min_value=0.0, max_value=10.0))
def test_a_dead_peer_is_suspected_and_a_suspected_one_failed_twice_after_being_heard(
        history: list[tuple[bool, float]], later: float) -> None:
    state, now = _run(history)
    at = now + later
    suspected = suspects(state, detector=DET, config=SUS, now=at)
    if evaluate(state, config=DET, now=at) is Health.DEAD:
        assert suspected
    elif suspected:
        assert state.last_success_at is not None and state.consecutive_failures >= SUS.min_failures


@given(st.integers(min_value=0, max_value=40), st.floats(min_value=0.0, max_value=60.0))
def test_a_peer_never_heard_is_suspected_only_once_the_detector_votes_it_dead(failures: int, at: float) -> None:
    state = initial_state(now=0.0)
    for i in range(failures):
        state = record(state, ok=False, config=DET, now=float(i))
    now = max(at, float(failures))
    assert suspects(state, detector=DET, config=SUS, now=now) == (evaluate(state, config=DET, now=now) is Health.DEAD)


def test_on_a_clean_link_the_second_failed_period_suspects_three_periods_before_dead() -> None:
    state = record(initial_state(now=0.0), ok=True, config=DET, now=10.0)  # the last period it answered
    state = record(state, ok=False, config=DET, now=11.0)
    assert not suspects(state, detector=DET, config=SUS, now=11.9)  # one lost period never suspects
    state = record(state, ok=False, config=DET, now=12.0)
    assert suspects(state, detector=DET, config=SUS, now=12.0)  # silent 2 s > 1.5 s, two failures
    assert evaluate(state, config=DET, now=12.0) is Health.SUSPECT  # the detector abstains
    for t in (13.0, 14.0, 15.0):
        state = record(state, ok=False, config=DET, now=t)
    assert evaluate(state, config=DET, now=15.1) is Health.DEAD  # 5 s of silence for a dead vote


def test_a_recovering_peer_is_no_longer_suspected() -> None:
    state = record(initial_state(now=0.0), ok=True, config=DET, now=0.0)
    for t in range(1, 8):
        state = record(state, ok=False, config=DET, now=float(t))
    assert suspects(state, detector=DET, config=SUS, now=8.0)
    state = record(state, ok=True, config=DET, now=8.0)
    assert not suspects(state, detector=DET, config=SUS, now=8.0)


@given(st.floats(min_value=0.0, max_value=1.0), st.floats(min_value=0.0, max_value=1.0))
def test_a_lossier_link_needs_more_failures_never_fewer_than_two_nor_more_than_for_dead(
        low: float, high: float) -> None:
    low, high = min(low, high), max(low, high)
    k_low = suspicion_failures(detector=DET, config=SUS, repeat=low)
    k_high = suspicion_failures(detector=DET, config=SUS, repeat=high)
    assert SUS.min_failures <= k_low <= k_high <= DET.max_dead_failures
    if 0.0 < high < 1.0:
        assert high ** (k_high - 1) <= SUS.max_false * (1 + 1e-9) or k_high == DET.max_dead_failures


def test_at_thirty_percent_loss_each_way_about_nine_failures_suspect() -> None:
    assert suspicion_failures(detector=DET, config=SUS, repeat=0.0) == 2
    assert suspicion_failures(detector=DET, config=SUS, repeat=0.4) == 9


@pytest.mark.parametrize("kwargs", [{"after_s": 0.0}, {"after_s": float("nan")}, {"min_failures": 1},
                                    {"max_false": 0.0}, {"max_false": 1.0}, {"min_failures": True}])
def test_bad_thresholds_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        SuspicionConfig(**kwargs)  # type: ignore[arg-type]


# -- the host check's confirmation ---------------------------------------------------------------------

times = st.floats(min_value=-1e6, max_value=1e6)


@given(times, times, st.floats(min_value=0.0, max_value=1e3), st.floats(min_value=0.01, max_value=10.0))
def test_a_suspicion_is_confirmed_only_by_a_fresh_failure_after_an_answer_within_the_verify_time(
        answered: float, failed: float, age: float, window: float) -> None:
    now = max(answered, failed) + age
    confirmed = confirms_suspicion(answered_at=answered, failed_at=failed, now=now, window_s=window, verify_s=300.0)
    assert confirmed == (answered < failed and now - answered <= 300.0 and now - failed <= window)
    assert not confirms_suspicion(answered_at=None, failed_at=failed, now=now, window_s=window)
    assert not confirms_suspicion(answered_at=answered, failed_at=None, now=now, window_s=window)


# -- a real peer exchange whose neighbour is killed ----------------------------------------------------

A, B = NodeName("s-1"), NodeName("s-2")
ADDRESSES = {A: "127.0.0.51", B: "127.0.0.52"}
PERIOD_S = 0.2


def _free_port_on_all() -> int:
    return free_port_on(ADDRESSES.values())


def _config(node: NodeName, *, peer_port: int, kubelet_port: int) -> AgentConfig:
    return AgentConfig(node=node, identity_file=Path("/nonexistent"), listen_address=ADDRESSES[node], port=peer_port,
                       peer_kubelet_port=kubelet_port, probe_timeout_s=0.15,
                       votes=VoteConfig(exchange_period_s=PERIOD_S, vote_ttl_s=1.0),
                       detector=DetectorConfig(suspect_timeout_s=0.6, dead_timeout_s=1.0),
                       suspicion=SuspicionConfig(after_s=0.3))


@pytest.mark.parametrize("host_dies", [True, False], ids=["node killed", "agent down, kubelet up"])
async def test_a_killed_neighbour_is_suspected_two_periods_after_its_death_before_any_dead_vote(
        host_dies: bool) -> None:
    """Both agents exchange on loopback (v5 exchanges every period: no datagrams here); s-2's kubelet
    port is a plain listener. Killed (its agent and its port gone), s-2 is suspected by s-1 within
    three periods while s-1's detector still abstains; with its port still answering (its agent
    down, not its host) it never is."""
    peer_port, kubelet_port = _free_port_on_all(), _free_port_on_all()
    a = peer_exchange(_config(A, peer_port=peer_port, kubelet_port=kubelet_port), membership=FixedMembership(ADDRESSES))
    b = peer_exchange(_config(B, peer_port=peer_port, kubelet_port=kubelet_port), membership=FixedMembership(ADDRESSES))
    runner_a, session_a = await serve(a, ADDRESSES[A], peer_port)
    runner_b, session_b = await serve(b, ADDRESSES[B], peer_port)
    try:
        async with contextlib.AsyncExitStack() as stack:
            kubelet = await stack.enter_async_context(listening(ADDRESSES[B], kubelet_port))
            for _ in range(6):  # both alive: s-1 hears s-2 and checks its kubelet port once
                await asyncio.gather(a.run_period(session_a), b.run_period(session_b))
                await asyncio.sleep(PERIOD_S)
            assert a.detectors[B].state(now=time.monotonic()) is Health.ALIVE and a.suspicions.current == frozenset()
            assert a.hosts.answered_at(B) is not None
            await close(runner_b, session_b)  # s-2's agent dies
            runner_b = session_b = None
            if host_dies:
                kubelet.close()
                await kubelet.wait_closed()
            periods = 0
            while a.suspicions.current != {B} and periods < 8:
                await a.run_period(session_a)
                periods += 1
                await asyncio.sleep(PERIOD_S)
        if host_dies:
            assert a.suspicions.current == {B} and periods <= 3
            assert a.detectors[B].state(now=time.monotonic()) is not Health.DEAD  # the dead vote comes later
        else:
            assert a.suspicions.current == frozenset() and periods == 8
    finally:
        await close(runner_a, session_a)
        await close(runner_b, session_b)


# -- the controller's count with suspicions ------------------------------------------------------------

def _fleet() -> Fleet:
    f = Fleet(["n1", "n2", "n3", "n4", "n5"])
    f.edge.beacons.record(B1, at=100.0)
    for n in ("n1", "n2", "n3", "n4", "n5"):
        f.write(n, f.stmt(n, alive=("n1", "n2", "n3", "n4", "n5")))
    f.edge.recount_all(now=100.0)
    return f


def test_a_majority_of_suspicions_accuses_a_node_one_writer_does_not() -> None:
    f = _fleet()
    for writer in ("n1", "n2"):
        assert f.edge.set_suspicions(writer, frozenset({"n5"}))
        assert not f.edge.set_suspicions(writer, frozenset({"n5"}))  # no change
    f.edge.recount_all(now=101.0)
    assert f.edge.accused("n5") is None and not f.edge.seen_alive("n5")  # 2 of 5 suspect it, 2 name it alive
    f.edge.set_suspicions("n3", frozenset({"n5", "n3", "bad name!"}))  # itself and a bad name: ignored
    assert NodeName("n5") in f.edge.recount_all(now=102.0)
    assert f.edge.accused("n5") == 102.0 and f.edge.accused("n1") is None
    assert f.edge.verdict("n5").verdict is Verdict.HEALTHY  # type: ignore[union-attr]  # the votes alone
    f.edge.set_suspicions("n3", frozenset())  # withdrawn
    assert NodeName("n5") in f.edge.recount_all(now=103.0) and f.edge.accused("n5") is None


def test_one_liar_and_one_honest_suspicion_are_two_claims_not_a_majority() -> None:
    """The reach count would let two newer dead claims supersede a silent node's last statement and
    count the abstainers of their component as dead votes; accusations are direct claims only."""
    f = _fleet()
    f.edge.beacons.record(B2, at=100.5)
    for n in ("n1", "n2", "n3"):  # the honest neighbours abstain on n5 (its agent is silent)
        f.write(n, f.stmt(n, beacon=B2, alive=("n1", "n2", "n3", "n4")))
    for writer in ("n1", "n4"):  # n4 lies; n1's check of n5's kubelet port was black-holed
        f.edge.set_suspicions(writer, frozenset({"n5"}))
    f.edge.recount_all(now=101.0)
    assert f.edge.accused("n5") is None


def test_suspicions_count_only_with_the_statement_they_were_written_with_while_it_is_fresh() -> None:
    f = _fleet()
    for writer in ("n1", "n2", "n3"):
        f.edge.set_suspicions(writer, frozenset({"n5"}))
    f.edge.recount_all(now=101.0)
    assert f.edge.accused("n5") == 101.0
    f.edge.beacons.record(B2, at=101.5)  # n3 is cut off: a peer carries a newer statement of it
    f.write("n4", f.stmt("n4", beacon=B2, alive=("n1", "n2", "n3", "n4", "n5")),
            f.stmt("n3", beacon=B2, seq=2, alive=("n1", "n2", "n4", "n5"), cloud_ok=False))
    f.edge.recount_all(now=102.0)
    assert f.edge.accused("n5") is None  # n3's Lease still says it suspects n5, of an older statement
    f = _fleet()
    for writer in ("n1", "n2", "n3"):
        f.edge.set_suspicions(writer, frozenset({"n5"}))
    f.edge.recount_all(now=131.0)  # the statements' beacon is older than the 30 s TTL: no vote counts
    assert f.edge.accused("n5") is None


def test_a_dead_vote_majority_is_accused_from_the_same_count() -> None:
    f = _fleet()
    f.edge.beacons.record(B2, at=100.5)
    for n in ("n1", "n2", "n3"):
        f.write(n, f.stmt(n, beacon=B2, alive=("n1", "n2", "n3", "n4"), dead=("n5",)))
    f.edge.recount_all(now=101.0)
    assert f.edge.verdict("n5").verdict is Verdict.UNHEALTHY and f.edge.accused("n5") == 101.0  # type: ignore[union-attr]


# -- the verdict under a challenge ---------------------------------------------------------------------

def _verdict(v: Verdict) -> VerifiedVerdict:
    return VerifiedVerdict(verdict=v, since=50.0, counted_at=104.0)


_CH = ChallengeSnapshot(issued_at=102.0, deadline=103.5, since=101.0)


@pytest.mark.parametrize(("counted", "challenge", "renewed", "now", "seen_alive", "expected"), [
    (Verdict.UNKNOWN, _CH, None, 104.0, False, Verdict.UNHEALTHY),
    (None, _CH, None, 104.0, False, Verdict.UNHEALTHY),
    (Verdict.HEALTHY, _CH, None, 104.0, False, Verdict.UNHEALTHY),
    (Verdict.HEALTHY, _CH, None, 104.0, True, Verdict.HEALTHY),
    (Verdict.UNKNOWN, ChallengeSnapshot(issued_at=102.0, deadline=103.5, answered=True, since=101.0), None, 104.0,
     False, Verdict.UNKNOWN),
    (Verdict.UNKNOWN, _CH, 102.5, 104.0, False, Verdict.UNKNOWN),
    (Verdict.UNKNOWN, None, None, 104.0, False, Verdict.UNKNOWN),
    (Verdict.UNKNOWN, _CH, 95.0, 103.0, False, Verdict.UNHEALTHY),
    (Verdict.UNKNOWN, _CH, 90.0, 103.0, False, Verdict.UNKNOWN),
    (Verdict.UNKNOWN, _CH, None, 103.0, False, Verdict.UNKNOWN),
    (Verdict.UNKNOWN, _CH, 90.0, 103.5, False, Verdict.UNHEALTHY),
    (Verdict.UNKNOWN, _CH, "first sight", 103.0, False, Verdict.UNKNOWN),
    (Verdict.UNKNOWN, _CH, "first sight", 103.5, False, Verdict.UNHEALTHY),
], ids=["unrefuted", "never counted", "reach-healthy by its own last word", "a majority names it alive",
        "answered", "renewed since", "no challenge", "before the deadline, renewal fresh",
        "before the deadline, renewal overdue", "before the deadline, no renewal", "at the deadline, overdue",
        "before the deadline, a first sight", "at the deadline, a first sight"])
def test_an_unrefuted_challenge_is_an_unhealthy_verdict_until_answer_renewal_or_a_live_majority(
        counted: Verdict | None, challenge: ChallengeSnapshot | None, renewed: float | str | None, now: float,
        seen_alive: bool, expected: Verdict) -> None:
    """Before its deadline the challenge counts only while the node's own renewal is fresh (grace
    12 s here) and was seen happen: with the renewal overdue the cloud view is LOST already, and a
    renewal seen only at a new leader's first look (a node with a recorded outage) may be LOST too,
    so an early UNHEALTHY would fail the node before it had its time to answer."""
    if renewed == "first sight":  # the controller's first look, just now; the renewal itself older
        lease = LeaseSnapshot(renew_time=format_micro_time(60.0), observed_at=101.5, duration_s=40.0,
                              first_sight=True)
    else:
        lease = None if renewed is None else LeaseSnapshot(renew_time=format_micro_time(float(renewed)),
                                                           observed_at=float(renewed), duration_s=40.0)
    out = challenged_verdict(verdict=None if counted is None else _verdict(counted), challenge=challenge,
                             lease=lease, seen_alive=seen_alive, now=now, grace_s=12.0)
    if counted is None and challenge is None:
        assert out is None
    else:
        assert out is not None and out.verdict is expected
    if expected is Verdict.UNHEALTHY and counted is not Verdict.UNHEALTHY:
        assert out is not None and out.since == 101.0 and out.counted_at == (None if counted is None else 104.0)


def test_a_node_a_majority_names_alive_directly_is_seen_alive_its_own_word_is_not_enough() -> None:
    f = _fleet()
    assert f.edge.seen_alive("n5")  # all four others name it alive
    f.edge.beacons.record(B2, at=100.5)
    for n in ("n1", "n2", "n3"):  # they stop naming it alive; its own last statement still names them
        f.write(n, f.stmt(n, beacon=B2, alive=("n1", "n2", "n3", "n4")))
    f.edge.recount_all(now=101.0)
    assert not f.edge.seen_alive("n5") and f.edge.verdict("n5").verdict is Verdict.HEALTHY  # type: ignore[union-attr]


# -- the agent's suspicions ------------------------------------------------------------------------------

class _AllConfirmed:
    """Host checks that confirm every suspicion asked about (the rule is tested above)."""

    def confirm_suspicions(self, suspected: list[NodeName], *, now: float) -> frozenset[NodeName]:
        return frozenset(suspected)


def _failing_detector() -> PeerDetector:
    detector = PeerDetector(config=DET, now=0.0)
    detector.record(True, now=10.0)
    detector.record(False, now=11.0)
    detector.record(False, now=12.0)
    return detector


def test_a_neighbour_whose_agent_still_speaks_is_not_suspected_while_its_kubelet_restarts() -> None:
    """Its datagrams say the kubelet is down, so the detector counts failures; but its agent is alive
    (its host is not dead): no suspicion, and the node is left to the Lease path."""
    suspicions = Suspicions(config=SUS, hosts=_AllConfirmed())  # type: ignore[arg-type]
    detectors = {B: _failing_detector()}
    suspicions.heard(B, at=11.5)  # a datagram with its kubelet flag down
    assert suspicions.update(detectors, [B], now=12.5) == frozenset()
    assert suspicions.update(detectors, [B], now=13.1) == {B}  # silent for more than 1.5 s
    suspicions.heard(B, at=13.2)
    assert suspicions.update(detectors, [B], now=13.3) == frozenset() == suspicions.current
    assert suspicions.update(detectors, [], now=20.0) == frozenset()  # no longer a neighbour: forgotten


def test_a_neighbour_missing_again_is_suspected_before_its_fallback_probe_ends() -> None:
    suspicions = Suspicions(config=SUS, hosts=_AllConfirmed())  # type: ignore[arg-type]
    detector = PeerDetector(config=DET, now=0.0)
    detector.record(True, now=10.0)
    detector.record(False, now=11.0)  # one failed period
    suspicions.heard(B, at=9.9)
    assert suspicions.update({B: detector}, [B], now=12.05) == frozenset()
    assert suspicions.update({B: detector}, [B], now=12.05, missing=[B]) == {B}  # as if the 2nd failure were in
    detector.record(True, now=12.6)  # the fallback answered after all
    suspicions.heard(B, at=12.6)
    assert suspicions.update({B: detector}, [B], now=12.6) == frozenset()

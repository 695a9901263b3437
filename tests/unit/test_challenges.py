"""Tests of the challenge through the beacon: the pure rule (edgewatch.controller.views.
challenge_deadline), what the decision table makes of it (edgewatch.controller.decision.plan) and
the controller's book of open challenges (edgewatch.controller.challenges)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from _fakekube import FakeKube
from _keys import ring

from edgewatch.controller.challenges import (BACKOFF_S, MAX_NAMES, MAX_PER_BEACON, RECENTLY_OVERDUE_S, Challenges,
                                             parse_mark, parse_names)
from edgewatch.controller.decision import plan
from edgewatch.controller.evidence import BeaconIssuer
from edgewatch.controller.model import (
    FAILED_TAINT,
    STATE_ANNOTATION,
    OUT_OF_SERVICE_TAINT,
    ChallengeSnapshot,
    CloudView,
    ControllerConfig,
    EdgeView,
    LeaseSnapshot,
    NodeSnapshot,
    NodeState,
    VerifiedVerdict,
)
from edgewatch.controller.verified import VerifiedEdge
from edgewatch.controller.views import challenge_deadline, challenged_verdict, lease_grace_s
from edgewatch.core.identity import NodeKey
from edgewatch.core.evidence import Statement
from edgewatch.core.types import NodeName, Verdict
from edgewatch.core.wire import sign_heartbeat
from edgewatch.names import (BEACON_ANNOTATION, BEACON_LEASE_NAME, CHALLENGE_ANNOTATION, DELEGATE_HEARTBEAT_ANNOTATION,
                             DELEGATED_RENEW_TIME_ANNOTATION, OUT_OF_SERVICE_ANNOTATION)
from edgewatch.timefmt import format_micro_time

CFG = ControllerConfig()
T0 = 1_800_000_000.0  # the last own renewal the controller saw


def own_lease(observed: float) -> LeaseSnapshot:
    return LeaseSnapshot(renew_time=format_micro_time(observed), observed_at=observed, duration_s=40.0)


def node(annotations: dict[str, str] | None = None) -> NodeSnapshot:
    return NodeSnapshot(name="n1", labels={}, annotations=dict(annotations or {}), taints=())


def unhealthy(since: float) -> VerifiedVerdict:
    return VerifiedVerdict(verdict=Verdict.UNHEALTHY, since=since, counted_at=since)


# -- the pure rule -----------------------------------------------------------------------------------


def test_no_challenge_or_an_answered_one_has_no_deadline() -> None:
    assert challenge_deadline(challenge=None, lease=own_lease(T0)) is None
    answered = ChallengeSnapshot(issued_at=T0 + 3, deadline=T0 + 5, answered=True)
    assert challenge_deadline(challenge=answered, lease=own_lease(T0)) is None


@settings(max_examples=200, deadline=None)
@given(renewed=st.floats(min_value=-20, max_value=20), issued=st.floats(min_value=0, max_value=10),
       timeout=st.floats(min_value=0.1, max_value=5))
def test_an_own_renewal_seen_at_or_after_the_challenge_answers_it(renewed: float, issued: float,
                                                                  timeout: float) -> None:
    challenge = ChallengeSnapshot(issued_at=T0 + issued, deadline=T0 + issued + timeout)
    deadline = challenge_deadline(challenge=challenge, lease=own_lease(T0 + renewed))
    assert (deadline is None) == (T0 + renewed >= T0 + issued)
    if deadline is not None:
        assert deadline == challenge.deadline


def test_a_carried_renewal_does_not_answer_but_an_own_one_before_the_carry_does() -> None:
    """A delegated Lease: only the node's own renewal (``own_observed_at``) speaks for it."""
    renew = format_micro_time(T0 + 5)
    carried = LeaseSnapshot(renew_time=renew, observed_at=T0 + 5, duration_s=40.0,
                            annotations={DELEGATE_HEARTBEAT_ANNOTATION: "true", DELEGATED_RENEW_TIME_ANNOTATION: renew},
                            own_observed_at=T0)
    challenge = ChallengeSnapshot(issued_at=T0 + 3, deadline=T0 + 5)
    assert challenge_deadline(challenge=challenge, lease=carried) == T0 + 5
    own_later = LeaseSnapshot(renew_time=renew, observed_at=T0 + 5, duration_s=40.0,
                              annotations=carried.annotations, own_observed_at=T0 + 4)
    assert challenge_deadline(challenge=challenge, lease=own_later) is None


# -- the decision table --------------------------------------------------------------------------------


def test_an_unanswered_challenge_fails_a_node_its_peers_see_dead_before_its_renewal_is_overdue() -> None:
    lease = own_lease(T0)
    challenge = ChallengeSnapshot(issued_at=T0 + 3.2, deadline=T0 + 5.4)
    before = plan(node=node(), lease=lease, verdict=unhealthy(T0 + 3), now=T0 + 5.0, config=CFG,
                  challenge=challenge)
    assert before.cloud is CloudView.OK and before.effective_state is NodeState.NORMAL
    assert before.requeue_after_s is not None and abs(before.requeue_after_s - 0.4) < 1e-6  # at the deadline
    after = plan(node=node(), lease=lease, verdict=unhealthy(T0 + 3), now=T0 + 5.4, config=CFG,
                 challenge=challenge)
    assert after.cloud is CloudView.LOST and after.edge is EdgeView.UNHEALTHY
    assert after.effective_state is NodeState.FAILED and after.evict_pods  # 6.6 s before the Lease is overdue
    assert FAILED_TAINT.ident in {t.ident for t in after.taints}
    assert "challenge unanswered" in after.explanation
    assert after.unreachable_since is not None and after.unreachable_since <= T0 + 5.4


def test_a_node_challenged_after_its_renewal_went_overdue_is_failed_at_the_deadline_not_before() -> None:
    """The renewal went overdue just before the peers' suspicions landed: the challenge is still
    owed its time (no FAILED before the deadline), and the plan comes back at the deadline."""
    lease = own_lease(T0)
    grace = lease_grace_s(lease=lease, config=CFG)
    challenge = ChallengeSnapshot(issued_at=T0 + grace + 0.5, deadline=T0 + grace + 2.0, since=T0 + grace + 0.2)

    def at(now: float):  # type: ignore[no-untyped-def]
        counted = VerifiedVerdict(verdict=Verdict.HEALTHY, since=T0, counted_at=T0 + grace + 0.9)  # suspected only
        verdict = challenged_verdict(verdict=counted, challenge=challenge, lease=lease, seen_alive=False, now=now,
                                     grace_s=grace)
        return plan(node=node(), lease=lease, verdict=verdict, now=now, config=CFG, challenge=challenge)

    before = at(T0 + grace + 1.0)
    assert before.cloud is CloudView.LOST and before.state is not NodeState.FAILED
    assert before.requeue_after_s is not None and before.requeue_after_s <= 1.0 + 1e-6
    after = at(T0 + grace + 2.0)
    assert after.edge is EdgeView.UNHEALTHY and after.state is NodeState.FAILED, after.explanation


def test_a_renewal_seen_only_at_a_new_leaders_first_look_does_not_fail_a_challenged_node_early() -> None:
    """A node with a recorded outage (DISCONNECTED) whose kubelet renews again: a new leader's first
    look does not trust that renewal (cloud view LOST), so a challenge counting at once would fail
    the node with no time to answer. It counts from the deadline on."""
    recorded = node({STATE_ANNOTATION: NodeState.DISCONNECTED.value})
    lease = LeaseSnapshot(renew_time=format_micro_time(T0 - 1.0), observed_at=T0, duration_s=40.0, first_sight=True)
    grace = lease_grace_s(lease=lease, config=CFG)
    challenge = ChallengeSnapshot(issued_at=T0 + 1.0, deadline=T0 + 2.5, since=T0 + 0.8)
    counted = VerifiedVerdict(verdict=Verdict.HEALTHY, since=T0 - 60.0, counted_at=T0 + 0.9)  # suspected only
    verdict = challenged_verdict(verdict=counted, challenge=challenge, lease=lease, seen_alive=False, now=T0 + 1.2,
                                 grace_s=grace)
    early = plan(node=recorded, lease=lease, verdict=verdict, now=T0 + 1.2, config=CFG, challenge=challenge)
    assert early.cloud is CloudView.LOST and early.state is not NodeState.FAILED, early.explanation
    assert early.requeue_after_s is not None and early.requeue_after_s <= 1.3 + 1e-6


def test_no_out_of_service_taint_on_an_unanswered_challenge_alone() -> None:
    """Force-detaching volumes waits for the Lease itself to go overdue."""
    lease = own_lease(T0)
    challenge = ChallengeSnapshot(issued_at=T0 + 3, deadline=T0 + 5)
    on = node({OUT_OF_SERVICE_ANNOTATION: "enabled"})
    early = plan(node=on, lease=lease, verdict=unhealthy(T0 + 3), now=T0 + 6, config=CFG, challenge=challenge)
    assert early.effective_state is NodeState.FAILED
    assert OUT_OF_SERVICE_TAINT.ident not in {t.ident for t in early.taints}
    overdue = plan(node=on, lease=lease, verdict=unhealthy(T0 + 3), now=T0 + 13, config=CFG, challenge=challenge)
    assert OUT_OF_SERVICE_TAINT.ident in {t.ident for t in overdue.taints}


@settings(max_examples=150, deadline=None)
@given(edge=st.sampled_from([Verdict.HEALTHY, Verdict.UNKNOWN]), at=st.floats(min_value=5, max_value=11.9),
       answered=st.booleans())
def test_a_challenge_changes_nothing_unless_the_peers_see_the_node_dead(edge: Verdict, at: float,
                                                                        answered: bool) -> None:
    lease = own_lease(T0)
    verdict = VerifiedVerdict(verdict=edge, since=T0 + 3, counted_at=T0 + 3)
    challenge = ChallengeSnapshot(issued_at=T0 + 3, deadline=T0 + 5, answered=answered)
    with_it = plan(node=node(), lease=lease, verdict=verdict, now=T0 + at, config=CFG, challenge=challenge)
    without = plan(node=node(), lease=lease, verdict=verdict, now=T0 + at, config=CFG)
    assert with_it == without


def test_a_node_failed_on_a_challenge_stays_failed_when_its_renewal_goes_overdue() -> None:
    """The outage began at the challenge's deadline; once the Lease itself is overdue that recorded
    start is still trusted (no NORMAL in between: taints kept, no second eviction round). The
    renewal is seen at a fractional second, so the Lease path's own start (rounded up) lies in the
    future for a moment after the renewal goes overdue."""
    lease = own_lease(T0 + 0.5)
    challenge = ChallengeSnapshot(issued_at=T0 + 3.2, deadline=T0 + 5.4)
    first = plan(node=node(), lease=lease, verdict=unhealthy(T0 + 3), now=T0 + 5.5, config=CFG, challenge=challenge)
    assert first.effective_state is NodeState.FAILED
    recorded = node({k: v for k, v in first.annotations.items() if v is not None})
    recorded = NodeSnapshot(name="n1", labels={}, annotations=recorded.annotations, taints=first.taints)
    for at in (8.0, 12.6, 20.0):
        for ch in (challenge, None):  # the challenge kept, or forgotten (a new leader)
            later = plan(node=recorded, lease=lease, verdict=unhealthy(T0 + 3), now=T0 + at, config=CFG, challenge=ch)
            if ch is None and at < 12.5:
                continue  # a new leader without the challenge challenges again (the Lease is fresh)
            assert later.effective_state is NodeState.FAILED and later.event is None, (at, ch, later.explanation)
            assert later.taints == first.taints


def test_an_answered_challenge_keeps_a_node_cut_off_only_from_its_lan() -> None:
    lease = own_lease(T0)
    challenge = ChallengeSnapshot(issued_at=T0 + 3, deadline=T0 + 5, answered=True)
    p = plan(node=node(), lease=lease, verdict=unhealthy(T0 + 3), now=T0 + 8, config=CFG, challenge=challenge)
    assert p.cloud is CloudView.OK and p.effective_state is NodeState.NORMAL and not p.evict_pods


# -- the book of open challenges ----------------------------------------------------------------------


def statement(origin: str, *, at: float, kubelet_ok: bool = True, incarnation: int = 7) -> Statement:
    hb = sign_heartbeat(origin=NodeName(origin), incarnation=incarnation, seq=1, kubelet_ok=kubelet_ok,
                        cloud_ok=True, alive=[NodeName(origin)], dead=[], keyring=ring(NodeName(origin)),
                        beacon="b" * 32)
    return Statement(heartbeat=hb, at=at, carrier=NodeName(origin))


class Planned:
    """Just what ``Challenges.consider`` reads of a plan."""

    def __init__(self, cloud: CloudView, edge: EdgeView, state: NodeState = NodeState.NORMAL) -> None:
        self.cloud, self.edge, self.state = cloud, edge, state


SUSPECTED = Planned(CloudView.OK, EdgeView.UNHEALTHY)
GROUP = [f"n{i}" for i in range(1, 6)]


def book_of(*, group: list[str] = GROUP, incarnations: dict[str, int] | None = None, marked: bool = True,
            **kwargs: object) -> Challenges:
    """A book over one group whose members' newest statements are of ``incarnations`` (default 7
    each), each member's evidence Lease carrying a current mark if ``marked``."""
    incs = {n: 7 for n in group} if incarnations is None else incarnations
    book = Challenges(timeout_s=2.0, incarnation_of=incs.get, group_of=lambda _n: frozenset(group),
                      **kwargs)  # type: ignore[arg-type]
    if marked:
        for name, inc in incs.items():
            book.answers(name, mark=f"v1:{inc}")
    return book


def ask(book: Challenges, node: str = "n1", *, plan: Planned = SUSPECTED, episode: float = 100.0,
        now: float = 100.0) -> None:
    book.consider(node, plan, episode=episode, now=now)  # type: ignore[arg-type]


def test_a_challenge_is_asked_once_per_episode_issued_on_a_beacon_and_answered() -> None:
    due: list[str] = []
    results: list[str] = []
    book = book_of(on_due=due.append, on_result=results.append)
    ask(book)
    assert book.waiting() == ["n1"] and book.wanted.is_set()
    assert book.snapshot("n1", own=None, now=100.0) is None  # not on a beacon yet
    book.issued(["n1"], recorded_at=100.2, written_at=100.3)
    assert due == ["n1"] and results == ["issued"] and not book.wanted.is_set() and book.waiting() == []
    ask(book)
    assert book.waiting() == []  # the same episode: not again
    snap = book.snapshot("n1", own=statement("n1", at=95.0), now=101.0)
    assert snap == ChallengeSnapshot(issued_at=100.2, deadline=102.3, answered=False, since=100.0)
    book.statement_came("n1")
    assert due == ["n1", "n1"]  # planned again on news of it
    assert not book.snapshot("n1", own=statement("n1", at=100.1), now=101.0).answered  # type: ignore[union-attr]
    # a statement naming the beacon answers whatever it says of the kubelet: the agent, so the host,
    # is alive, and a kubelet restarting is left to the Lease path
    snap = book.snapshot("n1", own=statement("n1", at=100.2, kubelet_ok=False), now=101.0)
    assert snap is not None and snap.answered and results == ["issued", "answered"]
    later_sick = statement("n1", at=105.0, kubelet_ok=False)
    assert book.snapshot("n1", own=later_sick, now=106.0).answered  # type: ignore[union-attr]  # it stands
    assert results == ["issued", "answered"]  # each outcome counted once


def test_an_unanswered_challenge_is_counted_once_and_forgotten_with_the_verdict() -> None:
    results: list[str] = []
    book = book_of(on_due=lambda _n: None, on_result=results.append)
    ask(book, episode=1.0, now=1.0)
    book.issued(["n1"], recorded_at=1.0, written_at=1.1)
    for now in (3.2, 3.5):
        assert book.snapshot("n1", own=None, now=now) == ChallengeSnapshot(issued_at=1.0, deadline=3.1, since=1.0)
    assert results == ["issued", "unanswered"]
    ask(book, plan=Planned(CloudView.LOST, EdgeView.UNHEALTHY, NodeState.FAILED), episode=1.0, now=4.0)
    assert book.snapshot("n1", own=None, now=4.0) is not None  # failed on it: kept while the verdict holds
    ask(book, plan=Planned(CloudView.OK, EdgeView.HEALTHY), episode=9.0, now=10.0)
    assert book.snapshot("n1", own=None, now=10.0) is None


def test_no_challenge_when_the_node_is_failed_or_carried_or_challenges_are_off() -> None:
    book = book_of(on_due=lambda _n: None)
    ask(book, plan=Planned(CloudView.LOST, EdgeView.UNHEALTHY, NodeState.FAILED))  # failed on dead votes
    ask(book, plan=Planned(CloudView.DELEGATED, EdgeView.UNHEALTHY))
    assert book.waiting() == []
    off = Challenges(timeout_s=0.0, on_due=lambda _n: None, incarnation_of=lambda _n: 7)
    off.answers("n1", mark="v1:7")
    ask(off)
    assert off.waiting() == []


@settings(max_examples=200, deadline=None)
@given(overdue_for=st.one_of(st.none(), st.floats(min_value=-20.0, max_value=3600.0)))
def test_a_suspected_node_whose_renewal_just_went_overdue_is_challenged_one_cut_off_is_not(
        overdue_for: float | None) -> None:
    """A kill in the last seconds before a renewal finds the renewal overdue just before the
    suspicions land: asked all the same, so its detection does not wait for the dead votes. A node
    overdue for longer is cut off from the cloud (it could not answer: the challenge comes over its
    own link), and one never seen renewing is unknown: for them a suspicion must not stand in for
    the dead votes."""
    book = book_of(on_due=lambda _n: None)
    episode = 100.0
    book.consider("n1", Planned(CloudView.LOST, EdgeView.UNKNOWN, NodeState.UNKNOWN),  # type: ignore[arg-type]
                  episode=episode, accused=True, now=episode,
                  overdue_at=None if overdue_for is None else episode - overdue_for)
    challenged = overdue_for is not None and overdue_for <= RECENTLY_OVERDUE_S
    assert book.waiting() == (["n1"] if challenged else [])


def test_only_nodes_whose_group_all_answer_with_their_current_incarnation_are_challenged() -> None:
    """An agent of an earlier release keeps a copied mark after a rollback: its statements are of
    another incarnation, so its mark no longer counts, for itself nor for its group; a member with
    no statement at all (never started) does not stand in the way."""
    unmarked = book_of(on_due=lambda _n: None, marked=False)
    ask(unmarked)
    assert unmarked.waiting() == []
    rolled_back = book_of(on_due=lambda _n: None)
    rolled_back.answers("n1", mark="v1:6")  # the statements are of incarnation 7
    ask(rolled_back)
    assert rolled_back.waiting() == []
    old_peer = book_of(on_due=lambda _n: None)
    old_peer.answers("n4", mark=None)  # a peer of an earlier release: never confirms its dead votes
    ask(old_peer)
    assert old_peer.waiting() == []
    never_started = book_of(on_due=lambda _n: None, incarnations={"n1": 7, "n2": 7, "n3": 7})
    ask(never_started)
    assert never_started.waiting() == ["n1"]


def test_a_peer_that_cannot_confirm_the_death_keeps_the_node_on_the_lease_path() -> None:
    book = book_of(on_due=lambda _n: None)
    book.unconfirmed("n2", "n1,bad name,n9")
    ask(book)
    assert book.waiting() == [] and book.vouched("n1")
    book.unconfirmed("n2", None)
    ask(book)
    book.issued(["n1"], recorded_at=100.0, written_at=100.1)
    book.unconfirmed("n3", "n1")  # the claim comes after the challenge: it counts as an answer
    snap = book.snapshot("n1", own=None, now=103.0)
    assert snap is not None and snap.answered


def test_a_third_of_the_group_suspected_at_once_gets_no_challenge() -> None:
    """kube-controller-manager's unhealthy-zone idea: a LAN-wide fault is not met with a storm of
    challenges whose stragglers would be failed."""
    book = book_of(on_due=lambda _n: None)
    ask(book, "n1")
    ask(book, "n2")
    assert book.waiting() == ["n1"]
    ask(book, "n1", plan=Planned(CloudView.LOST, EdgeView.UNHEALTHY, NodeState.FAILED))  # n1 failed: no longer suspected
    ask(book, "n2", episode=101.0)
    assert book.waiting() == ["n1", "n2"]


def test_a_node_is_challenged_at_most_once_per_backoff() -> None:
    book = book_of(on_due=lambda _n: None)
    ask(book, episode=1.0, now=1.0)
    book.issued(["n1"], recorded_at=1.0, written_at=1.1)
    ask(book, plan=Planned(CloudView.OK, EdgeView.HEALTHY), episode=5.0, now=5.0)  # answered; the verdict turns
    ask(book, episode=6.0, now=6.0)
    assert book.waiting() == []  # a new episode, too soon
    ask(book, episode=70.0, now=1.0 + BACKOFF_S)
    assert book.waiting() == ["n1"]


def test_a_dropped_challenge_stops_asking_for_beacons() -> None:
    """Nothing waiting, nothing wanted: the beacon issuer goes back to its period."""
    book = book_of(on_due=lambda _n: None)
    ask(book)
    assert book.wanted.is_set()
    ask(book, plan=Planned(CloudView.OK, EdgeView.UNKNOWN))
    assert not book.wanted.is_set() and book.waiting() == []
    ask(book, episode=101.0)
    book.forget("n1")
    assert not book.wanted.is_set()
    book.issued([], recorded_at=1.0, written_at=1.0)
    assert not book.wanted.is_set()


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=300))
def test_marks_and_names_from_a_lease_are_parsed_without_fail(text: str) -> None:
    incarnation = parse_mark(text)
    assert incarnation is None or text == f"v1:{incarnation}" or text.startswith("v1:0")
    names = parse_names(text)
    assert len(names) <= MAX_NAMES


def test_one_beacon_names_at_most_max_per_beacon_nodes() -> None:
    names = [f"n{i:04d}" for i in range(MAX_PER_BEACON + 5)]
    book = book_of(on_due=lambda _n: None, group=["x"], incarnations={n: 7 for n in names})
    for name in names:  # each in a group of its own with "x" (no statement): no zone rule here
        ask(book, name)
    first = book.waiting()
    assert first == names[:MAX_PER_BEACON]
    book.issued(first, recorded_at=2.0, written_at=2.1)
    assert book.wanted.is_set() and book.waiting() == names[MAX_PER_BEACON:]


# -- the beacon that carries a challenge ----------------------------------------------------------------


async def test_a_waiting_challenge_gets_its_beacon_at_once_and_the_next_beacon_names_nobody() -> None:
    """BeaconIssuer on the in-memory API: a 5 s beacon period, yet the challenge's beacon is written
    within a fraction of a second, names the node, and its deadline runs from the write."""
    kube = FakeKube()
    verified = VerifiedEdge()
    now = [1000.0]
    due: list[str] = []
    book = book_of(on_due=due.append)
    issuer = BeaconIssuer(client=kube, verified=verified, clock=lambda: now[0], period_s=5.0,  # type: ignore[arg-type]
                          challenges=book)
    issuer.key = NodeKey.generate()
    task = asyncio.create_task(issuer.run())
    try:
        await _until(lambda: issuer.issued == 1)
        first = _annotations(kube)
        assert CHALLENGE_ANNOTATION not in first
        ask(book)
        await _until(lambda: issuer.issued == 2, timeout_s=1.0)  # not the 5 s period
        second = _annotations(kube)
        assert second[CHALLENGE_ANNOTATION] == "n1" and second[BEACON_ANNOTATION] != first[BEACON_ANNOTATION]
        assert due == ["n1"]
        snap = book.snapshot("n1", own=None, now=now[0])
        value = second[BEACON_ANNOTATION].split(".")[1]
        assert snap is not None and snap.issued_at == verified.beacons.issued_at(value) == 1000.0
        assert snap.deadline == 1002.0
        await issuer.issue()  # the next beacon: the challenge is issued, nobody waits
        assert CHALLENGE_ANNOTATION not in _annotations(kube)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _annotations(kube: FakeKube) -> dict[str, str]:
    return dict(kube.objects[("Lease", "edgewatch", BEACON_LEASE_NAME)]["metadata"]["annotations"])


async def _until(predicate: Callable[[], bool], timeout_s: float = 3.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.01)

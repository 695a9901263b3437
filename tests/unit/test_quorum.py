"""Tests of edgewatch.core.quorum: the vote rule, exhaustively for groups of
up to 5 nodes, and hypothesis properties for splits, expiry, non-members and
monotonicity."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgewatch.core.quorum import (
    MIN_TTL_PERIODS,
    Decision,
    Vote,
    VoteConfig,
    decide,
    decide_all,
    is_fresh,
    majority,
    validate_timing,
)
from edgewatch.core.types import Health, NodeName, Verdict

TTL = 5.0
NOW = 1000.0


def names(n: int) -> list[NodeName]:
    return [NodeName(f"n{i}") for i in range(n)]


def vote(observer: str, *, alive: set[str] = frozenset(), dead: set[str] = frozenset(), at: float = NOW) -> Vote:  # type: ignore[assignment]
    return Vote(
        observer=NodeName(observer),
        observed_at=at,
        alive=frozenset(NodeName(a) for a in alive),
        dead=frozenset(NodeName(d) for d in dead),
    )


def by_observer(*votes: Vote) -> dict[NodeName, Vote]:
    return {v.observer: v for v in votes}


# --------------------------------------------------------------------------- timing


def test_vote_config_defaults() -> None:
    cfg = VoteConfig()
    assert cfg.exchange_period_s == 1.0
    assert cfg.vote_ttl_s == 5.0
    assert cfg.vote_ttl_s >= MIN_TTL_PERIODS * cfg.exchange_period_s


@pytest.mark.parametrize(
    ("period", "ttl", "ok"),
    [
        (1.0, 3.0, True),
        (1.0, 5.0, True),
        (2.0, 6.0, True),
        (1.0, 2.99, False),
        (1.0, 1.0, False),  # SuperEdge: expiry == exchange period -> flapping
        (5.0, 5.0, False),
        (0.0, 5.0, False),
        (-1.0, 5.0, False),
        (1.0, math.inf, False),
        (math.nan, 5.0, False),
        (1.0, 0.0, False),
    ],
)
def test_validate_timing_table(period: float, ttl: float, ok: bool) -> None:
    if ok:
        validate_timing(exchange_period_s=period, vote_ttl_s=ttl)
        VoteConfig(exchange_period_s=period, vote_ttl_s=ttl)
    else:
        with pytest.raises(ValueError):
            validate_timing(exchange_period_s=period, vote_ttl_s=ttl)
        with pytest.raises(ValueError):
            VoteConfig(exchange_period_s=period, vote_ttl_s=ttl)


@pytest.mark.parametrize(("n", "m"), [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (1000, 501)])
def test_majority(n: int, m: int) -> None:
    assert majority(n) == m


@pytest.mark.parametrize("bad", [0, -1, 2.0, True])
def test_majority_refuses_nonsense(bad: object) -> None:
    with pytest.raises(ValueError):
        majority(bad)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- votes


def test_vote_cannot_see_a_node_alive_and_dead() -> None:
    with pytest.raises(ValueError):
        vote("a", alive={"b"}, dead={"b"})


@pytest.mark.parametrize("at", [math.nan, math.inf])
def test_vote_time_must_be_finite(at: float) -> None:
    with pytest.raises(ValueError):
        vote("a", at=at)


def test_vote_sets_must_be_frozensets() -> None:
    with pytest.raises(ValueError):
        Vote(observer=NodeName("a"), observed_at=0.0, alive={"a"}, dead=frozenset())  # type: ignore[arg-type]


def test_view_of() -> None:
    v = vote("a", alive={"a", "b"}, dead={"c"})
    assert v.view_of(NodeName("b")) is Health.ALIVE
    assert v.view_of(NodeName("c")) is Health.DEAD
    assert v.view_of(NodeName("d")) is Health.SUSPECT


@pytest.mark.parametrize(
    ("age", "fresh"), [(0.0, True), (TTL, True), (TTL + 1e-9, False), (-TTL, True), (-TTL - 1e-9, False), (100, False)]
)
def test_is_fresh_boundaries(age: float, fresh: bool) -> None:
    assert is_fresh(vote("a", at=NOW - age), now=NOW, vote_ttl_s=TTL) is fresh


# --------------------------------------------------------------------------- decide: tables


def test_four_of_five_see_it_alive() -> None:
    group = frozenset(names(5))
    votes = by_observer(*(vote(f"n{i}", alive={"n0"}) for i in range(4)), vote("n4", dead={"n0"}))
    d = decide(NodeName("n0"), group=group, votes=votes, now=NOW, vote_ttl_s=TTL)
    assert d == Decision(
        subject=NodeName("n0"), verdict=Verdict.HEALTHY, alive_count=4, dead_count=1, group_size=5, votes_counted=5
    )
    assert d.majority == 3
    assert d.message == "healthy: 4 of 5 peers see it alive, 1 dead, 0 no view (majority 3)"


def split_votes(sides: list[list[NodeName]], *, at: float = NOW) -> dict[NodeName, Vote]:
    """Each member sees its own side alive and every other side dead."""
    everyone = {n for side in sides for n in side}
    out = {}
    for side in sides:
        for m in side:
            out[m] = Vote(observer=m, observed_at=at, alive=frozenset(side), dead=frozenset(everyone - set(side)))
    return out


@pytest.mark.parametrize(
    ("sizes", "expected"),
    [
        ((3, 2), (Verdict.HEALTHY, Verdict.UNHEALTHY)),
        ((2, 2), (Verdict.UNKNOWN, Verdict.UNKNOWN)),
        ((4, 1), (Verdict.HEALTHY, Verdict.UNHEALTHY)),
        ((1, 1), (Verdict.UNKNOWN, Verdict.UNKNOWN)),
        ((2, 1), (Verdict.HEALTHY, Verdict.UNHEALTHY)),
        ((5, 5), (Verdict.UNKNOWN, Verdict.UNKNOWN)),
        ((6, 5), (Verdict.HEALTHY, Verdict.UNHEALTHY)),
    ],
)
def test_two_way_split_table(sizes: tuple[int, int], expected: tuple[Verdict, Verdict]) -> None:
    all_names = names(sum(sizes))
    sides = [all_names[: sizes[0]], all_names[sizes[0] :]]
    decisions = decide_all(group=frozenset(all_names), votes=split_votes(sides), now=NOW, vote_ttl_s=TTL)
    for side, verdict in zip(sides, expected):
        assert {decisions[m].verdict for m in side} == {verdict}


def test_three_way_split_without_a_majority_side_judges_everyone_unhealthy() -> None:
    """A consequence of the rule worth knowing: 3|2|2 — every node is seen
    dead by the other two sides, which together are a majority."""
    all_names = names(7)
    sides = [all_names[:3], all_names[3:5], all_names[5:]]
    decisions = decide_all(group=frozenset(all_names), votes=split_votes(sides), now=NOW, vote_ttl_s=TTL)
    # 3-side: 3 alive, 4 dead -> the majority (4) sees it dead
    assert {decisions[m].verdict for m in sides[0]} == {Verdict.UNHEALTHY}
    assert {decisions[m].verdict for m in sides[1] + sides[2]} == {Verdict.UNHEALTHY}


def test_single_node_group_is_healthy_on_its_own_vote_and_unknown_without() -> None:
    g = frozenset({NodeName("solo")})
    assert decide(NodeName("solo"), group=g, votes=by_observer(vote("solo", alive={"solo"})), now=NOW, vote_ttl_s=TTL).verdict is Verdict.HEALTHY
    assert decide(NodeName("solo"), group=g, votes={}, now=NOW, vote_ttl_s=TTL).verdict is Verdict.UNKNOWN
    assert decide(NodeName("solo"), group=g, votes=by_observer(vote("solo", dead={"solo"})), now=NOW, vote_ttl_s=TTL).verdict is Verdict.UNHEALTHY


def test_majority_is_of_the_group_not_of_votes_received() -> None:
    group = frozenset(names(5))
    # only two votes arrive, both say alive: 2 of 5 is not a majority
    votes = by_observer(vote("n0", alive={"n0"}), vote("n1", alive={"n0"}))
    d = decide(NodeName("n0"), group=group, votes=votes, now=NOW, vote_ttl_s=TTL)
    assert d.verdict is Verdict.UNKNOWN
    assert d.message == "unknown: 2 of 5 peers see it alive, 0 dead, 3 no view (majority 3)"


def test_expired_and_future_votes_do_not_count() -> None:
    group = frozenset(names(3))
    votes = by_observer(
        vote("n0", alive={"n0"}, at=NOW - TTL - 0.1),
        vote("n1", alive={"n0"}, at=NOW + TTL + 0.1),
        vote("n2", alive={"n0"}),
    )
    d = decide(NodeName("n0"), group=group, votes=votes, now=NOW, vote_ttl_s=TTL)
    assert (d.alive_count, d.votes_counted, d.verdict) == (1, 1, Verdict.UNKNOWN)


def test_non_member_votes_do_not_count() -> None:
    group = frozenset(names(3))
    votes = by_observer(vote("n0", dead={"n1"}), vote("x1", dead={"n1"}), vote("x2", dead={"n1"}))
    d = decide(NodeName("n1"), group=group, votes=votes, now=NOW, vote_ttl_s=TTL)
    assert (d.dead_count, d.verdict) == (1, Verdict.UNKNOWN)


def test_subject_must_be_in_group() -> None:
    with pytest.raises(ValueError):
        decide(NodeName("zz"), group=frozenset(names(3)), votes={}, now=NOW, vote_ttl_s=TTL)
    with pytest.raises(ValueError):
        decide(NodeName("zz"), group=frozenset(), votes={}, now=NOW, vote_ttl_s=TTL)


def test_votes_must_be_keyed_by_observer() -> None:
    with pytest.raises(ValueError):
        decide(NodeName("n0"), group=frozenset(names(2)), votes={NodeName("n1"): vote("n0")}, now=NOW, vote_ttl_s=TTL)


@pytest.mark.parametrize(("now", "ttl"), [(math.nan, TTL), (NOW, 0.0), (NOW, -1.0), (NOW, math.inf), (math.inf, TTL)])
def test_bad_time_arguments(now: float, ttl: float) -> None:
    with pytest.raises(ValueError):
        decide(NodeName("n0"), group=frozenset(names(2)), votes={}, now=now, vote_ttl_s=ttl)
    with pytest.raises(ValueError):
        decide_all(group=frozenset(names(2)), votes={}, now=now, vote_ttl_s=ttl)


def test_decide_all_of_empty_group() -> None:
    assert decide_all(group=frozenset(), votes={}, now=NOW, vote_ttl_s=TTL) == {}


# --------------------------------------------------------------------------- exhaustive

VIEWS = ("alive", "dead", "abstain", "none", "expired", "outsider")


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_exhaustive_views_of_one_subject(n: int) -> None:
    """Every combination of what each member's vote says about the subject,
    including no vote and an expired vote, plus an outsider's vote."""
    members = names(n)
    group = frozenset(members)
    subject = members[0]
    for combo in itertools.product(VIEWS[:5], repeat=n):
        for outsider in ("alive", "dead"):
            votes: dict[NodeName, Vote] = {}
            for m, view in zip(members, combo):
                if view == "none":
                    continue
                at = NOW - TTL - 1 if view == "expired" else NOW
                alive = {subject} if view in ("alive", "expired") else set()
                dead = {subject} if view == "dead" else set()
                votes[m] = Vote(observer=m, observed_at=at, alive=frozenset(alive), dead=frozenset(dead))
            votes[NodeName("outsider")] = Vote(
                observer=NodeName("outsider"),
                observed_at=NOW,
                alive=frozenset({subject}) if outsider == "alive" else frozenset(),
                dead=frozenset({subject}) if outsider == "dead" else frozenset(),
            )
            d = decide(subject, group=group, votes=votes, now=NOW, vote_ttl_s=TTL)
            alive_n = combo.count("alive")
            dead_n = combo.count("dead")
            assert (d.alive_count, d.dead_count, d.group_size) == (alive_n, dead_n, n)
            assert d.votes_counted == alive_n + dead_n + combo.count("abstain")
            if 2 * alive_n > n:
                assert d.verdict is Verdict.HEALTHY
            elif 2 * dead_n > n:
                assert d.verdict is Verdict.UNHEALTHY
            else:
                assert d.verdict is Verdict.UNKNOWN
            assert d.message.startswith(f"{d.verdict.value}: {alive_n} of {n} peers see it alive, {dead_n} dead")


# --------------------------------------------------------------------------- properties

VIEW_CHOICES = st.sampled_from([Health.ALIVE, Health.DEAD, Health.SUSPECT])


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[frozenset[NodeName], dict[NodeName, Vote]]:
    n = draw(st.integers(1, 9))
    members = names(n)
    votes: dict[NodeName, Vote] = {}
    for m in members:
        if not draw(st.booleans()):
            continue
        views = {s: draw(VIEW_CHOICES) for s in members}
        at = draw(st.floats(NOW - 2 * TTL, NOW + 2 * TTL))
        votes[m] = Vote(
            observer=m,
            observed_at=at,
            alive=frozenset(s for s, h in views.items() if h is Health.ALIVE),
            dead=frozenset(s for s, h in views.items() if h is Health.DEAD),
        )
    return frozenset(members), votes


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_never_both_healthy_and_unhealthy_and_counts_bounded(sc: tuple[frozenset[NodeName], dict[NodeName, Vote]]) -> None:
    group, votes = sc
    for subject, d in decide_all(group=group, votes=votes, now=NOW, vote_ttl_s=TTL).items():
        assert d.alive_count + d.dead_count <= d.votes_counted <= len(group)
        healthy = 2 * d.alive_count > len(group)
        unhealthy = 2 * d.dead_count > len(group)
        assert not (healthy and unhealthy)
        assert (d.verdict is Verdict.HEALTHY) == healthy
        assert (d.verdict is Verdict.UNHEALTHY) == unhealthy
        assert d == decide(subject, group=group, votes=votes, now=NOW, vote_ttl_s=TTL)


@st.composite
def splits(draw: st.DrawFn) -> tuple[list[list[NodeName]], set[NodeName]]:
    n = draw(st.integers(1, 12))
    members = names(n)
    k = draw(st.integers(1, min(4, n)))
    labels = [draw(st.integers(0, k - 1)) for _ in members]
    sides = [[m for m, lab in zip(members, labels) if lab == i] for i in range(k)]
    sides = [s for s in sides if s]
    silent = set(draw(st.lists(st.sampled_from(members), unique=True)))
    return sides, silent


@settings(max_examples=300, deadline=None)
@given(splits())
def test_split_brain_guarantees(sp: tuple[list[list[NodeName]], set[NodeName]]) -> None:
    """Each side sees exactly itself alive and the rest dead; any members may
    be silent. A strict-majority side is never UNHEALTHY; a side that is not a
    strict majority is never HEALTHY; with everyone voting, a strictly larger
    side of a two-way split is HEALTHY and the other UNHEALTHY."""
    sides, silent = sp
    everyone = [m for side in sides for m in side]
    group = frozenset(everyone)
    votes = {m: v for m, v in split_votes(sides).items() if m not in silent}
    decisions = decide_all(group=group, votes=votes, now=NOW, vote_ttl_s=TTL)
    for side in sides:
        strict_majority = 2 * len(side) > len(group)
        for m in side:
            if strict_majority:
                assert decisions[m].verdict is not Verdict.UNHEALTHY
            else:
                assert decisions[m].verdict is not Verdict.HEALTHY
    if len(sides) == 2 and not silent:
        big, small = sorted(sides, key=len, reverse=True)
        if len(big) > len(small):
            assert {decisions[m].verdict for m in big} == {Verdict.HEALTHY}
            assert {decisions[m].verdict for m in small} == {Verdict.UNHEALTHY}
        else:
            assert {d.verdict for d in decisions.values()} == {Verdict.UNKNOWN}


@settings(max_examples=300, deadline=None)
@given(scenarios(), st.floats(0.001, 1e6), st.booleans())
def test_expired_votes_never_count(sc: tuple[frozenset[NodeName], dict[NodeName, Vote]], extra: float, future: bool) -> None:
    group, votes = sc
    fresh = {m: v for m, v in votes.items() if is_fresh(v, now=NOW, vote_ttl_s=TTL)}
    base = decide_all(group=group, votes=fresh, now=NOW, vote_ttl_s=TTL)
    # replace the missing ones by arbitrary expired votes
    polluted = dict(fresh)
    for m in group - set(fresh):
        at = NOW + TTL + extra if future else NOW - TTL - extra
        polluted[m] = Vote(observer=m, observed_at=at, alive=frozenset(), dead=frozenset(group))
    assert decide_all(group=group, votes=polluted, now=NOW, vote_ttl_s=TTL) == base


@settings(max_examples=300, deadline=None)
@given(scenarios(), st.lists(st.text("abcxyz", min_size=1, max_size=4), max_size=5))
def test_non_member_votes_change_nothing(sc: tuple[frozenset[NodeName], dict[NodeName, Vote]], outsiders: list[str]) -> None:
    group, votes = sc
    base = decide_all(group=group, votes=votes, now=NOW, vote_ttl_s=TTL)
    more = dict(votes)
    for o in outsiders:
        name = NodeName("out-" + o)
        more[name] = Vote(observer=name, observed_at=NOW, alive=frozenset(), dead=frozenset(group))
    assert decide_all(group=group, votes=more, now=NOW, vote_ttl_s=TTL) == base


RANK = {Verdict.UNHEALTHY: 0, Verdict.UNKNOWN: 1, Verdict.HEALTHY: 2}


@settings(max_examples=300, deadline=None)
@given(scenarios(), st.data())
def test_monotonicity(sc: tuple[frozenset[NodeName], dict[NodeName, Vote]], data: st.DataObject) -> None:
    """Moving one observer's view of S up (dead -> suspect -> alive) never
    moves S's verdict down (UNHEALTHY < UNKNOWN < HEALTHY); in particular
    HEALTHY stays HEALTHY when a dead view becomes alive."""
    group, votes = sc
    if not votes:
        return
    observer = data.draw(st.sampled_from(sorted(votes)))
    subject = data.draw(st.sampled_from(sorted(group)))
    v = votes[observer]
    before = decide(subject, group=group, votes=votes, now=NOW, vote_ttl_s=TTL)
    if subject in v.dead:
        target = data.draw(st.sampled_from([Health.SUSPECT, Health.ALIVE]))
    elif subject not in v.alive:
        target = Health.ALIVE
    else:
        return
    alive = v.alive | {subject} if target is Health.ALIVE else v.alive
    improved = Vote(observer=v.observer, observed_at=v.observed_at, alive=alive, dead=v.dead - {subject})
    after = decide(subject, group=group, votes={**votes, observer: improved}, now=NOW, vote_ttl_s=TTL)
    assert RANK[after.verdict] >= RANK[before.verdict]
    if before.verdict is Verdict.HEALTHY:
        assert after.verdict is Verdict.HEALTHY


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_verdict_depends_only_on_counts_not_names(sc: tuple[frozenset[NodeName], dict[NodeName, Vote]]) -> None:
    group, votes = sc
    rename = {m: NodeName(f"z{len(group) - i}") for i, m in enumerate(sorted(group))}
    renamed = {
        rename[m]: Vote(
            observer=rename[m],
            observed_at=v.observed_at,
            alive=frozenset(rename[a] for a in v.alive),
            dead=frozenset(rename[d] for d in v.dead),
        )
        for m, v in votes.items()
    }
    a = decide_all(group=group, votes=votes, now=NOW, vote_ttl_s=TTL)
    b = decide_all(group=frozenset(rename.values()), votes=renamed, now=NOW, vote_ttl_s=TTL)
    for m in group:
        x, y = a[m], b[rename[m]]
        assert (x.verdict, x.alive_count, x.dead_count, x.votes_counted) == (y.verdict, y.alive_count, y.dead_count, y.votes_counted)

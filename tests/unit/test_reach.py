"""Tests of edgewatch.core.reach: the strict-majority rule over who reaches a node, for full meshes
(equal to the direct count of edgewatch.core.quorum) and K-ring groups up to 1,000, including one
lying member."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgewatch.core.quorum import Vote, decide_all
from edgewatch.core.reach import components, decide_reach, linked_members
from edgewatch.core.topology import neighbours
from edgewatch.core.types import NodeName, Verdict

TTL = 5.0
NOW = 100.0


def group(n: int) -> list[NodeName]:
    return [NodeName(f"e{i:04d}") for i in range(n)]


def partition_votes(members: list[NodeName], side_of: dict[NodeName, int], *, dead: set[NodeName],
                    silent: set[NodeName], ring: dict[NodeName, frozenset[NodeName]],
                    claims_dead: bool = True) -> dict[NodeName, Vote]:
    """Votes of a clean partition: every live member with a delivered statement names its neighbours
    on its own side alive (and itself), the others (other sides, dead nodes) dead."""
    votes = {}
    for m in members:
        if m in dead or m in silent:
            continue
        near = ring[m]
        alive = {p for p in near if p not in dead and side_of[p] == side_of[m]} | {m}
        gone = {p for p in near if p not in alive} if claims_dead else set()
        votes[m] = Vote(observer=m, observed_at=NOW, alive=frozenset(alive), dead=frozenset(gone))
    return votes


@st.composite
def full_mesh_case(draw: st.DrawFn) -> tuple[list[NodeName], dict[NodeName, int], set[NodeName], set[NodeName]]:
    n = draw(st.integers(min_value=1, max_value=7))
    members = group(n)
    sides = draw(st.lists(st.integers(min_value=0, max_value=2), min_size=n, max_size=n))
    dead = {m for m, d in zip(members, draw(st.lists(st.booleans(), min_size=n, max_size=n))) if d}
    silent = {m for m, s in zip(members, draw(st.lists(st.booleans(), min_size=n, max_size=n))) if s} - dead
    return members, dict(zip(members, sides)), dead, silent


@settings(max_examples=400, deadline=None)
@given(case=full_mesh_case())
def test_full_mesh_equals_the_direct_count(case) -> None:  # type: ignore[no-untyped-def]
    members, side_of, dead, silent = case
    ring = dict(neighbours(members))
    votes = partition_votes(members, side_of, dead=dead, silent=silent, ring=ring)
    g = frozenset(members)
    direct = decide_all(group=g, votes=votes, now=NOW, vote_ttl_s=TTL)
    reached = decide_reach(group=g, votes=votes, now=NOW, vote_ttl_s=TTL, ring=ring)
    assert {m: d.verdict for m, d in reached.items()} == {m: d.verdict for m, d in direct.items()}


@st.composite
def ring_case(draw: st.DrawFn) -> tuple[list[NodeName], dict[NodeName, int]]:
    n = draw(st.integers(min_value=8, max_value=80))
    members = group(n)
    rng = random.Random(draw(st.integers(min_value=0, max_value=2**32)))
    sides = draw(st.integers(min_value=2, max_value=3))
    side_of = {m: rng.randrange(sides) for m in members}
    return members, side_of


@settings(max_examples=200, deadline=None)
@given(case=ring_case(), claims_dead=st.booleans())
def test_a_side_of_at_least_half_is_never_unhealthy(case, claims_dead: bool) -> None:  # type: ignore[no-untyped-def]
    members, side_of = case
    ring = dict(neighbours(members))
    votes = partition_votes(members, side_of, dead=set(), silent=set(), ring=ring, claims_dead=claims_dead)
    n = len(members)
    out = decide_reach(group=frozenset(members), votes=votes, now=NOW, vote_ttl_s=TTL, ring=ring)
    root = components(group=frozenset(members), fresh=votes, ring=ring)
    for m in members:
        side = [p for p in members if side_of[p] == side_of[m]]
        if 2 * len(side) >= n:
            assert out[m].verdict is not Verdict.UNHEALTHY
        if 2 * len(side) > n and len({root.get(p, p) for p in side}) == 1:
            assert out[m].verdict is Verdict.HEALTHY
        if not claims_dead:
            assert out[m].verdict is not Verdict.UNHEALTHY  # no evidence of death: only abstentions
        assert out[m].alive_count + out[m].dead_count <= n


@pytest.mark.parametrize("n", [4, 50, 1000])
def test_an_even_split_decides_nothing(n: int) -> None:
    members = group(n)
    side_of = {m: i % 2 for i, m in enumerate(members)}
    ring = dict(neighbours(members))
    votes = partition_votes(members, side_of, dead=set(), silent=set(), ring=ring)
    out = decide_reach(group=frozenset(members), votes=votes, now=NOW, vote_ttl_s=TTL, ring=ring)
    assert {d.verdict for d in out.values()} == {Verdict.UNKNOWN}


@pytest.mark.parametrize("n", [5, 25, 200, 1000])
def test_a_dead_node_is_unhealthy_and_a_silent_live_one_is_not(n: int) -> None:
    members = group(n)
    ring = dict(neighbours(members))
    victim, cut_off = members[0], members[-1]
    votes = partition_votes(members, dict.fromkeys(members, 0), dead={victim}, silent={cut_off}, ring=ring)
    out = decide_reach(group=frozenset(members), votes=votes, now=NOW, vote_ttl_s=TTL, ring=ring)
    assert out[victim].verdict is Verdict.UNHEALTHY
    assert out[cut_off].verdict is Verdict.HEALTHY  # its neighbours reach it: attached
    assert all(out[m].verdict is Verdict.HEALTHY for m in members[1:])


def test_stale_and_foreign_votes_do_not_count() -> None:
    members = group(5)
    ring = dict(neighbours(members))
    votes = partition_votes(members, dict.fromkeys(members, 0), dead=set(), silent=set(), ring=ring)
    stale = {m: Vote(observer=m, observed_at=NOW - 2 * TTL, alive=v.alive, dead=v.dead) for m, v in votes.items()}
    out = decide_reach(group=frozenset(members), votes=stale, now=NOW, vote_ttl_s=TTL)
    assert {d.verdict for d in out.values()} == {Verdict.UNKNOWN}
    assert all(d.votes_counted == 0 for d in out.values())
    with pytest.raises(ValueError):
        decide_reach(group=frozenset(members), votes={members[0]: votes[members[1]]}, now=NOW, vote_ttl_s=TTL)


@settings(max_examples=300, deadline=None)
@given(n=st.integers(min_value=1, max_value=12), data=st.data())
def test_counts_never_exceed_the_fresh_statements(n: int, data: st.DataObject) -> None:
    members = group(n)
    votes = {}
    for m in members:
        if data.draw(st.booleans()):
            claims = data.draw(st.lists(st.sampled_from([None, True, False]), min_size=n, max_size=n))
            alive = frozenset(p for p, c in zip(members, claims) if c is True)
            dead = frozenset(p for p, c in zip(members, claims) if c is False)
            votes[m] = Vote(observer=m, observed_at=NOW, alive=alive, dead=dead)
    out = decide_reach(group=frozenset(members), votes=votes, now=NOW, vote_ttl_s=TTL)
    for d in out.values():
        assert 0 <= d.alive_count and 0 <= d.dead_count
        assert d.alive_count + d.dead_count <= len(votes)
        assert not (2 * d.alive_count > n and 2 * d.dead_count > n)


@settings(max_examples=150, deadline=None)
@given(n=st.integers(min_value=5, max_value=120), liar_at=st.integers(min_value=0, max_value=10**6),
       victim_at=st.integers(min_value=0, max_value=10**6), data=st.data())
def test_one_liar_cannot_flip_a_verdict(n: int, liar_at: int, victim_at: int, data: st.DataObject) -> None:
    members = group(n)
    ring = dict(neighbours(members))
    liar, victim = members[liar_at % n], members[victim_at % n]
    if liar == victim:
        return
    votes = partition_votes(members, dict.fromkeys(members, 0), dead={victim}, silent=set(), ring=ring)
    honest_witnesses = [p for p in ring[victim] if p != liar]
    # The liar says anything at all about anyone.
    claims = data.draw(st.lists(st.sampled_from([None, True, False]), min_size=n, max_size=n))
    votes[liar] = Vote(observer=liar, observed_at=NOW,
                       alive=frozenset(p for p, c in zip(members, claims) if c is True),
                       dead=frozenset(p for p, c in zip(members, claims) if c is False))
    out = decide_reach(group=frozenset(members), votes=votes, now=NOW, vote_ttl_s=TTL, ring=ring)
    for m in members:
        if m not in (liar, victim):
            assert out[m].verdict is Verdict.HEALTHY, out[m].message
    if len(honest_witnesses) >= 2:
        assert out[victim].verdict is not Verdict.HEALTHY


@settings(max_examples=100, deadline=None)
@given(case=ring_case(), data=st.data())
def test_deciding_on_some_subjects_gives_their_full_count(case, data: st.DataObject) -> None:  # type: ignore[no-untyped-def]
    members, side_of = case
    ring = dict(neighbours(members))
    silent = set(data.draw(st.lists(st.sampled_from(members), max_size=len(members) // 2)))
    votes = partition_votes(members, side_of, dead=set(), silent=silent, ring=ring)
    subjects = data.draw(st.sets(st.sampled_from(members), max_size=6))
    every = decide_reach(group=frozenset(members), votes=votes, now=NOW, vote_ttl_s=TTL, ring=ring)
    some = decide_reach(group=frozenset(members), votes=votes, now=NOW, vote_ttl_s=TTL, ring=ring,
                        subjects=subjects | {NodeName("not-a-member")})
    assert some == {s: every[s] for s in subjects}


@pytest.mark.parametrize("n", [25, 200])
def test_one_dead_claim_does_not_make_a_whole_component_vote_dead(n: int) -> None:
    """A node without a statement of its own, which one neighbour names dead and the others do not
    name at all (suspect), gets one dead vote, not the whole group's; a second claimant decides."""
    members = group(n)
    ring = dict(neighbours(members))
    x = members[0]
    votes = partition_votes(members, dict.fromkeys(members, 0), dead=set(), silent={x}, ring=ring)
    near = sorted(ring[x])
    for i, o in enumerate(near):  # the neighbours abstain on x ...
        dead = frozenset({x}) if i < 1 else frozenset()  # ... but one names it dead
        votes[o] = Vote(observer=o, observed_at=NOW, alive=votes[o].alive - {x}, dead=dead)
    out = decide_reach(group=frozenset(members), votes=votes, now=NOW, vote_ttl_s=TTL, ring=ring)
    assert out[x].verdict is Verdict.UNKNOWN and out[x].dead_count == 1
    o = near[1]
    votes[o] = Vote(observer=o, observed_at=NOW, alive=votes[o].alive, dead=frozenset({x}))
    out = decide_reach(group=frozenset(members), votes=votes, now=NOW, vote_ttl_s=TTL, ring=ring)
    assert out[x].verdict is Verdict.UNHEALTHY and out[x].dead_count == n - 1


@settings(max_examples=150, deadline=None)
@given(n=st.integers(min_value=5, max_value=120), liar_at=st.integers(min_value=0, max_value=10**6),
       victim_at=st.integers(min_value=0, max_value=10**6), died=st.floats(min_value=0.5, max_value=TTL - 0.5))
def test_a_dead_nodes_own_last_statement_and_one_liar_do_not_keep_it_in(n: int, liar_at: int, victim_at: int,
                                                                     died: float) -> None:
    """The victim died ``died`` seconds ago: its own last statement (naming its neighbours alive)
    is still fresh, the neighbours' newer statements name it dead, one liar keeps naming it alive.
    Its own older word is superseded by what its neighbours saw since: it is not linked, one liar
    cannot attach it, and it is never HEALTHY."""
    members = group(n)
    ring = dict(neighbours(members))
    liar, victim = members[liar_at % n], members[victim_at % n]
    if liar == victim or len([p for p in ring[victim] if p != liar]) < 2:
        return
    votes = partition_votes(members, dict.fromkeys(members, 0), dead={victim}, silent=set(), ring=ring)
    votes[victim] = Vote(observer=victim, observed_at=NOW - died, alive=ring[victim] | {victim}, dead=frozenset())
    votes[liar] = Vote(observer=liar, observed_at=NOW, alive=votes[liar].alive | {victim},
                       dead=votes[liar].dead - {victim})
    out = decide_reach(group=frozenset(members), votes=votes, now=NOW, vote_ttl_s=TTL, ring=ring)
    # UNHEALTHY once three honest neighbours name it dead after it last spoke; with only two, one
    # liar naming it alive leaves it UNKNOWN (a live node with one lossy link and a liar looks the
    # same); a liar that is no ring neighbour of the victim is not even heard about it
    honest = [p for p in ring[victim] if p != liar]
    expected = Verdict.UNKNOWN if liar in ring[victim] and len(honest) <= 2 else Verdict.UNHEALTHY
    assert out[victim].verdict is expected, out[victim].message
    assert all(out[m].verdict is Verdict.HEALTHY for m in members if m != victim)
    truthful = {**votes, liar: Vote(observer=liar, observed_at=NOW, alive=votes[liar].alive - {victim},
                                    dead=votes[liar].dead | {victim})}
    out = decide_reach(group=frozenset(members), votes=truthful, now=NOW, vote_ttl_s=TTL, ring=ring)
    assert out[victim].verdict is Verdict.UNHEALTHY, out[victim].message  # no liar: failed at once


@settings(max_examples=150, deadline=None)
@given(n=st.integers(min_value=5, max_value=60), victim_at=st.integers(min_value=0, max_value=10**6),
       data=st.data())
def test_a_live_nodes_statement_is_superseded_only_by_a_majority_of_its_neighbours(
        n: int, victim_at: int, data: st.DataObject) -> None:
    """A live node whose links to some neighbours are lossy: those name it dead in statements newer
    than its own. While at least two neighbours still name it alive (or fewer than two name it
    dead), its own statement keeps it linked and HEALTHY, as before."""
    members = group(n)
    ring = dict(neighbours(members))
    victim = members[victim_at % n]
    near = sorted(ring[victim])
    lossy = set(data.draw(st.lists(st.sampled_from(near), unique=True, max_size=len(near))))
    if len(lossy) >= 2 and len(near) - len(lossy) < 2:
        return  # fewer than two neighbours still reach it: superseded (previous test)
    votes = partition_votes(members, dict.fromkeys(members, 0), dead=set(), silent=set(), ring=ring)
    votes[victim] = Vote(observer=victim, observed_at=NOW - 1.0, alive=ring[victim] | {victim}, dead=frozenset())
    for o in lossy:
        votes[o] = Vote(observer=o, observed_at=NOW, alive=votes[o].alive - {victim}, dead=votes[o].dead | {victim})
    out = decide_reach(group=frozenset(members), votes=votes, now=NOW, vote_ttl_s=TTL, ring=ring)
    assert out[victim].verdict is Verdict.HEALTHY, out[victim].message


def _v(observer: str, at: float, *, alive: set[str], dead: set[str] = frozenset()) -> Vote:  # type: ignore[assignment]
    return Vote(observer=NodeName(observer), observed_at=at, alive=frozenset(map(NodeName, alive)),
                dead=frozenset(map(NodeName, dead)))


@pytest.mark.parametrize("n", [50, 1000])
@pytest.mark.parametrize("liar_statement", ["names-itself-dead", "withheld"])
def test_a_liar_without_edges_cannot_bridge_a_dead_node_back_in(n: int, liar_statement: str) -> None:
    """A liar among a dead node's neighbours keeps answering its peers (they name it alive) but
    publishes a statement naming itself dead, or none: it is attached by its witnesses, and the
    dead node's superseded statement (naming the liar alive) must not be one of them, or the
    attachment would glue the dead node to the majority. (Found by a red team of this rule.)"""
    members = group(n)
    ring = dict(neighbours(members))
    dead_node = members[0]
    liar = sorted(ring[dead_node])[0]
    votes = {}
    for m in members:
        if m == dead_node:
            votes[m] = Vote(observer=m, observed_at=NOW - 5, alive=ring[m] | {m}, dead=frozenset())
            continue
        alive, dead = set(ring[m]) | {m}, set()
        if dead_node in ring[m]:
            alive.discard(dead_node)
            dead.add(dead_node)
        if m == liar:
            if liar_statement == "withheld":
                continue
            alive.discard(m)
            dead.add(m)
        votes[m] = Vote(observer=m, observed_at=NOW, alive=frozenset(alive), dead=frozenset(dead))
    out = decide_reach(group=frozenset(members), votes=votes, now=NOW, vote_ttl_s=30.0, ring=ring,
                       subjects=[dead_node])
    assert out[dead_node].verdict is Verdict.UNHEALTHY, out[dead_node].message


def test_one_liar_and_one_lossy_link_do_not_make_a_live_node_unhealthy() -> None:
    """Group of 4: live v's link to h1 is broken (h1 names it dead, newest beacon), h2 names it
    alive (an older beacon), the liar names it dead at the newest beacon. Not UNHEALTHY (the direct
    count is an even 2|2). (Found by a red team of this rule.)"""
    votes = [
        _v("v", 95, alive={"v", "h1", "h2", "l"}),
        _v("h1", 100, alive={"h1", "h2", "l"}, dead={"v"}),
        _v("h2", 90, alive={"h2", "h1", "l", "v"}),
        _v("l", 100, alive={"l", "h1", "h2"}, dead={"v"}),
    ]
    members = frozenset(NodeName(x) for x in ("h1", "h2", "l", "v"))
    out = decide_reach(group=members, votes={v.observer: v for v in votes}, now=100.0, vote_ttl_s=30.0)
    assert out[NodeName("v")].verdict is not Verdict.UNHEALTHY, out[NodeName("v")].message


def test_one_liar_does_not_tip_a_ring_nodes_tie_of_lossy_links() -> None:
    """Group of 50: of live v's six neighbours two have broken links (dead), two name it alive, one
    abstains, and the liar names it dead at the newest beacon: v stays HEALTHY. (Red team.)"""
    members = group(50)
    ring = dict(neighbours(members))
    v = next(x for x in sorted(ring) if len(ring[x]) == 6)
    liar, d1, d2, _a1, _a2, s1 = sorted(ring[v])
    votes = {}
    for m in members:
        alive, dead = set(ring[m]) | {m}, set()
        if m == v:
            votes[m] = Vote(observer=m, observed_at=95.0, alive=frozenset(alive), dead=frozenset())
            continue
        if m in (d1, d2, liar):
            alive.discard(v)
            dead.add(v)
        if m == s1:
            alive.discard(v)
        votes[m] = Vote(observer=m, observed_at=100.0, alive=frozenset(alive), dead=frozenset(dead))
    out = decide_reach(group=frozenset(members), votes=votes, now=100.0, vote_ttl_s=30.0, ring=ring)
    assert out[v].verdict is Verdict.HEALTHY, out[v].message
    assert all(out[m].verdict is Verdict.HEALTHY for m in members)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(min_value=10, max_value=100), seed=st.integers(min_value=0, max_value=10**6))
def test_a_clean_partitions_newer_minority_statements_supersede_no_one(n: int, seed: int) -> None:
    """A clean partition whose smaller side's statements carry a newer beacon than the bigger
    side's: their dead claims across the cut are evidence of the cut, not of deaths, so every
    member of a ring-connected side of more than n/2 stays HEALTHY. (Red team.)"""
    members = group(n)
    ring = dict(neighbours(members))
    bigger = set(random.Random(seed).sample(members, n // 2 + 1 + n // 10))
    todo, seen = [min(bigger)], {min(bigger)}
    while todo:
        for y in ring[todo.pop()] & bigger - seen:
            seen.add(y)
            todo.append(y)
    if seen != bigger:
        return  # not ring-connected: the guarantee does not apply
    votes = {}
    for m in members:
        same = {p for p in ring[m] if (p in bigger) == (m in bigger)}
        votes[m] = Vote(observer=m, observed_at=95.0 if m in bigger else 100.0, alive=frozenset(same | {m}),
                        dead=frozenset(ring[m] - same))
    out = decide_reach(group=frozenset(members), votes=votes, now=100.0, vote_ttl_s=30.0, ring=ring)
    assert all(out[m].verdict is Verdict.HEALTHY for m in bigger), \
        [out[m].message for m in bigger if out[m].verdict is not Verdict.HEALTHY]


def test_a_liar_cannot_move_a_dead_claimant_across_a_cut_to_keep_a_dead_node_linked() -> None:
    """Rings of 2 over six nodes: dead n01's honest neighbours are n02 (still suspect), n03 and
    n05 (both name it dead); n05's only other neighbour is the liar n04, which names n05 dead to
    cut it off. n05's claim still supersedes n01's statement (n01's statement names n05 alive):
    not HEALTHY. (Found by a second red team of this rule.)"""
    members = [NodeName(f"n{i:02d}") for i in range(6)]
    ring = dict(neighbours(members, k=2))
    assert ring[NodeName("n05")] == frozenset({"n01", "n04"})  # the topology the attack needs
    votes = [
        _v("n00", 100, alive={"n00", "n02", "n03", "n04"}),
        _v("n01", 70, alive={"n01", "n02", "n03", "n05"}),
        _v("n02", 100, alive={"n00", "n02", "n03"}),
        _v("n03", 100, alive={"n00", "n02", "n03", "n04"}, dead={"n01"}),
        _v("n05", 100, alive={"n04", "n05"}, dead={"n01"}),
        _v("n04", 100, alive={"n00", "n03", "n04"}, dead={"n05"}),  # the liar
    ]
    out = decide_reach(group=frozenset(members), votes={v.observer: v for v in votes}, now=100.0, vote_ttl_s=30.0,
                       ring=ring)
    assert out[NodeName("n01")].verdict is not Verdict.HEALTHY, out[NodeName("n01")].message


@settings(max_examples=200, deadline=None)
@given(n=st.integers(min_value=6, max_value=60), data=st.data())
def test_claims_a_statement_does_not_confirm_never_supersede_it(n: int, data: st.DataObject) -> None:
    """A member whose own statement names none of the neighbours that call it dead alive (a live
    node across a cut, looking at the other side) keeps its edges, whatever the ages, so a
    partition with stalled statements on one side supersedes no one. (Second red team: a stalled
    pre-partition statement merged both sides' components and let the other side's claims count.)"""
    members = group(n)
    ring = dict(neighbours(members))
    x = members[data.draw(st.integers(min_value=0, max_value=n - 1))]
    near = sorted(ring[x])
    claimants = set(data.draw(st.lists(st.sampled_from(near), unique=True, min_size=2, max_size=len(near))))
    votes = {m: Vote(observer=m, observed_at=80.0 + data.draw(st.integers(min_value=0, max_value=20)),
                     alive=ring[m] | {m}, dead=frozenset()) for m in members}
    votes[x] = Vote(observer=x, observed_at=80.0, alive=frozenset({x} | (set(near) - claimants)),
                    dead=frozenset(claimants))
    for o in claimants:
        votes[o] = Vote(observer=o, observed_at=100.0, alive=votes[o].alive - {x}, dead=frozenset({x}))
    assert x in linked_members(fresh=votes, ring=ring)

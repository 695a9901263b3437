"""Duties (who carries a cut-off node) and the rendezvous choice behind them: the cut-off node names
its carrier; exhaustive small cases and hypothesis properties."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from edgewatch.core.assign import choose
from edgewatch.core.duties import PeerReport, assign_duties, choose_carrier
from edgewatch.core.types import NodeName, Verdict

NAMES = [NodeName(f"n-{i}") for i in range(1, 8)]
UP = PeerReport(cloud_ok=True, kubelet_ok=True)


def cut(carrier: str = "") -> PeerReport:
    return PeerReport(cloud_ok=False, kubelet_ok=True, carrier=carrier)


def test_choose_is_deterministic_and_none_for_no_candidates() -> None:
    assert choose(subject="x", candidates=[]) is None
    assert choose(subject="x", candidates=NAMES) == choose(subject="x", candidates=list(reversed(NAMES)))


@given(st.sets(st.sampled_from(NAMES), min_size=2), st.sampled_from(NAMES))
def test_removing_the_chosen_moves_only_its_subjects(candidates: set, subject: str) -> None:  # type: ignore[type-arg]
    chosen = choose(subject=subject, candidates=candidates)
    other = next(c for c in candidates if c != chosen)
    # Removing a candidate that was not chosen never changes the choice (minimal disruption).
    assert choose(subject=subject, candidates=candidates - {other}) == chosen


@settings(max_examples=300)
@given(reachable=st.sets(st.sampled_from(NAMES[1:])), data=st.data())
def test_a_cut_off_node_names_one_able_reachable_carrier(reachable: set, data) -> None:  # type: ignore[no-untyped-def,type-arg]
    me = NAMES[0]
    reports = {m: data.draw(st.sampled_from([None, UP, cut(), PeerReport(cloud_ok=True, kubelet_ok=False)]))
               for m in NAMES[1:]}
    able = {m for m in reachable if reports[m] is UP}
    chosen = choose_carrier(me=me, cloud_ok=False, reachable=frozenset(reachable), reports=reports)
    assert (chosen is None) == (not able)
    assert chosen is None or chosen in able
    assert choose_carrier(me=me, cloud_ok=True, reachable=frozenset(reachable), reports=reports) is None


@settings(max_examples=200)
@given(reachable=st.sets(st.sampled_from(NAMES[1:])), leader=st.sampled_from(NAMES), data=st.data())
def test_with_a_pool_leader_carrying_the_leader_is_named(reachable: set, leader: str, data) -> None:  # type: ignore[no-untyped-def,type-arg]
    """The pool coordinator's leader writes the carried renewals, so the node names it (the
    controller counts a carried renewal only from the carrier the node named); never itself."""
    me = NAMES[0]
    reports = {m: data.draw(st.sampled_from([None, UP, cut()])) for m in NAMES[1:]}
    chosen = choose_carrier(me=me, cloud_ok=False, reachable=frozenset(reachable), reports=reports, leader=leader)
    without = choose_carrier(me=me, cloud_ok=False, reachable=frozenset(reachable), reports=reports)
    assert chosen == (without if leader == me else leader)
    assert choose_carrier(me=me, cloud_ok=True, reachable=frozenset(reachable), reports=reports, leader=leader) is None


@settings(max_examples=300)
@given(data=st.data())
def test_exactly_the_named_carrier_carries(data) -> None:  # type: ignore[no-untyped-def]
    subject = NAMES[0]
    neighbours = NAMES[1:]
    reports = {m: UP for m in neighbours}
    carrier = choose_carrier(me=subject, cloud_ok=False, reachable=frozenset(neighbours), reports=reports)
    assert carrier is not None
    reports[subject] = cut(carrier)
    verdict = data.draw(st.sampled_from(list(Verdict)))
    carriers = [m for m in neighbours
                if subject in assign_duties(me=m, cloud_ok=True, reachable=frozenset({subject}),
                                            verdicts={subject: verdict}, reports=reports).carry]
    assert carriers == ([] if verdict is Verdict.UNHEALTHY else [carrier])


def test_no_carrying_without_direct_evidence_a_fresh_report_or_an_own_link() -> None:
    me, subject = NAMES[1], NAMES[0]
    reports = {subject: cut(me)}
    args = dict(me=me, verdicts={}, reports=reports)
    assert assign_duties(cloud_ok=True, reachable=frozenset({subject}), **args).carry == {subject}  # type: ignore[arg-type]
    assert not assign_duties(cloud_ok=True, reachable=frozenset(), **args).carry  # type: ignore[arg-type]
    assert not assign_duties(cloud_ok=False, reachable=frozenset({subject}), **args).carry  # type: ignore[arg-type]
    assert not assign_duties(me=me, cloud_ok=True, reachable=frozenset({subject}), verdicts={},
                             reports={}).carry
    sick = {subject: PeerReport(cloud_ok=False, kubelet_ok=False, carrier=me)}
    assert not assign_duties(me=me, cloud_ok=True, reachable=frozenset({subject}), verdicts={}, reports=sick).carry


def test_standing_back_still_carries_the_statement() -> None:
    me, subject = NAMES[1], NAMES[0]
    duties = assign_duties(me=me, cloud_ok=True, reachable=frozenset({subject}), verdicts={},
                           reports={subject: cut(me)}, carry_enabled=False)
    assert not duties.carry and duties.statements == {subject} and duties.able

"""Duties (who publishes, who carries) and the rendezvous choice behind them: exhaustive small
cases and hypothesis properties."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from edgewatch.core.assign import choose
from edgewatch.core.duties import PeerReport, assign_duties
from edgewatch.core.types import NodeName, Verdict

NAMES = [NodeName(f"n-{i}") for i in range(1, 8)]
UP, CUT = PeerReport(cloud_ok=True, kubelet_ok=True), PeerReport(cloud_ok=False, kubelet_ok=True)


def _all_duties(group, verdicts, reports, carry_enabled=True):  # type: ignore[no-untyped-def]
    return {m: assign_duties(me=m, group=group, verdicts=verdicts, reports=reports, carry_enabled=carry_enabled)
            for m in group}


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
@given(
    group=st.sets(st.sampled_from(NAMES), min_size=1),
    data=st.data(),
)
def test_each_subject_has_exactly_one_publisher_and_at_most_one_carrier(group: set, data) -> None:  # type: ignore[no-untyped-def,type-arg]
    group = frozenset(group)
    verdicts = {m: data.draw(st.sampled_from(list(Verdict))) for m in group}
    reports = {m: data.draw(st.sampled_from([None, UP, CUT])) for m in group}
    duties = _all_duties(group, verdicts, reports)
    able = {m for m in group if verdicts[m] is Verdict.HEALTHY and reports[m] is UP}
    for subject in group:
        publishers = [m for m, d in duties.items() if subject in d.publish]
        carriers = [m for m, d in duties.items() if subject in d.carry]
        assert len(publishers) == (1 if able else 0)
        assert set(publishers) <= able
        needs = verdicts[subject] is Verdict.HEALTHY and reports[subject] is CUT
        assert len(carriers) == (1 if needs and able - {subject} else 0)
        assert subject not in carriers  # nobody carries itself
        assert set(carriers) <= able


def test_unhealthy_or_unknown_nodes_are_never_carried() -> None:
    group = frozenset(NAMES[:3])
    reports = {NAMES[0]: UP, NAMES[1]: UP, NAMES[2]: CUT}
    for verdict in (Verdict.UNHEALTHY, Verdict.UNKNOWN):
        verdicts = {NAMES[0]: Verdict.HEALTHY, NAMES[1]: Verdict.HEALTHY, NAMES[2]: verdict}
        assert all(not d.carry for d in _all_duties(group, verdicts, reports).values())
    verdicts = {n: Verdict.HEALTHY for n in group}
    carriers = [m for m, d in _all_duties(group, verdicts, reports).items() if NAMES[2] in d.carry]
    assert len(carriers) == 1 and carriers[0] in NAMES[:2]


def test_a_cut_off_agent_has_no_cloud_duties_and_carrying_can_be_disabled() -> None:
    group = frozenset(NAMES[:2])
    verdicts = {n: Verdict.HEALTHY for n in group}
    reports = {NAMES[0]: CUT, NAMES[1]: UP}
    cut = assign_duties(me=NAMES[0], group=group, verdicts=verdicts, reports=reports)
    assert not cut.publish and not cut.carry
    up = assign_duties(me=NAMES[1], group=group, verdicts=verdicts, reports=reports)
    assert up.publish == group and up.carry == {NAMES[0]}
    standing_back = assign_duties(me=NAMES[1], group=group, verdicts=verdicts, reports=reports, carry_enabled=False)
    assert standing_back.publish == group and not standing_back.carry

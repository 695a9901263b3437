"""The cloud-link tracker: hysteresis in both directions (pure), exhaustively over short runs."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgewatch.agent.cloudlink import CloudLinkConfig, LinkState, observe

CFG = CloudLinkConfig(down_after=3, up_after=2)


def _run(results: tuple[bool, ...]) -> list[bool]:
    state, ups = LinkState(), []
    for ok in results:
        state = observe(state, ok=ok, config=CFG)
        ups.append(state.up)
    return ups


def test_goes_down_only_after_three_failures_in_a_row() -> None:
    assert _run((False, False)) == [True, True]
    assert _run((False, False, False)) == [True, True, False]
    assert _run((False, False, True, False, False)) == [True] * 5


def test_comes_back_only_after_two_successes_in_a_row() -> None:
    assert _run((False, False, False, True)) == [True, True, False, False]
    assert _run((False, False, False, True, True)) == [True, True, False, False, True]
    assert _run((False, False, False, True, False, True)) == [True, True, False, False, False, False]


@pytest.mark.parametrize("results", list(itertools.product([True, False], repeat=8)))
def test_exhaustive_8_probes_matches_the_rule(results: tuple[bool, ...]) -> None:
    up, fails, oks = True, 0, 0
    for ok, got in zip(results, _run(results)):
        fails, oks = (0, oks + 1) if ok else (fails + 1, 0)
        up = (up or oks >= 2) if ok else (up and fails < 3)
        assert got == up


@given(st.lists(st.booleans(), max_size=60))
def test_a_single_failure_never_cuts(results: list[bool]) -> None:
    # Insert isolated failures into an all-success history: the link stays up throughout.
    history = tuple(x for ok in results for x in ((True, False) if not ok else (True,)))
    assert all(_run(history))


def test_invalid_config_is_refused() -> None:
    with pytest.raises(ValueError):
        CloudLinkConfig(down_after=0)

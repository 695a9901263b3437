"""edgewatch.core.admission: the peer port's connection bookkeeping (per source, strangers in all)
and the throttle of its log lines. Tables for the rules, properties for the invariants."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgewatch.core.admission import ConnectionLimits, Refusal, ReportThrottle, Ticket, source_key


@pytest.mark.parametrize(("address", "stranger", "key"), [
    ("198.18.0.10", True, "198.18.0.10"),
    ("198.18.0.10", False, "198.18.0.10"),
    ("::ffff:198.18.0.10", True, "198.18.0.10"),           # IPv4-mapped: counted as the IPv4 address
    ("2001:db8:1:2:aaaa::1", True, "2001:db8:1:2::/64"),    # a stranger's IPv6 address: its /64
    ("2001:db8:1:2:bbbb::7", True, "2001:db8:1:2::/64"),
    ("2001:db8:1:2:aaaa::1", False, "2001:db8:1:2:aaaa::1"),  # a known one: itself
    ("fe80::1%eth0", True, "fe80::/64"),                    # the zone is not part of the key
    ("not-an-address", True, "not-an-address"),             # a Unix socket, an unknown peer: itself
    ("", True, ""),
])
def test_source_key(address: str, stranger: bool, key: str) -> None:
    assert source_key(address, stranger=stranger) == key


def test_per_source_bound_refuses_the_next_connection_and_frees_a_slot_on_release() -> None:
    limits = ConnectionLimits(per_source=2, strangers=10)
    first, second = limits.admit("10.0.0.1", known=False), limits.admit("10.0.0.1", known=False)
    assert isinstance(first, Ticket) and isinstance(second, Ticket)
    assert limits.admit("10.0.0.1", known=False) is Refusal.PER_SOURCE
    assert isinstance(limits.admit("10.0.0.2", known=False), Ticket)  # another source is not affected
    limits.release(first)
    assert isinstance(limits.admit("10.0.0.1", known=False), Ticket)
    assert limits.strangers_open == 3 and len(limits) == 2


def test_strangers_share_a_total_that_known_sources_never_count_against() -> None:
    limits = ConnectionLimits(per_source=5, strangers=2)
    assert isinstance(limits.admit("10.0.0.1", known=False), Ticket)
    assert isinstance(limits.admit("10.0.0.2", known=False), Ticket)
    assert limits.admit("10.0.0.3", known=False) is Refusal.TOTAL
    for _ in range(5):  # the node itself and the group's members: bounded per source only
        assert isinstance(limits.admit("198.18.0.11", known=True), Ticket)
    assert limits.admit("198.18.0.11", known=True) is Refusal.PER_SOURCE
    assert (limits.strangers_open, limits.known_open) == (2, 5)


def test_the_per_source_bound_is_checked_before_the_total() -> None:
    limits = ConnectionLimits(per_source=1, strangers=1)
    assert isinstance(limits.admit("10.0.0.1", known=False), Ticket)
    assert limits.admit("10.0.0.1", known=False) is Refusal.PER_SOURCE
    assert limits.admit("10.0.0.2", known=False) is Refusal.TOTAL


def test_an_ipv6_stranger_cannot_multiply_its_budget_within_its_64() -> None:
    limits = ConnectionLimits(per_source=2, strangers=100)
    assert isinstance(limits.admit("2001:db8::1", known=False), Ticket)
    assert isinstance(limits.admit("2001:db8::2", known=False), Ticket)
    assert limits.admit("2001:db8::3", known=False) is Refusal.PER_SOURCE
    assert limits.open_from("2001:db8::ffff", known=False) == 2


def test_a_second_release_of_one_ticket_is_ignored() -> None:
    limits = ConnectionLimits(per_source=3, strangers=3)
    ticket = limits.admit("10.0.0.1", known=False)
    assert isinstance(ticket, Ticket)
    limits.release(ticket)
    limits.release(ticket)
    assert (limits.strangers_open, len(limits)) == (0, 0)


@pytest.mark.parametrize("kwargs", [{"per_source": 0, "strangers": 1}, {"per_source": 1, "strangers": 0},
                                    {"per_source": 1.5, "strangers": 1}, {"per_source": True, "strangers": 1}])
def test_bounds_must_be_positive_ints(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        ConnectionLimits(**kwargs)  # type: ignore[arg-type]


events = st.lists(st.tuples(st.booleans(), st.sampled_from(["10.0.0.1", "10.0.0.2", "10.0.0.3", "2001:db8::1",
                                                            "2001:db8::2", "198.18.0.11"]),
                            st.booleans(), st.integers(0, 50)), max_size=300)


@settings(max_examples=300, deadline=None)
@given(events, st.integers(1, 4), st.integers(1, 6))
def test_the_bounds_always_hold_and_every_release_balances(ops: list[tuple[bool, str, bool, int]],
                                                           per_source: int, strangers: int) -> None:
    """Any interleaving of connections and closes: never more than ``per_source`` open per key nor
    ``strangers`` strangers open; the counts equal the tickets held; all released, nothing is left."""
    limits = ConnectionLimits(per_source=per_source, strangers=strangers)
    held: list[Ticket] = []
    for is_open, address, known, pick in ops:
        if is_open or not held:
            decision = limits.admit(address, known=known)
            if isinstance(decision, Ticket):
                held.append(decision)
        else:
            limits.release(held.pop(pick % len(held)))
        per_key: dict[str, int] = {}
        for ticket in held:
            per_key[ticket.source] = per_key.get(ticket.source, 0) + 1
        assert all(n <= per_source for n in per_key.values())
        assert limits.strangers_open == sum(t.stranger for t in held) <= strangers
        assert limits.known_open == sum(not t.stranger for t in held)
        assert len(limits) == len(per_key)
    for ticket in held:
        limits.release(ticket)
    assert (limits.strangers_open, limits.known_open, len(limits)) == (0, 0, 0)


def test_report_throttle_reports_once_per_interval_with_the_count_held_back() -> None:
    throttle = ReportThrottle(interval_s=60.0)
    assert throttle.note("per_source", now=0.0) == 1          # the first one at once
    assert [throttle.note("per_source", now=t) for t in (1.0, 2.0, 59.0)] == [None, None, None]
    assert throttle.note("total", now=30.0) == 1              # kinds are independent
    assert throttle.note("per_source", now=60.0) == 4         # itself and the three held back
    assert throttle.note("per_source", now=61.0) is None
    assert throttle.note("per_source", now=200.0) == 2


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 30), max_size=200))
def test_report_throttle_never_reports_more_than_once_an_interval_and_loses_no_count(gaps: list[float]) -> None:
    throttle = ReportThrottle(interval_s=10.0)
    now, reported, reports = 0.0, 0, []
    for gap in gaps:
        now += gap
        count = throttle.note("k", now=now)
        if count is not None:
            reported += count
            reports.append(now)
    assert all(b - a >= 10.0 for a, b in zip(reports, reports[1:]))
    assert len(gaps) - reported == (throttle.note("k", now=now + 11.0) or 1) - 1


def test_report_throttle_is_bounded_in_kinds() -> None:
    throttle = ReportThrottle(interval_s=60.0, max_kinds=2)
    for kind in ("a", "b", "c"):
        assert throttle.note(kind, now=0.0) == 1
    assert throttle.note("a", now=1.0) == 1  # forgotten (least recently reported): reports again
    with pytest.raises(ValueError):
        ReportThrottle(interval_s=0)

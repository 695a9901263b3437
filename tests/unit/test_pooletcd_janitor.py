"""edgewatch.pooletcd.janitor.ElectionBook: the coordinator's judgement of the pool election, change
by change in revision order (pure). The attack it stops: a member puts its candidacy while another
node leads, under a long lease, and is next in line for good."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgewatch.poolkeys import MAX_LEADER_TTL_S, Candidate
from edgewatch.pooletcd.janitor import ElectionBook, ElectionJanitor


def test_a_candidacy_put_while_another_leads_is_disqualified() -> None:
    book = ElectionBook()
    assert book.put("n1", Candidate(lease=11, create_revision=10), granted_ttl_s=5) is None
    verdict = book.put("n2", Candidate(lease=12, create_revision=20), granted_ttl_s=5)  # standing in line
    assert verdict is not None and (verdict.node, verdict.reason, verdict.lease) == ("n2", "standing", 12)
    book.delete("n1")  # a routine leader change: the standing candidacy never leads
    assert book.leader() is None
    assert book.put("n3", Candidate(lease=13, create_revision=30), granted_ttl_s=5) is None  # an honest campaign
    assert book.leader() == "n3"


def test_the_winner_of_a_simultaneous_campaign_leads_and_the_losers_are_disqualified() -> None:
    book = ElectionBook()
    assert book.put("n2", Candidate(13, 40), granted_ttl_s=5) is None
    assert book.put("n3", Candidate(14, 41), granted_ttl_s=5).reason == "standing"  # type: ignore[union-attr]
    assert book.put("n4", Candidate(15, 42), granted_ttl_s=5).reason == "standing"  # type: ignore[union-attr]
    assert book.leader() == "n2"


def test_long_and_missing_leases_are_disqualified_even_for_the_first() -> None:
    book = ElectionBook()
    assert book.put("n1", Candidate(11, 10), granted_ttl_s=30 * 86400).reason == "long_lease"  # type: ignore[union-attr]
    assert book.put("n2", Candidate(0, 11), granted_ttl_s=None).reason == "no_lease"  # type: ignore[union-attr]
    assert book.leader() is None
    assert book.put("n3", Candidate(13, 12), granted_ttl_s=MAX_LEADER_TTL_S) is None
    assert book.leader() == "n3"


def test_a_rewrite_of_a_judged_or_leading_candidacy_changes_nothing() -> None:
    book = ElectionBook()
    book.put("n1", Candidate(11, 10), granted_ttl_s=5)
    assert book.put("n1", Candidate(11, 10), granted_ttl_s=5) is None
    assert book.put("n2", Candidate(12, 20), granted_ttl_s=5) is not None
    assert book.put("n2", Candidate(12, 20), granted_ttl_s=5) is None  # judged already
    assert book.leader() == "n1"


def test_a_snapshot_disqualifies_everyone_in_line_and_keeps_what_was_judged() -> None:
    book = ElectionBook()
    verdicts = book.snapshot({"n1": Candidate(11, 10), "n2": Candidate(12, 20), "n3": Candidate(13, 5)},
                             {"n3": 5}, {"n1": 5, "n2": 5, "n3": 5})
    assert [(v.node, v.reason) for v in verdicts] == [("n2", "standing")]
    assert book.leader() == "n1"


@given(st.lists(st.tuples(st.sampled_from(["n1", "n2", "n3", "n4"]), st.booleans(),
                          st.sampled_from([5, 5, 5, 3600])), max_size=30))
def test_no_candidacy_put_behind_an_eligible_leader_ever_leads(steps: list[tuple[str, bool, int]]) -> None:
    """Property: whatever the order of puts (True) and deletes (False), a candidacy that was put
    while an eligible leader existed, or under a long lease, is never the leader afterwards."""
    book = ElectionBook()
    revision = 0
    tainted: set[tuple[str, int]] = set()
    for node, put, ttl in steps:
        if not put:
            book.delete(node)
            continue
        revision += 1
        leader_before = book.leader()
        verdict = book.put(node, Candidate(revision + 100, revision), granted_ttl_s=ttl)
        if (leader_before is not None and leader_before != node) or ttl > MAX_LEADER_TTL_S:
            assert verdict is not None
            tainted.add((node, revision))
        leader = book.leader()
        if leader is not None:
            assert (leader, book.candidates[leader].create_revision) not in tainted


async def test_a_failed_session_never_ends_the_janitor() -> None:
    """A session's TaskGroup raises an ExceptionGroup (etcd overloaded, restarted to load a new CA):
    the janitor counts it and starts a new session; it never propagates into the coordinator pod's
    own TaskGroup (which would stop etcd with it)."""
    actions: list[str] = []
    janitor = ElectionJanitor(host="127.0.0.1", port=1, credentials=lambda: None, pool="p",  # type: ignore[arg-type,return-value]
                              members=lambda: None, retry_s=0.01, on_action=actions.append)
    sessions = 0

    async def failing(_client: object) -> None:
        nonlocal sessions
        sessions += 1
        raise ExceptionGroup("session", [TimeoutError("etcd did not answer"), ValueError("x")])

    janitor._session = failing  # type: ignore[method-assign]  # noqa: SLF001
    task = asyncio.create_task(janitor.run())
    while sessions < 3:
        await asyncio.sleep(0.01)
    assert not task.done()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert actions.count("error") >= 3


async def test_a_disqualification_that_could_not_be_written_is_judged_again() -> None:
    """etcd overloaded when the janitor writes a disqualification: the write fails, the janitor
    forgets it, and the replayed change is judged (and written) again; before, it counted as judged
    in memory only, and every agent took the candidacy for the next in line."""
    from edgewatch.pooletcd.janitor import Verdict

    janitor = ElectionJanitor(host="127.0.0.1", port=1, credentials=lambda: None, pool="p",  # type: ignore[arg-type,return-value]
                              members=lambda: None)
    janitor.book.put("n1", Candidate(11, 10), granted_ttl_s=5)
    verdict = janitor.book.put("n2", Candidate(12, 20), granted_ttl_s=5)
    assert verdict is not None

    class Overloaded:
        async def put(self, *_a: object, **_k: object) -> None:
            raise TimeoutError("etcd did not answer")

    with pytest.raises(TimeoutError):
        await janitor._act(Overloaded(), verdict)  # type: ignore[arg-type]  # noqa: SLF001
    assert "n2" not in janitor.book.disqualified
    again = janitor.book.put("n2", Candidate(12, 20), granted_ttl_s=5)  # the watch replays the change
    assert again == Verdict(node="n2", create_revision=20, lease=12, reason="standing")


def test_the_judged_revision_follows_a_listing_that_matches_the_book() -> None:
    """A quiet election must not let etcd's hourly compaction pass the judged revision."""
    from types import SimpleNamespace

    janitor = ElectionJanitor(host="127.0.0.1", port=1, credentials=lambda: None, pool="p",  # type: ignore[arg-type,return-value]
                              members=lambda: None)
    janitor._revision = 100  # noqa: SLF001
    janitor.book.put("n1", Candidate(11, 10), granted_ttl_s=5)
    prefix = janitor.keys.candidates

    class Listing(list):  # type: ignore[type-arg]
        header = SimpleNamespace(revision=5000)

    same = Listing([SimpleNamespace(key=prefix + b"n1", create_revision=10)])
    janitor._advance(same)  # noqa: SLF001
    assert janitor._revision == 5000  # noqa: SLF001
    other = Listing([SimpleNamespace(key=prefix + b"n1", create_revision=10),
                     SimpleNamespace(key=prefix + b"n2", create_revision=4990)])  # not judged yet
    other.header = SimpleNamespace(revision=6000)  # type: ignore[attr-defined]
    janitor._advance(other)  # noqa: SLF001
    assert janitor._revision == 5000  # noqa: SLF001

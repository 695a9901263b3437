"""The pool coordinator's key layout, grants and leader rule (``edgewatch.poolkeys``)."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgewatch.poolkeys import Access, Candidate, Grant, PoolKeys, leader_of, node_grants, prefix_end

NAMES = st.text(alphabet=string.ascii_lowercase + string.digits, min_size=1, max_size=12).filter(
    lambda s: s[0].isalnum() and s[-1].isalnum())


def _covers(grant: Grant, key: bytes) -> bool:
    if not grant.range_end:
        return key == grant.key
    return grant.key <= key < grant.range_end


def _writable(grants: tuple[Grant, ...], key: bytes) -> bool:
    return any(_covers(g, key) for g in grants if g.access in (Access.WRITE, Access.READWRITE))


def test_layout_under_the_pool_prefix() -> None:
    keys = PoolKeys("factory-1")
    assert keys.prefix == "/edgewatch/pools/factory-1/"
    assert keys.heartbeat("n-1") == b"/edgewatch/pools/factory-1/heartbeats/n-1"
    assert keys.candidate("n-1") == b"/edgewatch/pools/factory-1/leader/election/n-1"
    assert keys.sync("n-1") == b"/edgewatch/pools/factory-1/leader/sync/n-1"
    assert keys.writer("n-1") == "/edgewatch/pools/factory-1/nodes/n-1/"
    assert keys.candidate("x").startswith(keys.leadership) and keys.sync("x").startswith(keys.leadership)


def test_prefix_end() -> None:
    assert prefix_end(b"/a/") == b"/a0"
    assert prefix_end(b"a\xff") == b"b"
    with pytest.raises(ValueError):
        prefix_end(b"\xff\xff")
    with pytest.raises(ValueError):
        prefix_end(b"")


@given(NAMES, NAMES)
def test_a_node_may_write_only_its_own_keys(me: str, other: str) -> None:
    keys = PoolKeys("p")
    grants = node_grants(keys, me)
    own = [keys.heartbeat(me), keys.candidate(me), keys.sync(me), keys.writer(me).encode() + b"cache/x/o/ns/a"]
    assert all(_writable(grants, k) for k in own)
    if other != me:
        theirs = [keys.heartbeat(other), keys.candidate(other), keys.sync(other),
                  keys.writer(other).encode() + b"cache/x/o/ns/a"]
        assert not any(_writable(grants, k) for k in theirs), (me, other)
    # nothing outside the pool, and nothing shared
    assert not _writable(grants, b"/edgewatch/pools/q/heartbeats/" + me.encode())
    assert not _writable(grants, keys.prefix.encode() + b"leader")
    assert not _writable(grants, keys.prefix.encode() + b"cache/x")
    # the whole pool is readable
    assert any(g.access is Access.READ and _covers(g, keys.heartbeat(other)) for g in grants)


def test_a_node_whose_name_prefixes_another_cannot_write_its_area() -> None:
    keys = PoolKeys("p")
    assert not _writable(node_grants(keys, "a"), keys.writer("a-b").encode() + b"x")
    assert not _writable(node_grants(keys, "a"), keys.heartbeat("a-b"))


def test_leader_is_the_lowest_valid_create_revision() -> None:
    assert leader_of({}) is None
    assert leader_of({"b": Candidate(1, 5), "a": Candidate(2, 9)}) == "b"
    assert leader_of({"b": Candidate(0, 5), "a": Candidate(2, 9)}) == "a"  # no lease: never obeyed
    assert leader_of({"Bad_Name": Candidate(1, 1), "a": Candidate(2, 9)}) == "a"
    assert leader_of({"b": Candidate(0, 1)}) is None


@given(st.dictionaries(NAMES, st.tuples(st.integers(0, 3), st.integers(1, 10**6)), max_size=20), NAMES,
       st.integers(1, 10**6))
def test_a_newer_candidacy_never_displaces_the_leader(existing: dict[str, tuple[int, int]], newcomer: str,
                                                      extra: int) -> None:
    candidates = {n: Candidate(lease, rev) for n, (lease, rev) in existing.items()}
    before = leader_of(candidates)
    newest = max((c.create_revision for c in candidates.values()), default=0) + extra
    after = leader_of({**candidates, newcomer: Candidate(1, newest)}) if newcomer not in candidates else before
    if before is not None:
        assert after == before
    elif newcomer not in candidates:
        assert after == newcomer

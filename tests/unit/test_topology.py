"""Tests of edgewatch.core.topology: the K-ring monitoring graph is symmetric, bounded in degree,
connected, deterministic, a full mesh for small groups, and stable under churn."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgewatch.core.topology import DEFAULT_RINGS, full_mesh_max, neighbours, ring_order
from edgewatch.core.types import NodeName


def group(n: int, prefix: str = "edge-") -> list[NodeName]:
    return [NodeName(f"{prefix}{i}") for i in range(n)]


def connected(graph: dict[NodeName, frozenset[NodeName]]) -> bool:
    if not graph:
        return True
    start = next(iter(graph))
    seen, todo = {start}, [start]
    while todo:
        for b in graph[todo.pop()]:
            if b not in seen:
                seen.add(b)
                todo.append(b)
    return len(seen) == len(graph)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(min_value=1, max_value=300), k=st.integers(min_value=1, max_value=5))
def test_symmetric_bounded_connected(n: int, k: int) -> None:
    graph = dict(neighbours(group(n), k=k))
    assert set(graph) == set(group(n))
    for a, near in graph.items():
        assert a not in near
        assert len(near) <= min(2 * k, n - 1)
        assert len(near) >= min(2, n - 1)
        for b in near:
            assert a in graph[b]
    assert connected(graph)


@pytest.mark.parametrize("n", [1, 2, 5, 7])
def test_small_groups_are_a_full_mesh(n: int) -> None:
    members = group(n)
    graph = neighbours(members, k=DEFAULT_RINGS)
    assert n <= full_mesh_max(DEFAULT_RINGS)
    for m in members:
        assert graph[m] == frozenset(members) - {m}


def test_beyond_full_mesh_degree_is_bounded_at_1000() -> None:
    graph = neighbours(group(1000))
    degrees = [len(v) for v in graph.values()]
    assert max(degrees) <= 2 * DEFAULT_RINGS
    assert sum(degrees) / len(degrees) > 5.9  # three random rings rarely share an edge


@settings(max_examples=30, deadline=None)
@given(members=st.sets(st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True), min_size=0, max_size=40),
       seed=st.randoms(use_true_random=False))
def test_order_of_members_does_not_matter(members: set[str], seed) -> None:  # type: ignore[no-untyped-def]
    names = [NodeName(m) for m in members]
    shuffled = list(names)
    seed.shuffle(shuffled)
    assert dict(neighbours(names)) == dict(neighbours(shuffled))
    assert ring_order(names, 1) == ring_order(shuffled, 1)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(min_value=10, max_value=200), victim=st.integers(min_value=0, max_value=10_000))
def test_one_member_leaving_moves_few_edges(n: int, victim: int) -> None:
    members = group(n)
    gone = members[victim % n]
    before = neighbours(members)
    after = neighbours([m for m in members if m != gone])
    edges = lambda g: {frozenset((a, b)) for a, near in g.items() for b in near}  # noqa: E731
    changed = edges(before) ^ edges(after)
    # The leaver's own <= 2k edges disappear; each ring joins its predecessor and successor: <= k new.
    assert len(changed) <= 3 * DEFAULT_RINGS


def test_k_must_be_positive() -> None:
    with pytest.raises(ValueError):
        neighbours(group(3), k=0)
    with pytest.raises(ValueError):
        neighbours(group(3), k=True)  # type: ignore[arg-type]

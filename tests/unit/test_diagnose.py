"""The account a timed-out lab wait gives (edgewatch_lab.testing.diagnose.summarize): which pods
do not serve, on which node, and which nodes are not Ready."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from edgewatch_lab.testing.diagnose import PodRow, summarize


def _pod(name: str, node: str = "a-1", phase: str = "Running", ready: bool = True, deleting: bool = False) -> PodRow:
    return PodRow(name=name, node=node, phase=phase, ready=ready, deleting=deleting)


def test_all_serving_names_only_the_counts() -> None:
    text = summarize([_pod("p1"), _pod("p2", node="a-2")], endpoints=2, not_ready_nodes={})
    assert text == "2 ready endpoints; 2 pods (2 Running/ready)"


def test_stuck_pods_are_named_with_their_node_and_its_state() -> None:
    pods = [_pod("p1"), _pod("p2", node="", phase="Pending", ready=False),
            _pod("p3", node="a-3", ready=False), _pod("p4", node="a-4", deleting=True)]
    text = summarize(pods, endpoints=1, not_ready_nodes={"a-3": "Unknown"})
    assert text == ("1 ready endpoints; 4 pods (1 Pending/not-ready, 1 Running/not-ready, 1 Running/ready, "
                    "1 terminating); not serving: p2@<unscheduled>, p3@a-3[node Ready=Unknown], p4@a-4; "
                    "nodes not Ready: a-3=Unknown")


def test_long_lists_are_capped_and_say_how_many_more() -> None:
    pods = [_pod(f"p{i:02}", node=f"n{i:02}", ready=False) for i in range(15)]
    nodes = {f"n{i:02}": "False" for i in range(15)}
    text = summarize(pods, endpoints=0, not_ready_nodes=nodes, limit=3)
    assert "not serving: p00@n00[node Ready=False], p01@n01[node Ready=False], p02@n02[node Ready=False] and 12 more" in text
    assert "nodes not Ready: n00=False, n01=False, n02=False and 12 more" in text


@given(st.lists(st.tuples(st.booleans(), st.booleans()), max_size=30), st.integers(0, 5))
def test_every_pod_is_counted_once_and_only_stuck_ones_are_named(flags: list[tuple[bool, bool]], limit: int) -> None:
    pods = [_pod(f"p{i:02}", ready=ready, deleting=deleting) for i, (ready, deleting) in enumerate(flags)]
    text = summarize(pods, endpoints=0, not_ready_nodes={}, limit=limit)
    assert f"; {len(pods)} pods (" in text
    stuck = [p.name for p in pods if p.deleting or not p.ready]
    for name in stuck[:limit]:
        assert f"{name}@" in text
    for p in pods:
        if p.ready and not p.deleting:
            assert f"{p.name}@" not in text
    assert ("not serving" in text) == bool(stuck)

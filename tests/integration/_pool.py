"""Shared by the tests that run one 5-node pool as shipped (test_agent, test_adversary): the lab,
and how they read a node's state through kubectl."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from edgewatch.names import EDGE_CONDITION_TYPE
from edgewatch_lab.playground.cluster import PlaygroundCluster
from edgewatch_lab.playground.scenario import parse_scenario

NODES = [f"a-{i}" for i in range(1, 6)]


@contextmanager
def five_node_pool(binaries, name: str, *, settle_s: float = 120) -> Iterator[PlaygroundCluster]:  # type: ignore[no-untyped-def]
    """Pool ``a`` of 5 nodes with edgewatch installed as shipped, once every node is EdgeHealthy."""
    scenario = parse_scenario({"name": name, "topology": {"pools": [{"name": "a", "nodes": 5}]},
                               "steps": [{"at": 1, "action": "end"}]})
    with PlaygroundCluster(scenario=scenario, binaries=binaries) as c:
        wait(lambda: all(edge(c, n) == "True" for n in NODES), settle_s, "EdgeHealthy=True everywhere")
        yield c
    c.remove_workdir()


def wait(predicate: Callable[[], bool], timeout_s: float, what: str, interval_s: float = 0.25) -> float:
    """Poll ``predicate`` until true; returns the seconds it took. Raises TimeoutError."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout_s:
            raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)
    return time.monotonic() - start


def node(c: PlaygroundCluster, name: str) -> dict:  # type: ignore[type-arg]
    """The Node as JSON (admin kubectl)."""
    assert c.cp is not None
    return json.loads(c.cp.kubectl("get", "node", name, "-o", "json"))


def edge(c: PlaygroundCluster, name: str) -> str | None:
    """The EdgeHealthy status, or None (none yet, or a failed read)."""
    try:
        conds = node(c, name)["status"].get("conditions", [])
    except Exception:  # noqa: BLE001 - a failed read is "not yet"
        return None
    return next((x["status"] for x in conds if x["type"] == EDGE_CONDITION_TYPE), None)

"""The per-node cut-off series ``edgewatch_controller_node_cut_off_seconds{node, pool}``
(``edgewatch.controller.cutoff``): seconds since the controller judged a node cut off, read at
scrape time; no series for a node that is not cut off, so the cardinality stays bounded."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator, Callable

import pytest
from _fakekube import FakeKube
from lightkube.resources.core_v1 import Node
from prometheus_client import CollectorRegistry, generate_latest

from edgewatch.controller.cutoff import CutOffTracker, SinceTracker, agent_silent
from edgewatch.controller.metrics import ControllerMetrics
from edgewatch.controller.model import CloudView, ControllerConfig, NodeState
from edgewatch.controller.reconciler import Reconciler
from edgewatch.names import POOL_LABEL
from edgewatch.timefmt import format_micro_time

pytestmark = pytest.mark.timeout(60)

NAME = "edgewatch_controller_node_cut_off_seconds"


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def value(registry: CollectorRegistry, node: str, pool: str) -> float | None:
    return registry.get_sample_value(NAME, {"node": node, "pool": pool})


def series(registry: CollectorRegistry) -> set[tuple[str, str]]:
    return {(s.labels["node"], s.labels["pool"]) for fam in registry.collect() for s in fam.samples if s.name == NAME}


def test_seconds_since_cut_off_grow_at_scrape_time_and_survive_a_switch_between_cut_off_states() -> None:
    registry, clock = CollectorRegistry(), FakeClock()
    cut = CutOffTracker(ControllerMetrics(registry).node_cut_off, clock)
    cut.judged("n1", pool="p1", state=NodeState.DISCONNECTED, now=clock.now)
    assert value(registry, "n1", "p1") == 0.0
    clock.now += 42.5
    assert value(registry, "n1", "p1") == 42.5  # no new judgement needed: read at scrape time
    cut.judged("n1", pool="p1", state=NodeState.UNKNOWN, now=clock.now)  # still cut off: the start stands
    clock.now += 10
    assert value(registry, "n1", "p1") == 52.5
    assert f'{NAME}{{node="n1",pool="p1"}} 52.5' in generate_latest(registry).decode()


@pytest.mark.parametrize("state", [NodeState.NORMAL, NodeState.FAILED])
def test_a_node_not_cut_off_has_no_series(state: NodeState) -> None:
    registry, clock = CollectorRegistry(), FakeClock()
    cut = CutOffTracker(ControllerMetrics(registry).node_cut_off, clock)
    cut.judged("n1", pool="p1", state=state, now=clock.now)
    cut.judged("n2", pool="p1", state=NodeState.UNKNOWN, now=clock.now)
    assert series(registry) == {("n2", "p1")}
    cut.judged("n2", pool="p1", state=state, now=clock.now)  # healthy (or failed) again: its series goes
    assert series(registry) == set() and len(cut) == 0
    cut.judged("n2", pool="p1", state=NodeState.DISCONNECTED, now=clock.now + 5)  # cut off anew: from 0
    assert value(registry, "n2", "p1") == 0.0


def test_forget_drops_the_series_and_a_pool_change_keeps_the_start() -> None:
    registry, clock = CollectorRegistry(), FakeClock()
    cut = CutOffTracker(ControllerMetrics(registry).node_cut_off, clock)
    cut.judged("n1", pool=None, state=NodeState.UNKNOWN, now=clock.now)
    assert series(registry) == {("n1", "")}
    clock.now += 7
    cut.judged("n1", pool="p2", state=NodeState.UNKNOWN, now=clock.now)
    assert series(registry) == {("n1", "p2")} and value(registry, "n1", "p2") == 7.0
    cut.forget("n1")
    cut.forget("n1")  # twice: no error
    assert series(registry) == set()


# -- in the reconciler -------------------------------------------------------------------------------

CONFIG = ControllerConfig(default_lease_duration_s=2.0, overdue_slack_s=0.5, confirm_s=1.0,
                          edge_view_ttl_s=3.0, autonomy_s=300.0)


async def eventually(check: Callable[[], bool], *, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        await asyncio.sleep(0.05)


#: the fake API, the controller's metrics and the running reconciler
Running = tuple[FakeKube, CollectorRegistry, Reconciler]


@pytest.fixture
async def two_nodes() -> AsyncIterator[Running]:
    """A running reconciler over two nodes of pool p1: ``live``, whose Lease is renewed every 0.4 s,
    and ``dead``, whose Lease stops (no agent publishes anything for either)."""
    kube = FakeKube()
    for name in ("dead", "live"):
        kube.put("Node", {"apiVersion": "v1", "kind": "Node",
                          "metadata": {"name": name, "uid": f"uid-{name}", "labels": {POOL_LABEL: "p1"},
                                       "annotations": {}},
                          "spec": {"taints": []}, "status": {"conditions": []}})
        kube.put("Lease", {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                           "metadata": {"name": name, "namespace": "kube-node-lease"},
                           "spec": {"holderIdentity": name, "leaseDurationSeconds": 2,
                                    "renewTime": format_micro_time(dt.datetime.now(dt.timezone.utc))}})

    async def renew_live() -> None:
        while True:
            lease = kube.obj("Lease", "live", "kube-node-lease")
            lease["spec"]["renewTime"] = format_micro_time(dt.datetime.now(dt.timezone.utc))
            kube.put("Lease", lease)
            await asyncio.sleep(0.4)

    registry = CollectorRegistry()
    rec = Reconciler(client=kube, config=CONFIG, metrics=ControllerMetrics(registry),  # type: ignore[arg-type]
                     resync_s=2.0, hold_interval_s=0.5, evidence_ttl_s=2.0, beacon_period_s=0.2)
    tasks = [asyncio.create_task(rec.run()), asyncio.create_task(renew_live())]
    try:
        yield kube, registry, rec
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_the_reconciler_exports_a_dead_nodes_cut_off_and_drops_it_when_the_node_is_deleted(two_nodes: Running) -> None:
    """A node whose Lease stops (no peer evidence: unknown) gets a series labelled with its pool that
    grows; a live node never gets one; the deleted node's series goes."""
    kube, registry, rec = two_nodes
    await eventually(lambda: series(registry) == {("dead", "p1")}, timeout_s=10,
                     what="the dead node's cut-off series")
    first = value(registry, "dead", "p1")
    assert first is not None
    await eventually(lambda: (value(registry, "dead", "p1") or 0.0) >= first + 0.5, timeout_s=5,
                     what="the cut-off seconds growing")
    assert rec.plans["dead"].effective_state in (NodeState.UNKNOWN, NodeState.DISCONNECTED)
    await kube.delete(Node, "dead")
    await eventually(lambda: series(registry) == set(), timeout_s=5, what="the deleted node's series gone")
    assert rec.plans["live"].effective_state is NodeState.NORMAL


# -- the silent-agent series (edgewatch_controller_agent_silent_seconds) ---------------------------------

SILENT = "edgewatch_controller_agent_silent_seconds"


@pytest.mark.parametrize(("cloud", "own", "silent"), [
    (CloudView.OK, False, True),  # the kubelet renews, the agent says nothing: not running, not ready
    (CloudView.OK, True, False),
    (CloudView.DELEGATED, False, False),  # carried by a peer: cut off, its agent cannot be heard
    (CloudView.DELEGATED, True, False),
    (CloudView.LOST, False, False),  # down or cut off: the cut-off series' case, not this one
    (CloudView.LOST, True, False),
])
def test_an_agent_is_silent_only_on_a_node_that_renews_its_own_lease(cloud: CloudView, own: bool,
                                                                      silent: bool) -> None:
    assert agent_silent(cloud=cloud, own_statement=own) is silent


def test_the_silent_series_counts_from_the_first_judgment_and_goes_with_the_condition() -> None:
    registry, clock = CollectorRegistry(), FakeClock()
    tracker = SinceTracker(ControllerMetrics(registry).agent_silent, clock)
    tracker.set("a", pool="p1", active=True, now=clock.now)
    clock.now += 40
    tracker.set("a", pool="p1", active=True, now=clock.now)  # still silent: the start stands
    assert registry.get_sample_value(SILENT, {"node": "a", "pool": "p1"}) == 40.0
    tracker.set("a", pool="p1", active=False, now=clock.now)
    assert registry.get_sample_value(SILENT, {"node": "a", "pool": "p1"}) is None and len(tracker) == 0


async def test_the_reconciler_exports_a_live_node_whose_agent_is_silent(two_nodes: Running) -> None:
    """A node whose kubelet renews its Lease but whose agent never published a signed statement
    (no agent runs here): its silent-agent series appears and grows; a node whose Lease stopped
    (cut off or dead) gets none; the series goes when the node is deleted."""
    kube, registry, _rec = two_nodes

    def silent() -> set[str]:
        return {s.labels["node"] for fam in registry.collect() for s in fam.samples if s.name == SILENT}

    await eventually(lambda: silent() == {"live"} and series(registry) == {("dead", "p1")}, timeout_s=10,
                     what="the live node's silent-agent series, the dead node's cut-off one")
    first = registry.get_sample_value(SILENT, {"node": "live", "pool": "p1"}) or 0.0
    await eventually(lambda: (registry.get_sample_value(SILENT, {"node": "live", "pool": "p1"}) or 0.0)
                     >= first + 0.5, timeout_s=5, what="the silent seconds growing")
    await kube.delete(Node, "live")
    await eventually(lambda: silent() == set(), timeout_s=5, what="the deleted node's series gone")

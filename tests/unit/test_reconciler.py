"""The reconciler's plumbing on an in-memory API (``_fakekube.FakeKube``): freshness judged by what
the controller observed (never by remote clocks), coverage by the ``coverLabel`` of the
edgewatch-config ConfigMap, and per-node work (one stuck node never blocks another).

Short timings (Lease of 2 s: grace 1 s; confirmation 1 s) keep each test to a few seconds; the same
behaviours are exercised on the real control plane in tests/integration/test_controller.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from collections.abc import AsyncIterator, Callable

import pytest
from _fakekube import FakeKube, api_error
from lightkube.resources.core_v1 import Node
from prometheus_client import CollectorRegistry

from edgewatch.controller.metrics import ControllerMetrics
from edgewatch.controller.model import ControllerConfig, NodeState
from edgewatch.controller.reconciler import Reconciler
from edgewatch.core.types import NodeName
from edgewatch_lab.testing.evidence import SignedEdge
from edgewatch.names import (
    AUTONOMY_DURATION_ANNOTATION,
    CLOUD_UNREACHABLE_TAINT_KEY,
    DELEGATE_HEARTBEAT_ANNOTATION,
    DELEGATED_RENEW_TIME_ANNOTATION,
    DELEGATED_VIA_ANNOTATION,
    EDGE_CONDITION_TYPE,
    FAILED_TAINT_KEY,
    POOL_LABEL,
)
from edgewatch.timefmt import format_micro_time

pytestmark = pytest.mark.timeout(60)

CONFIG = ControllerConfig(default_lease_duration_s=2.0, overdue_slack_s=0.5, confirm_s=1.0,
                          edge_view_ttl_s=3.0, autonomy_s=300.0)
HOUR = 3600.0


def _clock(skew_s: float) -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=skew_s)


def add_node(kube: FakeKube, name: str, *, labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None, taints: list[dict] | None = None) -> None:
    kube.put("Node", {"apiVersion": "v1", "kind": "Node",
                      "metadata": {"name": name, "uid": f"uid-{name}", "labels": labels or {},
                                   "annotations": annotations or {}},
                      "spec": {"taints": taints or []}, "status": {"conditions": []}})


def add_lease(kube: FakeKube, name: str, *, skew_s: float = 0.0) -> None:
    kube.put("Lease", {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                       "metadata": {"name": name, "namespace": "kube-node-lease"},
                       "spec": {"holderIdentity": name, "leaseDurationSeconds": 2,
                                "renewTime": format_micro_time(_clock(skew_s))}})


def add_pod(kube: FakeKube, name: str, *, node: str) -> None:
    kube.put("Pod", {"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": name, "namespace": "work", "uid": f"uid-{name}"},
                     "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}})


def set_edge(kube: FakeKube, name: str, status: str | None, *, skew_s: float = 0.0) -> None:
    """What the agents sign: ``name``'s peers see it alive ("True"), dead ("False") or nothing, in
    statements naming the controller's current beacon (``skew_s`` is ignored: signed evidence carries
    no timestamp at all)."""
    edge = getattr(kube, "signed_edge", None)
    if edge is None:
        edge = kube.signed_edge = SignedEdge()  # type: ignore[attr-defined]
    edge.set(name, status)
    edge.sync_fake(kube)


async def kubelet(kube: FakeKube, name: str, *, skew_s: float, alive: Callable[[], bool] = lambda: True,
                  edge: Callable[[], str | None] = lambda: "True", edge_skew_s: float | None = None,
                  every_s: float = 0.4) -> None:
    """A node whose kubelet renews its Lease, and whose peers publish a verdict, with skewed clocks."""
    while True:
        if alive():
            lease = kube.obj("Lease", name, "kube-node-lease")
            lease["spec"]["renewTime"] = format_micro_time(_clock(skew_s))
            kube.put("Lease", lease)
        status = edge()
        if status is not None:
            set_edge(kube, name, status, skew_s=skew_s if edge_skew_s is None else edge_skew_s)
        await asyncio.sleep(every_s)


def taints(kube: FakeKube, name: str) -> set[str]:
    return {f"{t['key']}:{t['effect']}" for t in kube.obj("Node", name)["spec"].get("taints") or []}


async def eventually(check: Callable[[], bool], *, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def running(kube: FakeKube, **kwargs) -> AsyncIterator[Reconciler]:  # type: ignore[no-untyped-def]
    settings = {"resync_s": 2.0, "hold_interval_s": 0.5, "evidence_ttl_s": 2.0, "beacon_period_s": 0.2, **kwargs}
    rec = Reconciler(client=kube, config=CONFIG, metrics=ControllerMetrics(CollectorRegistry()),  # type: ignore[arg-type]
                     **settings)
    task = asyncio.create_task(rec.run())
    try:
        yield rec
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


# ---------------------------------------------------------------------------------------------------
# 1. freshness from observation, not from remote clocks
# ---------------------------------------------------------------------------------------------------


async def test_slow_and_fast_node_clocks_neither_taint_a_live_node_nor_hide_a_dead_one() -> None:
    """A live node whose clocks are an hour slow (its Lease renewTime and its peers' verdict times)
    is never tainted; a node whose clock is an hour fast is judged failed as soon as its renewals stop
    and its peers say so. Before: the slow one was tainted at once, the fast one never failed."""
    kube = FakeKube()
    for name, skew in (("slow", -HOUR), ("fast", HOUR)):
        add_node(kube, name)
        add_lease(kube, name, skew_s=skew)
    fast_alive = True
    fast_edge = "True"
    tasks = [asyncio.create_task(kubelet(kube, "slow", skew_s=-HOUR)),
             asyncio.create_task(kubelet(kube, "fast", skew_s=HOUR, alive=lambda: fast_alive,
                                         edge=lambda: fast_edge))]
    try:
        async with running(kube):
            started = time.monotonic()
            while time.monotonic() - started < 4.0:  # grace 1 s + confirmation 1 s, twice over
                assert taints(kube, "slow") == set(), "a live node with a slow clock was tainted"
                assert taints(kube, "fast") == set(), "a live node with a fast clock was tainted"
                await asyncio.sleep(0.1)
            assert "edgewatch.io/state" not in kube.obj("Node", "slow")["metadata"]["annotations"]
            fast_alive, fast_edge = False, "False"  # the fast node dies; its peers see it dead
            killed = time.monotonic()
            await eventually(lambda: f"{FAILED_TAINT_KEY}:NoExecute" in taints(kube, "fast"), timeout_s=5,
                             what="the fast-clock node judged failed")
            assert time.monotonic() - killed < 3.0  # grace 1 s + a verdict refresh
            assert taints(kube, "slow") == set()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_autonomy_hold_moves_renew_time_forward_past_a_fast_clock() -> None:
    """A dead node whose last renewTime is an hour ahead of the controller's clock: the autonomy hold
    must still renew (stock kube-controller-manager only counts a renewTime later than the last one),
    so it writes just after the current renewTime rather than its own, earlier, clock."""
    kube = FakeKube()
    add_node(kube, "n1")
    add_lease(kube, "n1", skew_s=HOUR)  # never renewed again: the node is dead
    before = kube.obj("Lease", "n1", "kube-node-lease")["spec"]["renewTime"]
    async with running(kube):
        def held() -> bool:
            lease = kube.obj("Lease", "n1", "kube-node-lease")
            return (lease["metadata"].get("annotations") or {}).get(DELEGATED_VIA_ANNOTATION) == "autonomy"

        await eventually(held, timeout_s=5, what="the autonomy hold")
        lease = kube.obj("Lease", "n1", "kube-node-lease")
        assert lease["spec"]["renewTime"] > before  # MicroTime text in UTC sorts as time
        ann = lease["metadata"]["annotations"]
        assert ann[DELEGATE_HEARTBEAT_ANNOTATION] == "true"
        assert ann[DELEGATED_RENEW_TIME_ANNOTATION] == lease["spec"]["renewTime"]
        # and the hold is no heartbeat: the node is still unknown (no edge evidence), tainted
        await eventually(lambda: f"{CLOUD_UNREACHABLE_TAINT_KEY}:NoSchedule" in taints(kube, "n1"), timeout_s=5,
                         what="unknown taint on a held node")


# ---------------------------------------------------------------------------------------------------
# 2. coverage
# ---------------------------------------------------------------------------------------------------


def add_config(kube: FakeKube, **data: str) -> None:
    kube.put("ConfigMap", {"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "edgewatch-config", "namespace": "edgewatch"},
                           "data": {"grouping": "off", **data}})


async def test_uncovered_node_gets_stock_behaviour_and_loses_leftovers_once() -> None:
    kube = FakeKube()
    add_config(kube, coverLabel=POOL_LABEL)
    leftovers = {"edgewatch.io/state": "unknown", "edgewatch.io/unreachable-since": "2024-01-01T00:00:00Z",
                 "keep.example/me": "1"}
    add_node(kube, "cloud-1", annotations=leftovers,
             taints=[{"key": CLOUD_UNREACHABLE_TAINT_KEY, "effect": "NoSchedule"},
                     {"key": "dedicated", "value": "db", "effect": "NoSchedule"}])
    add_node(kube, "edge-1", labels={POOL_LABEL: "a"})
    for name in ("cloud-1", "edge-1"):
        add_lease(kube, name)  # neither is renewed again: both dead, no edge evidence
    async with running(kube):
        await eventually(lambda: taints(kube, "cloud-1") == {"dedicated:NoSchedule"}, timeout_s=5,
                         what="edgewatch's leftovers removed from the uncovered node")
        ann = kube.obj("Node", "cloud-1")["metadata"]["annotations"]
        assert ann == {"keep.example/me": "1"}
        # the covered node is held and tainted, the uncovered one neither
        await eventually(lambda: f"{CLOUD_UNREACHABLE_TAINT_KEY}:NoSchedule" in taints(kube, "edge-1"),
                         timeout_s=5, what="covered node tainted")
        await asyncio.sleep(1.0)
        assert taints(kube, "cloud-1") == {"dedicated:NoSchedule"}
        cloud_lease = kube.obj("Lease", "cloud-1", "kube-node-lease")
        assert not (cloud_lease["metadata"].get("annotations") or {}), "the uncovered node's Lease was held"
        assert not any(e["involvedObject"]["name"] == "cloud-1" and e["reason"].startswith("Edgewatch")
                       and e["reason"] != "EdgewatchUncovered" for e in kube.events)
        # the ConfigMap changes: every node is covered now, and cloud-1 is planned at once
        add_config(kube, coverLabel="")
        await eventually(lambda: f"{CLOUD_UNREACHABLE_TAINT_KEY}:NoSchedule" in taints(kube, "cloud-1"),
                         timeout_s=5, what="cloud-1 covered after the ConfigMap change")


async def test_invalid_config_keeps_the_previous_coverage() -> None:
    kube = FakeKube()
    add_config(kube, coverLabel=POOL_LABEL)
    add_node(kube, "cloud-1")
    add_lease(kube, "cloud-1")
    async with running(kube):
        await asyncio.sleep(0.5)
        add_config(kube, coverLabel=POOL_LABEL, typo="1")  # refused: unknown key
        await asyncio.sleep(3.0)
        assert taints(kube, "cloud-1") == set()


# ---------------------------------------------------------------------------------------------------
# 3. one stuck node never blocks another
# ---------------------------------------------------------------------------------------------------


async def test_a_stuck_eviction_does_not_stop_another_node_from_being_tainted() -> None:
    kube = FakeKube()
    add_node(kube, "a")
    add_node(kube, "b")
    add_lease(kube, "a")
    add_lease(kube, "b")
    add_pod(kube, "victim", node="a")
    stuck = asyncio.Event()

    async def hang(pod: str, namespace: str) -> None:
        stuck.set()
        await asyncio.sleep(3600)  # an eviction that never answers

    kube.hooks["evict"] = hang
    b_alive = True
    tasks = [asyncio.create_task(kubelet(kube, "b", skew_s=0.0, alive=lambda: b_alive))]
    set_edge(kube, "a", "False")
    try:
        async with running(kube):
            await asyncio.wait_for(stuck.wait(), 5)  # a is failed, and its eviction hangs
            b_alive = False  # now b is cut off (its peers still see it healthy)
            await eventually(lambda: f"{CLOUD_UNREACHABLE_TAINT_KEY}:NoSchedule" in taints(kube, "b"),
                             timeout_s=5, what="b tainted while a's eviction is stuck")
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_edge_condition_is_written_on_verdict_change_and_counts_only_rarely() -> None:
    """EdgeHealthy is written when its status or reason changes; a change of the counts alone (the
    message) waits VERDICT_MESSAGE_REFRESH_S: in a group of 1,000 one death moves the counts of all
    999 others, and every Node write is a watch event for every Node watcher."""
    from lightkube.resources.core_v1 import Node

    from edgewatch.controller import reconciler as reconciler_module
    from edgewatch.controller.verified import CountedVerdict
    from edgewatch.core.quorum import decision_from_counts
    from edgewatch.core.types import NodeName

    kube = FakeKube()
    add_node(kube, "n1")
    now = [1000.0]
    rec = Reconciler(client=kube, config=CONFIG, metrics=ControllerMetrics(CollectorRegistry()),  # type: ignore[arg-type]
                     clock=lambda: now[0])

    def hold(alive: int, dead: int) -> None:
        decision = decision_from_counts(NodeName("n1"), alive=alive, dead=dead, group_size=1000, votes_counted=1000)
        rec.verified._verdicts[NodeName("n1")] = CountedVerdict(decision=decision, since=0.0)  # noqa: SLF001

    async def show() -> int:
        before = sum(1 for c in kube.calls if c[0] == "patch")
        await rec._show_verdict(Node.from_dict(kube.obj("Node", "n1")))  # noqa: SLF001
        return sum(1 for c in kube.calls if c[0] == "patch") - before

    hold(999, 0)
    assert await show() == 1  # first time: written
    assert await show() == 0  # unchanged
    hold(998, 1)  # a peer died: only the counts moved
    assert await show() == 0
    now[0] += reconciler_module.VERDICT_MESSAGE_REFRESH_S
    assert await show() == 1  # refreshed, rarely
    hold(300, 700)  # the verdict itself changed: at once
    assert await show() == 1
    condition = next(c for c in kube.obj("Node", "n1")["status"]["conditions"] if c["type"] == EDGE_CONDITION_TYPE)
    assert condition["status"] == "False"


async def test_steady_state_reconciles_read_the_watched_copy_not_the_api() -> None:
    """A node is reconciled on every Lease renewal; reading the Node and the Lease from the API each
    time cost ≈ 500 GETs per second at 1,000 nodes (bench/api_scale.py). The watch's copy is used;
    after our own write the API is read until the watch has delivered that write."""
    kube = FakeKube()
    for name in ("n1", "n2"):
        add_node(kube, name)
        add_lease(kube, name)
    tasks = [asyncio.create_task(kubelet(kube, name, skew_s=0.0)) for name in ("n1", "n2")]
    try:
        async with running(kube) as rec:
            await eventually(lambda: len(rec.plans) == 2 and rec.metrics.reconciles.labels(result="ok")._value.get() > 10,
                             timeout_s=10, what="a few reconciles")
            before = len(kube.calls)
            done = rec.metrics.reconciles.labels(result="ok")._value.get()
            skipped = rec.metrics.reconciles_skipped._value.get()
            await asyncio.sleep(1.5)  # Lease renewals every 0.4 s: looks go on (reconciles or skips)
            gets = [c for c in kube.calls[before:] if c[0] == "get" and c[1] in ("Node", "Lease") and c[2] in ("n1", "n2")]
            looks = rec.metrics.reconciles.labels(result="ok")._value.get() + rec.metrics.reconciles_skipped._value.get()
            assert looks > done + skipped + 4
            assert gets == [], gets
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_normal_nodes_own_renewal_moves_its_deadline_instead_of_reconciling() -> None:
    """At 1,000 nodes a reconcile per Lease renewal was ≈ 180 a second where nothing changed
    (docs/scaling.md). A normal node's own renewal now only moves the moment it is looked at again; when the
    renewals stop, it is reconciled at that moment and judged as before."""
    kube = FakeKube()
    add_node(kube, "n1")
    add_lease(kube, "n1")
    alive = True
    task = asyncio.create_task(kubelet(kube, "n1", skew_s=0.0, alive=lambda: alive))
    try:
        async with running(kube) as rec:
            await eventually(lambda: "n1" in rec.plans and rec.metrics.reconciles_skipped._value.get() > 0,
                             timeout_s=10, what="a renewal skipped")
            await asyncio.sleep(1.0)  # the first verdicts and their condition writes settle
            ok = rec.metrics.reconciles.labels(result="ok")._value.get()
            skipped = rec.metrics.reconciles_skipped._value.get()
            await asyncio.sleep(2.4)  # six renewals, grace 1 s: none needs a reconcile (a 2 s resync does one)
            assert rec.metrics.reconciles_skipped._value.get() >= skipped + 4
            assert rec.metrics.reconciles.labels(result="ok")._value.get() <= ok + 3
            alive = False  # the heartbeat stops: the deadline is the next look
            stopped = time.monotonic()
            await eventually(lambda: f"{CLOUD_UNREACHABLE_TAINT_KEY}:NoSchedule" in taints(kube, "n1"), timeout_s=6,
                             what="the silent node tainted cloud-unreachable")
            assert time.monotonic() - stopped < 4.0  # grace 1 s + confirmation 1 s, with slack
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_look_that_finds_nothing_new_keeps_the_plan_and_deadlines_still_fire(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The resync looks at every node every ``resync_s``; a node whose inputs are unchanged
    and whose plan's next deadline has not come keeps its plan: no plan, no write. A time-driven
    change still happens on time: a node without a Lease (nothing to hold) and without edge evidence
    is tainted when its outage is confirmed and fails when its autonomy time (3 s) runs out, while the
    resyncs in between (every 0.25 s) plan nothing; a live node's resyncs plan nothing at all."""
    from edgewatch.controller import reconciler as reconciler_module

    planned: list[tuple[str, float]] = []  # (node, now) of every plan made
    real_plan = reconciler_module.plan

    def counting_plan(**kwargs):  # type: ignore[no-untyped-def]
        planned.append((kwargs["node"].name, kwargs["now"]))
        return real_plan(**kwargs)

    monkeypatch.setattr(reconciler_module, "plan", counting_plan)
    kube = FakeKube()
    add_node(kube, "gone", annotations={AUTONOMY_DURATION_ANNOTATION: "3s"})
    add_node(kube, "live")
    add_lease(kube, "live")
    task = asyncio.create_task(kubelet(kube, "live", skew_s=0.0, edge=lambda: None))  # no evidence needed
    failed = f"{FAILED_TAINT_KEY}:NoExecute"
    try:
        async with running(kube, resync_s=0.25) as rec:
            await eventually(lambda: f"{CLOUD_UNREACHABLE_TAINT_KEY}:NoSchedule" in taints(kube, "gone"),
                             timeout_s=5, what="the silent node tainted once its outage is confirmed")
            await asyncio.sleep(0.3)  # our writes come back through the watch: the plan settles
            before = rec.plans["gone"]
            assert before.effective_state is NodeState.UNKNOWN and before.fail_at is not None
            assert failed not in taints(kube, "gone")
            reused = rec.metrics.plans_reused._value.get()
            seen = len(planned)
            await eventually(lambda: failed in taints(kube, "gone"), timeout_s=6,
                             what="the node failed when its autonomy time runs out")
            late = rec.clock() - before.fail_at
            assert 0 <= late < 0.5, late  # on time: the deadline was never skipped
            assert rec.plans["gone"].effective_state is NodeState.FAILED
            gauge = {state.value: rec.metrics.nodes.labels(state=state.value)._value.get() for state in NodeState}
            assert gauge == {"normal": 1, "disconnected": 0, "failed": 1, "unknown": 0}, gauge
            since = planned[seen:]
            # no plan of the silent node before its deadline (every look reused the plan), one at it
            assert [now for name, now in since if name == "gone" and now < before.fail_at] == []
            assert any(name == "gone" for name, _ in since)
            assert sum(name == "live" for name, _ in since) <= 1
            assert rec.metrics.plans_reused._value.get() - reused >= 8  # both nodes' resyncs, and more
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_the_resync_looks_at_every_node_without_a_list() -> None:
    """Every ``resync_s`` every node is looked at again; its names come from the shared Node
    informer's store, as client-go's informers resync from their cache: the only Node LIST is the
    informer's own first one (a LIST of 1,000 Nodes every 30 s was about a tenth of the controller's
    CPU)."""
    kube = FakeKube()
    for name in ("n1", "n2", "n3"):
        add_node(kube, name)
        add_lease(kube, name)
    async with running(kube, resync_s=0.2) as rec:
        await eventually(lambda: len(rec.plans) == 3, timeout_s=5, what="every node planned")
        await asyncio.sleep(0.5)
        looks = rec.metrics.reconciles.labels(result="ok")._value.get()
        await asyncio.sleep(2.6)
        assert [c for c in kube.calls if c[:2] == ("list", "Node")] == [("list", "Node")]  # the informer's
        assert rec.node_informer.informer.lists == 1
        assert rec.metrics.reconciles.labels(result="ok")._value.get() - looks >= 3 * 10  # every node, every resync


async def test_the_reconciler_and_the_roster_publisher_share_one_node_watch() -> None:
    """One Node informer (one LIST, one watch) feeds both the reconciler and the roster
    publisher; before, each had its own, and every Node event came twice."""
    kube = FakeKube()
    for name in ("n1", "n2"):
        add_node(kube, name)
        add_lease(kube, name)
    async with running(kube) as rec:
        await eventually(lambda: len(rec.plans) == 2 and rec.rosters.synced.is_set(), timeout_s=5,
                         what="both nodes planned and the roster publisher synced")
        await eventually(lambda: ("ConfigMap", "edgewatch", "edgewatch-roster") in kube.objects, timeout_s=5,
                         what="the roster published")
        add_node(kube, "n3")  # one event, to both subscribers
        await eventually(lambda: "n3" in rec.plans and "n3" in rec.rosters.labels, timeout_s=5,
                         what="n3 seen by the reconciler and the roster publisher")
        node_watches = [w for w in kube.watchers if w[0] == "Node"]
        assert len(node_watches) == 1, node_watches
        assert [c for c in kube.calls if c[:2] == ("watch", "Node")] == [("watch", "Node")]
        assert [c for c in kube.calls if c[:2] == ("list", "Node")] == [("list", "Node")]


async def test_a_node_deleted_while_the_watch_was_down_is_forgotten_after_the_relist() -> None:
    """The Node watch breaks; a Node is deleted meanwhile; the watch cannot resume (410: the history
    is gone) and the informer lists again. The store hands the reconciler and the roster publisher
    that deletion as DELETED (a re-established watch of old only started with ADDED for what
    exists: the node stayed known for ever)."""
    kube = FakeKube()
    for name in ("n1", "n2"):
        add_node(kube, name)
        add_lease(kube, name)
    gone_once = asyncio.Event()

    async def watch_gone(kind: str) -> None:
        if kind == "Node" and gone_once.is_set():
            gone_once.clear()
            raise api_error(410, "too old resource version")

    async with running(kube) as rec:
        await eventually(lambda: len(rec.plans) == 2 and rec.rosters.synced.is_set() and "n2" in rec.rosters.labels,
                         timeout_s=5, what="both nodes planned and in the roster")
        assert rec.verified.group_of(NodeName("n2")) == {"n1", "n2"}
        kube.hooks["watch"] = watch_gone
        gone_once.set()
        (node_watch,) = [w for w in kube.watchers if w[0] == "Node"]
        node_watch[3].put_nowait(("ERROR", {"kind": "Status", "code": 500, "message": "cut"}))  # the watch breaks
        await eventually(lambda: not [w for w in kube.watchers if w[0] == "Node"], timeout_s=5,
                         what="the Node watch closed")
        await kube.delete(Node, "n2")  # nobody watches Nodes: the deletion is missed
        await eventually(lambda: rec.node_informer.informer.lists == 2, timeout_s=5, what="the Node re-list")
        assert rec.node_informer.names() == ["n1"]
        assert "n2" not in rec.plans and "n2" not in rec._labels  # noqa: SLF001
        assert "n2" not in rec.rosters.labels and rec.verified.group_of(NodeName("n2")) is None
        assert rec.verified.group_of(NodeName("n1")) == {"n1"}
        await asyncio.sleep(0.3)
        assert set(rec.plans) == {"n1"}

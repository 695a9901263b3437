"""The controller on the real control plane, next to the stock kube-controller-manager and
kube-scheduler at short timings (20 s grace, 30 s tolerations).

The edge's side is played by the test itself, exactly as agents write it: the EdgeHealthy
condition on each node and, for a cut-off node, its Lease renewed with the delegate mark
(``edgewatch.kube.leases.renew_on_behalf``). The agents themselves are tested elsewhere; here
the question is what the controller makes of that evidence.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import secrets
import time

import pytest
from lightkube import ApiError, AsyncClient
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ConfigMap, Namespace, Node, Pod
from prometheus_client import CollectorRegistry

from edgewatch.controller.metrics import ControllerMetrics
from edgewatch.controller.model import ControllerConfig
from edgewatch.controller.reconciler import Reconciler
from edgewatch.kube.leases import clear_stale_mark, is_marked, renew_on_behalf
from edgewatch.names import (
    IDENTITY_NAMESPACE,
    CLOUD_UNREACHABLE_TAINT_KEY,
    DELEGATE_HEARTBEAT_ANNOTATION,
    DELEGATED_RENEW_TIME_ANNOTATION,
    DELEGATED_VIA_ANNOTATION,
    FAILED_TAINT_KEY,
    NODE_LEASE_NAMESPACE,
    POOL_LABEL,
)
from edgewatch_lab.testing.evidence import SignedEdge
from edgewatch.timefmt import format_micro_time, format_rfc3339
from edgewatch_lab.testing.kubeletsim import KubeletFleet, KubeletSimConfig, SimNode
from edgewatch_lab.testing.smoke import ready_endpoints, wait_for
from edgewatch_lab.testing.workload import sample_deployment, sample_service

pytestmark = pytest.mark.controlplane


class EdgeStandIn:
    """Plays the agents: signed statements of every node (the ``verdict`` its peers see, in evidence
    Leases naming the controller's beacon, ``edgewatch_lab.testing.evidence``) and, for cut nodes, a
    peer's delegated Lease renewal carrying the node's own statement."""

    def __init__(self, client: AsyncClient, nodes: list[str], *, namespace: str, skew_s: float = 0.0) -> None:
        self.client = client
        self.verdict: dict[str, str | None] = {n: "True" for n in nodes}
        self.carried: set[str] = set()
        self.signed = SignedEdge(beacon_namespace=namespace)
        self.skew_s = skew_s  # the agents' clock: signed evidence carries none, so it cannot matter

    async def run(self) -> None:
        while True:
            now = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=self.skew_s)
            for node, status in list(self.verdict.items()):
                self.signed.set(node, status)
            carriers = [n for n, s in self.verdict.items() if s == "True" and n not in self.carried]
            for node in self.verdict:
                self.signed.carry(node, by=carriers[0] if node in self.carried and carriers else None)
            with contextlib.suppress(Exception):
                await self.signed.publish(self.client)
            for node in self.carried:
                await renew_on_behalf(client=self.client, node=node, delegate="stand-in", via="peer", alive_at=now)
            await asyncio.sleep(2)


async def _grouped(kube: AsyncClient, ns: str) -> None:
    """The test's own ConfigMap: grouping on by the pool label (each test's nodes are a group of their
    own, whatever other nodes the shared control plane holds), and the identity namespace."""
    await kube.create(ConfigMap.from_dict({"metadata": {"name": "edgewatch-config", "namespace": ns},
                                           "data": {"grouping": "on", "groupLabel": POOL_LABEL}}))
    with contextlib.suppress(ApiError):
        await kube.create(Namespace.from_dict({"metadata": {"name": IDENTITY_NAMESPACE}}))


@pytest.fixture
async def cluster(kube):  # type: ignore[no-untyped-def]
    """Four simulated nodes, a Deployment of 8 pods on them behind a Service, the edge stand-in and
    a running reconciler. Yields a dict of handles."""
    suffix = secrets.token_hex(2)
    names = [f"ctl{suffix}-{i}" for i in range(1, 5)]
    ns = f"ctl-{suffix}"
    await kube.create(Namespace.from_dict({"metadata": {"name": ns}}))
    await _grouped(kube, ns)
    fleet = KubeletFleet(client=kube, nodes=[SimNode(name=n, address="127.0.0.1", index=i + 20,
                                                     labels={POOL_LABEL: ns})
                                             for i, n in enumerate(names)],
                         config=KubeletSimConfig(healthz_port=None))
    edge = EdgeStandIn(kube, names, namespace=ns)
    state: dict = {"fleet": fleet, "edge": edge, "names": names, "ns": ns}

    def start_reconciler() -> asyncio.Task[None]:
        # The edgewatch-config ConfigMap is looked up in the test's own namespace (there is none:
        # every node is covered), never in a namespace another test module may have filled.
        rec = Reconciler(client=kube, config=ControllerConfig(), metrics=ControllerMetrics(CollectorRegistry()),
                         namespace=ns, resync_s=5)
        state["reconciler"] = rec
        return asyncio.create_task(rec.run())

    state["start_reconciler"] = start_reconciler
    tasks = [asyncio.create_task(fleet.run()), asyncio.create_task(edge.run())]
    state["reconciler_task"] = start_reconciler()
    try:
        await asyncio.wait_for(fleet.registered.wait(), 30)

        async def schedulable() -> bool:
            # New Nodes carry node.kubernetes.io/not-ready until kube-controller-manager sees them
            # Ready; pods created before that would pile onto the first node cleared.
            for n in names:
                node = await kube.get(Node, n)
                if any(t.key.startswith("node.kubernetes.io/") for t in (node.spec.taints or [])):
                    return False
            return True

        await wait_for(schedulable, timeout_s=60, what="nodes schedulable")
        deployment = sample_deployment(namespace=ns, replicas=8)
        deployment.spec.template.spec.affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": names}]}]}}}
        await kube.create(sample_service(namespace=ns))
        await kube.create(deployment)

        async def serving() -> bool:
            return len(await ready_endpoints(kube, namespace=ns, service="sample")) == 8

        await wait_for(serving, timeout_s=90, what="8 ready endpoints")
        # Tests take nodes from here, busiest first, so the node they fault always has pods.
        counts = {n: len(await _pods_on(kube, ns, n)) for n in names}
        state["by_load"] = sorted(names, key=lambda n: -counts[n])
        yield state
        rec = state["reconciler"]
        assert not state["reconciler_task"].done(), "the reconciler must never die"
        crashes = rec.metrics.registry.get_sample_value("edgewatch_controller_reconciles_total", {"result": "crash"})
        assert not crashes, f"{crashes} reconciles crashed"
    finally:
        for task in [*tasks, state["reconciler_task"]]:
            task.cancel()
        await asyncio.gather(*tasks, state["reconciler_task"], return_exceptions=True)
        await kube.delete(Namespace, ns)
        for n in names:
            with contextlib.suppress(Exception):
                await kube.delete(Node, n)


async def _pods_on(kube, ns: str, node: str) -> list[Pod]:  # type: ignore[no-untyped-def]
    return [p async for p in kube.list(Pod, namespace=ns) if p.spec.nodeName == node]


async def _taints(kube, node: str) -> set[str]:  # type: ignore[no-untyped-def]
    n = await kube.get(Node, node)
    return {f"{t.key}:{t.effect}" for t in (n.spec.taints or [])}


async def test_disconnected_node_keeps_pods_and_endpoints_and_gets_no_new_pods(kube, cluster) -> None:  # type: ignore[no-untyped-def]
    ns, cut = cluster["ns"], cluster["by_load"][0]
    own_pods = {p.metadata.name for p in await _pods_on(kube, ns, cut)}
    assert own_pods, "the workload should have pods on every node"
    cluster["fleet"].kill(cut)          # its own heartbeat stops reaching the cloud ...
    cluster["edge"].carried.add(cut)    # ... a peer carries it, and the peers still see it healthy
    started = time.monotonic()
    tainted_at = None
    # Watch for longer than grace (20 s) + toleration (30 s): stock Kubernetes would have evicted.
    while time.monotonic() - started < 65:
        pods = {p.metadata.name: p for p in await _pods_on(kube, ns, cut)}
        assert set(pods) == own_pods, "no pod of a disconnected node may leave"
        assert all(p.metadata.deletionTimestamp is None for p in pods.values())
        ready = set(await ready_endpoints(kube, namespace=ns, service="sample"))
        assert own_pods <= ready, f"pods of a disconnected node left the endpoints: {own_pods - ready}"
        node = await kube.get(Node, cut)
        assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions), "went NotReady"
        if tainted_at is None and f"{CLOUD_UNREACHABLE_TAINT_KEY}:NoSchedule" in await _taints(kube, cut):
            tainted_at = time.monotonic() - started
        await asyncio.sleep(1)
    assert tainted_at is not None, "a disconnected node must get the NoSchedule taint"
    assert f"{FAILED_TAINT_KEY}:NoExecute" not in await _taints(kube, cut)
    # No new pods land on it: scale up and check where the new ones go.
    await kube.patch(Deployment, "sample", {"spec": {"replicas": 12}}, namespace=ns)

    async def scaled() -> bool:
        return len(await ready_endpoints(kube, namespace=ns, service="sample")) == 12

    await wait_for(scaled, timeout_s=60, what="12 ready endpoints")
    assert {p.metadata.name for p in await _pods_on(kube, ns, cut)} == own_pods
    # The node's own kubelet comes back: the taint goes.
    cluster["edge"].carried.discard(cut)
    cluster["fleet"].revive(cut)

    async def untainted() -> bool:
        return f"{CLOUD_UNREACHABLE_TAINT_KEY}:NoSchedule" not in await _taints(kube, cut)

    await wait_for(untainted, timeout_s=40, what="taint removed after reconnect")


async def test_failed_node_pods_are_evicted_fast_and_replaced(kube, cluster) -> None:  # type: ignore[no-untyped-def]
    ns, dead = cluster["ns"], cluster["by_load"][0]
    victims = {p.metadata.name for p in await _pods_on(kube, ns, dead)}
    assert victims
    cluster["fleet"].kill(dead)
    killed = time.monotonic()
    await asyncio.sleep(5)               # the agents need ~5-6 s to agree it is dead
    cluster["edge"].verdict[dead] = "False"

    async def all_evicted() -> bool:
        pods = {p.metadata.name: p for p in await _pods_on(kube, ns, dead)}
        return all(pods[v].metadata.deletionTimestamp is not None for v in victims if v in pods)

    await wait_for(all_evicted, timeout_s=40, interval_s=0.25, what="pods of the failed node evicted")
    eviction_s = time.monotonic() - killed
    # Stock Kubernetes at these timings: 20 s grace + 30 s toleration = about 50 s.
    assert eviction_s < 20, f"eviction took {eviction_s:.1f} s"
    assert f"{FAILED_TAINT_KEY}:NoExecute" in await _taints(kube, dead)

    async def replaced() -> bool:
        return len(await ready_endpoints(kube, namespace=ns, service="sample")) == 8

    await wait_for(replaced, timeout_s=60, what="replacements ready elsewhere")
    print(f"\nkill -> eviction: {eviction_s:.1f} s")


async def test_controller_restart_mid_outage_leaves_no_stuck_taint(kube, cluster) -> None:  # type: ignore[no-untyped-def]
    edge, fleet = cluster["edge"], cluster["fleet"]
    cut = cluster["by_load"][1]
    fleet.kill(cut)
    edge.carried.add(cut)

    async def tainted() -> bool:
        return f"{CLOUD_UNREACHABLE_TAINT_KEY}:NoSchedule" in await _taints(kube, cut)

    await wait_for(tainted, timeout_s=60, what="disconnected taint")
    node = await kube.get(Node, cut)
    assert (node.metadata.annotations or {}).get("edgewatch.io/state") == "disconnected"
    # The controller dies mid-outage; meanwhile the node reconnects.
    cluster["reconciler_task"].cancel()
    await asyncio.gather(cluster["reconciler_task"], return_exceptions=True)
    edge.carried.discard(cut)
    fleet.revive(cut)
    await asyncio.sleep(12)
    assert await tainted(), "nobody removes the taint while the controller is down"
    # A new controller starts from what the API shows: the outage is over, the taint goes.
    cluster["reconciler_task"] = cluster["start_reconciler"]()

    async def untainted() -> bool:
        n = await kube.get(Node, cut)
        return (not await tainted()) and "edgewatch.io/state" not in (n.metadata.annotations or {})

    await wait_for(untainted, timeout_s=30, what="taint and state removed by the new controller")


# ---------------------------------------------------------------------------------------------------
# Clock skew, coverage, and the stale-mark race, on nodes without a workload (quicker)
# ---------------------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def bare_nodes(kube, names: list[str], *, labels: dict[str, dict[str, str]] | None = None,  # type: ignore[no-untyped-def]
                     grouping: bool = True):
    """Simulated nodes (no pods), a namespace for the test's ConfigMap, and a reconciler reading it.
    With ``grouping`` every node is a group of its own (its pool label names it) and the ConfigMap
    says so; without, the test writes its own ConfigMap."""
    suffix = secrets.token_hex(2)
    ns = f"ctl-{suffix}"
    await kube.create(Namespace.from_dict({"metadata": {"name": ns}}))
    if grouping:
        await _grouped(kube, ns)
        labels = {n: {POOL_LABEL: f"{ns}-{n}", **(labels or {}).get(n, {})} for n in names}
    nodes = [SimNode(name=f"{n}-{suffix}", address="127.0.0.1", index=i + 40, labels=(labels or {}).get(n, {}))
             for i, n in enumerate(names)]
    fleet = KubeletFleet(client=kube, nodes=nodes, config=KubeletSimConfig(healthz_port=None))
    state: dict = {"fleet": fleet, "ns": ns, "name": {n: f"{n}-{suffix}" for n in names}, "tasks": []}
    state["tasks"].append(asyncio.create_task(fleet.run()))
    try:
        await asyncio.wait_for(fleet.registered.wait(), 30)

        def start_reconciler() -> Reconciler:
            rec = Reconciler(client=kube, config=ControllerConfig(), metrics=ControllerMetrics(CollectorRegistry()),
                             namespace=ns, resync_s=5)
            state["tasks"].append(asyncio.create_task(rec.run()))
            return rec

        state["start_reconciler"] = start_reconciler
        yield state
    finally:
        for task in state["tasks"]:
            task.cancel()
        await asyncio.gather(*state["tasks"], return_exceptions=True)
        await kube.delete(Namespace, ns)
        for node in nodes:
            with contextlib.suppress(Exception):
                await kube.delete(Node, node.name)


async def skewed_kubelet(kube, node: str, *, skew_s: float, alive: asyncio.Event) -> None:  # type: ignore[no-untyped-def]
    """A kubelet whose clock is ``skew_s`` off: renews its Lease every 10 s while ``alive`` is set."""
    while True:
        await alive.wait()
        when = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=skew_s)
        spec = {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": format_micro_time(when)}
        with contextlib.suppress(Exception):
            try:
                await kube.patch(Lease, node, {"spec": spec}, namespace=NODE_LEASE_NAMESPACE)
            except ApiError as exc:
                if exc.status.code != 404:
                    raise
                await kube.create(Lease.from_dict({"metadata": {"name": node, "namespace": NODE_LEASE_NAMESPACE},
                                                   "spec": spec}))
        await asyncio.sleep(10)


async def test_node_clocks_minutes_off_are_judged_by_what_the_controller_saw(kube) -> None:  # type: ignore[no-untyped-def]
    """One node (kubelet and agents) runs 60 s slow, one 120 s fast. The slow one is never tainted (it
    renews: the controller sees its Lease change); the fast one, once dead, is judged failed as fast as
    a node with a right clock. Before: a node >= 22 s slow was tainted and >= 30 s slow evicted, and a
    fast node's last renewal looked fresh for 120 s more."""
    async with bare_nodes(kube, ["slow", "fast"]) as env:
        slow, fast = env["name"]["slow"], env["name"]["fast"]
        for n in (slow, fast):
            env["fleet"].kill(n)  # the simulator's own (true-clock) renewals stop; ours take over
            # a new Lease, as a kubelet with that clock would have written from the start
            await kube.delete(Lease, n, namespace=NODE_LEASE_NAMESPACE)
        alive = {slow: asyncio.Event(), fast: asyncio.Event()}
        for event in alive.values():
            event.set()
        edges = {slow: EdgeStandIn(kube, [slow], namespace=env["ns"], skew_s=-60),
                 fast: EdgeStandIn(kube, [fast], namespace=env["ns"], skew_s=120)}
        env["tasks"].extend([asyncio.create_task(skewed_kubelet(kube, slow, skew_s=-60, alive=alive[slow])),
                             asyncio.create_task(skewed_kubelet(kube, fast, skew_s=120, alive=alive[fast])),
                             *(asyncio.create_task(e.run()) for e in edges.values())])
        await asyncio.sleep(2)
        env["start_reconciler"]()
        started = time.monotonic()
        while time.monotonic() - started < 45:  # grace 12 s + confirmation 20 s, and more
            for n in (slow, fast):
                assert not await _taints_of_ours(kube, n), f"{n} tainted while alive"
            await asyncio.sleep(1)
        node = await kube.get(Node, slow)
        assert "edgewatch.io/state" not in (node.metadata.annotations or {})
        alive[fast].clear()           # the fast node dies ...
        edges[fast].verdict[fast] = "False"  # ... and its peers see it dead
        died = time.monotonic()

        async def failed() -> bool:
            return f"{FAILED_TAINT_KEY}:NoExecute" in await _taints(kube, fast)

        await wait_for(failed, timeout_s=40, interval_s=0.25, what="the fast-clock node judged failed")
        detection_s = time.monotonic() - died
        assert detection_s < 25, f"took {detection_s:.1f} s (grace 12 s + one renew interval)"
        assert not await _taints_of_ours(kube, slow)
        print(f"\nfast-clock node: death -> failed taint {detection_s:.1f} s")


async def _taints_of_ours(kube, node: str) -> set[str]:  # type: ignore[no-untyped-def]
    return {t for t in await _taints(kube, node) if t.startswith("edgewatch.io/")}


async def test_uncovered_node_gets_stock_behaviour_and_coverage_follows_the_configmap(kube) -> None:  # type: ignore[no-untyped-def]
    async with bare_nodes(kube, ["cov", "unc"], labels={"cov": {POOL_LABEL: "a"}}, grouping=False) as env:
        cov, unc = env["name"]["cov"], env["name"]["unc"]
        ns = env["ns"]
        await kube.create(ConfigMap.from_dict({"metadata": {"name": "edgewatch-config", "namespace": ns},
                                               "data": {"grouping": "off", "coverLabel": POOL_LABEL}}))
        # unc carries what edgewatch left on it while it was covered
        await kube.patch(Node, unc, {"metadata": {"annotations": {"edgewatch.io/state": "unknown",
                                                                  "edgewatch.io/unreachable-since": format_rfc3339()}},
                                     "spec": {"taints": [{"key": CLOUD_UNREACHABLE_TAINT_KEY, "effect": "NoSchedule"}]}})
        for n in (cov, unc):
            env["fleet"].kill(n)  # both die; no agent publishes anything about either
        env["start_reconciler"]()

        async def released() -> bool:
            node = await kube.get(Node, unc)
            ann = node.metadata.annotations or {}
            return not await _taints_of_ours(kube, unc) and not any(k.startswith("edgewatch.io/") for k in ann)

        await wait_for(released, timeout_s=20, what="edgewatch's leftovers removed from the uncovered node")

        async def held() -> bool:
            lease = await kube.get(Lease, cov, namespace=NODE_LEASE_NAMESPACE)
            return (lease.metadata.annotations or {}).get(DELEGATED_VIA_ANNOTATION) == "autonomy"

        await wait_for(held, timeout_s=40, what="the covered node's Lease held")

        async def stock_unreachable() -> bool:
            return "node.kubernetes.io/unreachable:NoExecute" in await _taints(kube, unc)

        # stock Kubernetes judges the uncovered node alone: NotReady after its 20 s grace
        await wait_for(stock_unreachable, timeout_s=60, what="kube-controller-manager's unreachable taint on unc")
        lease = await kube.get(Lease, unc, namespace=NODE_LEASE_NAMESPACE)
        assert not (lease.metadata.annotations or {}), "the uncovered node's Lease was touched"
        assert not await _taints_of_ours(kube, unc)
        assert "node.kubernetes.io/unreachable:NoExecute" not in await _taints(kube, cov), "the hold failed"
        # every node covered now: unc is planned at once (its outage began long ago: confirmed)
        await kube.patch(ConfigMap, "edgewatch-config", {"data": {"coverLabel": ""}}, namespace=ns)

        async def covered_now() -> bool:
            node = await kube.get(Node, unc)
            return (node.metadata.annotations or {}).get("edgewatch.io/state") in ("unknown", "failed")

        await wait_for(covered_now, timeout_s=20, what="unc planned after the ConfigMap change")


class _RacingClient:
    """The real client, except that a delegate renews the Lease (a current mark) right before the
    first patch goes out: the moment between clear_stale_mark's read and its write."""

    def __init__(self, kube: AsyncClient, node: str) -> None:
        self.kube, self.node, self.raced = kube, node, False

    async def get(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        return await self.kube.get(*args, **kwargs)

    async def patch(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if not self.raced:
            self.raced = True
            result = await renew_on_behalf(client=self.kube, node=self.node, delegate="a-2", via="peer",
                                           alive_at=dt.datetime.now(dt.timezone.utc))
            assert result.outcome.value == "renewed", result
        return await self.kube.patch(*args, **kwargs)


async def test_clearing_a_stale_mark_never_removes_a_current_one(kube) -> None:  # type: ignore[no-untyped-def]
    async with bare_nodes(kube, ["mark"]) as env:
        node = env["name"]["mark"]
        env["fleet"].kill(node)
        stale = format_micro_time(dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=30))
        await kube.patch(Lease, node, {"metadata": {"annotations": {
            DELEGATE_HEARTBEAT_ANNOTATION: "true", DELEGATED_RENEW_TIME_ANNOTATION: stale,
            "edgewatch.io/delegated-by": "a-3", DELEGATED_VIA_ANNOTATION: "peer"}}}, namespace=NODE_LEASE_NAMESPACE)
        assert not is_marked(await kube.get(Lease, node, namespace=NODE_LEASE_NAMESPACE))
        racing = _RacingClient(kube, node)
        removed = await clear_stale_mark(client=racing, node=node)  # type: ignore[arg-type]
        lease = await kube.get(Lease, node, namespace=NODE_LEASE_NAMESPACE)
        assert racing.raced
        assert not removed and is_marked(lease), "a current mark written after the read was removed"
        assert (lease.metadata.annotations or {})["edgewatch.io/delegated-by"] == "a-2"
        # and once the kubelet renews by itself, the mark is stale and goes
        await kube.patch(Lease, node, {"spec": {"renewTime": format_micro_time(dt.datetime.now(dt.timezone.utc))}},
                         namespace=NODE_LEASE_NAMESPACE)
        assert await clear_stale_mark(client=kube, node=node)
        lease = await kube.get(Lease, node, namespace=NODE_LEASE_NAMESPACE)
        assert not any(k.startswith("edgewatch.io/") for k in (lease.metadata.annotations or {}))

"""The controller on the real control plane, next to the stock kube-controller-manager and
kube-scheduler at short timings (20 s grace, 30 s tolerations).

The edge's side is played by the test itself, exactly as agents write it: the EdgeHealthy
condition on each node and, for a cut-off node, its Lease renewed with the delegate mark
(``edgewatch.agent.delegation.renew_on_behalf``). The agents themselves are tested elsewhere; here
the question is what the controller makes of that evidence.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import secrets
import time

import pytest
from lightkube import AsyncClient
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Namespace, Node, Pod
from prometheus_client import CollectorRegistry

from edgewatch.agent.delegation import renew_on_behalf
from edgewatch.controller.decision import ControllerConfig
from edgewatch.controller.metrics import ControllerMetrics
from edgewatch.controller.reconciler import Reconciler
from edgewatch.names import CLOUD_UNREACHABLE_TAINT_KEY, EDGE_CONDITION_TYPE, FAILED_TAINT_KEY
from edgewatch.testing.kubeletsim import KubeletFleet, KubeletSimConfig, SimNode
from edgewatch.testing.smoke import ready_endpoints, wait_for
from edgewatch.testing.workload import sample_deployment, sample_service

pytestmark = pytest.mark.controlplane


class EdgeStandIn:
    """Writes what the agents would: EdgeHealthy per node, and delegated renewals for cut nodes."""

    def __init__(self, client: AsyncClient, nodes: list[str]) -> None:
        self.client = client
        self.verdict = {n: "True" for n in nodes}
        self.carried: set[str] = set()

    async def run(self) -> None:
        while True:
            now = dt.datetime.now(dt.timezone.utc)
            stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
            for node, status in self.verdict.items():
                with contextlib.suppress(Exception):
                    await self.client.patch(Node.Status, node, {"status": {"conditions": [{
                        "type": EDGE_CONDITION_TYPE, "status": status, "reason": "Test", "message": "test",
                        "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}]}})
            for node in self.carried:
                await renew_on_behalf(client=self.client, node=node, delegate="stand-in", via="peer", alive_at=now)
            await asyncio.sleep(3)


@pytest.fixture
async def cluster(kube):  # type: ignore[no-untyped-def]
    """Four simulated nodes, a Deployment of 8 pods on them behind a Service, the edge stand-in and
    a running reconciler. Yields a dict of handles."""
    suffix = secrets.token_hex(2)
    names = [f"ctl{suffix}-{i}" for i in range(1, 5)]
    ns = f"ctl-{suffix}"
    await kube.create(Namespace.from_dict({"metadata": {"name": ns}}))
    fleet = KubeletFleet(client=kube, nodes=[SimNode(name=n, address="127.0.0.1", index=i + 20)
                                             for i, n in enumerate(names)],
                         config=KubeletSimConfig(healthz_port=None))
    edge = EdgeStandIn(kube, names)
    state: dict = {"fleet": fleet, "edge": edge, "names": names, "ns": ns}

    def start_reconciler() -> asyncio.Task[None]:
        rec = Reconciler(client=kube, config=ControllerConfig(), metrics=ControllerMetrics(CollectorRegistry()),
                         resync_s=5)
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

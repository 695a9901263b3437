"""The opt-in out-of-service taint (docs/out-of-service.md) on the real control plane (kube-apiserver,
kube-controller-manager with every controller, kube-scheduler; 20 s node-monitor grace).

Two simulated nodes die the same way (kubelet stops, the peers' signed statements say dead, as in
test_controller.py's failed node), each running the one pod of a StatefulSet pinned to it. ``on``
carries ``edgewatch.io/out-of-service: enabled``, ``off`` nothing. Expected: ``on`` gets
``node.kubernetes.io/out-of-service=edgewatch:NoExecute`` and kube-controller-manager's pod GC
force-deletes its terminating pod; ``off`` never gets the taint and its pod stays (Terminating), as
in stock Kubernetes. When ``on``'s heartbeat comes back, the taint goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time

import pytest
from lightkube import ApiError
from lightkube.resources.apps_v1 import StatefulSet
from lightkube.resources.core_v1 import ConfigMap, Namespace, Node, Pod
from prometheus_client import CollectorRegistry

from edgewatch.controller.metrics import ControllerMetrics
from edgewatch.controller.model import ControllerConfig
from edgewatch.controller.reconciler import Reconciler
from edgewatch.names import (
    FAILED_TAINT_KEY,
    IDENTITY_NAMESPACE,
    OUT_OF_SERVICE_ANNOTATION,
    OUT_OF_SERVICE_TAINT_KEY,
    POOL_LABEL,
)
from edgewatch_lab.testing.kubeletsim import KubeletFleet, KubeletSimConfig, SimNode
from edgewatch_lab.testing.smoke import wait_for
from test_controller import EdgeStandIn, _taints

pytestmark = pytest.mark.controlplane

OOS = f"{OUT_OF_SERVICE_TAINT_KEY}:NoExecute"
FAILED = f"{FAILED_TAINT_KEY}:NoExecute"


def _statefulset(ns: str, name: str, node: str) -> StatefulSet:
    labels = {"app": name}
    return StatefulSet.from_dict({
        "metadata": {"name": name, "namespace": ns},
        "spec": {"replicas": 1, "serviceName": name, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"nodeName": node, "terminationGracePeriodSeconds": 30,
                                       "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10.2"}]}}},
    })


async def _pod(kube, ns: str, name: str) -> Pod | None:  # type: ignore[no-untyped-def]
    try:
        return await kube.get(Pod, name, namespace=ns)
    except ApiError as exc:
        if exc.status.code == 404:
            return None
        raise


async def test_out_of_service_taint_force_deletes_a_dead_nodes_statefulset_pod_only_when_enabled(kube) -> None:  # type: ignore[no-untyped-def]
    suffix = secrets.token_hex(2)
    ns = f"oos-{suffix}"
    names = {k: f"oos{suffix}-{k}" for k in ("on", "off", "p1", "p2")}
    await kube.create(Namespace.from_dict({"metadata": {"name": ns}}))
    with contextlib.suppress(ApiError):
        await kube.create(Namespace.from_dict({"metadata": {"name": IDENTITY_NAMESPACE}}))
    # one group of four (the test's pool); the pool is not listed: only the annotated node opts in
    await kube.create(ConfigMap.from_dict({"metadata": {"name": "edgewatch-config", "namespace": ns},
                                           "data": {"grouping": "on", "groupLabel": POOL_LABEL,
                                                    "outOfServicePools": ""}}))
    fleet = KubeletFleet(client=kube, nodes=[SimNode(name=n, address="127.0.0.1", index=i + 60, labels={POOL_LABEL: ns})
                                             for i, n in enumerate(names.values())],
                         config=KubeletSimConfig(healthz_port=None))
    edge = EdgeStandIn(kube, list(names.values()), namespace=ns)
    rec = Reconciler(client=kube, config=ControllerConfig(), metrics=ControllerMetrics(CollectorRegistry()),
                     namespace=ns, resync_s=5)
    tasks = [asyncio.create_task(fleet.run()), asyncio.create_task(edge.run()), asyncio.create_task(rec.run())]
    on, off = names["on"], names["off"]
    try:
        await asyncio.wait_for(fleet.registered.wait(), 30)
        await kube.patch(Node, on, {"metadata": {"annotations": {OUT_OF_SERVICE_ANNOTATION: "enabled"}}})
        for key in ("on", "off"):
            await kube.create(_statefulset(ns, f"db-{key}", names[key]))

        async def running() -> bool:
            for key in ("on", "off"):
                pod = await _pod(kube, ns, f"db-{key}-0")
                if pod is None or not pod.status or pod.status.phase != "Running":
                    return False
            return True

        await wait_for(running, timeout_s=90, what="both StatefulSet pods running")
        uid = {key: (await _pod(kube, ns, f"db-{key}-0")).metadata.uid for key in ("on", "off")}

        for n in (on, off):
            fleet.kill(n)                     # the machines die ...
        killed = time.monotonic()
        await asyncio.sleep(5)
        for n in (on, off):
            edge.verdict[n] = "False"        # ... and their peers' signed statements say so

        async def judged_failed() -> bool:
            return FAILED in await _taints(kube, on) and FAILED in await _taints(kube, off)

        await wait_for(judged_failed, timeout_s=60, interval_s=0.25, what="both nodes judged failed")
        failed_at = time.monotonic()
        assert OOS in await _taints(kube, on), "the opted-in failed node must carry the out-of-service taint"
        assert OOS not in await _taints(kube, off), "a node without the switch must never get it"

        async def on_pod_gone() -> bool:
            pod = await _pod(kube, ns, "db-on-0")
            return pod is None or pod.metadata.uid != uid["on"]

        await wait_for(on_pod_gone, timeout_s=120, interval_s=0.5, what="the opted-in node's pod force-deleted")
        gone_s = time.monotonic() - failed_at
        # Stock behaviour on the other node, over at least as long a wait: the pod stays.
        await asyncio.sleep(10.0)  # a pod GC period (20 s) after the node went NotReady is well past
        pod = await _pod(kube, ns, "db-off-0")
        assert pod is not None and pod.metadata.uid == uid["off"], "the pod of a node without the switch left"
        terminating = pod.metadata.deletionTimestamp is not None
        assert OOS not in await _taints(kube, off)
        wait_off_s = time.monotonic() - failed_at

        # The node comes back: its own heartbeat, peers see it alive. The taint goes.
        edge.verdict[on] = "True"
        fleet.revive(on)
        revived = time.monotonic()

        async def untainted() -> bool:
            return OOS not in await _taints(kube, on)

        await wait_for(untainted, timeout_s=60, what="out-of-service taint removed after the heartbeat is back")
        print(f"\nkill -> failed: {failed_at - killed:.1f} s; failed -> pod force-deleted: {gone_s:.1f} s; "
              f"off-node pod still there after {wait_off_s:.1f} s (terminating={terminating}); "
              f"heartbeat back -> taint removed: {time.monotonic() - revived:.1f} s")
        assert not tasks[2].done(), "the reconciler must never die"
        crashes = rec.metrics.registry.get_sample_value("edgewatch_controller_reconciles_total", {"result": "crash"})
        assert not crashes
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await kube.delete(Namespace, ns)
        for n in names.values():
            with contextlib.suppress(Exception):
                await kube.delete(Node, n)

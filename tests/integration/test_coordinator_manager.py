"""On the real control plane (``auto`` pools, docs/install.md): the controller's pool coordinator manager
(edgewatch.controller.coordinators) keeps an ``auto`` pool's coordinator Deployment, deletes it when
the pool is no longer ``auto``, and publishes where a Ready coordinator pod runs.

No kubelet runs the Deployment's pods (kube-controller-manager creates them; they stay Pending, with
no hostIP, so they are never published). Discovery is tested with pods the test creates itself
(``schedulerName`` of no scheduler, a finalizer so a deletion leaves them terminating) and whose
status it writes through the status subresource.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from typing import Any

import pytest
from lightkube import ApiError
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import ConfigMap, Namespace, Pod
from prometheus_client import CollectorRegistry

from edgewatch.controller.coordinators import CoordinatorManager
from edgewatch.controller.coordinatorspec import coordinator_deployment, drift
from edgewatch.controller.metrics import ControllerMetrics
from edgewatch.names import POOL_COORDINATORS_CONFIGMAP, POOL_LABEL, coordinator_name
from edgewatch_lab.testing.smoke import wait_for

pytestmark = pytest.mark.controlplane

METRIC = "edgewatch_controller_pool_coordinator_ready"
FINALIZER = "edgewatch.io/test-hold"


async def _get(kube, res: Any, name: str, ns: str) -> Any:  # type: ignore[no-untyped-def]
    try:
        return await kube.get(res, name, namespace=ns)
    except ApiError as exc:
        if exc.status.code == 404:
            return None
        raise


def _coordinator_pod(ns: str, name: str, pool: str) -> Pod:
    return Pod.from_dict({
        "metadata": {"name": name, "namespace": ns, "finalizers": [FINALIZER],
                     "labels": {"app.kubernetes.io/name": "edgewatch", "app.kubernetes.io/component": "coordinator",
                                POOL_LABEL: pool}},
        "spec": {"schedulerName": "edgewatch-test-no-scheduler",
                 "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10.2"}]},
    })


async def _set_ready(kube, ns: str, name: str, *, ready: bool, host: str) -> None:  # type: ignore[no-untyped-def]
    status = "True" if ready else "False"
    await kube.patch(Pod.Status, name, {"status": {
        "phase": "Running", "hostIP": host, "hostIPs": [{"ip": host}],
        "conditions": [{"type": "Ready", "status": status}, {"type": "ContainersReady", "status": status}]}},
        namespace=ns)


async def test_coordinator_manager_keeps_deployments_and_publishes_ready_pods(kube) -> None:  # type: ignore[no-untyped-def]
    suffix = secrets.token_hex(3)
    ns, pool, other = f"coord-{suffix}", f"factory-{suffix}", f"plain-{suffix}"
    await kube.create(Namespace.from_dict({"metadata": {"name": ns}}))
    await kube.create(ConfigMap.from_dict({"metadata": {"name": "edgewatch-config", "namespace": ns},
                                           "data": {"poolCoordinators": f"{pool}: auto\n{other}: http://192.0.2.1:2379\n"}}))
    registry = CollectorRegistry()
    manager = CoordinatorManager(client=kube, namespace=ns, image="ghcr.io/edgewatch/edgewatch:test",
                                 metrics=ControllerMetrics(registry), api_timeout_s=10, retry_s=0.5)
    task = asyncio.create_task(manager.run())
    name = coordinator_name(pool)
    want = coordinator_deployment(pool=pool, namespace=ns, image="ghcr.io/edgewatch/edgewatch:test")
    pods = [f"coord-a-{suffix}", f"coord-b-{suffix}"]

    def ready_value() -> float | None:
        return registry.get_sample_value(METRIC, {"pool": pool})

    async def urls() -> dict[str, str] | None:
        cm = await _get(kube, ConfigMap, POOL_COORDINATORS_CONFIGMAP, ns)
        return None if cm is None else dict(cm.data or {})

    try:
        # auto pool -> its Deployment, exactly as rendered (API defaults aside); no other pool gets one
        dep = await wait_for(lambda: _get(kube, Deployment, name, ns), timeout_s=30, what="the coordinator Deployment")
        assert drift(want={"metadata": {"labels": want["metadata"]["labels"]}, "spec": want["spec"]},
                     have=dep.to_dict()) == []
        assert [d.metadata.name async for d in kube.list(Deployment, namespace=ns)] == [name]
        # nothing Ready yet: the URL ConfigMap exists and is empty, the metric says 0
        assert await wait_for(lambda: _eq(urls(), {}), timeout_s=30, what="an empty URL ConfigMap")
        assert ready_value() == 0.0
        assert registry.get_sample_value(METRIC, {"pool": other}) is None  # not auto: no series

        # someone changes a rendered field: it is put back (an update with the read resourceVersion)
        await kube.patch(Deployment, name, {"spec": {"template": {"spec": {"containers": [
            {"name": "coordinator", "image": "tampered:1"}]}}}}, namespace=ns)

        async def restored() -> bool:
            d = await _get(kube, Deployment, name, ns)
            return d is not None and d.spec.template.spec.containers[0].image == "ghcr.io/edgewatch/edgewatch:test"
        await wait_for(restored, timeout_s=30, what="the image put back")

        # a Ready coordinator pod -> its node's URL in the ConfigMap, metric 1
        await kube.create(_coordinator_pod(ns, pods[0], pool))
        await _set_ready(kube, ns, pods[0], ready=True, host="10.20.30.40")
        await wait_for(lambda: _eq(urls(), {pool: "https://10.20.30.40:12379"}), timeout_s=30, what="the URL")
        assert ready_value() == 1.0

        # a second, younger Ready pod does not displace the older one
        await kube.create(_coordinator_pod(ns, pods[1], pool))
        await _set_ready(kube, ns, pods[1], ready=True, host="10.20.30.41")
        await asyncio.sleep(2)
        assert await urls() == {pool: "https://10.20.30.40:12379"}

        # the older one turns unready -> the younger one is published
        await _set_ready(kube, ns, pods[0], ready=False, host="10.20.30.40")
        await wait_for(lambda: _eq(urls(), {pool: "https://10.20.30.41:12379"}), timeout_s=30, what="the other URL")

        # the younger one is being deleted (held by a finalizer) -> no Ready pod: key gone, metric 0
        await kube.delete(Pod, pods[1], namespace=ns)
        await wait_for(lambda: _eq(urls(), {}), timeout_s=30, what="the URL removed")
        assert ready_value() == 0.0

        # Ready again -> published again; then the pool is no longer auto: Deployment deleted,
        # key gone, series removed
        await _set_ready(kube, ns, pods[0], ready=True, host="10.20.30.40")
        await wait_for(lambda: _eq(urls(), {pool: "https://10.20.30.40:12379"}), timeout_s=30, what="the URL back")
        await kube.patch(ConfigMap, "edgewatch-config", {"data": {"poolCoordinators": f"{other}: http://192.0.2.1:2379"}},
                         namespace=ns)

        async def deleted() -> bool:
            return await _get(kube, Deployment, name, ns) is None
        await wait_for(deleted, timeout_s=30, what="the Deployment deleted")
        await wait_for(lambda: _eq(urls(), {}), timeout_s=30, what="the URL of a pool no longer auto removed")
        assert ready_value() is None
        assert manager.passes > 0
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        for pod in pods:
            with contextlib.suppress(ApiError):
                await kube.patch(Pod, pod, {"metadata": {"finalizers": None}}, namespace=ns)
        with contextlib.suppress(ApiError):
            await kube.delete(Namespace, ns)


async def _eq(value: Any, expected: Any) -> bool:
    return bool(await value == expected)


async def test_without_an_image_the_coordinators_run_the_controllers_own(kube) -> None:  # type: ignore[no-untyped-def]
    """The image comes from the controller's own Pod (POD_NAME), so a kustomize overlay's or Helm
    value's image reaches the coordinators without a second setting to keep in step."""
    suffix = secrets.token_hex(3)
    ns, pool = f"coord-own-{suffix}", f"factory-{suffix}"
    await kube.create(Namespace.from_dict({"metadata": {"name": ns}}))
    await kube.create(ConfigMap.from_dict({"metadata": {"name": "edgewatch-config", "namespace": ns},
                                           "data": {"poolCoordinators": f"{pool}: auto\n"}}))
    await kube.create(Pod.from_dict({
        "metadata": {"name": "edgewatch-controller-x", "namespace": ns},
        "spec": {"schedulerName": "edgewatch-test-no-scheduler",
                 "containers": [{"name": "sidecar", "image": "other:1"},
                                {"name": "controller", "image": "registry.example/edgewatch:overlay"}]}}))
    manager = CoordinatorManager(client=kube, namespace=ns, image="", own_pod="edgewatch-controller-x",
                                 metrics=ControllerMetrics(CollectorRegistry()), api_timeout_s=10, retry_s=0.5)
    task = asyncio.create_task(manager.run())
    try:
        dep = await wait_for(lambda: _get(kube, Deployment, coordinator_name(pool), ns), timeout_s=30,
                             what="the coordinator Deployment")
        assert dep.spec.template.spec.containers[0].image == "registry.example/edgewatch:overlay"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

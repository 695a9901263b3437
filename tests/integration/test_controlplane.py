"""The foundation against the real binaries: API round-trips, the stock node lifecycle
(NotReady + unreachable taints for a silent node), the scheduler, the kubelet simulator, and
crash cleanup of the control plane."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx2 as httpx
import pytest
from lightkube import ApiError
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ConfigMap, Namespace, Node, Pod

from edgewatch.kube.listwatch import lister_watcher
from edgewatch_lab.testing.binaries import BinariesError, ensure_binaries
from edgewatch_lab.testing.controlplane import ControlPlane
from edgewatch_lab.testing.kubeletsim import KubeletFleet, KubeletSimConfig, SimNode
from edgewatch_lab.testing.procstat import children
from edgewatch_lab.testing.smoke import ready_endpoints, wait_for
from edgewatch_lab.testing.diagnose import explain_workload
from edgewatch_lab.testing.workload import APP_LABEL, sample_deployment, sample_service

pytestmark = pytest.mark.controlplane


def _suffix() -> str:
    return secrets.token_hex(3)


async def _namespace(kube, name: str) -> str:  # type: ignore[no-untyped-def]
    await kube.create(Namespace.from_dict({"metadata": {"name": name}}))
    return name


def test_version_tells_the_truth(control_plane: ControlPlane) -> None:
    version = json.loads(control_plane.kubectl("get", "--raw", "/version"))
    assert version["gitVersion"] == "v1.36.3"
    assert (version["major"], version["minor"]) == ("1", "36")
    etcd = subprocess.run([str(control_plane.binaries.etcd), "--version"], capture_output=True, text=True)
    assert "etcd Version: 3.6." in etcd.stdout


async def test_api_round_trip(kube) -> None:  # type: ignore[no-untyped-def]
    ns = await _namespace(kube, f"rt-{_suffix()}")
    created = await kube.create(ConfigMap.from_dict({"metadata": {"name": "c", "namespace": ns}, "data": {"k": "v1"}}))
    got = await kube.get(ConfigMap, "c", namespace=ns)
    assert got.data == {"k": "v1"} and got.metadata.uid == created.metadata.uid
    got.data["k"] = "v2"
    await kube.replace(got)
    # A stale write (old resourceVersion) is refused with 409: optimistic concurrency is real.
    created.data["k"] = "stale"
    with pytest.raises(ApiError) as conflict:
        await kube.replace(created)
    assert conflict.value.status.code == 409
    assert (await kube.get(ConfigMap, "c", namespace=ns)).data == {"k": "v2"}
    await kube.delete(ConfigMap, "c", namespace=ns)
    with pytest.raises(ApiError) as gone:
        await kube.get(ConfigMap, "c", namespace=ns)
    assert gone.value.status.code == 404


async def test_silent_node_goes_not_ready_and_is_tainted(control_plane: ControlPlane, kube) -> None:  # type: ignore[no-untyped-def]
    """kube-controller-manager's node lifecycle controller, at 20 s grace: a node whose kubelet
    stops renewing its Lease becomes Ready=Unknown and gets the unreachable taints.

    A second node stays healthy: with every node of a zone down, the controller assumes its own
    network is at fault (zone FullDisruption) and stops NoExecute tainting on purpose."""
    name, healthy = f"silent-{_suffix()}", f"healthy-{_suffix()}"
    fleet = KubeletFleet(client=kube, nodes=[SimNode(name=name, address="127.0.0.1"),
                                             SimNode(name=healthy, address="127.0.0.1")],
                         config=KubeletSimConfig(healthz_port=None, lease_renew_s=2))
    runner = asyncio.create_task(fleet.run())
    try:
        await asyncio.wait_for(fleet.registered.wait(), 30)

        async def ready_is(status: str) -> bool:
            node = await kube.get(Node, name)
            return any(c.type == "Ready" and c.status == status for c in node.status.conditions or [])

        await wait_for(lambda: ready_is("True"), timeout_s=30, what="node Ready")
        lease = await kube.get(Lease, name, namespace="kube-node-lease")
        assert lease.spec.holderIdentity == name and lease.spec.leaseDurationSeconds == 40
        fleet.kill(name)
        killed_at = time.monotonic()
        await wait_for(lambda: ready_is("Unknown"), timeout_s=60, what="node Ready=Unknown")
        went_unknown_s = time.monotonic() - killed_at
        # Not before the grace period (minus the last renewal's age), not long after it.
        assert 20 - 2 - 1 <= went_unknown_s <= 20 + 15, went_unknown_s

        async def tainted() -> bool:
            node = await kube.get(Node, name)
            keys = {(t.key, t.effect) for t in node.spec.taints or []}
            return {("node.kubernetes.io/unreachable", "NoSchedule"),
                    ("node.kubernetes.io/unreachable", "NoExecute")} <= keys

        await wait_for(tainted, timeout_s=30, what="unreachable taints")
        # The kubelet comes back: Ready again, taints removed.
        fleet.revive(name)
        await wait_for(lambda: ready_is("True"), timeout_s=40, what="node Ready again")
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        await kube.delete(Node, name)
        await kube.delete(Node, healthy)


async def test_scheduler_binds_and_kubelet_sim_runs_pods_into_endpoints(kube) -> None:  # type: ignore[no-untyped-def]
    """kube-scheduler binds the pods, the simulated kubelets run them, the EndpointSlice
    controller publishes them; deleting a pod completes (the kubelet finalizes it)."""
    ns = await _namespace(kube, f"wl-{_suffix()}")
    names = [f"wl-{_suffix()}" for _ in range(2)]
    fleet = KubeletFleet(client=kube, nodes=[SimNode(name=n, address="127.0.0.1", index=i + 1)
                                             for i, n in enumerate(names)],
                         config=KubeletSimConfig(healthz_port=None))
    runner = asyncio.create_task(fleet.run())
    try:
        await asyncio.wait_for(fleet.registered.wait(), 30)
        # Only our nodes may take these pods: other tests' nodes may exist in the shared cluster.
        deployment = sample_deployment(namespace=ns, replicas=4)
        deployment.spec.template.spec.nodeSelector = None
        deployment.spec.template.spec.affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": names}]}]}}}
        await kube.create(sample_service(namespace=ns))
        await kube.create(deployment)

        async def four_endpoints() -> list[str]:
            eps = await ready_endpoints(kube, namespace=ns, service="sample")
            return eps if len(eps) == 4 else []

        endpoints = await wait_for(four_endpoints, timeout_s=60, what="4 ready endpoints")
        pods = [p async for p in kube.list(Pod, namespace=ns)]
        assert {p.spec.nodeName for p in pods} <= set(names)  # bound by the scheduler, to our nodes
        assert sorted(p.metadata.name for p in pods) == endpoints
        victim = pods[0].metadata.name
        await kube.delete(Pod, victim, namespace=ns)

        async def finalized() -> bool:
            try:
                await kube.get(Pod, victim, namespace=ns)
            except ApiError as exc:
                return exc.status.code == 404
            return False

        await wait_for(finalized, timeout_s=30, what="pod deletion completed by the kubelet")
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        await kube.delete(Namespace, ns)
        for n in names:
            await kube.delete(Node, n)


class _FirstStatusPostsTimeOut:
    """The admin client, except that its first ``failures`` pod-status patches time out, as they do
    on a machine busy starting dozens of nodes (a transport fault at the client's edge)."""

    def __init__(self, client, failures: int) -> None:  # type: ignore[no-untyped-def]
        self._client = client
        self.left = failures

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self._client, name)

    def lister_watcher(self, resource, **selectors):  # type: ignore[no-untyped-def]
        return lister_watcher(self._client, resource, **selectors)

    async def patch(self, resource, *args, **kwargs):  # type: ignore[no-untyped-def]
        if resource is Pod.Status and self.left > 0:
            self.left -= 1
            raise httpx.ReadTimeout("injected: the status post timed out")
        return await self._client.patch(resource, *args, **kwargs)


async def test_a_pod_whose_status_post_timed_out_is_posted_again(kube) -> None:  # type: ignore[no-untyped-def]
    """A failed status post is retried with the pod's latest state (as kubelet's status manager
    re-syncs): nothing else would ever change the pod, so without the retry it stays Pending."""
    ns = await _namespace(kube, f"wl-{_suffix()}")
    name = f"wl-{_suffix()}"
    client = _FirstStatusPostsTimeOut(kube, failures=2)
    fleet = KubeletFleet(client=client, nodes=[SimNode(name=name, address="127.0.0.1", index=1)],  # type: ignore[arg-type]
                         config=KubeletSimConfig(healthz_port=None, pod_retry_s=0.5))
    runner = asyncio.create_task(fleet.run())
    try:
        await asyncio.wait_for(fleet.registered.wait(), 30)
        deployment = sample_deployment(namespace=ns, replicas=2)
        deployment.spec.template.spec.affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [name]}]}]}}}
        await kube.create(sample_service(namespace=ns))
        await kube.create(deployment)

        async def both_ready() -> bool:
            return len(await ready_endpoints(kube, namespace=ns, service="sample")) == 2

        await wait_for(both_ready, timeout_s=60, what="2 ready endpoints after 2 lost status posts",
                       explain=lambda: explain_workload(kube, namespace=ns, service="sample", labels=APP_LABEL))
        assert client.left == 0  # both injected timeouts happened, and were recovered from
        assert not runner.done()
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        await kube.delete(Namespace, ns)
        await kube.delete(Node, name)


def test_kubebuilder_assets_are_used_without_building(tmp_path: Path, binaries) -> None:  # type: ignore[no-untyped-def]
    folder = tmp_path / "assets"
    folder.mkdir()
    for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"):
        (folder / name).symlink_to(getattr(binaries, name.replace("-", "_")))
    found = ensure_binaries(env={"KUBEBUILDER_ASSETS": str(folder), "PATH": "/nonexistent"})
    assert found.kube_apiserver == binaries.kube_apiserver.resolve()
    (folder / "kube-scheduler").unlink()
    with pytest.raises(BinariesError, match="kube-scheduler"):
        ensure_binaries(env={"KUBEBUILDER_ASSETS": str(folder)})


def test_stale_run_of_a_dead_owner_is_cleaned_up(tmp_path: Path) -> None:
    """A control plane whose owner died (SIGKILL, no cleanup) is killed and removed by the next
    start; a live owner's run is left alone."""
    # Stand-in for a dead owner's run: a process in its own session, recorded like _spawn does.
    dead_owner = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_owner.wait()
    run = tmp_path / f"{dead_owner.pid}-abc123"
    run.mkdir()
    orphan = subprocess.Popen(["sleep", "300"], start_new_session=True)
    start = Path(f"/proc/{orphan.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    (run / "pids").write_text(f"etcd {orphan.pid} {start}\n")
    live = tmp_path / f"{os.getpid()}-def456"
    live.mkdir()
    try:
        removed = ControlPlane.cleanup_stale(runs_root=tmp_path)
        assert removed == [run]
        assert orphan.wait(timeout=10) == -signal.SIGKILL
        assert not run.exists() and live.exists()
    finally:
        if orphan.poll() is None:
            orphan.kill()


def test_a_controller_manager_that_exits_is_started_again_and_leads(control_plane: ControlPlane) -> None:
    """kube-controller-manager exits by design when it loses its leader Lease (a renewal past the
    10 s renew deadline on a busy machine); the lab restarts it as the kubelet restarts a kubeadm
    static pod, and the restarted process leads again once the old Lease has expired (15 s)."""
    def holder() -> str:
        lease = json.loads(control_plane.kubectl("get", "lease", "kube-controller-manager", "-n", "kube-system",
                                                 "-o", "json"))
        return str(lease["spec"]["holderIdentity"])

    before_holder, before_restarts = holder(), control_plane.restarts("kube-controller-manager")
    loop = control_plane.pid("kube-controller-manager")
    (manager,) = children(loop)
    os.kill(manager, signal.SIGKILL)  # the manager only, as its own exit would: the loop survives
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and holder() == before_holder:
        time.sleep(1)
    assert holder() != before_holder, "the restarted kube-controller-manager never took the Lease"
    assert control_plane.restarts("kube-controller-manager") == before_restarts + 1
    assert control_plane.pid("kube-controller-manager") == loop
    (restarted,) = children(loop)
    assert restarted != manager

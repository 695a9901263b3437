"""One real node (``edgewatch_lab.testing.realnode``) on a real control plane: the kubelet registers
with its own node credential, runs a pod of edgewatch's image built here, and changes none of
the host's sysctls; a kill stops every container; and a crashed owner's node is removed by the
stale cleanup (cgroups, folders, processes).

The scenarios (tests/e2e, ``real-nodes``) play edgewatch's faults on such nodes; this file checks
the node itself.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from edgewatch_lab.testing import realnode
from edgewatch_lab.testing.binaries import Binaries, ensure_node_binaries
from edgewatch_lab.testing.controlplane import SERVICE_CIDR, ControlPlane
from edgewatch_lab.testing.images import EDGEWATCH_IMAGE, Images, ensure_images
from edgewatch_lab.testing.kubeproxy import KubeProxy
from edgewatch_lab.testing.netlab import Host, NetLab

pytestmark = [pytest.mark.root, pytest.mark.controlplane, pytest.mark.realnodes]

SYSCTLS = ("kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory")


def host_sysctls() -> dict[str, str]:
    return {k: Path("/proc/sys", k).read_text().strip() for k in SYSCTLS}


def make_node(*, lab: NetLab, host: Host, cp: ControlPlane | None, binaries: Binaries, node_bin: Path,
              images: Images) -> realnode.RealNode:
    root = realnode.LAB_ROOT / lab.lab_id / host.name
    root.mkdir(parents=True, exist_ok=True)
    if cp is not None:
        kubelet_cfg = cp.client_kubeconfig(root / "kubelet.kubeconfig", user=f"system:node:{host.name}",
                                           groups=("system:nodes",))
        proxy_cfg = cp.client_kubeconfig(root / "kube-proxy.kubeconfig", user="system:kube-proxy")
    else:  # no apiserver: the processes still start, which is all the crash test needs
        kubelet_cfg = proxy_cfg = root / "none.kubeconfig"
        kubelet_cfg.write_text("apiVersion: v1\nkind: Config\nclusters: []\nusers: []\ncontexts: []\n")
    proxy = KubeProxy(netns=host.netns, node_name=host.name, kubeconfig=proxy_cfg, work_dir=root / "kube-proxy",
                      node_ip=host.address, binary=binaries.require_kube_proxy())
    _argv, path = proxy.prepare()
    spec = realnode.RealNodeSpec(
        name=host.name, lab_id=lab.lab_id, netns=host.netns, address=host.address, pod_subnet="10.245.1.0/24",
        node_bin=node_bin, kubelet_bin=binaries.require_kubelet(), kube_proxy_bin=binaries.require_kube_proxy(),
        images=(images.pause, images.edgewatch), labels=("edgewatch.io/pool=a",), kubelet_kubeconfig=kubelet_cfg,
        kube_proxy_config=proxy.config_path, kube_proxy_path=path, service_cidr=SERVICE_CIDR)
    node = realnode.RealNode(spec)
    node.prepare()
    return node


@pytest.fixture(scope="module")
def runtime() -> tuple[Path, Images]:
    node_bin = ensure_node_binaries()
    return node_bin, ensure_images(pause_binary=node_bin / "pause")


def wait(predicate, timeout_s: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        time.sleep(0.5)
    return value


def test_a_real_node_runs_our_image_with_its_own_credential_and_dies_whole(binaries, runtime):  # type: ignore[no-untyped-def]
    node_bin, images = runtime
    before = host_sysctls()
    with NetLab.create() as lab:
        lab_id = lab.lab_id
        host = lab.add_pool("a", 1)[0]
        with ControlPlane(address=lab.cloud_address, binaries=binaries, audit=True) as cp:
            node = make_node(lab=lab, host=host, cp=cp, binaries=binaries, node_bin=node_bin, images=images)
            try:
                node.start()

                def ready() -> bool:
                    items = json.loads(cp.kubectl("get", "nodes", "-o", "json"))["items"]
                    return any(c["type"] == "Ready" and c["status"] == "True"
                               for n in items for c in n["status"].get("conditions", []))

                wait(ready, 90, "the real node Ready")
                pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hello", "namespace": "default"},
                       "spec": {"nodeName": "a-1", "restartPolicy": "Never", "containers": [
                           {"name": "c", "image": EDGEWATCH_IMAGE, "args": ["--help"]}]}}
                sleeper = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sleeper", "namespace": "default"},
                           "spec": {"nodeName": "a-1", "containers": [
                               {"name": "c", "image": "registry.k8s.io/pause:3.10.2"}]}}
                cp.kubectl("apply", "-f", "-", input_text=json.dumps(pod))
                cp.kubectl("apply", "-f", "-", input_text=json.dumps(sleeper))

                def phases() -> dict[str, str] | None:
                    items = json.loads(cp.kubectl("get", "pods", "-o", "json"))["items"]
                    got = {p["metadata"]["name"]: p["status"].get("phase", "") for p in items}
                    return got if got == {"hello": "Succeeded", "sleeper": "Running"} else None

                wait(phases, 90, "edgewatch's image to run to completion and pause to run")
                assert node.container_pids(), "a running pod but no container process in the node's cgroups"
                usage = node.usage()
                assert usage["cpu_s"] > 0 and usage["rss_bytes"] > 0
                assert host_sysctls() == before, "the kubelet changed the host's sysctls"
                audit = [json.loads(line) for line in cp.audit_log.read_text().splitlines()]  # type: ignore[union-attr]
                users = {e["user"]["username"] for e in audit if "kubelet" in e.get("userAgent", "")}
                assert users == {"system:node:a-1"}, users
            finally:
                assert node.kill() > 0
            assert not node.container_pids() and not node.running
            assert node.remove() == []
    assert host_sysctls() == before
    assert not (realnode.LAB_ROOT / lab_id).exists() or not any((realnode.LAB_ROOT / lab_id).iterdir())


def test_a_crashed_owner_leaves_nothing_after_the_stale_cleanup(binaries, runtime, tmp_path):  # type: ignore[no-untyped-def]
    node_bin, images = runtime
    script = tmp_path / "owner.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from pathlib import Path
        from edgewatch_lab.testing.binaries import ensure_binaries
        from edgewatch_lab.testing.images import Images
        from edgewatch_lab.testing.netlab import NetLab
        from test_realnode import make_node
        lab = NetLab.create()
        host = lab.add_pool("a", 1)[0]
        node = make_node(lab=lab, host=host, cp=None, binaries=ensure_binaries(), node_bin=Path({str(node_bin)!r}),
                         images=Images(edgewatch=Path({str(images.edgewatch)!r}), pause=Path({str(images.pause)!r})))
        node.start()
        print(lab.lab_id, flush=True)
        time.sleep(600)
    """))
    owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        lab_id = owner.stdout.readline().strip()
        assert lab_id.startswith("ew"), lab_id
        relative = f"/{realnode.CGROUP_PARENT}/{lab_id}"
        wait(lambda: len(realnode.tree_pids(relative)) >= 2, 60, "containerd and the kubelet to start")
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=10)
    NetLab.cleanup_stale()
    assert lab_id in realnode.cleanup_stale()
    assert not realnode.tree_pids(relative)
    assert not (realnode.LAB_ROOT / lab_id).exists()
    assert not any((realnode.CGROUP_FS / c / relative.lstrip("/")).exists() for c in realnode.CGROUP_CONTROLLERS)

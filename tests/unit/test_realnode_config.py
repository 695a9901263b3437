"""What a real lab node is configured with (``edgewatch_lab.testing.realnode``): the renderers are
pure, so the properties that keep several kubelets on one machine apart are checked here; the
node itself runs in the ``real-nodes`` scenario (tests/e2e)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from edgewatch_lab.testing.realnode import (
    BIND_TARGETS,
    CONTAINERD_SOCKET,
    KUBELET_SYSCTLS,
    RealNodeSpec,
    cni_config,
    containerd_config,
    kubelet_config,
    launch_script,
)


def spec(name: str = "a-1", index: int = 1) -> RealNodeSpec:
    return RealNodeSpec(
        name=name, lab_id="ew12ab", netns=f"ew12ab-{name}", address=f"198.18.1.{10 + index}",
        pod_subnet=f"10.245.{index}.0/24", node_bin=Path("/cache/node"), kubelet_bin=Path("/cache/k8s/kubelet"),
        kube_proxy_bin=Path("/cache/k8s/kube-proxy"), images=(Path("/cache/pause.tar"), Path("/cache/ew.tar")),
        labels=("topology.kubernetes.io/zone=a", "edgewatch.io/pool=a"),
        kubelet_kubeconfig=Path(f"/lab/{name}/kubelet.kubeconfig"), kube_proxy_config=Path(f"/lab/{name}/kp.yaml"),
        kube_proxy_path="/stubs:/usr/bin")


def test_two_nodes_share_no_host_path_or_cgroup():
    a, b = spec("a-1", 1), spec("a-2", 2)
    ka, kb = kubelet_config(a), kubelet_config(b)
    for key in ("cgroupRoot", "podLogsDir"):
        assert ka[key] != kb[key]
    assert a.root != b.root and not a.root.is_relative_to(b.root)
    ca, cb = tomllib.loads(containerd_config(a)), tomllib.loads(containerd_config(b))
    cni = '"io.containerd.cri.v1.runtime"'
    assert ca["plugins"]["io.containerd.cri.v1.runtime"]["cni"]["conf_dir"] != \
        cb["plugins"]["io.containerd.cri.v1.runtime"]["cni"]["conf_dir"], cni
    assert cni_config(a)["plugins"][0]["ipam"]["ranges"] != cni_config(b)["plugins"][0]["ipam"]["ranges"]


def test_kubelet_config_fits_this_machine_and_keeps_kubelet_defaults_edgewatch_relies_on():
    k = kubelet_config(spec())
    assert k["failCgroupV1"] is False and k["cgroupDriver"] == "cgroupfs"
    assert k["cgroupRoot"] == "/edgewatch-lab/ew12ab/a-1"
    assert k["containerRuntimeEndpoint"] == f"unix://{CONTAINERD_SOCKET}"
    assert k["nodeLeaseDurationSeconds"] == 40 and k["nodeStatusUpdateFrequency"] == "10s"
    assert (k["healthzBindAddress"], k["healthzPort"]) == ("127.0.0.1", 10248)  # the agent's kubelet probe
    assert k["imageGCHighThresholdPercent"] == 100  # imported images are never collected


def test_containerd_config_is_version_3_without_shared_sockets():
    c = tomllib.loads(containerd_config(spec()))
    assert c["version"] == 3  # v4 would put every node's ttrpc socket at one path
    assert "io.containerd.nri.v1.nri" in c["disabled_plugins"]  # NRI's socket is machine-wide
    assert c["grpc"]["address"] == CONTAINERD_SOCKET
    runtime = c["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True and runtime["netns_mounts_under_state_dir"] is True
    assert runtime["containerd"]["runtimes"]["runc"]["options"]["BinaryName"] == "/cache/node/runc"


def test_launch_script_binds_every_shared_path_and_the_sysctls_before_starting_anything():
    script = launch_script(spec())
    first_start = script.index("containerd --config")
    for target in BIND_TARGETS.values():
        assert f" {target}\n" in script[:first_start]
    for key in KUBELET_SYSCTLS:
        assert f"/proc/sys/{key}\n" in script[:first_start]
    assert script.index("cgroup.procs") < script.index("mount ")  # join the node's cgroups first
    assert script.index("images import") < script.index("--hostname-override=a-1")
    assert "--node-ip=198.18.1.11" in script and "ip route replace 10.0.0.0/24 dev eth0" in script
    assert script.rstrip().endswith("wait")


def test_sysctl_values_are_what_the_kubelet_expects():
    # cm/container_manager_linux.go setupKernelTunables: panic 10, panic_on_oops 1, overcommit 1.
    assert KUBELET_SYSCTLS == {"kernel/panic": "10", "kernel/panic_on_oops": "1", "vm/overcommit_memory": "1"}


def test_cni_config_is_a_gateway_bridge_without_masquerade():
    [bridge] = cni_config(spec())["plugins"]
    assert bridge["type"] == "bridge" and bridge["isGateway"] and not bridge["ipMasq"]
    assert json.dumps(cni_config(spec()))  # serialisable as written to the conflist

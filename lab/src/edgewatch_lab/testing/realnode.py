"""A real Kubernetes node in the network lab: the kubelet, containerd, runc, the CNI bridge and
kube-proxy, inside one of the lab's network namespaces, beside the simulated nodes.

What it is for
    The playground's ``real_nodes: N`` (``edgewatch_lab.playground.cluster``) and the ``real-nodes``
    scenario: edgewatch's agent and the sample workload run there as real containers from images
    built on this machine (``edgewatch_lab.testing.images``), and the kubelet's own Lease controller,
    NodeStatus updates, pod lifecycle and evictions meet edgewatch as they would on a real edge box.

How several kubelets share one host (each point checked in the v1.36 / containerd v2.3 sources;
``docs/real-nodes.md`` has the details)
    * one **mount namespace** per node (``nsenter --net`` + ``unshare --mount --propagation
      slave``; ``ip netns exec`` would remount /sys and hide the cgroup mounts the kubelet needs).
      containerd, the kubelet and kube-proxy start from the same shell, so volume mounts are seen
      by both. In it, per-node folders are bind-mounted over ``/var/lib/kubelet`` (the kubelet's
      root, its certificates and the device-plugin socket, which v1.36 hard-codes),
      ``/var/lib/containerd``, ``/var/lib/cni``, ``/var/log/containers`` and
      ``/var/lib/edgewatch`` (the agent's hostPath), and a tmpfs over ``/run/containerd``
      (sockets, shim sockets, runc state: gone at a "reboot", as on a real box). Nothing of this
      is visible on the host; it all goes when the node's last process exits;
    * **sysctls**: with ``protectKernelDefaults: false`` the kubelet would set
      ``kernel.panic_on_oops=1``, ``kernel.panic=10`` and ``vm.overcommit_memory=1`` for the whole
      machine. Files holding exactly those values are bind-mounted over the three
      ``/proc/sys`` entries in the node's mount namespace: the kubelet reads what it wants and
      writes nothing; the host's values never change;
    * **cgroups**: each node has its own ``cgroupRoot`` ``/edgewatch-lab/<lab>/<node>`` (made in
      every v1 hierarchy beforehand; kubelets that shared one would kill each other's pods as
      orphans); the node's own processes run in ``<root>/system``; ``failCgroupV1: false`` (this
      machine mounts cgroup v1, which v1.36 refuses by default);
    * **containerd** (config version 3: version 4 would share one ttrpc socket) with NRI off,
      ``restrict_oom_score_adj`` (this VM's root lacks CAP_SYS_RESOURCE, so runc may not lower a
      sandbox's ``oom_score_adj``) and the pod network namespaces under its state folder; it runs
      inside the node's network namespace, so the bridge plugin's ``cni0`` and
      ``ip_forward=1`` land there, never on the host;
    * **identities**: the kubelet uses its own client certificate (``system:node:<name>`` in
      ``system:nodes``, as the Node authorizer expects) and kube-proxy ``system:kube-proxy``;
      never the admin credential.

Crash cleanup
    Per-node folders live under ``/var/lib/edgewatch-lab/<lab>/`` and cgroups under
    ``edgewatch-lab/<lab>`` in every hierarchy, ``<lab>`` being the network lab's id. The lab's
    namespaces are removed by ``NetLab.cleanup_stale`` (which kills their processes);
    :func:`cleanup_stale` then kills whatever is left in the cgroups of every lab without a live
    registry file (pod containers live in network namespaces of their own), removes the cgroups
    and the folders. The playground and ``make clean-lab`` run both.

Limits: Linux with cgroup v1 hierarchies at ``/sys/fs/cgroup/<controller>`` (this machine); root;
no clock skew on a real node; ``kubectl logs``/``exec`` are not wired (the apiserver has no
kubelet client certificate); pods reach each other only within a node (one bridge per node, no
routes between nodes).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from edgewatch_lab.testing.procstat import rss_bytes

__all__ = ["LAB_ROOT", "RealNode", "RealNodeError", "RealNodeSpec", "cleanup_stale", "containerd_config",
           "cni_config", "kubelet_config", "launch_script"]

log = logging.getLogger(__name__)

#: Per-node folders: ``<LAB_ROOT>/<lab id>/<node>/``.
LAB_ROOT: Final = Path("/var/lib/edgewatch-lab")
CGROUP_FS: Final = Path("/sys/fs/cgroup")
CGROUP_PARENT: Final = "edgewatch-lab"
#: The v1 hierarchies the kubelet checks for its cgroupRoot (cm/container_manager_linux.go) and
#: those runc joins; every one gets the node's tree. ``unified`` is the hybrid cgroup2 mount.
CGROUP_CONTROLLERS: Final = ("cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids", "systemd")
#: Where kill and cleanup look for processes: every process of a node is in its pids tree.
_PIDS: Final = "pids"
#: What the kubelet's setupKernelTunables wants (cm/container_manager_linux.go); bind-mounted per node.
KUBELET_SYSCTLS: Final = {"kernel/panic": "10", "kernel/panic_on_oops": "1", "vm/overcommit_memory": "1"}
#: Host folders bound per node inside its mount namespace (created on the host when missing).
BIND_TARGETS: Final = {"kubelet": "/var/lib/kubelet", "containerd": "/var/lib/containerd", "cni": "/var/lib/cni",
                       "containers-log": "/var/log/containers", "edgewatch": "/var/lib/edgewatch"}
RUN_CONTAINERD: Final = "/run/containerd"
CONTAINERD_SOCKET: Final = f"{RUN_CONTAINERD}/containerd.sock"
_LAB_ID_RE: Final = re.compile(r"^ew[0-9a-f]{4}$")
_NETLAB_REGISTRY: Final = Path("/run/edgewatch-netlab")


class RealNodeError(RuntimeError):
    """A real node could not be prepared, started or removed (the message names the step)."""


@dataclass(frozen=True)
class RealNodeSpec:
    """Everything that makes one real node (paths absolute; no I/O).

    Attributes:
        name: the Node name (``--hostname-override``).
        lab_id: the network lab's id (``ew1234``): names the cgroups and folders.
        netns: the node's network namespace (``/run/netns/<netns>``).
        address: the node's InternalIP (its eth0 in the lab).
        pod_subnet: the CIDR of this node's pods on its ``cni0`` bridge, e.g. ``10.244.3.0/24``.
        node_bin: folder of containerd, runc, the CNI plugins (``ensure_node_binaries``).
        kubelet_bin, kube_proxy_bin: the binaries.
        images: OCI archives imported into the node's containerd at every start.
        labels: ``key=value`` node labels the kubelet registers with.
        kubelet_kubeconfig, kube_proxy_config: the kubelet's credential (written by the caller);
            kube-proxy's KubeProxyConfiguration file (written by the caller, see
            ``KubeProxy.prepare``), and the PATH it runs with.
        kube_proxy_path: PATH for kube-proxy (its stub tools first).
        service_cidr: the cluster's ClusterIP range, routed to ``eth0`` in the node's namespace
            so a connection to a Service reaches kube-proxy's DNAT (the lab has no default
            route, and must not: nothing may leave it).
    """

    name: str
    lab_id: str
    netns: str
    address: str
    pod_subnet: str
    node_bin: Path
    kubelet_bin: Path
    kube_proxy_bin: Path
    images: tuple[Path, ...]
    labels: tuple[str, ...]
    kubelet_kubeconfig: Path
    kube_proxy_config: Path
    kube_proxy_path: str
    service_cidr: str = "10.0.0.0/24"

    @property
    def root(self) -> Path:
        """The node's own folder on the host: ``/var/lib/edgewatch-lab/<lab>/<node>``."""
        return LAB_ROOT / self.lab_id / self.name

    @property
    def cgroup_root(self) -> str:
        """The kubelet's ``cgroupRoot``: ``/edgewatch-lab/<lab>/<node>``."""
        return f"/{CGROUP_PARENT}/{self.lab_id}/{self.name}"


# -- pure renderers ---------------------------------------------------------------------------------


def containerd_config(spec: RealNodeSpec) -> str:
    """containerd's config.toml (version 3) for ``spec`` (see the module docstring). Pure."""
    disabled = ["io.containerd.nri.v1.nri", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile",
                "io.containerd.snapshotter.v1.erofs", "io.containerd.differ.v1.erofs",
                "io.containerd.mount-handler.v1.erofs", "io.containerd.tracing.processor.v1.otlp"]
    return "\n".join([
        "version = 3",
        'root = "/var/lib/containerd"',
        f'state = "{RUN_CONTAINERD}"',
        f"disabled_plugins = {json.dumps(disabled)}",
        "[grpc]",
        f'  address = "{CONTAINERD_SOCKET}"',
        '[plugins."io.containerd.cri.v1.images"]',
        '  snapshotter = "overlayfs"',
        '  [plugins."io.containerd.cri.v1.images".pinned_images]',
        '    sandbox = "registry.k8s.io/pause:3.10.2"',
        '[plugins."io.containerd.cri.v1.runtime"]',
        "  enable_cdi = false",
        "  netns_mounts_under_state_dir = true",
        "  restrict_oom_score_adj = true",
        '  [plugins."io.containerd.cri.v1.runtime".cni]',
        f'    bin_dirs = ["{spec.node_bin}"]',
        f'    conf_dir = "{spec.root / "cni-conf"}"',
        "    use_internal_loopback = true",
        '  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]',
        '    runtime_type = "io.containerd.runc.v2"',
        '    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]',
        f'      BinaryName = "{spec.node_bin / "runc"}"',
        "      SystemdCgroup = false",
        "",
    ])


def cni_config(spec: RealNodeSpec) -> dict[str, Any]:
    """The node's CNI network list: a ``cni0`` bridge (gateway, no masquerade: there is no route
    out anyway) with host-local addresses from ``spec.pod_subnet``. Pure."""
    return {
        "cniVersion": "1.0.0", "name": "edgewatch-lab",
        "plugins": [{"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False,
                     "ipam": {"type": "host-local", "ranges": [[{"subnet": spec.pod_subnet}]],
                              "routes": [{"dst": "0.0.0.0/0"}]}}],
    }


def kubelet_config(spec: RealNodeSpec) -> dict[str, Any]:
    """The KubeletConfiguration (kubelet.config.k8s.io/v1beta1) for ``spec``. Pure.

    Kubelet defaults are kept where they matter to edgewatch: the node Lease (40 s, renewed every
    10 s), NodeStatus every 10 s, ``/healthz`` on 127.0.0.1:10248 (the agent's kubelet probe).
    """
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "failCgroupV1": False, "cgroupDriver": "cgroupfs", "cgroupsPerQOS": True, "cgroupRoot": spec.cgroup_root,
        "enforceNodeAllocatable": ["pods"], "protectKernelDefaults": False,
        "podLogsDir": str(spec.root / "pod-logs"),
        "containerRuntimeEndpoint": f"unix://{CONTAINERD_SOCKET}",
        "failSwapOn": False, "seccompDefault": False, "resolvConf": "/etc/resolv.conf",
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "nodeLeaseDurationSeconds": 40, "nodeStatusUpdateFrequency": "10s", "maxPods": 30,
        "healthzBindAddress": "127.0.0.1", "healthzPort": 10248, "readOnlyPort": 0,
        "registerNode": True, "serializeImagePulls": False,
    }


def launch_script(spec: RealNodeSpec) -> str:
    """The shell script one node runs in its own mount namespace (see the module docstring):
    join the node's cgroups, make the per-node mounts, start containerd, import the images, start
    kube-proxy and the kubelet, and wait. Pure."""
    q = shlex.quote
    root = spec.root
    lines = ["#!/bin/sh", "set -eu", "# generated by edgewatch_lab.testing.realnode"]
    for controller in CGROUP_CONTROLLERS:
        lines.append(f"echo $$ > {q(str(CGROUP_FS / controller) + spec.cgroup_root + '/system/cgroup.procs')}")
    lines.append(f"mount -t tmpfs -o mode=0711 edgewatch-lab {RUN_CONTAINERD}")
    for folder, target in BIND_TARGETS.items():
        lines.append(f"mount --bind {q(str(root / 'mounts' / folder))} {q(target)}")
    for key in KUBELET_SYSCTLS:
        lines.append(f"mount --bind {q(str(root / 'sysctl' / key.replace('/', '.')))} /proc/sys/{key}")
    lines += [
        "echo 1 > /proc/sys/net/ipv4/ip_forward",
        "ip link set lo up",
        f"ip route replace {q(spec.service_cidr)} dev eth0",
        f"export PATH={q(str(spec.node_bin))}:$PATH",
        f"containerd --config {q(str(root / 'containerd.toml'))} >>{q(str(root / 'containerd.log'))} 2>&1 &",
        "i=0; while [ ! -S " + CONTAINERD_SOCKET + " ]; do i=$((i+1)); [ $i -lt 300 ] || exit 3; sleep 0.1; done",
    ]
    for image in spec.images:
        lines.append(f"ctr -a {CONTAINERD_SOCKET} -n k8s.io images import --snapshotter overlayfs "
                     f"{q(str(image))} >>{q(str(root / 'containerd.log'))} 2>&1")
    lines += [
        f"PATH={q(spec.kube_proxy_path)} {q(str(spec.kube_proxy_bin))} --config={q(str(spec.kube_proxy_config))} "
        f"--v=2 >>{q(str(root / 'kube-proxy.log'))} 2>&1 &",
        f"{q(str(spec.kubelet_bin))} --config={q(str(root / 'kubelet.yaml'))} "
        f"--kubeconfig={q(str(spec.kubelet_kubeconfig))} --hostname-override={q(spec.name)} "
        f"--node-ip={q(spec.address)} --node-labels={q(','.join(spec.labels))} --v=2 "
        f">>{q(str(root / 'kubelet.log'))} 2>&1 &",
        "wait",
        "",
    ]
    return "\n".join(lines)


# -- cgroups and processes --------------------------------------------------------------------------


def _cgroup_dirs(relative: str) -> list[Path]:
    return [CGROUP_FS / c / relative.lstrip("/") for c in (*CGROUP_CONTROLLERS, "unified")]


def _make_cgroup(relative: str) -> None:
    """mkdir ``relative`` in every hierarchy, copying cpuset.cpus/mems down each new level (a
    cpuset cgroup without them refuses tasks)."""
    for controller in CGROUP_CONTROLLERS:
        base = CGROUP_FS / controller
        path = base
        for part in relative.strip("/").split("/"):
            parent, path = path, path / part
            if not path.is_dir():
                path.mkdir()
                if controller == "cpuset":
                    for knob in ("cpuset.cpus", "cpuset.mems"):
                        (path / knob).write_text((parent / knob).read_text())


def tree_pids(relative: str) -> set[int]:
    """Every pid in the pids-hierarchy subtree ``relative`` (empty when it does not exist)."""
    top = CGROUP_FS / _PIDS / relative.lstrip("/")
    pids: set[int] = set()
    if not top.is_dir():
        return pids
    for dirpath, _dirs, _files in os.walk(top):
        with contextlib.suppress(OSError):
            pids.update(int(p) for p in (Path(dirpath) / "cgroup.procs").read_text().split())
    return pids


def kill_tree(relative: str, *, timeout_s: float = 10.0) -> int:
    """SIGKILL every process in the cgroup subtree ``relative`` until none is left (a process
    forking meanwhile is caught by the next round). Returns how many were killed.

    Raises RealNodeError when some survive ``timeout_s`` seconds (uninterruptible sleep).
    """
    killed: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while pids := tree_pids(relative):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        killed |= pids
        if time.monotonic() > deadline:
            raise RealNodeError(f"processes {sorted(pids)[:10]} in cgroup {relative} survived SIGKILL")
        time.sleep(0.05)
    return len(killed)


def remove_cgroup_tree(relative: str) -> list[str]:
    """rmdir the subtree ``relative`` depth-first in every hierarchy; returns what could not go."""
    left = []
    for top in _cgroup_dirs(relative):
        if not top.is_dir():
            continue
        for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda w: -len(Path(w[0]).parts)):
            try:
                os.rmdir(dirpath)
            except OSError:
                left.append(dirpath)
    return left


# -- the node ---------------------------------------------------------------------------------------


class RealNode:
    """One real node of the lab (see the module docstring). Synchronous; not thread-safe.

    Lifecycle: ``prepare()`` once (folders, cgroups, configs), ``start()`` (again after ``kill()``:
    a reboot with its disk kept), ``kill()`` (power loss: every process, containers included, is
    SIGKILLed), ``remove()`` (kill, then remove cgroups and folders).
    """

    def __init__(self, spec: RealNodeSpec) -> None:
        self.spec = spec
        #: Monotonic times of the last and of the first ``start()``.
        self.started_at: float | None = None
        self.first_started_at: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    def prepare(self) -> None:
        """Make the folders, mount points, cgroups and configuration files.

        Raises RealNodeError (not root, or a cgroup hierarchy is missing).
        """
        spec, root = self.spec, self.spec.root
        if os.geteuid() != 0:
            raise RealNodeError("a real node needs root")
        for controller in CGROUP_CONTROLLERS:
            if not (CGROUP_FS / controller / "cgroup.procs").exists():
                raise RealNodeError(f"cgroup v1 hierarchy {CGROUP_FS / controller} is not mounted")
        for folder, target in BIND_TARGETS.items():
            (root / "mounts" / folder).mkdir(parents=True, exist_ok=True)
            Path(target).mkdir(parents=True, exist_ok=True)  # an empty mount point on the host
        Path(RUN_CONTAINERD).mkdir(parents=True, exist_ok=True)
        (root / "sysctl").mkdir(exist_ok=True)
        for key, value in KUBELET_SYSCTLS.items():
            (root / "sysctl" / key.replace("/", ".")).write_text(value + "\n")
        (root / "cni-conf").mkdir(exist_ok=True)
        (root / "pod-logs").mkdir(exist_ok=True)
        (root / "cni-conf" / "10-edgewatch-lab.conflist").write_text(json.dumps(cni_config(spec), indent=1))
        (root / "containerd.toml").write_text(containerd_config(spec))
        (root / "kubelet.yaml").write_text(yaml.safe_dump(kubelet_config(spec)))
        (root / "launch.sh").write_text(launch_script(spec))
        _make_cgroup(spec.cgroup_root + "/system")

    def start(self) -> None:
        """Start the node (returns at once; the Node registers in a few seconds).

        Raises RealNodeError when it is already running.
        """
        if self.running:
            raise RealNodeError(f"{self.spec.name} is already running")
        _make_cgroup(self.spec.cgroup_root + "/system")
        argv = ["nsenter", f"--net=/run/netns/{self.spec.netns}", "unshare", "--mount", "--propagation", "slave",
                "--", "/bin/sh", str(self.spec.root / "launch.sh")]
        with open(self.spec.root / "launch.log", "ab") as out:
            self._proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True)
        self.started_at = time.monotonic()
        if self.first_started_at is None:
            self.first_started_at = self.started_at
        log.info("real node %s: started (pid %d)", self.spec.name, self._proc.pid)

    @property
    def running(self) -> bool:
        """Whether any process of the node is alive."""
        return bool(tree_pids(self.spec.cgroup_root)) or (self._proc is not None and self._proc.poll() is None)

    def kill(self) -> int:
        """Power loss: SIGKILL every process of the node, its containers included. Returns how
        many. Raises RealNodeError when some survive."""
        killed = kill_tree(self.spec.cgroup_root)
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=5)
            self._proc = None
        log.info("real node %s: killed %d process(es)", self.spec.name, killed)
        return killed

    def remove(self) -> list[str]:
        """Kill the node and remove its cgroups and folder. Returns what could not be removed."""
        with contextlib.suppress(RealNodeError):
            self.kill()
        left = remove_cgroup_tree(self.spec.cgroup_root)
        left += _remove_folder(self.spec.root)
        return left

    def container_pids(self) -> set[int]:
        """Pids of the node's pod containers (its ``kubepods`` cgroup subtree)."""
        return tree_pids(self.spec.cgroup_root + "/kubepods")

    def usage(self) -> dict[str, float]:
        """What the node costs now: ``cpu_s`` (CPU seconds used since its cgroup was made, from
        cpuacct), ``rss_bytes`` (sum of its processes' resident sets) and ``processes``."""
        cpu_s = 0.0
        with contextlib.suppress(OSError, ValueError):
            cpu_s = int((CGROUP_FS / "cpuacct" / self.spec.cgroup_root.lstrip("/") / "cpuacct.usage")
                        .read_text()) / 1e9
        pids = tree_pids(self.spec.cgroup_root)
        return {"cpu_s": cpu_s, "rss_bytes": float(sum(rss_bytes(p) for p in pids)), "processes": float(len(pids))}

    def log_tail(self, name: str = "kubelet", lines: int = 20) -> str:
        """The last lines of the node's ``<name>.log`` (kubelet, containerd, kube-proxy, launch)."""
        try:
            return "\n".join((self.spec.root / f"{name}.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def _remove_folder(path: Path) -> list[str]:
    if not path.exists():
        return []
    proc = subprocess.run(["rm", "-rf", "--one-file-system", str(path)], capture_output=True, text=True, timeout=120)
    return [str(path)] if proc.returncode != 0 or path.exists() else []


def cleanup_stale(*, live_labs: set[str] | None = None) -> list[str]:
    """Remove what real nodes of dead labs left: processes in their cgroups, the cgroups, and
    their folders under ``LAB_ROOT``. A lab is live when its network-lab registry file exists
    (``NetLab.cleanup_stale`` removes those of dead owners first) or it is in ``live_labs``.
    Returns the lab ids cleaned."""
    live = set(live_labs or ())
    if _NETLAB_REGISTRY.is_dir():
        live |= {p.stem for p in _NETLAB_REGISTRY.glob("ew*.json")}
    found: set[str] = set()
    for top in [LAB_ROOT, *(_cgroup_dirs(CGROUP_PARENT))]:
        if top.is_dir():
            found |= {p.name for p in top.iterdir() if p.is_dir() and _LAB_ID_RE.match(p.name)}
    cleaned = []
    for lab_id in sorted(found - live):
        relative = f"/{CGROUP_PARENT}/{lab_id}"
        try:
            kill_tree(relative)
        except RealNodeError as exc:
            log.error("real nodes of lab %s: %s", lab_id, exc)
        left = remove_cgroup_tree(relative) + _remove_folder(LAB_ROOT / lab_id)
        if left:
            log.error("real nodes of lab %s: could not remove %s", lab_id, left[:5])
        else:
            cleaned.append(lab_id)
    return cleaned

"""The playground's cluster: a real control plane on the network lab's cloud address, cloud nodes
and edge nodes played by kubelet simulators, a coordinator (etcd) per pool that asks for one, and
edgewatch installed *as shipped*.

How edgewatch gets in: the shipped kustomize base (``deploy/``) is rendered with a small overlay
and applied with kubectl (``edgewatch_lab.playground.install``); the real DaemonSet controller and
scheduler create and bind the agent and controller pods; each node's kubelet simulator runs the
pods of edgewatch's image as processes with what a kubelet gives a container (ServiceAccount token
bound to the pod, Secret and ConfigMap volumes with their modes, hostPath, runAsUser/fsGroup,
probes; ``edgewatch_lab.testing.podrunner``). No edgewatch process holds the admin credential; the
apiserver's audit log shows who they were (``edgewatch_lab.playground.identities``).

Nodes: ``cloud-1`` (control plane, tainted, in the machine's own network namespace, never faulted;
the controller runs there), ``cloud-2..N`` (ordinary workers in namespaces, no agent), and the edge
nodes ``<pool>-<n>`` (namespaces, agent DaemonSet pod). A node's clock can be skewed
(``skew``): its kubelet and containers then see the machine's time plus an offset.

``PlaygroundCluster`` is a context manager: ``__exit__`` stops every process and removes every
namespace, also when a step failed. With ``system="stock"`` (the baseline) nothing of
edgewatch is installed and no coordinator runs: stock Kubernetes alone.

Real nodes (a pool's ``real_nodes``): ``<pool>-1..N`` run a real kubelet, containerd, runc and
kube-proxy in their namespace instead of the simulator (``edgewatch_lab.testing.realnode``), with their
own node credential; the agent and the sample pods run there as real containers from the images
built here (``edgewatch_lab.testing.images``). A kill SIGKILLs all their processes, containers included;
a revive boots them again with their disk kept.

Coordinators (a pool's ``coordinator: true``): by default (``coordinators: process``) the lab runs
an etcd per pool on a host of its own, ``<pool>-coord``, and names it in ``poolCoordinators``. With
``coordinators: pods`` the ConfigMap says ``{<pool>: auto}`` and nothing else: edgewatch's controller
keeps the coordinator Deployment, the scheduler puts its pod on a node of the pool and that node's
kubelet simulator runs it like the agent (with the etcd of the lab's binaries on its PATH, as the
image carries etcd); killing the coordinator then means killing its node (the runner does it).

Limits: one machine; on simulated nodes, pods other than edgewatch's are only reported Running (no
containers); logs are files in the run folder (``log_files()``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from edgewatch.core.poolconfig import AUTO
from edgewatch.names import POOL_LABEL
from edgewatch_lab.playground import install, superedge
from edgewatch_lab.playground.comparison import SYSTEMS
from edgewatch_lab.playground.scenario import Scenario
from edgewatch_lab.testing import realnode
from edgewatch_lab.testing.binaries import (
    Binaries,
    ensure_binaries,
    ensure_helm,
    ensure_node_binaries,
    ensure_superedge,
)
from edgewatch_lab.testing.controlplane import SERVICE_CIDR, ClusterTimings, ControlPlane
from edgewatch_lab.testing.etcd import EtcdServer
from edgewatch_lab.testing.images import Images, ensure_images
from edgewatch_lab.testing.kubeproxy import KubeProxy
from edgewatch_lab.testing.netlab import Host, NetLab
from edgewatch_lab.testing.podrunner import write_clock_offset
from edgewatch_lab.testing.procstat import (children, cpu_snapshot, descendants, pod_processes, process_table,
                                            rss_bytes)
from edgewatch_lab.testing.realnode import RealNode, RealNodeSpec

log = logging.getLogger(__name__)

WORKLOAD_NAMESPACE = "playground"
EDGEWATCH_NAMESPACE = install.NAMESPACE
EDGEWATCH_IMAGE = "ghcr.io/edgewatch/edgewatch"
CLOUD_ZONE = "cloud"
#: The shipped ServiceAccount whose tokens may read edgewatch's /metrics (deploy/13-rbac-metrics.yaml).
METRICS_SCRAPER = "edgewatch-metrics-scraper"


@dataclass
class NodeProcesses:
    """One node: its namespace (None for cloud-1, which is the machine itself), its kubelet
    simulator or real runtime, and its own root folder (hostPath volumes, pod folders, clock)."""

    name: str
    host: Host | None
    address: str
    index: int
    root: Path
    covered: bool
    kubelet: subprocess.Popen[bytes] | None = None
    #: True for a real node (``real_nodes``); ``real`` is its runtime once started.
    is_real: bool = False
    real: RealNode | None = None


@dataclass
class PlaygroundCluster:
    """Everything a scenario runs on.

    Args:
        scenario: topology and timings.
        system: what judges the nodes, one of ``comparison.SYSTEMS`` (default ``edgewatch``):
            ``edgewatch`` installs edgewatch; ``superedge`` SuperEdge's edge-health instead
            (``edgewatch_lab.playground.superedge``; never both: both use the host port 51005);
            ``stock`` neither (the baseline, Kubernetes alone).
        binaries: control-plane binaries (default: ``ensure_binaries()``).
        workdir: folder for logs, node folders and the rendered install (default: a new temporary folder).
        install_method: how edgewatch is installed, one of ``install.METHODS``: ``kustomize``
            (deploy/ with an overlay, applied with kubectl) or ``helm`` (charts/edgewatch).
    """

    scenario: Scenario
    system: str = "edgewatch"
    binaries: Binaries | None = None
    workdir: Path | None = None
    install_method: str = "kustomize"
    nodes: dict[str, NodeProcesses] = field(default_factory=dict)
    coordinators: dict[str, EtcdServer] = field(default_factory=dict)
    coordinator_hosts: dict[str, Host] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.lab: NetLab | None = None
        self.cp: ControlPlane | None = None
        #: The cluster admin's kubeconfig: for the lab's own parts only — the simulated kubelets, the
        #: observer, ``edgewatch status`` run by the operator, tests. Never handed to edgewatch's pods,
        #: which get ServiceAccount tokens (the report's ``identities`` proves it).
        self.admin_kubeconfig: Path | None = None
        self._metrics_token: str | None = None
        #: The real nodes' runtime binaries and images (None without real nodes).
        self.node_bin: Path | None = None
        self.images: Images | None = None
        #: What ``install`` installed (``install.install``'s record; empty before, or without edgewatch).
        self.installed: dict[str, object] = {}
        #: The release installed now: a git revision (``topology.release``, then each ``rollout``
        #: step's), or None for this checkout.
        self.release: str | None = self.scenario.topology.release
        if self.system not in SYSTEMS:
            raise ValueError(f"system must be one of {', '.join(SYSTEMS)}, got {self.system!r}")
        #: SuperEdge's binaries (``superedge`` runs only).
        self.superedge_bin: Path | None = ensure_superedge() if self.superedge else None

    @property
    def edgewatch(self) -> bool:
        """Whether edgewatch is installed (``system == "edgewatch"``)."""
        return self.system == "edgewatch"

    @property
    def superedge(self) -> bool:
        """Whether SuperEdge's edge-health is installed (``system == "superedge"``)."""
        return self.system == "superedge"

    @property
    def coordinator_pods(self) -> bool:
        """True when the pools' coordinators run as edgewatch ships them (``coordinators: pods``:
        the controller's Deployment, pods scheduled onto the pool's nodes), not as lab processes."""
        return self.scenario.topology.coordinators == "pods"

    # -- lifecycle ---------------------------------------------------------------------------------

    def __enter__(self) -> "PlaygroundCluster":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Build the lab, start the control plane, coordinators and nodes, install edgewatch."""
        sc = self.scenario
        self.workdir = Path(self.workdir or tempfile.mkdtemp(prefix="edgewatch-playground-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        if sc.real_node_names():
            self.node_bin = ensure_node_binaries()
            self.images = ensure_images(pause_binary=self.node_bin / "pause")
        self.lab = NetLab.create()
        realnode.cleanup_stale()  # what real nodes of crashed runs left (their labs are gone now)
        skewed = {s.node for s in sc.steps if s.action == "skew"}
        index = 0

        def add(name: str, host: Host | None, address: str, covered: bool) -> None:
            nonlocal index
            index += 1
            self.nodes[name] = NodeProcesses(name=name, host=host, address=address, index=index,
                                             root=self.workdir / "nodes" / name, covered=covered)

        add(sc.cloud_node_names()[0], None, self.lab.cloud_address, covered=False)
        for name in sc.cloud_node_names()[1:]:
            host = self.lab.add_host(name, pool=CLOUD_ZONE)
            add(name, host, host.address, covered=False)
        for pool in sc.topology.pools:
            for host in self.lab.add_pool(pool.name, pool.nodes):
                add(host.name, host, host.address, covered=True)
                self.nodes[host.name].is_real = sc.is_real(host.name)
            if pool.coordinator and self.edgewatch and not self.coordinator_pods:
                self.coordinator_hosts[pool.name] = self.lab.add_host(f"{pool.name}-coord", pool=pool.name)
        for name in skewed:  # a skew at 0 s is the node's clock from its boot on; later ones step it
            at_boot = [st.seconds for st in sc.steps if st.action == "skew" and st.node == name and st.at == 0]
            write_clock_offset(self.nodes[name].root / "clock", at_boot[0] if at_boot else 0)
        timings = ClusterTimings(node_monitor_grace_s=sc.timings.node_monitor_grace_s,
                                 not_ready_toleration_s=int(sc.timings.toleration_s),
                                 unreachable_toleration_s=int(sc.timings.toleration_s))
        self.binaries = self.binaries or ensure_binaries()
        self.cp = ControlPlane(address=self.lab.cloud_address, timings=timings, audit=self.edgewatch,
                               binaries=self.binaries).start()
        self.admin_kubeconfig = self.cp.kubeconfig
        self.cp.kubectl("create", "namespace", WORKLOAD_NAMESPACE)
        if self.edgewatch:
            for pool in self.coordinator_hosts:
                self.start_coordinator(pool)
            self.install()
        if self.superedge:
            self.cp.kubectl("apply", "-f", "-", timeout_s=60, input_text=superedge.render(
                folder=self.workdir / "superedge", address=self.lab.cloud_address))
        for name in self.nodes:
            self.start_node(name)

    def install(self) -> None:
        """Install edgewatch the ``install_method`` way — the shipped kustomize base with the
        playground's overlay, or the shipped chart with the same values — as an operator does
        (there is no key to create: each agent makes its own, see ``edgewatch.core.identity``)."""
        self.installed = self._apply(self.install_method, self.release)

    def roll_to(self, release: str | None) -> None:
        """Apply ``release``'s install (a git revision; None: this checkout) over the current one,
        with the same ConfigMap keys, flags and replicas, as an operator upgrades (or rolls back):
        the DaemonSet and the Deployment roll through their own rolling update."""
        self._apply("kustomize", release)
        self.release = release

    def uninstall(self, *, timeout_s: float = 180.0) -> dict[str, object]:
        """Remove edgewatch as docs/uninstall.md tells an operator: delete the install the way it
        was made (``install.remove``), then run ``edgewatch uninstall`` (this checkout's CLI) with
        the admin kubeconfig, as the operator would. Its output is kept as ``uninstall.log`` in
        the run folder. Returns ``{"install_deleted": objects, "install_deleted_s", "cleanup_exit",
        "cleanup": its last line, "cleanup_s"}`` (seconds).

        Raises:
            subprocess.CalledProcessError: deleting the install failed.
            subprocess.TimeoutExpired: ``edgewatch uninstall`` took longer than ``timeout_s``.
        """
        assert self.cp is not None and self.workdir is not None and self.admin_kubeconfig is not None
        start = time.monotonic()
        deleted = install.remove(self.install_method, workdir=self.workdir, kubectl=self.cp.kubectl,
                                 helm=ensure_helm, kubeconfig=self.admin_kubeconfig)
        deleted_s = time.monotonic() - start
        done = subprocess.run([sys.executable, "-m", "edgewatch", "uninstall",
                               f"--kubeconfig={self.admin_kubeconfig}"],
                              capture_output=True, text=True, timeout=timeout_s)
        (self.workdir / "uninstall.log").write_text(deleted + "\n--- edgewatch uninstall ---\n"
                                                    + done.stdout + done.stderr)
        lines = (done.stdout.strip() or done.stderr.strip()).splitlines()
        return {"install_deleted": len(deleted.splitlines()), "install_deleted_s": round(deleted_s, 1),
                "cleanup_exit": done.returncode, "cleanup": lines[-1] if lines else "",
                "cleanup_s": round(time.monotonic() - start - deleted_s, 1)}

    def metrics_token(self) -> str | None:
        """A token of the shipped scraper ServiceAccount ``edgewatch/edgewatch-metrics-scraper``
        (deploy/13-rbac-metrics.yaml: may ``get /metrics`` and nothing else), for the lab's own
        readers of edgewatch's ``/metrics`` (its Prometheus, the coordinator watch, tests), as an
        operator's Prometheus holds one. Asked once with ``kubectl create token`` (valid 48 h) and
        kept; None while the install has no such ServiceAccount (a release before it, whose
        ``/metrics`` is open), asked again next time.

        Raises:
            subprocess.CalledProcessError: kubectl failed for another reason than a missing account.
        """
        if self._metrics_token is None and self.cp is not None:
            try:
                self._metrics_token = self.cp.kubectl("create", "token", METRICS_SCRAPER, "--namespace",
                                                      EDGEWATCH_NAMESPACE, "--duration=48h").strip() or None
            except subprocess.CalledProcessError as exc:
                if "NotFound" not in (exc.stderr or "") and "not found" not in (exc.stderr or ""):
                    raise
        return self._metrics_token

    def metrics_headers(self) -> dict[str, str]:
        """``{"Authorization": "Bearer <token>"}`` for a ``/metrics`` read (:meth:`metrics_token`),
        or ``{}`` while there is no token."""
        token = self.metrics_token()
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _apply(self, method: str, release: str | None) -> dict[str, object]:
        """``install.install`` with the playground's settings for this scenario."""
        assert self.cp is not None and self.workdir is not None and self.admin_kubeconfig is not None
        sc = self.scenario
        coordinators: dict[str, str] = {pool: etcd.client_url for pool, etcd in self.coordinators.items()}
        if self.coordinator_pods:  # edgewatch runs them: one ConfigMap line per pool, as an operator writes
            coordinators = {p.name: AUTO for p in sc.topology.pools if p.coordinator}
        config = install.edgewatch_config(grouping=sc.topology.grouping, coordinators=coordinators,
                                          out_of_service_pools=sc.out_of_service_pools())
        args = [f"--autonomy={sc.timings.autonomy_s:g}"]
        if release is None:  # the releases before this checkout's (0.1.0, 0.2.0) have no --node-monitor-grace
            args.append(f"--node-monitor-grace={sc.timings.node_monitor_grace_s:g}")
        return install.install(
            method, workdir=self.workdir, kubectl=self.cp.kubectl, helm=ensure_helm,
            kubeconfig=self.admin_kubeconfig, config=config, controller_args=args,
            controller_replicas=min(2, sc.topology.cloud_nodes), release=release)

    def stop(self) -> None:
        """Stop every process and remove the lab (real nodes: their logs are copied to the run
        folder first). Safe to call twice."""
        for node in self.nodes.values():
            if node.kubelet is not None:
                _terminate(node.kubelet)
                node.kubelet = None
            if node.real is not None:
                self._keep_real_logs(node)
                left = node.real.remove()
                if left:
                    log.error("real node %s: could not remove %s", node.name, left)
                node.real = None
        if self.lab is not None:
            shutil.rmtree(realnode.LAB_ROOT / self.lab.lab_id, ignore_errors=True)
        for etcd in self.coordinators.values():
            with contextlib.suppress(Exception):
                etcd.stop()
        self.coordinators.clear()
        if self.cp is not None:
            self.cp.stop()
            self.cp = None
        if self.lab is not None:
            self.lab.close()
            self.lab = None

    # -- parts ---------------------------------------------------------------------------------------

    def _log(self, name: str) -> object:
        assert self.workdir is not None
        return open(self.workdir / f"{name}.log", "ab")

    def start_node(self, name: str) -> None:
        """Start the node's kubelet simulator (in its namespace; cloud-1 in the machine's own). It
        runs the node's edgewatch pods (agent, controller) as processes. A real node boots its
        kubelet and containerd instead (``_start_real``)."""
        assert self.admin_kubeconfig is not None
        node = self.nodes[name]
        if node.is_real:
            self._start_real(node)
            return
        node.root.mkdir(parents=True, exist_ok=True)
        pool = self.scenario.pool_of(name)
        argv = [sys.executable, "-m", "edgewatch_lab.testing.kubeletsim", "--kubeconfig", str(self.admin_kubeconfig),
                "--node", name, "--address", node.address, "--index", str(node.index),
                "--label", f"topology.kubernetes.io/zone={pool}",
                "--run-image", EDGEWATCH_IMAGE, "--node-root", str(node.root),
                # the real image carries etcd (the pool coordinator pods run it): so does the lab's
                "--image-bin-dir", str((self.binaries or ensure_binaries()).etcd.parent)]
        if self.superedge_bin is not None:  # SuperEdge's images: their binaries
            argv += ["--run-image", superedge.IMAGE_PREFIX, "--image-bin-dir", str(self.superedge_bin)]
        if node.covered:
            argv += ["--label", f"{POOL_LABEL}={pool}"]
        if (node.root / "clock").is_dir():
            argv += ["--clock-dir", str(node.root / "clock")]
        with self._log(f"{name}-kubelet") as out:
            if node.host is None:  # cloud-1: the control-plane node, this machine
                argv += ["--healthz-port", "0", "--label", "node-role.kubernetes.io/control-plane=",
                         "--taint", "node-role.kubernetes.io/control-plane:NoSchedule"]
                node.kubelet = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                                preexec_fn=_die_with_parent)
            else:
                node.kubelet = node.host.popen(argv, stdout=out, stderr=subprocess.STDOUT)

    def _start_real(self, node: NodeProcesses) -> None:
        """Boot a real node: on first use make its credentials (``system:node:<name>`` for the
        kubelet, ``system:kube-proxy``), kube-proxy's configuration and the node's folders."""
        assert self.cp is not None and self.lab is not None and node.host is not None
        assert self.node_bin is not None and self.images is not None
        binaries = self.binaries or ensure_binaries()
        if node.real is None:
            root = realnode.LAB_ROOT / self.lab.lab_id / node.name
            proxy = KubeProxy(
                netns=node.host.netns, node_name=node.name, node_ip=node.address, work_dir=root / "kube-proxy",
                binary=binaries.require_kube_proxy(),
                kubeconfig=self.cp.client_kubeconfig(root / "kube-proxy.kubeconfig", user="system:kube-proxy"))
            _argv, path = proxy.prepare()
            pool = self.scenario.pool_of(node.name)
            labels = [f"topology.kubernetes.io/zone={pool}"] + ([f"{POOL_LABEL}={pool}"] if node.covered else [])
            spec = RealNodeSpec(
                name=node.name, lab_id=self.lab.lab_id, netns=node.host.netns, address=node.address,
                pod_subnet=f"10.245.{node.index % 256}.0/24", node_bin=self.node_bin,
                kubelet_bin=binaries.require_kubelet(), kube_proxy_bin=binaries.require_kube_proxy(),
                images=(self.images.pause, self.images.edgewatch), labels=tuple(labels),
                kubelet_kubeconfig=self.cp.client_kubeconfig(
                    root / "kubelet.kubeconfig", user=f"system:node:{node.name}", groups=("system:nodes",)),
                kube_proxy_config=proxy.config_path, kube_proxy_path=path, service_cidr=SERVICE_CIDR)
            node.real = RealNode(spec)
            node.real.prepare()
        node.real.start()

    def _keep_real_logs(self, node: NodeProcesses) -> None:
        assert self.workdir is not None and node.real is not None
        dest = self.workdir / "nodes" / node.name
        dest.mkdir(parents=True, exist_ok=True)
        for path in node.real.spec.root.glob("*.log"):
            with contextlib.suppress(OSError):
                shutil.copy2(path, dest / f"real-{path.name}")
        with contextlib.suppress(OSError):
            shutil.copytree(node.real.spec.root / "pod-logs", dest / "var" / "log" / "pods", dirs_exist_ok=True)

    def container_count(self, name: str) -> int | None:
        """Pod container processes running on a real node now (None for a simulated node)."""
        node = self.nodes[name]
        return len(node.real.container_pids()) if node.real is not None else None

    def node_usage(self, name: str, table: Mapping[int, tuple[int, int]] | None = None) -> dict[str, float]:
        """What a node's processes have used: ``cpu_s`` (CPU seconds: a real node's cgroup since
        its creation; a simulated node's simulator and pods, live ones only) and ``rss_bytes``.
        ``table``: one ``procstat.process_table`` shared by several calls (else one scan each)."""
        node = self.nodes[name]
        if node.real is not None:
            return node.real.usage()
        if node.kubelet is None:
            return {"cpu_s": 0.0, "rss_bytes": 0.0}
        table = process_table() if table is None else table
        pids = [node.kubelet.pid] + descendants(node.kubelet.pid, table)
        cpu = sum(cpu_snapshot(pids, table).values())
        return {"cpu_s": cpu, "rss_bytes": float(sum(rss_bytes(p) for p in pids))}

    def pod_usage(self, name: str,
                  table: Mapping[int, tuple[int, int]] | None = None) -> dict[str, tuple[dict[int, float], int]]:
        """Per pod running on a simulated node now, ``namespace/name`` → (CPU seconds per process,
        ``{pid: seconds}``, for ``procstat.cpu_delta_s``; resident set in bytes). Empty for a real
        node (its containers are containerd's) and for a node whose simulator is not running.
        ``table`` as for :meth:`node_usage`."""
        node = self.nodes[name]
        if node.real is not None or node.kubelet is None or node.kubelet.poll() is not None:
            return {}
        table = process_table() if table is None else table
        return {pod: (cpu_snapshot(pids, table), sum(rss_bytes(p) for p in pids))
                for pod, pids in pod_processes(node.root, simulator_pid=node.kubelet.pid, table=table).items()}

    def start_coordinator(self, pool: str) -> None:
        """Start (or restart, keeping its data) the pool's etcd inside its coordinator namespace."""
        assert self.workdir is not None
        host = self.coordinator_hosts[pool]
        etcd = self.coordinators.get(pool)
        if etcd is None:
            binaries = self.binaries or ensure_binaries()
            # Alone in its namespace: etcd's default ports are free there.
            etcd = EtcdServer(binary=binaries.etcd, address=host.address, client_port=2379, peer_port=2380,
                              metrics_port=2381, data_dir=self.workdir / f"etcd-{pool}" / "data", name=pool,
                              popen=host.popen)
            self.coordinators[pool] = etcd
        etcd.start()

    def restart_controller(self) -> int:
        """SIGKILL every running edgewatch controller container (no goodbye); their kubelets
        restart them as a kubelet restarts a crashed container. Returns how many were killed."""
        return sum(self.kill_controller_on(name) for name, node in self.nodes.items() if not node.covered)

    def kill_controller_on(self, node_name: str) -> int:
        """SIGKILL the edgewatch controller container(s) that ``node_name``'s kubelet runs (no
        goodbye; its kubelet restarts it). Returns how many were killed."""
        node = self.nodes.get(node_name)
        if node is None or node.kubelet is None:
            return 0
        killed = 0
        for pid in children(node.kubelet.pid):
            if b"controller" in _cmdline(pid) and b"edgewatch" in _cmdline(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
        return killed

    def kill_node(self, name: str) -> None:
        """The machine dies: every process in its namespace is killed and its address goes silent."""
        assert self.lab is not None
        node = self.nodes[name]
        if node.host is None:
            raise ValueError(f"{name} is the control-plane node; it cannot be killed")
        self.lab.kill(name)
        if node.real is not None:
            node.real.kill()
        if node.kubelet is not None:
            with contextlib.suppress(Exception):
                node.kubelet.wait(timeout=5)
        node.kubelet = None

    def revive_node(self, name: str) -> None:
        """The machine boots again: link up, kubelet starts (and runs its pods again)."""
        assert self.lab is not None
        self.lab.revive(name)
        self.start_node(name)

    def skew(self, name: str, seconds: float) -> None:
        """From now on the node's clock is off by ``seconds`` (0 ends it)."""
        write_clock_offset(self.nodes[name].root / "clock", seconds)

    def kill_coordinator(self, pool: str) -> None:
        """SIGKILL the pool's etcd (its data stays for a later revive)."""
        self.coordinators[pool].kill()

    def log_files(self) -> list[Path]:
        """The log files of this run: kubelets, and every container's (``nodes/*/var/log/pods``)."""
        assert self.workdir is not None
        return (sorted(self.workdir.glob("*.log")) + sorted(self.workdir.glob("nodes/*/real-*.log"))
                + sorted(self.workdir.glob("nodes/*/var/log/pods/*/*/*.log")))

    def remove_workdir(self) -> None:
        """Delete the run folder (logs, node folders)."""
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it when the playground process dies, however it dies (the
    namespaced nodes die with their namespaces; cloud-1 lives in the machine's own)."""
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _terminate(proc: subprocess.Popen[bytes], timeout_s: float = 5.0) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout_s)


def wait_until(predicate, *, timeout_s: float, interval_s: float = 0.5, what: str) -> None:  # type: ignore[no-untyped-def]
    """Poll a sync predicate; raise TimeoutError naming ``what`` after ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)

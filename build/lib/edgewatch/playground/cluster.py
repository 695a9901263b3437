"""The playground's cluster: a real control plane on the network lab's cloud address, cloud nodes
and edge nodes played by kubelet simulators, a coordinator (etcd) per pool that asks for one, and
edgewatch installed *as shipped*.

How edgewatch gets in: the shipped kustomize base (``deploy/``) is rendered with a small overlay
and applied with kubectl (``edgewatch.playground.install``); the real DaemonSet controller and
scheduler create and bind the agent and controller pods; each node's kubelet simulator runs the
pods of edgewatch's image as processes with what a kubelet gives a container (ServiceAccount token
bound to the pod, Secret and ConfigMap volumes with their modes, hostPath, runAsUser/fsGroup,
probes; ``edgewatch.testing.podrunner``). No edgewatch process holds the admin credential; the
apiserver's audit log shows who they were (``edgewatch.playground.identities``).

Nodes: ``cloud-1`` (control plane, tainted, in the machine's own network namespace, never faulted;
the controller runs there), ``cloud-2..N`` (ordinary workers in namespaces, no agent), and the edge
nodes ``<pool>-<n>`` (namespaces, agent DaemonSet pod). A node's clock can be skewed
(``skew``): its kubelet and containers then see the machine's time plus an offset.

``PlaygroundCluster`` is a context manager: ``__exit__`` stops every process and removes every
namespace, also when a step failed. Without edgewatch (``edgewatch=False``, the baseline) nothing of
edgewatch is installed and no coordinator runs: stock Kubernetes alone.

Limits: one machine; pods other than edgewatch's are only reported Running (no containers); logs
are files in the run folder (``log_files()``).
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
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from edgewatch.names import POOL_LABEL
from edgewatch.playground import install
from edgewatch.playground.scenario import Scenario
from edgewatch.testing.binaries import Binaries, ensure_binaries
from edgewatch.testing.controlplane import ClusterTimings, ControlPlane
from edgewatch.testing.etcd import EtcdServer
from edgewatch.testing.netlab import Host, NetLab
from edgewatch.testing.podrunner import write_clock_offset

log = logging.getLogger(__name__)

WORKLOAD_NAMESPACE = "playground"
EDGEWATCH_NAMESPACE = install.NAMESPACE
EDGEWATCH_IMAGE = "ghcr.io/edgewatch/edgewatch"
CLOUD_ZONE = "cloud"


@dataclass
class NodeProcesses:
    """One simulated node: its namespace (None for cloud-1, which is the machine itself), its
    kubelet simulator, and its own root folder (hostPath volumes, pod folders, clock)."""

    name: str
    host: Host | None
    address: str
    index: int
    root: Path
    covered: bool
    kubelet: subprocess.Popen[bytes] | None = None


@dataclass
class PlaygroundCluster:
    """Everything a scenario runs on.

    Args:
        scenario: topology and timings.
        edgewatch: False for the baseline (stock Kubernetes).
        binaries: control-plane binaries (default: ``ensure_binaries()``).
        workdir: folder for logs, node folders and the rendered install (default: a new temporary folder).
    """

    scenario: Scenario
    edgewatch: bool = True
    binaries: Binaries | None = None
    workdir: Path | None = None
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
        #: The admin's copy of the key the Secret holds (tests sign probe messages with it).

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
        self.lab = NetLab.create()
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
            if pool.coordinator and self.edgewatch:
                self.coordinator_hosts[pool.name] = self.lab.add_host(f"{pool.name}-coord", pool=pool.name)
        for name in skewed:  # a skew at 0 s is the node's clock from its boot on; later ones step it
            at_boot = [st.seconds for st in sc.steps if st.action == "skew" and st.node == name and st.at == 0]
            write_clock_offset(self.nodes[name].root / "clock", at_boot[0] if at_boot else 0)
        timings = ClusterTimings(node_monitor_grace_s=sc.timings.node_monitor_grace_s,
                                 not_ready_toleration_s=int(sc.timings.toleration_s),
                                 unreachable_toleration_s=int(sc.timings.toleration_s))
        self.cp = ControlPlane(address=self.lab.cloud_address, timings=timings, audit=self.edgewatch,
                               binaries=self.binaries or ensure_binaries()).start()
        self.admin_kubeconfig = self.cp.kubeconfig
        self.cp.kubectl("create", "namespace", WORKLOAD_NAMESPACE)
        if self.edgewatch:
            for pool in self.coordinator_hosts:
                self.start_coordinator(pool)
            self.install()
        for name in self.nodes:
            self.start_node(name)

    def install(self) -> None:
        """Render the shipped kustomize base with the playground's overlay and apply it — what an
        operator does (there is no key to create: each agent makes its own, see
        ``edgewatch.core.identity``)."""
        assert self.cp is not None and self.workdir is not None
        sc = self.scenario
        coordinators = {pool: etcd.client_url for pool, etcd in self.coordinators.items()}
        config = {"grouping": "on" if sc.topology.grouping else "off", "groupLabel": POOL_LABEL,
                  "coverLabel": POOL_LABEL,
                  "poolCoordinators": yaml.safe_dump(coordinators) if coordinators else ""}
        rendered = install.render(
            workdir=self.workdir, kubectl=self.cp.kubectl, config=config,
            controller_args=[f"--autonomy={sc.timings.autonomy_s:g}"],
            controller_replicas=min(2, sc.topology.cloud_nodes))
        self.cp.kubectl("apply", "-f", "-", input_text=rendered, timeout_s=60)

    def stop(self) -> None:
        """Stop every process and remove the lab. Safe to call twice."""
        for node in self.nodes.values():
            if node.kubelet is not None:
                _terminate(node.kubelet)
                node.kubelet = None
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
        runs the node's edgewatch pods (agent, controller) as processes."""
        assert self.admin_kubeconfig is not None
        node = self.nodes[name]
        node.root.mkdir(parents=True, exist_ok=True)
        pool = self.scenario.pool_of(name)
        argv = [sys.executable, "-m", "edgewatch.testing.kubeletsim", "--kubeconfig", str(self.admin_kubeconfig),
                "--node", name, "--address", node.address, "--index", str(node.index),
                "--label", f"topology.kubernetes.io/zone={pool}",
                "--run-image", EDGEWATCH_IMAGE, "--node-root", str(node.root)]
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
        killed = 0
        for node in self.nodes.values():
            if node.kubelet is None or node.covered:
                continue
            for pid in _children(node.kubelet.pid):
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
        return sorted(self.workdir.glob("*.log")) + sorted(self.workdir.glob("nodes/*/var/log/pods/*/*/*.log"))

    def remove_workdir(self) -> None:
        """Delete the run folder (logs, node folders)."""
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it when the playground process dies, however it dies (the
    namespaced nodes die with their namespaces; cloud-1 lives in the machine's own)."""
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry.name))
    return out


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

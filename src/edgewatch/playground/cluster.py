"""The playground's cluster: a real control plane on the network lab's cloud address, one network
namespace per simulated edge node (kubelet simulator + the real agent as processes inside it), a
coordinator (etcd) per pool that asks for one, the controller, and the sample workload.

``PlaygroundCluster`` is a context manager: ``__exit__`` stops every process and removes every
namespace, also when a step failed. Without edgewatch (``edgewatch=False``, the baseline) no agent,
controller or coordinator runs: stock Kubernetes alone.

Limits: one machine; node processes log to files in the run folder (printed at the end).
"""

from __future__ import annotations

import base64
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

from edgewatch.names import POOL_LABEL
from edgewatch.playground.scenario import Scenario
from edgewatch.testing.binaries import Binaries, ensure_binaries
from edgewatch.testing.controlplane import ClusterTimings, ControlPlane, free_port
from edgewatch.testing.etcd import EtcdServer
from edgewatch.testing.netlab import Host, NetLab

log = logging.getLogger(__name__)

WORKLOAD_NAMESPACE = "playground"
EDGEWATCH_NAMESPACE = "edgewatch"


@dataclass
class NodeProcesses:
    """The processes of one simulated node (inside its namespace)."""

    host: Host
    index: int
    kubelet: subprocess.Popen[bytes] | None = None
    agent: subprocess.Popen[bytes] | None = None


@dataclass
class PlaygroundCluster:
    """Everything a scenario runs on.

    Args:
        scenario: topology and timings.
        edgewatch: False for the baseline (stock Kubernetes).
        binaries: control-plane binaries (default: ``ensure_binaries()``).
        workdir: folder for logs, keys and kubeconfig (default: a new temporary folder).
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
        self.controller: subprocess.Popen[bytes] | None = None
        self.key_file: Path | None = None
        self.kubeconfig: Path | None = None
        self.controller_port = 0
        self.cloud_kubelet: subprocess.Popen[bytes] | None = None

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
        """Build the lab, start the control plane, coordinators, nodes and controller."""
        sc = self.scenario
        self.workdir = Path(self.workdir or tempfile.mkdtemp(prefix="edgewatch-playground-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.lab = NetLab.create()
        for pool in sc.topology.pools:
            for i, host in enumerate(self.lab.add_pool(pool.name, pool.nodes), start=1):
                self.nodes[host.name] = NodeProcesses(host=host, index=len(self.nodes) + 1)
            if pool.coordinator and self.edgewatch:
                self.coordinator_hosts[pool.name] = self.lab.add_host(f"{pool.name}-coord", pool=pool.name)
        timings = ClusterTimings(node_monitor_grace_s=sc.timings.node_monitor_grace_s,
                                 not_ready_toleration_s=int(sc.timings.toleration_s),
                                 unreachable_toleration_s=int(sc.timings.toleration_s))
        self.cp = ControlPlane(address=self.lab.cloud_address, timings=timings,
                               binaries=self.binaries or ensure_binaries()).start()
        self.kubeconfig = self.cp.kubeconfig
        self.start_cloud_node()
        self.cp.kubectl("create", "namespace", WORKLOAD_NAMESPACE)
        if self.edgewatch:
            self.cp.kubectl("create", "namespace", EDGEWATCH_NAMESPACE)
            self.cp.kubectl("-n", EDGEWATCH_NAMESPACE, "create", "configmap", "edgewatch-config",
                            f"--from-literal=grouping={'on' if sc.topology.grouping else 'off'}",
                            f"--from-literal=groupLabel={POOL_LABEL}", f"--from-literal=coverLabel={POOL_LABEL}")
            self.key_file = self.workdir / "keys"
            self.key_file.write_text("k1:" + base64.b64encode(os.urandom(32)).decode() + "\n")
            self.key_file.chmod(0o600)
            for pool, host in self.coordinator_hosts.items():
                self.start_coordinator(pool)
        for name in self.nodes:
            self.start_node(name)
        if self.edgewatch:
            self.start_controller()

    def stop(self) -> None:
        """Stop every process and remove the lab. Safe to call twice."""
        if self.controller is not None:
            _terminate(self.controller)
            self.controller = None
        for node in self.nodes.values():
            for proc in (node.agent, node.kubelet):
                if proc is not None:
                    _terminate(proc)
            node.agent = node.kubelet = None
        if self.cloud_kubelet is not None:
            _terminate(self.cloud_kubelet)
            self.cloud_kubelet = None
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

    def start_cloud_node(self) -> None:
        """The cloud's own node (``cloud-1``, a control-plane node in zone ``cloud``, tainted so the
        workload does not land on it), never faulted. Real clusters have one; without it a whole
        pool cut would leave *every* node NotReady, and kube-controller-manager then assumes its
        own network is at fault and stops evicting ("master disruption mode") — the baseline would
        show less than stock Kubernetes really does."""
        assert self.kubeconfig is not None and self.lab is not None and self.cp is not None
        with self._log("cloud-1-kubelet") as out:
            self.cloud_kubelet = subprocess.Popen([
                sys.executable, "-m", "edgewatch.testing.kubeletsim", "--kubeconfig", str(self.kubeconfig),
                "--node", "cloud-1", "--address", self.lab.cloud_address, "--index", "250", "--healthz-port", "0",
                "--label", "topology.kubernetes.io/zone=cloud", "--label", "node-role.kubernetes.io/control-plane=",
                "--taint", "node-role.kubernetes.io/control-plane:NoSchedule"],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def start_node(self, name: str) -> None:
        """Start the kubelet simulator and (with edgewatch) the agent inside the node's namespace."""
        assert self.kubeconfig is not None
        node = self.nodes[name]
        host = node.host
        pool = self.scenario.pool_of(name)
        with self._log(f"{name}-kubelet") as out:
            node.kubelet = host.popen([
                sys.executable, "-m", "edgewatch.testing.kubeletsim", "--kubeconfig", str(self.kubeconfig),
                "--node", name, "--address", host.address, "--index", str(node.index),
                "--label", f"{POOL_LABEL}={pool}", "--label", f"topology.kubernetes.io/zone={pool}"],
                stdout=out, stderr=subprocess.STDOUT)
        if not self.edgewatch:
            return
        argv = [sys.executable, "-m", "edgewatch", "agent", "--node", name, "--key-file", str(self.key_file),
                "--kubeconfig", str(self.kubeconfig), "--listen-address", host.address,
                "--namespace", EDGEWATCH_NAMESPACE,
                "--kubelet-healthz-url", f"http://{host.address}:10248/healthz", "--log-format", "json"]
        if pool in self.coordinators:
            argv += ["--coordinator", self.coordinators[pool].client_url, "--pool", pool]
        with self._log(f"{name}-agent") as out:
            node.agent = host.popen(argv, stdout=out, stderr=subprocess.STDOUT)

    def start_coordinator(self, pool: str) -> None:
        """Start (or restart, keeping its data) the pool's etcd inside its coordinator namespace."""
        assert self.workdir is not None
        host = self.coordinator_hosts[pool]
        etcd = self.coordinators.get(pool)
        if etcd is None:
            binaries = self.binaries or ensure_binaries()
            # Alone in its namespace: etcd's default ports are free there (free_port() would probe the
            # root namespace, where this address does not exist).
            etcd = EtcdServer(binary=binaries.etcd, address=host.address, client_port=2379, peer_port=2380,
                              metrics_port=2381, data_dir=self.workdir / f"etcd-{pool}" / "data", name=pool,
                              popen=host.popen)
            self.coordinators[pool] = etcd
        etcd.start()

    def start_controller(self) -> None:
        """Start the edgewatch controller as a process in the cloud (root) namespace."""
        assert self.kubeconfig is not None and self.lab is not None
        self.controller_port = free_port("127.0.0.1")
        t = self.scenario.timings
        with self._log("controller") as out:
            self.controller = subprocess.Popen(
                [sys.executable, "-m", "edgewatch", "controller", "--kubeconfig", str(self.kubeconfig),
                 "--namespace", EDGEWATCH_NAMESPACE, "--metrics-address", "127.0.0.1",
                 "--metrics-port", str(self.controller_port), "--autonomy", str(t.autonomy_s), "--log-format", "json"],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def restart_controller(self) -> None:
        """Kill the controller (SIGKILL: no goodbye) and start a new one."""
        if self.controller is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.controller.pid, signal.SIGKILL)
            self.controller.wait(timeout=10)
        self.start_controller()

    def kill_node(self, name: str) -> None:
        """The machine dies: every process in its namespace is killed and its address goes silent."""
        assert self.lab is not None
        self.lab.kill(name)
        node = self.nodes[name]
        for proc in (node.agent, node.kubelet):
            if proc is not None:
                with contextlib.suppress(Exception):
                    proc.wait(timeout=5)
        node.agent = node.kubelet = None

    def revive_node(self, name: str) -> None:
        """The machine boots again: link up, kubelet and agent start."""
        assert self.lab is not None
        self.lab.revive(name)
        self.start_node(name)

    def kill_coordinator(self, pool: str) -> None:
        """SIGKILL the pool's etcd (its data stays for a later revive)."""
        self.coordinators[pool].kill()

    def log_files(self) -> list[Path]:
        """The log files of this run."""
        assert self.workdir is not None
        return sorted(self.workdir.glob("*.log"))

    def remove_workdir(self) -> None:
        """Delete the run folder (logs, keys)."""
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


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

"""A real, local Kubernetes control plane for tests and the playground.

``ControlPlane`` starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler (the
upstream binaries, see ``edgewatch_lab.testing.binaries``) on one address with a temporary data dir,
generated certificates and service-account keys, waits until each is healthy, writes an admin
kubeconfig, and stops everything it started, by PID.

Crash safety: every run lives in ``<runs_root>/<owner pid>-<random>/`` (default
``/tmp/edgewatch-cp``) with a ``pids`` file; ``ControlPlane.cleanup_stale()`` (called on every
start) kills what a dead owner left running and removes its folder, so an interrupted test run
never leaves an apiserver holding a port.

Limits: one etcd member, no kubelet (see ``edgewatch_lab.testing.kubeletsim``), no kube-proxy, no
cloud provider; certificates are throw-away (``edgewatch_lab.testing.pki``). The apiserver binds a
single address: 127.0.0.1 by default, or the network lab's cloud address so simulated nodes in
network namespaces reach it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from edgewatch_lab.testing.binaries import Binaries, ensure_binaries
from edgewatch_lab.testing.pki import CertificateAuthority, write_service_account_keys

#: ClusterIP range of Services; the ``kubernetes`` Service is its first address.
SERVICE_CIDR = "10.0.0.0/24"

log = logging.getLogger(__name__)

DEFAULT_RUNS_ROOT = Path("/tmp/edgewatch-cp")

#: How a restart-on-exit component's log marks each restart (:meth:`ControlPlane.restarts`).
RESTART_MARK = "edgewatch-lab: restart:"


class ControlPlaneError(RuntimeError):
    """A control-plane process failed to start or become healthy; the message has its log tail."""


@dataclass(frozen=True)
class ClusterTimings:
    """Timings of the stock node lifecycle, all in seconds.

    Defaults are short test timings (a real cluster uses 50 s grace and 300 s tolerations, see
    kube-controller-manager's ``--node-monitor-grace-period`` and the Kubernetes docs, "Taints and
    Tolerations"), so scenarios finish in minutes while keeping the same proportions.

    Attributes:
        node_monitor_grace_s: kube-controller-manager --node-monitor-grace-period: how long a node
            may go without a heartbeat before it is marked NotReady/Unknown (upstream 50 s).
        node_monitor_period_s: --node-monitor-period: how often the node lifecycle controller
            checks (upstream 5 s).
        not_ready_toleration_s: kube-apiserver --default-not-ready-toleration-seconds, added to
            every pod by the DefaultTolerationSeconds admission plugin (upstream 300 s).
        unreachable_toleration_s: --default-unreachable-toleration-seconds (upstream 300 s).
    """

    node_monitor_grace_s: float = 20.0
    node_monitor_period_s: float = 2.0
    not_ready_toleration_s: int = 30
    unreachable_toleration_s: int = 30


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path


def free_port(host: str) -> int:
    """A TCP port that is free on ``host`` right now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def log_tail(path: Path, lines: int = 25) -> str:
    """The last ``lines`` lines of a log file (for error messages)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _proc_start_time(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


@dataclass
class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler, started as real processes.

    Use as a context manager, or call ``start()`` and ``stop()``::

        with ControlPlane(timings=ClusterTimings(node_monitor_grace_s=20)) as cp:
            print(cp.kubeconfig)   # admin kubeconfig path, server https://127.0.0.1:<port>

    Args:
        address: IPv4 address the apiserver, controller-manager and scheduler bind (etcd always
            binds 127.0.0.1). Use the network lab's cloud address to serve namespaced nodes.
        timings: node lifecycle timings, see ``ClusterTimings``.
        binaries: the binaries to run; default ``ensure_binaries()`` (may build them once).
        runs_root: parent of the per-run folder (logs, data, certs, kubeconfig).
        start_timeout_s: how long each component may take to become healthy, in seconds.
        extra_controller_manager_args: more kube-controller-manager flags.
        audit: write the apiserver's audit log (every request at level Metadata, JSON lines) to
            ``audit_log``; read it before ``stop()``, which removes the run folder.

    Raises (from ``start``):
        ControlPlaneError: a process exited or did not become healthy in time.
    """

    address: str = "127.0.0.1"
    timings: ClusterTimings = field(default_factory=ClusterTimings)
    binaries: Binaries | None = None
    runs_root: Path = DEFAULT_RUNS_ROOT
    start_timeout_s: float = 90.0
    extra_controller_manager_args: tuple[str, ...] = ()
    audit: bool = False

    def __post_init__(self) -> None:
        self.audit_log: Path | None = None
        self.run_dir: Path | None = None
        self.kubeconfig: Path | None = None
        self.apiserver_url: str = ""
        self.ca_file: Path | None = None
        self._ca: CertificateAuthority | None = None
        self._processes: dict[str, _Process] = {}
        self._ports: dict[str, int] = {}

    # -- lifecycle -----------------------------------------------------------------------------

    def __enter__(self) -> "ControlPlane":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> "ControlPlane":
        """Start all four components and wait until each is healthy; returns ``self``."""
        self.cleanup_stale(runs_root=self.runs_root)
        binaries = self.binaries or ensure_binaries()
        self.binaries = binaries
        self.runs_root.mkdir(parents=True, exist_ok=True)
        self.run_dir = self.runs_root / f"{os.getpid()}-{secrets.token_hex(3)}"
        self.run_dir.mkdir()
        try:
            self._prepare_pki()
            self._start_etcd()
            self._start_apiserver()
            self._start_controller_manager()
            self._start_scheduler()
        except BaseException:
            self.stop()
            raise
        log.info("control plane ready", extra={"apiserver": self.apiserver_url, "run_dir": str(self.run_dir)})
        return self

    def stop(self) -> None:
        """Stop every process this control plane started (SIGTERM, then SIGKILL after 10 s) and
        remove its run folder. Safe to call twice."""
        for name in reversed(list(self._processes)):
            self._stop_process(name)
        self._processes.clear()
        if self.run_dir is not None and self.run_dir.exists():
            shutil.rmtree(self.run_dir, ignore_errors=True)

    @staticmethod
    def cleanup_stale(*, runs_root: Path = DEFAULT_RUNS_ROOT) -> list[Path]:
        """Kill the processes of runs whose owner process is gone and remove their folders.

        A PID is only killed if its start time still matches the one recorded, so a reused PID is
        never hit. Returns the folders removed.
        """
        removed: list[Path] = []
        if not runs_root.is_dir():
            return removed
        for run in runs_root.iterdir():
            owner = run.name.split("-", 1)[0]
            if not owner.isdigit() or _pid_alive(int(owner)):
                continue
            pids_file = run / "pids"
            if pids_file.exists():
                for line in pids_file.read_text().splitlines():
                    with contextlib.suppress(ValueError):
                        name, pid_text, started = line.split()
                        pid = int(pid_text)
                        if _proc_start_time(pid) == started:
                            log.warning("killing stale %s (pid %d) of dead run %s", name, pid, run)
                            with contextlib.suppress(ProcessLookupError):
                                os.killpg(pid, signal.SIGKILL)
            shutil.rmtree(run, ignore_errors=True)
            removed.append(run)
        return removed

    # -- component control (used by tests and the playground's restart steps) -----------------

    def stop_component(self, name: str) -> None:
        """Stop one component ("kube-controller-manager", "kube-scheduler", ...)."""
        self._stop_process(name)
        self._processes.pop(name, None)

    def restart_controller_manager(self) -> None:
        """Stop and start kube-controller-manager (as after a control-plane upgrade). It leads
        again once the old leader Lease has expired (15 s, client-go's default lease duration)."""
        self.stop_component("kube-controller-manager")
        self._start_controller_manager()

    def pid(self, name: str) -> int:
        """The process id of the running component ``name``; for a restart-on-exit component, the
        id of the shell loop that (re)starts it, its parent.

        Raises:
            KeyError: no such component is running.
        """
        return self._processes[name].popen.pid

    def restarts(self, name: str) -> int:
        """How many times the component ``name`` exited and was started again (0 when it has no
        log yet); only components started with ``restart_on_exit`` are ever restarted."""
        path = self.log_path(name)
        if not path.exists():
            return 0
        with open(path, "rb") as log_file:
            return sum(line.startswith(RESTART_MARK.encode()) for line in log_file)

    def log_path(self, name: str) -> Path:
        """Path of a component's combined stdout/stderr log."""
        assert self.run_dir is not None, "control plane not started"
        return self.run_dir / f"{name}.log"

    # -- internals ------------------------------------------------------------------------------

    def _prepare_pki(self) -> None:
        assert self.run_dir is not None
        pki = self.run_dir / "pki"
        pki.mkdir()
        ca = CertificateAuthority(folder=pki)
        self.ca_file = ca.pair.cert
        self._ca = ca
        ips = tuple(sorted({self.address, "127.0.0.1", SERVICE_CIDR.replace(".0/24", ".1")}))
        self._serving = ca.issue(
            name="apiserver", common_name="kube-apiserver", server=True,
            dns_names=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                       "kubernetes.default.svc.cluster.local"),
            ip_addresses=ips,
        )
        self._admin = ca.issue(name="admin", common_name="edgewatch-admin",
                               organizations=("system:masters",), client=True)
        self._sa = write_service_account_keys(pki)
        self._ports = {
            "etcd": free_port("127.0.0.1"),
            "etcd-peer": free_port("127.0.0.1"),
            "apiserver": free_port(self.address),
            "kcm": free_port(self.address),
            "scheduler": free_port(self.address),
        }
        self.apiserver_url = f"https://{self.address}:{self._ports['apiserver']}"
        self.kubeconfig = self.run_dir / "kubeconfig"
        self.write_kubeconfig(self.kubeconfig, server=self.apiserver_url)

    def write_kubeconfig(self, path: Path, *, server: str | None = None) -> Path:
        """Write an admin kubeconfig (certificates inlined) pointing at ``server``."""
        import base64

        def b64(p: Path) -> str:
            return base64.b64encode(p.read_bytes()).decode()

        assert self.ca_file is not None
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "edgewatch", "cluster": {
                "server": server or self.apiserver_url,
                "certificate-authority-data": b64(self.ca_file)}}],
            "users": [{"name": "admin", "user": {
                "client-certificate-data": b64(self._admin.cert),
                "client-key-data": b64(self._admin.key)}}],
            "contexts": [{"name": "edgewatch", "context": {"cluster": "edgewatch", "user": "admin"}}],
            "current-context": "edgewatch",
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def client_kubeconfig(self, path: Path, *, user: str, groups: tuple[str, ...] = (),
                          server: str | None = None) -> Path:
        """Write a kubeconfig (certificates inlined, mode 0600) for a client certificate issued by
        the cluster CA to ``user`` in ``groups`` — e.g. a real lab kubelet's
        ``system:node:<name>`` in ``system:nodes`` (the Node authorizer's identity), or
        ``system:kube-proxy`` (bound to ``system:node-proxier`` by the default RBAC).

        Raises:
            RuntimeError: the control plane is not started.
        """
        import base64

        if self.ca_file is None or self._ca is None:
            raise RuntimeError("the control plane is not started")
        stem = "client-" + "".join(c if c.isalnum() else "-" for c in user)
        pair = self._ca.issue(name=stem, common_name=user, organizations=groups, client=True)
        config = {
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "edgewatch", "cluster": {
                "server": server or self.apiserver_url,
                "certificate-authority-data": base64.b64encode(self.ca_file.read_bytes()).decode()}}],
            "users": [{"name": user, "user": {
                "client-certificate-data": base64.b64encode(pair.cert.read_bytes()).decode(),
                "client-key-data": base64.b64encode(pair.key.read_bytes()).decode()}}],
            "contexts": [{"name": "edgewatch", "context": {"cluster": "edgewatch", "user": user}}],
            "current-context": "edgewatch",
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def _spawn(self, name: str, argv: list[str], *, restart_on_exit: bool = False) -> _Process:
        """Start one component, its output appended to ``<run_dir>/<name>.log``.

        ``restart_on_exit`` runs it under a shell loop that starts it again one second after it
        exits, as the kubelet restarts a control plane's static pod: kube-controller-manager exits
        by design when it loses its leader Lease (its renewal missed the 10 s renew deadline while
        the one machine is busy), and a kubeadm cluster would simply restart it. Each restart is
        written to the log as a line starting with :data:`RESTART_MARK`. The loop and the component
        share one process group, so stopping the component stops both.
        """
        assert self.run_dir is not None
        log_path = self.run_dir / f"{name}.log"
        if restart_on_exit:
            loop = (f'while :; do "$@"; echo "{RESTART_MARK} $0 exited with $?; restarting in 1 s"; '
                    'sleep 1; done')
            argv = ["/bin/sh", "-c", loop, name, *argv]
        with open(log_path, "ab") as out:
            popen = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: killpg reaches any children
            )
        proc = _Process(name=name, popen=popen, log_path=log_path)
        self._processes[name] = proc
        with open(self.run_dir / "pids", "a") as pids:
            pids.write(f"{name} {popen.pid} {_proc_start_time(popen.pid)}\n")
        return proc

    def _stop_process(self, name: str) -> None:
        proc = self._processes.get(name)
        if proc is None or proc.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.popen.pid, signal.SIGTERM)
        try:
            proc.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGKILL)
            proc.popen.wait(timeout=10)

    def _wait_healthy(self, proc: _Process, url: str, *, context: ssl.SSLContext | None) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        last_error = ""
        while time.monotonic() < deadline:
            if proc.popen.poll() is not None:
                raise ControlPlaneError(
                    f"{proc.name} exited with {proc.popen.returncode}; log tail:\n{log_tail(proc.log_path)}"
                )
            try:
                with urllib.request.urlopen(url, timeout=2, context=context) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:
                last_error = str(exc)
            time.sleep(0.25)
        raise ControlPlaneError(
            f"{proc.name} not healthy at {url} after {self.start_timeout_s} s ({last_error}); "
            f"log tail:\n{log_tail(proc.log_path)}"
        )

    def _ca_context(self) -> ssl.SSLContext:
        assert self.ca_file is not None
        return ssl.create_default_context(cafile=str(self.ca_file))

    def _start_etcd(self) -> None:
        assert self.run_dir is not None and self.binaries is not None
        client = f"http://127.0.0.1:{self._ports['etcd']}"
        peer = f"http://127.0.0.1:{self._ports['etcd-peer']}"
        proc = self._spawn("etcd", [
            str(self.binaries.etcd),
            "--name=default",
            f"--data-dir={self.run_dir / 'etcd'}",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            "--unsafe-no-fsync",  # throw-away data: fsync only slows tests down
            "--log-level=warn",
        ])
        self.etcd_url = client
        self._wait_healthy(proc, f"{client}/health", context=None)

    def _start_apiserver(self) -> None:
        assert self.run_dir is not None and self.binaries is not None and self.ca_file is not None
        t = self.timings
        audit_args: list[str] = []
        if self.audit:
            policy = self.run_dir / "audit-policy.yaml"
            policy.write_text(yaml.safe_dump({
                "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
                "rules": [{"level": "Metadata"}]}))
            self.audit_log = self.run_dir / "audit.log"
            audit_args = [f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log}",
                          "--audit-log-format=json", "--audit-log-maxsize=1024", "--audit-log-mode=batch"]
        proc = self._spawn("kube-apiserver", [
            str(self.binaries.kube_apiserver),
            f"--etcd-servers={self.etcd_url}",
            f"--bind-address={self.address}", f"--advertise-address={self.address}",
            f"--secure-port={self._ports['apiserver']}",
            f"--cert-dir={self.run_dir / 'apiserver-certs'}",
            f"--tls-cert-file={self._serving.cert}", f"--tls-private-key-file={self._serving.key}",
            f"--client-ca-file={self.ca_file}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={self._sa.cert}",
            f"--service-account-signing-key-file={self._sa.key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC",
            "--allow-privileged=true",
            f"--default-not-ready-toleration-seconds={t.not_ready_toleration_s}",
            f"--default-unreachable-toleration-seconds={t.unreachable_toleration_s}",
            *audit_args,
            "--v=1",
        ])
        self._wait_healthy(proc, f"{self.apiserver_url}/readyz", context=self._ca_context())

    def _component_kubeconfig(self) -> Path:
        assert self.kubeconfig is not None
        return self.kubeconfig

    def _start_controller_manager(self) -> None:
        assert self.binaries is not None and self.ca_file is not None
        t = self.timings
        kc = self._component_kubeconfig()
        port = self._ports["kcm"]
        proc = self._spawn("kube-controller-manager", restart_on_exit=True, argv=[
            str(self.binaries.kube_controller_manager),
            f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
            f"--bind-address={self.address}", f"--secure-port={port}",
            # leader election on, as kubeadm and most distributions run it: its Lease
            # (kube-system/kube-controller-manager, renewed every 2 s) is the control plane's clock
            # that edgewatch's carry-clock admission policy bounds carried renewTimes by
            "--leader-elect=true",
            "--controllers=*",
            f"--root-ca-file={self.ca_file}",
            f"--service-account-private-key-file={self._sa.key}",
            "--use-service-account-credentials=false",
            f"--node-monitor-grace-period={t.node_monitor_grace_s:g}s",
            f"--node-monitor-period={t.node_monitor_period_s:g}s",
            "--v=1",
            *self.extra_controller_manager_args,
        ])
        self._wait_healthy(proc, f"https://{self.address}:{port}/healthz", context=_insecure_context())

    def _start_scheduler(self) -> None:
        assert self.binaries is not None
        kc = self._component_kubeconfig()
        port = self._ports["scheduler"]
        proc = self._spawn("kube-scheduler", [
            str(self.binaries.kube_scheduler),
            f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
            f"--bind-address={self.address}", f"--secure-port={port}",
            "--leader-elect=false",
            "--v=1",
        ])
        self._wait_healthy(proc, f"https://{self.address}:{port}/healthz", context=_insecure_context())

    def kubectl(self, *args: str, timeout_s: float = 30.0, input_text: str | None = None) -> str:
        """Run the built kubectl against this control plane and return its stdout.

        Raises:
            subprocess.CalledProcessError: kubectl failed (stderr attached).
        """
        assert self.binaries is not None and self.kubeconfig is not None
        done = subprocess.run(
            [str(self.binaries.kubectl), f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True, text=True, timeout=timeout_s, check=True, input=input_text,
        )
        return done.stdout


def _insecure_context() -> ssl.SSLContext:
    """TLS without verification, only for the controller-manager and scheduler /healthz probes:
    their serving certificates are self-signed at start-up by the binaries themselves."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx

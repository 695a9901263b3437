"""A real Prometheus for a playground run (``edgewatch playground run SCENARIO --prometheus``).

What it is for
    The shipped alert rules (``deploy/monitoring/edgewatch.rules.yaml``) are unit-tested with
    ``promtool test rules`` on made-up series; this runs them on what the real edgewatch pods
    export during a scenario. :class:`PrometheusServer` runs upstream Prometheus (built from the Go
    module proxy with promtool by ``hack/binaries/build.sh promtool``; ``ensure_prometheus``) on
    this machine, discovering the edgewatch pods through the lab's apiserver (Kubernetes service
    discovery, role ``pod``), scraping the controller the way the shipped PodMonitor
    (``deploy/monitoring/podmonitor.yaml``) has the prometheus-operator do it, and the agents too,
    and evaluating the shipped rules. At the end of the run :func:`query_alerts` reads the
    ``ALERTS`` series back and :func:`alerts_from_series` turns them into the report's ``alerts``:
    which alert was pending and firing when, in scenario seconds.

    * :func:`render_config` is pure: the Prometheus configuration as a dict (written as YAML;
      JSON is YAML).
    * :class:`PrometheusServer` starts and stops the process: its TSDB in a folder of its own,
      removed on every stop (and with the playground's work folder if the runner itself dies:
      the process gets SIGTERM when its parent dies, see ``_die_with_parent``); its log in the
      playground's work folder beside the other components' logs.

Limits
    Pods are hostNetwork in the lab: a pod's address is its node's, reachable from this machine
    unless the node is cut from the cloud or killed (then its agent is simply not scraped, as in a
    real cluster). No remote write, no Alertmanager, no web UI (built without upstream's
    ``builtinassets`` tag; only the HTTP API is used), no external URL. Times: Prometheus stamps
    samples with this machine's wall clock, and the runner runs on the same machine, so an
    ``ALERTS`` sample's timestamp minus the run's wall-clock start is its scenario time (to the
    clock's step, well under the 1 s query step); this would not hold across machines.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx2 as httpx

if TYPE_CHECKING:
    from edgewatch_lab.playground.cluster import PlaygroundCluster

__all__ = [
    "ALERT_STATES",
    "EVALUATION_INTERVAL_S",
    "PrometheusError",
    "PrometheusServer",
    "alerts_from_series",
    "format_alerts",
    "lab_prometheus",
    "query_alerts",
    "render_config",
    "rules_file",
]

#: Scrape and rule-evaluation interval, seconds. Far shorter than a real cluster's 30 s (the
#: PodMonitor's): a lab run lasts a few minutes and the alerts' ``for`` is 1 minute, so each step
#: of 30 s would blur when an alert went pending and firing by as much as the scenario's phases.
EVALUATION_INTERVAL_S = 5
#: The values of the ``alertstate`` label of ``ALERTS``.
ALERT_STATES = ("pending", "firing")
#: Most bytes read of one HTTP answer of Prometheus (a query's JSON).
MAX_BODY_BYTES = 8 << 20
_PR_SET_PDEATHSIG = 1


class PrometheusError(RuntimeError):
    """Prometheus did not start, did not get ready, or answered a query with an error."""


def rules_file(root: Path) -> Path:
    """The shipped plain Prometheus rules file of the checkout at ``root``."""
    return root / "deploy" / "monitoring" / "edgewatch.rules.yaml"


def _pod_job(name: str, *, app: str, port_name: str, kubeconfig: Path, namespace: str,
             token_file: Path | None) -> dict[str, Any]:
    """A scrape job for the pods labelled ``app.kubernetes.io/name=<app>``, on their container
    port named ``port_name``: what the prometheus-operator makes of a PodMonitor with that
    selector and ``port``. No ``node`` target label (the operator adds none either): the
    controller's own series carry a ``node`` label that the alerts group by, and a target label of
    the same name would rename it to ``exported_node``. ``token_file``: the bearer token that may
    read ``/metrics`` (the PodMonitor's ``authorization``), None for none."""
    return {
        **({"authorization": {"type": "Bearer", "credentials_file": str(token_file)}} if token_file else {}),
        "job_name": name,
        "metrics_path": "/metrics",
        "scheme": "http",
        "kubernetes_sd_configs": [{
            "role": "pod",
            "kubeconfig_file": str(kubeconfig),
            "namespaces": {"names": [namespace]},
        }],
        "relabel_configs": [
            {"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"], "regex": "(Failed|Succeeded)"},
            {"action": "keep", "source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_name"],
             "regex": app},
            {"action": "keep", "source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": port_name},
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
            {"target_label": "endpoint", "replacement": port_name},
        ],
    }


def render_config(*, kubeconfig: Path, rules: Path, namespace: str = "edgewatch",
                  interval_s: float = EVALUATION_INTERVAL_S, token_file: Path | None = None) -> dict[str, Any]:
    """The Prometheus configuration of a lab run (pure).

    Args:
        kubeconfig: the lab's admin kubeconfig (certificates inlined; Kubernetes service discovery
            lists and watches the pods of ``namespace`` with it).
        rules: the rules file to load (:func:`rules_file`).
        namespace: where edgewatch runs.
        interval_s: scrape and evaluation interval, seconds (see ``EVALUATION_INTERVAL_S``).
        token_file: a file holding a token that may ``get /metrics`` (the shipped scraper
            ServiceAccount's, deploy/13-rbac-metrics.yaml), or None to scrape without one.

    Returns a dict with ``global`` (scrape/evaluation interval and timeout), ``rule_files`` and two
    ``scrape_configs``: ``edgewatch-controller`` (the PodMonitor's equivalent: pods labelled
    ``app.kubernetes.io/name=edgewatch-controller``, container port ``metrics``) and
    ``edgewatch-agent`` (``app.kubernetes.io/name=edgewatch-agent``, port ``peer``, whose
    ``/metrics`` the agents serve).
    """
    if interval_s <= 0:
        raise ValueError(f"interval_s must be positive, got {interval_s}")
    every = f"{int(interval_s)}s" if float(interval_s).is_integer() else f"{int(interval_s * 1000)}ms"
    timeout = f"{max(1, int(interval_s * 0.8))}s"  # a scrape must end before the next one starts
    return {
        "global": {"scrape_interval": every, "evaluation_interval": every, "scrape_timeout": timeout},
        "rule_files": [str(rules)],
        "scrape_configs": [
            _pod_job("edgewatch-controller", app="edgewatch-controller", port_name="metrics",
                     kubeconfig=kubeconfig, namespace=namespace, token_file=token_file),
            _pod_job("edgewatch-agent", app="edgewatch-agent", port_name="peer",
                     kubeconfig=kubeconfig, namespace=namespace, token_file=token_file),
        ],
    }


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it when the playground process dies, however it dies."""
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _read_limited(resp: httpx.Response, limit: int) -> bytes:
    """The body of a streamed response, at most ``limit`` bytes (PrometheusError beyond)."""
    chunks: list[bytes] = []
    size = 0
    for chunk in resp.iter_bytes():
        size += len(chunk)
        if size > limit:
            raise PrometheusError(f"answer of {resp.request.url} is over {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


class PrometheusServer:
    """One Prometheus process on ``127.0.0.1:<free port>`` (see the module docstring).

    Use as a context manager, or :meth:`start` then :meth:`stop` (idempotent; also after a
    failed start). Every wait is bounded: ``ready_timeout_s`` for ``/-/ready``,
    ``stop_timeout_s`` for the process to exit after SIGTERM (then SIGKILL).
    """

    def __init__(self, *, binary: Path, kubeconfig: Path, rules: Path, workdir: Path,
                 namespace: str = "edgewatch", interval_s: float = EVALUATION_INTERVAL_S,
                 ready_timeout_s: float = 60.0, stop_timeout_s: float = 10.0, token_file: Path | None = None) -> None:
        self.binary = binary
        self.config = render_config(kubeconfig=kubeconfig, rules=rules, namespace=namespace, interval_s=interval_s,
                                    token_file=token_file)
        self.workdir = workdir
        self.ready_timeout_s = ready_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.port = 0
        self.folder: Path | None = None
        self.log_path = workdir / "prometheus.log"
        #: Wall-clock time (``time.time()``) Prometheus was started (0: not yet).
        self.started_wall = 0.0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Base URL of the HTTP API (``http://127.0.0.1:<port>``)."""
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> PrometheusServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Write the config, start Prometheus and wait until ``/-/ready`` answers 200.

        Raises:
            PrometheusError: it exited or was not ready within ``ready_timeout_s`` seconds (the
                message has its log's tail); it is stopped and its folder removed.
        """
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.folder = Path(tempfile.mkdtemp(prefix="prometheus-", dir=self.workdir))
        config = self.folder / "prometheus.yml"
        config.write_text(json.dumps(self.config, indent=2))  # JSON is YAML
        self.port = _free_port()
        self.started_wall = time.time()
        argv = [str(self.binary), f"--config.file={config}", f"--storage.tsdb.path={self.folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1d",
                "--log.level=info"]
        try:
            with open(self.log_path, "ab") as log:
                self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                              preexec_fn=_die_with_parent)
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        with httpx.Client(timeout=2.0) as http:
            while True:
                assert self._proc is not None
                if self._proc.poll() is not None:
                    raise PrometheusError(f"prometheus exited with {self._proc.returncode}: {self._log_tail()}")
                with contextlib.suppress(httpx.HTTPError, OSError):
                    if http.get(f"{self.url}/-/ready").status_code == 200:
                        return
                if time.monotonic() > deadline:
                    raise PrometheusError(f"prometheus not ready after {self.ready_timeout_s:g} s: {self._log_tail()}")
                time.sleep(0.5)

    def _log_tail(self, lines: int = 15) -> str:
        with contextlib.suppress(OSError):
            return " | ".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"

    def stop(self) -> None:
        """Terminate Prometheus (SIGKILL after ``stop_timeout_s`` seconds) and remove its folder
        (config and TSDB; the log stays in ``workdir``)."""
        proc, self._proc = self._proc, None
        try:
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=self.stop_timeout_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=self.stop_timeout_s)
        finally:
            if self.folder is not None:
                shutil.rmtree(self.folder, ignore_errors=True)
                self.folder = None

    def query_alerts(self, *, start_wall: float, end_wall: float, timeout_s: float = 10.0) -> list[dict[str, Any]]:
        """:func:`query_alerts` on this server, over everything it evaluated (from its start, so
        an alert already pending or firing at t=0 shows when it began, in negative seconds)."""
        return query_alerts(self.url, start_wall=start_wall, end_wall=end_wall, timeout_s=timeout_s,
                            since_wall=self.started_wall or None)


def lab_prometheus(cluster: PlaygroundCluster, binary: Path) -> PrometheusServer:
    """A (not yet started) :class:`PrometheusServer` for a started playground cluster: service
    discovery with its admin kubeconfig in the edgewatch namespace, the checkout's shipped rules,
    its log and TSDB folder in the cluster's work folder.

    Raises:
        PrometheusError: no checkout (the rules file ships in ``deploy/``, not in the package).
    """
    from edgewatch_lab.playground.cluster import EDGEWATCH_NAMESPACE
    from edgewatch_lab.testing.binaries import repo_root

    root = repo_root()
    if root is None or not rules_file(root).is_file():
        raise PrometheusError("--prometheus needs the repository checkout (deploy/monitoring/edgewatch.rules.yaml)")
    assert cluster.admin_kubeconfig is not None and cluster.workdir is not None
    token, token_file = cluster.metrics_token(), cluster.workdir / "metrics-scraper.token"
    if token:  # what the PodMonitor's authorization reads from the scraper's Secret
        token_file.write_text(token)
        token_file.chmod(0o600)
    return PrometheusServer(binary=binary, kubeconfig=cluster.admin_kubeconfig, rules=rules_file(root),
                            workdir=cluster.workdir, namespace=EDGEWATCH_NAMESPACE,
                            token_file=token_file if token else None)


def query_alerts(base_url: str, *, start_wall: float, end_wall: float, timeout_s: float = 10.0,
                 step_s: float = 1.0, max_bytes: int = MAX_BODY_BYTES,
                 since_wall: float | None = None) -> list[dict[str, Any]]:
    """Every alert pending or firing between ``since_wall`` (default ``start_wall``) and
    ``end_wall`` (wall-clock seconds, ``time.time()``; ``start_wall`` is the scenario's t=0, so
    times before it come out negative), from ``/api/v1/query_range`` of
    ``ALERTS`` at ``step_s`` (1 s; coarser when the run is long enough to pass Prometheus' 11,000
    points per series), as :func:`alerts_from_series` gives them.

    Valid only when Prometheus runs on the machine whose clock gave ``start_wall`` (see the module
    docstring). The request is bounded by ``timeout_s`` seconds and its answer by ``max_bytes``.

    Raises:
        PrometheusError: the request failed, the answer was too large, or not a matrix.
    """
    since = start_wall if since_wall is None else min(since_wall, start_wall)
    step = max(step_s, math.ceil((end_wall - since) / 10_000))
    params = {"query": "ALERTS", "start": f"{since:.3f}", "end": f"{end_wall:.3f}", "step": f"{step:g}"}
    try:
        with httpx.Client(timeout=timeout_s) as http, \
                http.stream("GET", f"{base_url}/api/v1/query_range", params=params) as resp:
            body = _read_limited(resp, max_bytes)
            status = resp.status_code
    except httpx.HTTPError as exc:
        raise PrometheusError(f"querying ALERTS failed: {exc}") from exc
    try:
        answer = json.loads(body)
    except ValueError as exc:
        raise PrometheusError(f"querying ALERTS: HTTP {status}, not JSON") from exc
    data = answer.get("data") if isinstance(answer, dict) else None
    if status != 200 or answer.get("status") != "success" or not isinstance(data, dict) \
            or data.get("resultType") != "matrix":
        raise PrometheusError(f"querying ALERTS: HTTP {status}: {str(answer)[:300]}")
    return alerts_from_series(data.get("result") or [], start_wall=start_wall, max_gap_s=3 * EVALUATION_INTERVAL_S)


def alerts_from_series(series: list[dict[str, Any]], *, start_wall: float,
                       max_gap_s: float = 3 * EVALUATION_INTERVAL_S) -> list[dict[str, Any]]:
    """The alerts in a ``query_range`` matrix of ``ALERTS`` (pure).

    One entry per episode of an alert (its name and labels): samples of either state no more than
    ``max_gap_s`` seconds apart belong to one episode (a resolved alert's series stops; one that
    comes back starts a new episode). Each entry: ``alertname``, ``labels`` (the series' labels
    without ``__name__``, ``alertname`` and ``alertstate``), ``pending_at_s`` / ``firing_at_s``
    (the first sample in that state, scenario seconds = sample time - ``start_wall``; None: never
    in that state, e.g. an alert without ``for`` is never pending) and ``last_seen_s``. Sorted by
    first sample, then name.
    """
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, str]]] = {}
    for s in series:
        metric = s.get("metric") or {}
        state = metric.get("alertstate")
        name = metric.get("alertname")
        if state not in ALERT_STATES or not name:
            continue
        labels = tuple(sorted((k, str(v)) for k, v in metric.items()
                              if k not in ("__name__", "alertname", "alertstate")))
        for point in s.get("values") or []:
            samples.setdefault((name, labels), []).append((float(point[0]), state))
    out: list[dict[str, Any]] = []
    for (name, labels), points in samples.items():
        points.sort()
        episode: list[tuple[float, str]] = []
        for point in points:
            if episode and point[0] - episode[-1][0] > max_gap_s:
                out.append(_episode(name, labels, episode, start_wall))
                episode = []
            episode.append(point)
        if episode:
            out.append(_episode(name, labels, episode, start_wall))
    out.sort(key=lambda a: (min(t for t in (a["pending_at_s"], a["firing_at_s"]) if t is not None), a["alertname"]))
    return out


def _episode(name: str, labels: tuple[tuple[str, str], ...], points: list[tuple[float, str]],
             start_wall: float) -> dict[str, Any]:
    def first(state: str) -> float | None:
        return next((round(t - start_wall, 3) + 0.0 for t, s in points if s == state), None)  # + 0.0: no -0.0

    return {"alertname": name, "labels": dict(labels), "pending_at_s": first("pending"),
            "firing_at_s": first("firing"), "last_seen_s": round(points[-1][0] - start_wall, 3) + 0.0}


def format_alerts(alerts: list[dict[str, Any]] | None) -> list[str]:
    """One console line per alert of a report (``["Prometheus did not run"]`` for None)."""
    if alerts is None:
        return ["Prometheus did not run (--prometheus)"]
    if not alerts:
        return ["no alert pending or firing"]
    lines = []
    for a in alerts:
        labels = ",".join(f"{k}={v}" for k, v in sorted(a["labels"].items()) if k not in ("severity",))
        when = [f"{state} at {a[f'{state}_at_s']:.1f} s" for state in ALERT_STATES
                if a.get(f"{state}_at_s") is not None]
        lines.append(f"{a['alertname']}{{{labels}}}: {', '.join(when)}")
    return lines

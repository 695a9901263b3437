"""Playing a scenario: bring the cluster up, wait until the workload is serving, play the timed
faults while recording what the API shows, then stop everything and write the report.

``run_scenario`` is what ``edgewatch playground run`` calls; it returns the report (a dict, see
``edgewatch_lab.playground.report.build_report``) and the expectation results.

Pool coordinators with ``coordinators: pods`` (as shipped): before t=0 the runner also waits for
each coordinator pod Ready, published and the pool led; ``kill-coordinator`` kills the node the pod
is bound to (found through the API) as ``kill`` does, ``revive-coordinator`` waits (at most
``actions.REVIVE_COORDINATOR_WAIT_S``) for the Deployment's pod Ready on another node, and ``kill-leader``
finds the leader in what the agents publish. Each coordinator pool is recorded throughout
(``coordinatorwatch``).

With ``prometheus=True`` a real Prometheus (``edgewatch_lab.playground.prometheus``) runs from
before the workload is created until the report is read: the report's ``alerts`` is what it fired,
in scenario seconds (``Recording.started_at`` is t=0 on the wall clock).

Limits: times are seconds from the scenario's start (t=0 once every pod is a ready endpoint and,
with edgewatch, every node has a published verdict); a step runs as close to its ``at`` as the
previous step's duration allows (a kill waits for the processes to die, well under a second).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.apps_v1 import DaemonSet, Deployment
from lightkube.resources.core_v1 import ConfigMap, Node, Pod
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from edgewatch.kube.errors import API_ERRORS
from edgewatch.names import EDGE_CONDITION_TYPE, POOL_COORDINATORS_CONFIGMAP
from edgewatch_lab.playground.actions import ActionState, StepContext, perform, published_leader
from edgewatch_lab.playground.costs import CostMeter
from edgewatch_lab.playground.cluster import EDGEWATCH_NAMESPACE, WORKLOAD_NAMESPACE, PlaygroundCluster
from edgewatch_lab.playground.identities import read_identities
from edgewatch_lab.playground.coordinators import newest_placement
from edgewatch_lab.playground.coordinatorwatch import CoordinatorWatch, coordinator_pods
from edgewatch_lab.playground.observer import Observer
from edgewatch_lab.playground.placement import place_statefulsets
from edgewatch_lab.playground.proxies import NodeProxies, pool_scope_counters
from edgewatch_lab.playground.checks import ExpectationResult, check_expectations
from edgewatch_lab.playground.report import NodeRecord, Recording, build_report
from edgewatch_lab.playground.uninstalling import leftovers
from edgewatch_lab.playground import superedge
from edgewatch_lab.playground.comparison import SYSTEMS, TITLES, run_label
from edgewatch_lab.playground.scenario import Scenario
from edgewatch_lab.playground.statefulsets import StatefulSetSeries
from edgewatch_lab.playground.prometheus import PrometheusError, lab_prometheus
from edgewatch_lab.testing.binaries import Binaries, ensure_prometheus
from edgewatch_lab.testing.kubeletsim import make_client, pod_ready
from edgewatch_lab.testing.diagnose import explain_workload
from edgewatch_lab.testing.smoke import create_until_done, ready_endpoints, wait_for
from edgewatch_lab.testing.workload import APP_LABEL, sample_deployment, sample_headless_service, sample_service

log = logging.getLogger(__name__)

#: The values of a topology's ``coordinators`` (and of ``run_scenario``'s ``coordinator_mode``).
COORDINATOR_MODES = ("process", "pods")

STATE_STYLE = {"normal": "green", "disconnected": "yellow", "failed": "red", "unknown": "magenta",
               "not_ready": "dark_orange"}


@dataclass
class RunResult:
    """The report of one run, its expectation results, and where its logs were."""

    report: dict[str, Any]
    expectations: list[ExpectationResult]
    logs: list[Path]
    #: How edgewatch was installed (``install.install``'s record: the method, for helm the release);
    #: empty for a baseline run.
    install: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """True if every expectation held."""
        return all(e.passed for e in self.expectations)


class ScenarioPlayer:
    """Plays one scenario on one cluster and records it."""

    def __init__(self, *, scenario: Scenario, cluster: PlaygroundCluster, client: AsyncClient, console: Console,
                 live: bool) -> None:
        self.scenario = scenario
        self.cluster = cluster
        self.client = client
        self.console = console
        self.live = live
        self.recording = Recording(
            scenario=scenario.name, baseline=cluster.system == "stock", system=cluster.system,
            timings=scenario.timings.model_dump(), faults=[],
            nodes={n: NodeRecord(name=n, pool=scenario.pool_of(n), covered=scenario.is_covered(n),
                                 real=scenario.is_real(n))
                   for n in scenario.all_node_names()},
            started_at=time.time(), ended_at=0.0,
            statefulsets={s.name: StatefulSetSeries(node=s.node) for s in scenario.statefulsets})
        self.observer: Observer | None = None
        self.proxies = NodeProxies(cluster=cluster, client=client,
                                   nodes=[n for p in scenario.topology.pools for n in p.kube_proxy],
                                   dns_nodes=[n for p in scenario.topology.pools for n in p.coredns])
        self._counters_at_start: dict[str, float] = {}
        #: Real nodes: monotonic time the Node was first seen Ready / its agent pod Ready.
        self._ready_at: dict[str, float] = {}
        self._agent_ready_at: dict[str, float] = {}
        #: Pools with a coordinator (edgewatch runs), watched during the run.
        self.coordinator_pools = {p.name: p.node_names() for p in scenario.topology.pools
                                  if p.coordinator and cluster.edgewatch}
        #: What steps leave for later steps and the report (``actions.ActionState``).
        self._actions = ActionState()

    async def prepare(self) -> None:
        """Create the workload and wait until it serves (and, with edgewatch, the agents and the
        controller run and verdicts are published)."""
        replicas = 2 * len(self.scenario.worker_node_names())
        wanted = set(self.scenario.all_node_names())

        async def nodes_schedulable() -> bool:
            # New Nodes carry node.kubernetes.io/not-ready until kube-controller-manager sees them
            # Ready; a workload created before that would pile onto the first node cleared.
            ok = set()
            async for node in self.client.list(Node):
                taints = {t.key for t in (node.spec.taints or [])} if node.spec else set()
                ready = any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))
                if ready:
                    self._ready_at.setdefault(node.metadata.name, time.monotonic())
                if ready and not any(k.startswith("node.kubernetes.io/") for k in taints):
                    ok.add(node.metadata.name)
            return wanted <= ok

        # Start-up work grows with the node count on this one machine (every node's processes start at once).
        slack = 4.0 * len(wanted)
        await wait_for(nodes_schedulable, timeout_s=90 + slack, what="every node Ready and schedulable")
        await create_until_done(self.client, sample_service(namespace=WORKLOAD_NAMESPACE), timeout_s=60)
        if self.proxies.dns_nodes:  # what CoreDNS answers with the pods' addresses
            await create_until_done(self.client, sample_headless_service(namespace=WORKLOAD_NAMESPACE), timeout_s=60)
        deployment = sample_deployment(namespace=WORKLOAD_NAMESPACE, replicas=replicas, strict=True)
        await create_until_done(self.client, deployment, timeout_s=60)

        async def serving() -> bool:
            return len(await ready_endpoints(self.client, namespace=WORKLOAD_NAMESPACE, service="sample")) == replicas

        async def explain_serving() -> str:
            found = await explain_workload(self.client, namespace=WORKLOAD_NAMESPACE, service="sample",
                                           labels=APP_LABEL)
            restarts = self.cluster.cp.restarts("kube-controller-manager") if self.cluster.cp else 0
            return f"{found}; kube-controller-manager restarted {restarts} times"

        await wait_for(serving, timeout_s=120 + slack, what=f"{replicas} ready endpoints", explain=explain_serving)
        if self.scenario.statefulsets:
            await place_statefulsets(self.client, {s.name: s.node for s in self.scenario.statefulsets},
                                     namespace=WORKLOAD_NAMESPACE, timeout_s=90 + slack)
        if self.cluster.edgewatch:
            async def edgewatch_running() -> bool:
                async for pod in self.client.list(Pod, namespace=EDGEWATCH_NAMESPACE,
                                                  labels={"app.kubernetes.io/name": "edgewatch-agent"}):
                    node_name = pod.spec.nodeName if pod.spec else None
                    if node_name and pod_ready(pod):
                        self._agent_ready_at.setdefault(node_name, time.monotonic())
                ds = await self.client.get(DaemonSet, "edgewatch-agent", namespace=EDGEWATCH_NAMESPACE)
                dep = await self.client.get(Deployment, "edgewatch-controller", namespace=EDGEWATCH_NAMESPACE)
                agents = ds.status is not None and ds.status.numberReady == len(self.scenario.node_names())
                return agents and dep.status is not None and (dep.status.readyReplicas or 0) >= 1

            await wait_for(edgewatch_running, timeout_s=120 + slack,
                           what="every agent pod Ready and a controller pod Ready (as shipped)")

            async def verdicts_published() -> bool:
                healthy = 0
                async for node in self.client.list(Node):
                    for cond in (node.status.conditions or []) if node.status else []:
                        if cond.type == EDGE_CONDITION_TYPE and cond.status == "True":
                            healthy += 1
                return healthy == len(self.scenario.node_names())  # covered nodes only

            await wait_for(verdicts_published, timeout_s=90 + slack, what="EdgeHealthy=True on every node")
            if self.cluster.coordinator_pods and self.coordinator_pools:
                await self._coordinators_running(timeout_s=180 + slack)
        if self.cluster.superedge:
            await superedge.wait_running(self.client, nodes=len(self.scenario.node_names()), timeout_s=120 + slack)
        if self.proxies.nodes or self.proxies.dns_nodes:
            await self.proxies.start(timeout_s=120 + slack)

    async def _coordinators_running(self, *, timeout_s: float) -> None:
        """``coordinators: pods``: wait until each coordinator pool's pod is Ready, published in
        the discovery ConfigMap, and its agents publish a leader."""
        for pool in self.coordinator_pools:
            async def running(pool: str = pool) -> bool:
                try:
                    _node, ready = newest_placement(await coordinator_pods(
                        self.client, namespace=EDGEWATCH_NAMESPACE, pool=pool))
                    if not ready:
                        return False
                    cm = await self.client.get(ConfigMap, POOL_COORDINATORS_CONFIGMAP, namespace=EDGEWATCH_NAMESPACE)
                    return bool((cm.data or {}).get(pool)) and await published_leader(
                        self.cluster, self.client, pool) is not None
                except API_ERRORS:  # not there yet, or a slow answer: look again
                    return False

            await wait_for(running, timeout_s=timeout_s,
                           what=f"pool {pool}'s coordinator pod Ready and published, and a leader elected")

    async def play(self) -> Recording:
        """Run the steps on time while the observer records; returns the recording."""
        with contextlib.suppress(Exception):
            self._counters_at_start = await pool_scope_counters(self.client)
        t0 = time.monotonic()
        self.recording.started_at = time.time()  # t=0 on the wall clock (Prometheus' time base)
        self.observer = Observer(client=self.client, recording=self.recording, namespace=WORKLOAD_NAMESPACE,
                                 service="sample", edgewatch=self.cluster.edgewatch, t0=t0,
                                 superedge=self.cluster.superedge)
        stop = asyncio.Event()
        edge = self.scenario.node_names()
        costs = CostMeter(cluster=self.cluster, nodes=list(edge), system=self.cluster.system)
        costs.start()
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._observe(stop))
            if self.proxies.nodes or self.proxies.dns_nodes:
                tg.create_task(self._observe_proxies(stop))
            if self.coordinator_pools:
                tg.create_task(self._observe_coordinators(stop))
            if self.cluster.edgewatch and any(s.action == "rollout" for s in self.scenario.steps):
                tg.create_task(self._observe_rollouts(stop))
            display = tg.create_task(self._display(stop)) if self.live else None
            try:
                for step in self.scenario.steps:
                    await asyncio.sleep(max(0.0, step.at - (time.monotonic() - t0)))
                    await self._do(step, t=self.observer.now())
                    if step.action == "end":
                        break
            finally:
                stop.set()
                if display is not None:
                    await display
        self.recording.ended_at = self.observer.now()
        self.recording.rollouts = [w.summary() for w in self._actions.rollouts]
        uninstalled = self._actions.uninstall
        if uninstalled is not None:
            self.recording.uninstall = {"t": uninstalled["t"], "done_at": uninstalled.get("done_at"),
                                        **{k: v for k, v in uninstalled.items() if k not in ("t", "action", "done_at")},
                                        "left": await leftovers(self.client)}
        self._record_costs(costs, elapsed_s=time.monotonic() - t0)
        if self._counters_at_start:
            with contextlib.suppress(Exception):
                end = await pool_scope_counters(self.client)
                self.recording.pool_scope_cloud = {
                    k: (v if k == "open_watches" else v - self._counters_at_start.get(k, 0.0)) for k, v in end.items()}
        return self.recording

    def _record_costs(self, costs: CostMeter, *, elapsed_s: float) -> None:
        """``recording.node_costs`` (``edgewatch_lab.playground.costs``); real nodes also their
        start-up times (see ``Recording.node_costs``)."""
        for name, cost in costs.finish(elapsed_s=elapsed_s).items():
            node = self.cluster.nodes[name]
            started = node.real.first_started_at if node.real is not None else None
            if started is not None and name in self._ready_at:
                cost["ready_s"] = round(self._ready_at[name] - started, 1)
                if name in self._agent_ready_at:
                    cost["agent_ready_s"] = round(self._agent_ready_at[name] - started, 1)
            self.recording.node_costs[name] = cost

    async def _observe_proxies(self, stop: asyncio.Event) -> None:
        assert self.observer is not None
        while not stop.is_set():
            await self.proxies.poll(self.recording, self.observer.now())
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)

    async def _observe_coordinators(self, stop: asyncio.Event) -> None:
        """Record each coordinator pool's coordinator about once a second (``CoordinatorWatch``)."""
        assert self.observer is not None
        lab = self.cluster.lab
        assert lab is not None

        def reachable(node: str) -> bool:
            faults = lab.faults(node)
            return not faults.killed and not faults.cloud_cut

        watch = CoordinatorWatch(client=self.client, namespace=EDGEWATCH_NAMESPACE, pools=self.coordinator_pools,
                                 addresses={n: v.address for n, v in self.cluster.nodes.items()}, reachable=reachable,
                                 metrics_headers=self.cluster.metrics_headers)
        self.recording.coordinators = watch.series
        try:
            while not stop.is_set():
                try:
                    await watch.poll(self.observer.now())
                except Exception:  # noqa: BLE001 - a look that failed must not end the run
                    log.exception("watching the pool coordinators failed once")
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), 1.0)
        finally:
            await watch.close()

    async def _observe_rollouts(self, stop: asyncio.Event) -> None:
        """Poll the newest rollout's pods once a second (``edgewatch_lab.playground.rollout``)."""
        while not stop.is_set():
            if self._actions.rollouts and self.observer is not None:
                with contextlib.suppress(*API_ERRORS):  # a slow answer: look again next second
                    await self._actions.rollouts[-1].poll(self.client, t=self.observer.now())
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)

    async def _observe(self, stop: asyncio.Event) -> None:
        assert self.observer is not None
        while not stop.is_set():
            await self.observer.poll()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.25)
        await self.observer.poll()

    async def _do(self, step: Any, *, t: float) -> None:
        """Do one step (``actions.perform``) and record its fault."""
        ctx = StepContext(cluster=self.cluster, client=self.client, scenario=self.scenario,
                          recording=self.recording, observer=self.observer, state=self._actions)
        fault = await perform(ctx, step, t=t)
        self.recording.faults.append(fault)
        log.info("t=%.1f %s %s", t, step.action, {k: v for k, v in fault.items() if k not in ("t", "action")})

    async def _display(self, stop: asyncio.Event) -> None:
        with Live(self._render(), console=self.console, refresh_per_second=2, transient=False) as live:
            while not stop.is_set():
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.5)
                live.update(self._render())

    def _render(self) -> Group:
        kind = run_label(self.cluster.system)
        t = self.observer.now() if self.observer else 0.0
        table = Table(title=f"{self.scenario.name} — {kind} — t={t:5.1f} s of {self.scenario.end_time:g} s")
        for col in ("node", "pool", "state", "Ready", "edge view", "pods", "evicted", "taints"):
            table.add_column(col)
        views = self.observer.views if self.observer else {}
        for name in self.scenario.all_node_names():
            v = views.get(name)
            rec = self.recording.nodes[name]
            if v is None:
                table.add_row(name, rec.pool, "-", "-", "-", "-", "-", "-")
                continue
            short = ",".join(sorted(x.replace("node.kubernetes.io/", "").replace("edgewatch.io/", "ew/")
                                    for x in v.taints)) or "-"
            table.add_row(name, rec.pool, Text(v.state, style=STATE_STYLE.get(v.state, "")), v.ready, v.edge,
                          "?" if v.pods is None else str(v.pods), str(len(rec.evictions)), short)
        lines = [Text(f"  t={f['t']:6.1f}  {f['action']}  "
                      f"{' '.join(str(v) for k, v in f.items() if k not in ('t', 'action', 'done_at'))}")
                 for f in self.recording.faults[-6:]]
        upcoming = [s for s in self.scenario.steps if s.at > t][:3]
        lines += [Text(f"  next t={s.at:6.1f}  {s.action}", style="dim") for s in upcoming]
        return Group(table, Text("faults:"), *lines)


async def _run_async(scenario: Scenario, cluster: PlaygroundCluster, console: Console, live: bool,
                     prometheus: Path | None = None) -> Recording:
    assert cluster.admin_kubeconfig is not None
    client = make_client(str(cluster.admin_kubeconfig), timeout_s=5)
    loop = asyncio.get_running_loop()
    server = None
    try:
        server = lab_prometheus(cluster, prometheus) if prometheus is not None else None
        player = ScenarioPlayer(scenario=scenario, cluster=cluster, client=client, console=console, live=live)
        try:
            if server is not None:
                with console.status("starting Prometheus"):
                    await loop.run_in_executor(None, server.start)
            with console.status("waiting for the workload to serve"):
                await player.prepare()
            recording = await player.play()
            if server is not None:
                start, prom = recording.started_at, server
                try:
                    recording.alerts = await loop.run_in_executor(
                        None, lambda: prom.query_alerts(start_wall=start, end_wall=time.time()))
                except PrometheusError:  # the run's report is worth more than its alerts
                    log.exception("reading the alerts from Prometheus failed; the report has none")
            return recording
        finally:
            await player.proxies.stop()
            if server is not None:
                await loop.run_in_executor(None, server.stop)
    finally:
        with contextlib.suppress(Exception):
            await client.close()


def with_coordinator_mode(scenario: Scenario, mode: str | None) -> Scenario:
    """``scenario`` with its topology's ``coordinators`` set to ``mode`` (``process`` or ``pods``;
    None: unchanged). Raises ValueError for another mode."""
    if mode is None or mode == scenario.topology.coordinators:
        return scenario
    if mode not in COORDINATOR_MODES:
        raise ValueError(f"coordinator mode must be one of {', '.join(COORDINATOR_MODES)}, got {mode!r}")
    data = scenario.model_dump(mode="json", exclude_none=True)
    data["topology"]["coordinators"] = mode
    return Scenario.model_validate(data)


def run_scenario(scenario: Scenario, *, baseline: bool, console: Console, live: bool = True,
                 keep_logs: bool = False, binaries: Binaries | None = None,
                 install_method: str = "kustomize", coordinator_mode: str | None = None,
                 prometheus: bool = False, system: str | None = None) -> RunResult:
    """Run ``scenario`` once (with edgewatch, or stock Kubernetes if ``baseline``, or ``system``
    one of ``SYSTEMS``: ``superedge`` installs SuperEdge's edge-health instead, measured and not
    judged: its report's expectations are none, ``edgewatch_lab.playground.superedge``); ``binaries``
    default to ``ensure_binaries()``; ``install_method`` is how edgewatch is installed
    (``install.METHODS``: the kustomize base or the Helm chart); ``coordinator_mode`` (``process``
    or ``pods``) overrides the topology's ``coordinators``; ``prometheus``: a real Prometheus
    scrapes edgewatch and evaluates the shipped alert rules during the run, and the report's
    ``alerts`` lists what fired (``edgewatch_lab.playground.prometheus``; built on first use)."""
    scenario = with_coordinator_mode(scenario, coordinator_mode)
    system = system or ("stock" if baseline else "edgewatch")
    if system not in SYSTEMS:
        raise ValueError(f"system must be one of {', '.join(SYSTEMS)}, got {system!r}")
    prometheus_binary = ensure_prometheus() if prometheus else None  # before the cluster: a failed build starts nothing
    kind = TITLES[system]
    with console.status(f"{scenario.name} ({kind}): starting the control plane, nodes and agents"):
        cluster = PlaygroundCluster(scenario=scenario, system=system, binaries=binaries,
                                    install_method=install_method)
        cluster.__enter__()
    try:
        recording = asyncio.run(_run_async(scenario, cluster, console, live, prometheus_binary))
        recording.identities = read_identities(cluster.cp.audit_log if cluster.cp else None)
    finally:
        with console.status("stopping everything"):
            logs = cluster.log_files()
            manager_restarts = cluster.cp.restarts("kube-controller-manager") if cluster.cp else 0
            if manager_restarts:  # it lost its leader Lease on a busy machine (ControlPlane._spawn)
                log.warning("kube-controller-manager was restarted %d times during %s", manager_restarts,
                            scenario.name)
                console.print(f"kube-controller-manager restarted {manager_restarts} times")
            cluster.stop()
    report = build_report(recording)
    expectations = check_expectations(scenario, report)
    if not keep_logs and all(e.passed for e in expectations):
        cluster.remove_workdir()
        logs = []
    return RunResult(report=report, expectations=expectations, logs=logs, install=dict(cluster.installed))


__all__ = ["COORDINATOR_MODES", "SYSTEMS", "RunResult", "ScenarioPlayer", "run_scenario", "with_coordinator_mode"]

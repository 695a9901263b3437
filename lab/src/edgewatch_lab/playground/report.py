"""What a playground run recorded, the JSON report built from it, and how it is judged.

The runner watches the real apiserver during a scenario and fills a :class:`Recording` (one
:class:`NodeRecord` per node; every time is in seconds from the scenario's start). Then:

* :func:`build_report` turns the recording into the JSON report (plain data, see its docstring);
* ``edgewatch_lab.playground.checks`` judges a report against the scenario's ``expect`` entries;
* ``edgewatch_lab.playground.summarytable`` puts an edgewatch run and a baseline run (stock
  Kubernetes) side by side.

Definitions used by the summary (one place, so docs/lab.md and the tests agree):

* a node is **down** from a kill until the next revive (or forever); a kill of a node that is already
  down, and a revive of a node that is up, change nothing. Down intervals are half-open ``[kill, revive)``:
  an event at the exact kill time happened while the node was down, one at the exact revive time
  while it was up;
* an eviction or endpoint removal **on a live node** is one at a time its node was not down;
* a node is **covered** when edgewatch runs on it (edge nodes); cloud nodes are not, and must get
  stock Kubernetes behaviour: their detection target is ``not_ready`` in every run, and the summary
  reports their kills apart (``max_not_ready_after_kill_s``) so stock timing can be compared;
* **detection** of a kill is the first state transition to ``failed`` (baseline or not covered: ``not_ready``) at or after
  the kill and before the revive; if the node was already in that state at the kill, detection is 0 s; if
  it never got there, the kill counts as undetected and its detection time is the time until the revive
  (or the end of the run);
* **eviction time** of a kill is the time from the kill to the last eviction of the node's pods while it
  was down (kills with no eviction do not count; they show up in ``killed_nodes_not_evicted`` instead
  when the node had pods at the kill);
* a **StatefulSet move** (``max_statefulset_move_s``) is, for a declared StatefulSet whose pod's
  node at the start was killed with the pod still on it, the time from that node's first kill to another pod of it Ready on
  another node (``edgewatch_lab.playground.statefulsets``); those never moved are listed in
  ``statefulsets_not_moved`` (stock Kubernetes: the dead node's pod stays Terminating).

Limits: pure data in, data out. What counts as an eviction or an endpoint removal (e.g. excluding
scale-downs) is the runner's call; this module only stores and counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from edgewatch_lab.playground.coordinators import CoordinatorSeries, coordinator_recoveries
from edgewatch_lab.playground.costs import cost_summary
from edgewatch_lab.playground.statefulsets import StatefulSetSeries, statefulset_outcome

__all__ = [
    "NodeRecord",
    "Recording",
    "build_report",
    "detection",
    "detection_target",
    "down_intervals",
    "during",
    "evictions_after",
    "is_live",
    "last_renewal_before",
    "report_end",
    "round_s",
]

REPORT_KEYS = ("scenario", "baseline", "system", "timings", "faults", "nodes", "summary", "identities", "service_endpoints",
               "pool_scope_cloud", "live_ready", "node_costs", "coordinators", "statefulsets", "alerts",
               "rollouts", "uninstall", "observer_errors")


def round_s(x: float) -> float:
    """Round a time to the millisecond (keeps reports free of float noise like 4.199999)."""
    return round(float(x), 3)


# --------------------------------------------------------------------------------------------------
# Recording (filled by the runner)


@dataclass
class NodeRecord:
    """Everything seen of one node during a run (times in seconds from the scenario's start)."""

    name: str
    pool: str
    #: Whether edgewatch covers the node (an agent runs there); cloud nodes are not covered.
    covered: bool = True
    #: ``(t, what)`` each time edgewatch left a mark on the node: its state annotation, one of its
    #: taints, or a delegated-heartbeat mark on its Lease (what an uncovered node must never get).
    touched: list[tuple[float, str]] = field(default_factory=list)
    #: Each kill of the node (the runner's own action, or kill-leader resolved to this node).
    killed_at: list[float] = field(default_factory=list)
    #: Each revive.
    revived_at: list[float] = field(default_factory=list)
    #: State transitions only: edgewatch runs normal/disconnected/failed/unknown (the controller's
    #: ``edgewatch.io/state`` annotation); baseline runs normal/not_ready (the Ready condition).
    states: list[tuple[float, str]] = field(default_factory=list)
    #: Intervals ``[start, end or None]`` when the Node's Ready condition was not True.
    not_ready: list[list[float | None]] = field(default_factory=list)
    #: ``{"t": float, "pod": str}``: a pod bound to this node got a deletionTimestamp.
    evictions: list[dict[str, Any]] = field(default_factory=list)
    #: ``{"t": float, "pod": str}``: a pod bound to this node stopped being a ready Service endpoint
    #: while it was not being deleted by a scale-down.
    endpoint_removals: list[dict[str, Any]] = field(default_factory=list)
    #: ``(t, "key:effect", "added" | "removed")``.
    taints: list[tuple[float, str, str]] = field(default_factory=list)
    #: Pods bound to the node at each kill (key: the kill time). A kill missing here is assumed to
    #: have had pods, so a missing count can only make a report stricter.
    pods_at_kill: dict[float, int] = field(default_factory=dict)
    #: Coarser stand-in for ``pods_at_kill``: whether a pod was ever seen bound to the node (None:
    #: not tracked). Used for a kill with no ``pods_at_kill`` entry: False means 0 pods at the kill.
    had_pods: bool | None = None
    #: ``(t, ["ip:port", ...])`` each time the node's real kube-proxy (if it runs one) changed the
    #: backends it programs for the sample Service.
    kube_proxy: list[tuple[float, list[str]]] = field(default_factory=list)
    #: ``(t, ["ip", ...])`` each time the node's real CoreDNS (if it runs one) changed its answer
    #: (A records) for the sample workload's headless Service.
    coredns: list[tuple[float, list[str]]] = field(default_factory=list)
    #: Whether the node is a real one (a real kubelet and containerd; ``real_nodes``).
    real: bool = False
    #: ``(t, state)`` each time the node's Lease changed hands: ``own`` (no delegated-heartbeat mark),
    #: ``carried`` (a current mark: a peer renewed it), ``mark-copied`` (mark annotations present
    #: but stale: the node's kubelet renewed over a carried Lease and kept them); `` holder=<x>`` is
    #: appended when the holder is not the node.
    lease: list[tuple[float, str]] = field(default_factory=list)
    #: Each time a new renewal of the node's Lease by the node itself (no current carried mark,
    #: holder the node) was first seen: the observer's time, so at most one poll (0.25 s) plus its
    #: API lists after the renewal reached the apiserver. What a kill's detection is timed against
    #: besides the kill: the controller's cloud view goes overdue one grace after the last one.
    renewals: list[float] = field(default_factory=list)
    #: Real nodes: ``[before, after]`` pod container processes at each kill (key: the kill time).
    containers_at_kill: dict[float, list[int]] = field(default_factory=dict)
    #: ``(t, [mark, ...])`` each time the set of edgewatch's marks on the node and its Lease changed
    #: (``edgewatch_lab.playground.marks``: ``taint <key>``, ``annotation <key>``, ``condition
    #: <type>``, ``lease <key>``); the first entry is the first look.
    marks: list[tuple[float, list[str]]] = field(default_factory=list)

    # -- helpers for the runner ------------------------------------------------------------------

    def observe_state(self, t: float, state: str) -> bool:
        """Record ``state`` if it differs from the last recorded one; returns whether it did."""
        if self.states and self.states[-1][1] == state:
            return False
        self.states.append((t, state))
        return True

    def observe_ready(self, t: float, ready: bool) -> None:
        """Open a NotReady interval when Ready turns not True, close it when it turns True."""
        open_ = bool(self.not_ready) and self.not_ready[-1][1] is None
        if not ready and not open_:
            self.not_ready.append([t, None])
        elif ready and open_:
            self.not_ready[-1][1] = t

    def record_kill(self, t: float, pods: int | None = None) -> None:
        self.killed_at.append(t)
        if pods is not None:
            self.pods_at_kill[t] = pods

    def record_revive(self, t: float) -> None:
        self.revived_at.append(t)

    def record_eviction(self, t: float, pod: str) -> None:
        self.evictions.append({"t": t, "pod": pod})

    def record_endpoint_removal(self, t: float, pod: str) -> None:
        self.endpoint_removals.append({"t": t, "pod": pod})

    def record_taint(self, t: float, taint: str, change: str) -> None:
        if change not in ("added", "removed"):
            raise ValueError(f"taint change must be 'added' or 'removed', got {change!r}")
        self.taints.append((t, taint, change))

    def down_intervals(self) -> list[tuple[float, float | None]]:
        return down_intervals(self.killed_at, self.revived_at)

    def pods_at(self, kill: float) -> int | None:
        """Pods bound at the kill at ``kill``: ``pods_at_kill``, else 0 if ``had_pods`` is False, else None."""
        if kill in self.pods_at_kill:
            return self.pods_at_kill[kill]
        return 0 if self.had_pods is False else None


@dataclass
class Recording:
    """One run of a scenario as the runner saw it through the API."""

    scenario: str
    baseline: bool
    #: What judged the nodes: ``edgewatch``, ``superedge`` (SuperEdge's edge-health) or ``stock``
    #: (Kubernetes alone; ``baseline`` is True exactly then); None: from ``baseline``.
    system: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    #: ``{"t", "action", target keys as in the scenario (pool / nodes / node / sides / percent), "detail"}``;
    #: for kill-leader, the runner adds ``node`` (the leader it killed) when it knows it.
    faults: list[dict[str, Any]] = field(default_factory=list)
    nodes: dict[str, NodeRecord] = field(default_factory=dict)
    #: Wall-clock time (``time.time()``) of the scenario's start.
    started_at: float = 0.0
    #: Scenario seconds at which the recording ended; None: the last time seen in the recording.
    ended_at: float | None = None
    #: Who edgewatch's processes were to the apiserver (from its audit log):
    #: ``{"username", "component", "requests", "node_names"}`` per identity.
    identities: list[dict[str, Any]] = field(default_factory=list)
    #: ``(t, ["ip:port", ...])`` each time the sample Service's ready endpoints changed in the cloud.
    service_endpoints: list[tuple[float, list[str]]] = field(default_factory=list)
    #: What the cloud apiserver sent for the pool-scope resources during the run (its own metrics):
    #: ``{"watch_bytes", "watch_events", "list_bytes", "lists", "open_watches"}``.
    pool_scope_cloud: dict[str, float] = field(default_factory=dict)
    #: ``(t, n)`` each time the number of the sample Service's ready endpoints whose pod's node is
    #: not down changed.
    live_ready: list[tuple[float, int]] = field(default_factory=list)
    #: What nodes cost during the run, per node (``edgewatch_lab.playground.costs``): ``{"kind":
    #: "real"|"simulated", "cpu_pct" (of one core), "rss_mib", "agent": {"pod", "cpu_pct",
    #: "rss_mib"} (the system's agent pod; simulated nodes), "traffic": {counter: per minute} (sent
    #: to peers and to the cloud), "ready_s" / "agent_ready_s" (real nodes: seconds from start to
    #: Node Ready / agent pod Ready)}``.
    node_costs: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Each coordinator pool's coordinator over the run (``edgewatch_lab.playground.coordinators``).
    coordinators: dict[str, CoordinatorSeries] = field(default_factory=dict)
    #: Each declared StatefulSet's pods over the run (``edgewatch_lab.playground.statefulsets``).
    statefulsets: dict[str, StatefulSetSeries] = field(default_factory=dict)
    #: The alerts a real Prometheus evaluated on the run (``--prometheus``): ``{"alertname",
    #: "labels", "pending_at_s", "firing_at_s", "last_seen_s"}`` per episode
    #: (``edgewatch_lab.playground.prometheus.alerts_from_series``); None: Prometheus did not run.
    alerts: list[dict[str, Any]] | None = None
    #: Each ``rollout`` step's record, in order (``RolloutWatch.summary``: per node, seconds from
    #: the step to its old agent pod gone and its new one Ready; the controller's rollout done).
    rollouts: list[dict[str, Any]] = field(default_factory=list)
    #: The ``uninstall`` step's record (``edgewatch_lab.playground.uninstalling``): when it ran, what
    #: deleting the install and ``edgewatch uninstall`` printed and took, and what of edgewatch was
    #: left at the end (``left``); None: no uninstall step ran.
    uninstall: dict[str, Any] | None = None
    #: ``(t, "what failed")`` for each of the observer's polls that failed (an API error or a
    #: timeout): what happened then is missing from this recording.
    observer_errors: list[tuple[float, str]] = field(default_factory=list)

    def add_node(self, name: str, pool: str) -> NodeRecord:
        rec = self.nodes[name] = NodeRecord(name=name, pool=pool)
        return rec

    def add_fault(self, t: float, action: str, detail: str = "", **target: Any) -> None:
        self.faults.append({"t": t, "action": action, **target, "detail": detail})

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``pods_at_kill`` keys become strings)."""
        d = asdict(self)
        for rec in d["nodes"].values():
            rec["pods_at_kill"] = {repr(float(k)): v for k, v in rec["pods_at_kill"].items()}
            rec["containers_at_kill"] = {repr(float(k)): v for k, v in rec["containers_at_kill"].items()}
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Recording:
        nodes = {}
        for name, rec in data.get("nodes", {}).items():
            rec = dict(rec)
            rec["states"] = [(float(t), s) for t, s in rec.get("states", [])]
            rec["taints"] = [(float(t), k, c) for t, k, c in rec.get("taints", [])]
            rec["touched"] = [(float(t), w) for t, w in rec.get("touched", [])]
            rec["pods_at_kill"] = {float(k): int(v) for k, v in rec.get("pods_at_kill", {}).items()}
            rec["kube_proxy"] = [(float(t), list(ips)) for t, ips in rec.get("kube_proxy", [])]
            rec["coredns"] = [(float(t), list(ips)) for t, ips in rec.get("coredns", [])]
            rec["lease"] = [(float(t), w) for t, w in rec.get("lease", [])]
            rec["renewals"] = [float(t) for t in rec.get("renewals", [])]
            rec["containers_at_kill"] = {float(k): list(v) for k, v in rec.get("containers_at_kill", {}).items()}
            rec["marks"] = [(float(t), list(m)) for t, m in rec.get("marks", [])]
            nodes[name] = NodeRecord(**rec)
        data = dict(data)
        data["live_ready"] = [(float(t), int(n)) for t, n in data.get("live_ready", [])]
        data["observer_errors"] = [(float(t), str(w)) for t, w in data.get("observer_errors", [])]
        data["coordinators"] = {pool: CoordinatorSeries(**{k: [list(r) for r in v] for k, v in series.items()})
                                for pool, series in data.get("coordinators", {}).items()}
        data["statefulsets"] = {name: StatefulSetSeries(node=series["node"], pods=[dict(e) for e in series["pods"]])
                                for name, series in data.get("statefulsets", {}).items()}
        return cls(**{**data, "nodes": nodes})


def down_intervals(killed_at: list[float], revived_at: list[float]) -> list[tuple[float, float | None]]:
    """Pair kills with revives: ``[(kill, revive or None)]``, half-open ``[kill, revive)``.

    A kill while down and a revive while up are ignored; at equal times a revive is applied first.
    """
    events = sorted([(t, 0) for t in revived_at] + [(t, 1) for t in killed_at])
    out: list[tuple[float, float | None]] = []
    down_since: float | None = None
    for t, is_kill in events:
        if is_kill and down_since is None:
            down_since = t
        elif not is_kill and down_since is not None:
            out.append((down_since, t))
            down_since = None
    if down_since is not None:
        out.append((down_since, None))
    return out


# --------------------------------------------------------------------------------------------------
# The report


def _last_time(rec: Recording) -> float:
    times = [0.0] + [float(f["t"]) for f in rec.faults]
    for n in rec.nodes.values():
        times += n.killed_at + n.revived_at + [t for t, _ in n.states] + [t for t, _, _ in n.taints]
        times += [e["t"] for e in n.evictions + n.endpoint_removals]
        times += [t for iv in n.not_ready for t in iv if t is not None]
    return max(times)


def build_report(recording: Recording) -> dict[str, Any]:
    """The JSON report of a run (plain data; ``json.dumps`` works on it).

    Keys: ``scenario``, ``baseline``, ``system`` (``edgewatch``, ``superedge`` or ``stock``), ``timings``, ``faults`` (time-sorted; an ``end`` fault at the
    recording's end is added when the runner did not record one, so the report carries the run's
    length), ``nodes`` (per node: ``pool``, ``killed_at`` (first kill or null), ``states`` [[t, state]],
    ``not_ready`` [[start, end|null]], ``evictions`` / ``endpoint_removals`` [{t, pod}], ``taints``
    [[t, "key:effect", "added"|"removed"]], and ``kills`` [{t, revived_at, pods}] - every down interval
    with the pods bound at the kill (null: unknown)), and ``summary`` (``evictions_on_live_nodes``,
    ``endpoint_removals_on_live_nodes``, ``killed_nodes_not_evicted``, ``max_detection_s``,
    ``max_eviction_s``, ``undetected``, ``max_statefulset_move_s``, ``statefulsets_not_moved``,
    ``live_nodes_not_ready`` (nodes whose Ready went False/Unknown while they were alive),
    ``false_verdicts_on_live_nodes`` (transitions of a live covered node to the system's verdict,
    ``detection_target``; null on stock), and the cost medians of ``costs.cost_summary``; see the
    module docstring), and ``coordinators`` (per pool with a coordinator: its series and
    ``recoveries``, ``edgewatch_lab.playground.coordinators``), and ``statefulsets`` (per declared
    StatefulSet: its ``pods`` series and where its pod went, ``statefulset_outcome`` of
    ``edgewatch_lab.playground.statefulsets``), and
    ``alerts`` (what a real Prometheus fired during the run, ``Recording.alerts``; null without
    ``--prometheus``), and ``rollouts`` (each ``rollout`` step's record, ``Recording.rollouts``), and
    ``uninstall`` (the ``uninstall`` step's record, ``Recording.uninstall``; null without one); and
    per node its ``marks`` series (``NodeRecord.marks``).
    """
    ended_at = recording.ended_at if recording.ended_at is not None else _last_time(recording)
    faults = sorted((dict(f) for f in recording.faults), key=lambda f: float(f["t"]))
    if not any(f.get("action") == "end" for f in faults):
        faults.append({"t": ended_at, "action": "end", "detail": "end of the recording"})
    nodes: dict[str, Any] = {}
    for name in sorted(recording.nodes, key=_node_sort_key):
        n = recording.nodes[name]
        kills = [
            {"t": k, "revived_at": r, "pods": n.pods_at(k)}
            for k, r in n.down_intervals()
        ]
        for kill in kills:
            last = last_renewal_before(n.renewals, kill["t"])
            if last is not None:
                kill["last_renewal"] = last
        nodes[name] = {
            "pool": n.pool,
            "covered": n.covered,
            "touched": [[t, w] for t, w in sorted(n.touched, key=lambda x: x[0])],
            "killed_at": min(n.killed_at) if n.killed_at else None,
            "states": [[t, s] for t, s in sorted(n.states, key=lambda x: x[0])],
            "not_ready": [list(iv) for iv in sorted(n.not_ready, key=lambda iv: iv[0])],
            "evictions": sorted((dict(e) for e in n.evictions), key=lambda e: e["t"]),
            "endpoint_removals": sorted((dict(e) for e in n.endpoint_removals), key=lambda e: e["t"]),
            "taints": [[t, k, c] for t, k, c in sorted(n.taints, key=lambda x: x[0])],
            "kills": kills,
        }
        if n.kube_proxy:
            nodes[name]["kube_proxy"] = [[t, sorted(ips)] for t, ips in sorted(n.kube_proxy, key=lambda x: x[0])]
        if n.coredns:
            nodes[name]["coredns"] = [[t, sorted(ips)] for t, ips in sorted(n.coredns, key=lambda x: x[0])]
        if n.lease:
            nodes[name]["lease"] = [[t, w] for t, w in sorted(n.lease, key=lambda x: x[0])]
        if n.marks:
            nodes[name]["marks"] = [[t, list(m)] for t, m in sorted(n.marks, key=lambda x: x[0])]
        if n.real:
            nodes[name]["real"] = True
            for kill in kills:
                kill["containers"] = n.containers_at_kill.get(kill["t"])
    report = {
        "scenario": recording.scenario,
        "baseline": recording.baseline,
        "system": recording.system or ("stock" if recording.baseline else "edgewatch"),
        "timings": dict(recording.timings),
        "faults": faults,
        "nodes": nodes,
        "summary": {},
        "identities": [dict(i) for i in recording.identities],
        "service_endpoints": [[t, sorted(ips)] for t, ips in sorted(recording.service_endpoints, key=lambda x: x[0])],
        "pool_scope_cloud": dict(recording.pool_scope_cloud),
        "live_ready": [[t, n] for t, n in sorted(recording.live_ready, key=lambda x: x[0])],
        "node_costs": {k: dict(v) for k, v in recording.node_costs.items()},
        "coordinators": {pool: {**asdict(series), "recoveries": coordinator_recoveries(
            asdict(series), faults, pool=pool, end=ended_at)} for pool, series in sorted(recording.coordinators.items())},
        "statefulsets": {name: {**statefulset_outcome(series, kills={n: list(r.killed_at) for n, r in recording.nodes.items()}),
                                "pods": sorted((dict(e) for e in series.pods), key=lambda e: float(e["t"]))}
                         for name, series in sorted(recording.statefulsets.items())},
        "alerts": None if recording.alerts is None else [
            {**a, "labels": dict(a.get("labels") or {})} for a in recording.alerts],
        "rollouts": [dict(r) for r in recording.rollouts],
        "uninstall": None if recording.uninstall is None else dict(recording.uninstall),
        "observer_errors": [[t, what] for t, what in recording.observer_errors],
    }
    report["summary"] = _summarize(report)
    return report


def report_end(report: dict[str, Any], default: float | None = None) -> float:
    """The run's end in scenario seconds: its last ``end`` fault, else ``default``, else the last fault."""
    ends = [float(f["t"]) for f in report.get("faults", []) if f.get("action") == "end"]
    if ends:
        return max(ends)
    if default is not None:
        return default
    return max([0.0] + [float(f["t"]) for f in report.get("faults", [])])


def detection_target(report: dict[str, Any], node: dict[str, Any] | None = None) -> str:
    """``failed`` for a covered node in an edgewatch run; ``unhealthy`` (SuperEdge's verdict) in a
    superedge run; ``not_ready`` in the baseline and for nodes no agent covers (stock Kubernetes
    judges those)."""
    if report["baseline"] or (node is not None and not node.get("covered", True)):
        return "not_ready"
    return "unhealthy" if report.get("system") == "superedge" else "failed"


def during(t: float, start: float, end: float | None) -> bool:
    return start <= t and (end is None or t < end)


def is_live(node: dict[str, Any], t: float) -> bool:
    return not any(during(t, k["t"], k["revived_at"]) for k in node["kills"])


def last_renewal_before(renewals: Sequence[float], t: float) -> float | None:
    """The latest own Lease renewal seen at or before ``t`` (seconds from the start), or None."""
    seen = [r for r in renewals if r <= t]
    return max(seen) if seen else None


def detection(node: dict[str, Any], kill: dict[str, Any], target: str, end: float) -> tuple[float, bool]:
    """(seconds from the kill to detection, detected?) for one kill of ``node``."""
    k, r = kill["t"], kill["revived_at"]
    before = [s for t, s in node["states"] if t < k]
    if before and before[-1] == target:
        return 0.0, True
    for t, s in node["states"]:
        if s == target and during(t, k, r):
            return round_s(t - k), True
    return round_s((r if r is not None else end) - k), False


def evictions_after(node: dict[str, Any], kill: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in node["evictions"] if during(e["t"], kill["t"], kill["revived_at"])]


def _summarize(report: dict[str, Any]) -> dict[str, Any]:
    end = report_end(report)
    target = detection_target(report)
    live_evictions = live_removals = 0
    not_evicted: list[str] = []
    undetected: list[str] = []
    detections: list[float] = []
    uncovered_not_ready: list[float] = []
    eviction_times: list[float] = []
    for name, node in report["nodes"].items():
        live_evictions += sum(1 for e in node["evictions"] if is_live(node, e["t"]))
        live_removals += sum(1 for e in node["endpoint_removals"] if is_live(node, e["t"]))
        covered = node.get("covered", True)
        for kill in node["kills"]:
            secs, detected = detection(node, kill, target if covered else "not_ready", end)
            (detections if covered else uncovered_not_ready).append(secs)
            if not detected and name not in undetected:
                undetected.append(name)
            evs = evictions_after(node, kill)
            if evs:
                eviction_times.append(round_s(max(e["t"] for e in evs) - kill["t"]))
            elif kill["pods"] != 0 and name not in not_evicted:
                not_evicted.append(name)
    live_not_ready = sorted(name for name, node in report["nodes"].items()
                            if any(is_live(node, iv[0]) for iv in node["not_ready"]))
    false_verdicts = None if report["baseline"] else sum(
        1 for node in report["nodes"].values() if node.get("covered", True)
        for t, state in node["states"] if state == target and is_live(node, t))
    whole_run = {name for name, node in report["nodes"].items() if not node["kills"]}
    dead_node_sets = {name: s for name, s in (report.get("statefulsets") or {}).items() if s.get("on_node_at_kill")}
    moves = [s["moved_s"] for s in dead_node_sets.values() if s.get("moved_s") is not None]
    return {
        "evictions_on_live_nodes": live_evictions,
        "endpoint_removals_on_live_nodes": live_removals,
        "killed_nodes_not_evicted": not_evicted,
        "max_detection_s": max(detections) if detections else None,
        "max_eviction_s": max(eviction_times) if eviction_times else None,
        "undetected": undetected,
        "max_not_ready_after_kill_s": max(uncovered_not_ready) if uncovered_not_ready else None,
        "pool_scope_cloud_bytes": _pool_scope(report, ("watch_bytes",)),
        "pool_scope_open_watches": _pool_scope(report, ("open_watches",)),
        "max_statefulset_move_s": max(moves) if moves else None,
        "statefulsets_not_moved": sorted(n for n, s in dead_node_sets.items() if s.get("moved_s") is None),
        "live_nodes_not_ready": len(live_not_ready),
        "false_verdicts_on_live_nodes": false_verdicts,
        **cost_summary(report.get("node_costs") or {}, whole_run=whole_run),
    }


def _pool_scope(report: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    cloud = report.get("pool_scope_cloud") or {}
    if not all(k in cloud for k in keys):
        return None
    return int(sum(cloud[k] for k in keys))


def _node_sort_key(name: str) -> tuple:
    pool, _, n = name.rpartition("-")
    return (pool, int(n)) if n.isdigit() else (name, -1)

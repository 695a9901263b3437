"""What each edge node spends during a run, measured the same way for every system: the node's
processes, the system's own agent pod alone, and the traffic the node sends (to its peers and to
the cloud), for ``Recording.node_costs`` and the summary's cost rows.

- **Node**: CPU (% of one core over the run) and RSS at the end of the kubelet simulator's whole
  process tree (simulator, workload and agent pods), or a real node's cgroup.
- **Agent**: the pod of the system's agent DaemonSet on that node (``AGENT_PODS``), from the
  simulator's per-pod record (``edgewatch_lab.testing.procstat``): CPU seconds its processes used
  between the start and the end (restarted containers included), RSS at the end. Stock Kubernetes
  has no agent.
- **Traffic**: what left the node's network namespace over the run, counted by nftables on its
  link (``NetLab.traffic``): packets, bytes and TCP connections opened, to peers (any other lab
  address) and to the cloud address, per minute of the run. The kubelet's own traffic to the
  cloud is in every system's figure; the stock run shows that floor.

The summary (:func:`cost_summary`) takes the median over nodes that ran the whole scenario (never
killed), so one dead node does not drag a figure down.

Limits: a real node's agent is not split out (its containers are containerd's); RSS counts shared
pages once per process (as ``ps``); a killed node's traffic counters are read after its death.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, Final

from edgewatch_lab.testing.netlab.traffic import TrafficCounters
from edgewatch_lab.testing.procstat import cpu_delta_s, process_table

if TYPE_CHECKING:
    from edgewatch_lab.playground.cluster import PlaygroundCluster

#: The agent pod of each system on a node, as a ``namespace/name`` prefix (its DaemonSet's pods).
AGENT_PODS: Final = {"edgewatch": "edgewatch/edgewatch-agent-", "superedge": "edge-system/edge-health-"}
#: Pods with an agent prefix that are not the agent (SuperEdge's webhook Deployment).
_NOT_AGENTS: Final = ("edge-system/edge-health-admission-",)
_MIB: Final = 1 << 20

PodUsage = Mapping[str, tuple[Mapping[int, float], int]]


def agent_pod(system: str, pods: Collection[str]) -> str | None:
    """The ``namespace/name`` of ``system``'s agent among ``pods`` (None: stock, or not running)."""
    prefix = AGENT_PODS.get(system)
    if prefix is None:
        return None
    found = sorted(p for p in pods if p.startswith(prefix) and not p.startswith(_NOT_AGENTS))
    return found[0] if found else None


def agent_cost(system: str, before: PodUsage, after: PodUsage, *, elapsed_s: float) -> dict[str, Any] | None:
    """``{"pod", "cpu_pct" (of one core over ``elapsed_s`` seconds), "rss_mib" (at the end)}`` of the
    agent pod running at the end (None when there is none). A pod is matched by name, so a pod
    replaced during the run is charged from its own start; its processes by pid
    (``procstat.cpu_delta_s``)."""
    pod = agent_pod(system, after)
    if pod is None:
        return None
    cpu_after, rss = after[pod]
    cpu_before = before[pod][0] if pod in before else {}
    used = cpu_delta_s(cpu_before, cpu_after)
    return {"pod": pod, "cpu_pct": round(100 * used / max(elapsed_s, 1e-9), 2), "rss_mib": round(rss / _MIB, 1)}


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def cost_summary(node_costs: Mapping[str, Mapping[str, Any]], *, whole_run: Collection[str]) -> dict[str, Any]:
    """The summary's cost figures: medians over the nodes in ``whole_run`` (never killed) of the
    agent's CPU % and RSS MiB and of the traffic per minute; None where nothing was measured.

    Keys: ``agent_cpu_pct``, ``agent_rss_mib``, ``peer_packets_per_min``, ``peer_connections_per_min``,
    ``peer_kib_per_min``, ``cloud_packets_per_min``, ``cloud_kib_per_min``."""
    costs = [c for n, c in node_costs.items() if n in whole_run]
    agents = [c["agent"] for c in costs if c.get("agent")]
    traffic = [c["traffic"] for c in costs if c.get("traffic")]

    def t(key: str, scale: float = 1.0) -> float | None:
        values = [x[key] / scale for x in traffic if key in x]
        med = _median(values)
        return None if med is None else round(med, 1)

    return {
        "agent_cpu_pct": _median([a["cpu_pct"] for a in agents]),
        "agent_rss_mib": _median([a["rss_mib"] for a in agents]),
        "peer_packets_per_min": t("peer_packets"),
        "peer_connections_per_min": t("peer_connections"),
        "peer_kib_per_min": t("peer_bytes", 1024.0),
        "cloud_packets_per_min": t("cloud_packets"),
        "cloud_kib_per_min": t("cloud_bytes", 1024.0),
    }


@dataclasses.dataclass
class CostMeter:
    """Takes the start snapshot of every edge node (:meth:`start`) and turns the end snapshot into
    ``Recording.node_costs`` entries (:meth:`finish`). Reads ``/proc`` and nftables counters; a
    failed read leaves that part out, never the run."""

    cluster: PlaygroundCluster
    nodes: list[str]
    system: str
    _usage: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    _pods: dict[str, Any] = dataclasses.field(default_factory=dict)
    _traffic: dict[str, TrafficCounters] = dataclasses.field(default_factory=dict)

    def _read_traffic(self, name: str) -> TrafficCounters | None:
        lab, node = self.cluster.lab, self.cluster.nodes[name]
        if lab is None or node.host is None:
            return None
        with contextlib.suppress(Exception):
            return lab.traffic(node.host.name)
        return None

    def start(self) -> None:
        """Snapshot each node's usage, its pods' CPU and its traffic counters (one ``/proc`` scan)."""
        table = process_table()
        for name in self.nodes:
            self._usage[name] = self.cluster.node_usage(name, table)
            self._pods[name] = self.cluster.pod_usage(name, table)
            if (counters := self._read_traffic(name)) is not None:
                self._traffic[name] = counters

    def finish(self, *, elapsed_s: float) -> dict[str, dict[str, Any]]:
        """``{node: {"kind", "cpu_pct", "rss_mib", "agent"?, "traffic"?}}`` over ``elapsed_s`` seconds."""
        out: dict[str, dict[str, Any]] = {}
        table = process_table()
        for name, before in self._usage.items():
            now = self.cluster.node_usage(name, table)
            node = self.cluster.nodes[name]
            cost: dict[str, Any] = {
                "kind": "real" if node.is_real else "simulated",
                "cpu_pct": round(100 * max(0.0, now["cpu_s"] - before["cpu_s"]) / max(elapsed_s, 1e-9), 2),
                "rss_mib": round(now["rss_bytes"] / _MIB, 1),
            }
            agent = agent_cost(self.system, self._pods.get(name, {}), self.cluster.pod_usage(name, table),
                               elapsed_s=elapsed_s)
            if agent is not None:
                cost["agent"] = agent
            end = self._read_traffic(name)
            if end is not None and name in self._traffic:
                with contextlib.suppress(ValueError):  # counters went down: the table was recreated
                    rates = end.delta(self._traffic[name]).per_minute(max(elapsed_s, 1e-9))
                    cost["traffic"] = {k: round(v, 1) for k, v in rates.items()}
            out[name] = cost
        return out

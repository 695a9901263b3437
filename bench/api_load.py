"""The cloud API load edgewatch adds, per node per minute, on the real control plane: one pool of N
edge nodes with edgewatch installed as shipped, measured in steady state (nothing failing).

From the apiserver's audit log (every request, by user) it counts edgewatch's requests by verb and
resource, per covered node per minute, for the agents and for the controller; from the apiserver's
``apiserver_watch_events_total`` it counts the watch events the apiserver sent, by kind (all
watchers, edgewatch's and the control plane's own), per node per minute. The kubelet's own Lease
renewal (one update per 10 s per node, 6 per minute) is the yardstick.

Usage: .venv/bin/python bench/api_load.py 5 10 [--window 120]   (root; one JSON line per N)

Limits: a pool of N on this 2-core machine (N <= 15); the figures per node are what the protocol
does at that size, not a projection to 1,000 nodes (bench/api_scale.py measures that with kwok).
"""

from __future__ import annotations

import argparse
import json
import time

from _measure import audit_requests, watch_events
from edgewatch_lab.playground.cluster import PlaygroundCluster
from edgewatch_lab.playground.scenario import parse_scenario
from edgewatch_lab.testing.binaries import ensure_binaries

AGENT = "system:serviceaccount:edgewatch:edgewatch-agent"
CONTROLLER = "system:serviceaccount:edgewatch:edgewatch-controller"


def _caller(event: dict) -> str | None:  # type: ignore[type-arg]
    return {AGENT: "agent", CONTROLLER: "controller"}.get(event.get("user", {}).get("username", ""))


def measure(n: int, window_s: float) -> dict[str, object]:
    scenario = parse_scenario({"name": f"api-load-{n}", "topology": {"pools": [{"name": "a", "nodes": n}]},
                               "steps": [{"at": 1, "action": "end"}]})
    with PlaygroundCluster(scenario=scenario, binaries=ensure_binaries()) as cluster:
        assert cluster.cp is not None and cluster.cp.audit_log is not None
        time.sleep(60)  # settle: agents registered, keys published, first evidence written
        _, offset = audit_requests(cluster.cp.audit_log, 0, caller=_caller)
        events0 = watch_events(cluster.cp.kubectl("get", "--raw", "/metrics"))
        time.sleep(window_s)
        counts, _ = audit_requests(cluster.cp.audit_log, offset, caller=_caller)
        events1 = watch_events(cluster.cp.kubectl("get", "--raw", "/metrics"))
    per = 60.0 / window_s / n
    writes = {f"{who} {verb} {res}": round(c * per, 2) for (who, verb, res), c in sorted(counts.items())
              if verb in ("create", "update", "patch", "delete")}
    reads = {f"{who} {verb} {res}": round(c * per, 2) for (who, verb, res), c in sorted(counts.items())
             if verb not in ("create", "update", "patch", "delete")}
    events = {kind: round((events1[kind] - events0.get(kind, 0)) * per, 1) for kind in sorted(events1)
              if events1[kind] - events0.get(kind, 0) > 0}
    return {"nodes": n, "window_s": window_s,
            "edgewatch_writes_per_node_per_min": writes,
            "edgewatch_writes_total_per_node_per_min": round(sum(writes.values()), 2),
            "edgewatch_other_requests_per_node_per_min": reads,
            "watch_events_sent_per_node_per_min_by_kind": events,
            "kubelet_lease_updates_per_node_per_min": 6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", type=int, nargs="+")
    parser.add_argument("--window", type=float, default=120.0, help="measurement window, seconds")
    args = parser.parse_args()
    for n in args.sizes:
        print(json.dumps(measure(n, args.window)), flush=True)


if __name__ == "__main__":
    main()

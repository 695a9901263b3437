"""A scenario's checks across its parts (what pydantic's per-field validation cannot see): references
to nodes and pools (steps, StatefulSets, expectations), the one ``end`` step, duplicates, kill/revive
sequences, StatefulSets (unique names, on a worker node) and expectations that
need a coordinator, a kube-proxy, CoreDNS, a real node or a covered node (alert checks). The rules are listed in
:mod:`edgewatch_lab.playground.scenario`'s docstring ("Validation").

Limits: pure; called by ``Scenario``'s validator, which raises the problems as one error.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from edgewatch_lab.playground.expectation import COORDINATOR_KEYS, UNINSTALL_KEYS

if TYPE_CHECKING:
    from edgewatch_lab.playground.scenario import Scenario

__all__ = ["compact_node_names", "cross_check"]


def cross_check(scenario: Scenario) -> tuple[list[str], list[int]]:
    """``(problems, order)``: every problem found (empty: the scenario is consistent), each naming
    the step or expectation index as written and the field; and the steps' indexes in time order
    (stable: file order at equal times)."""
    problems: list[str] = []
    pools = {p.name: p for p in scenario.topology.pools}
    nodes = set(scenario.all_node_names())
    all_nodes = compact_node_names(scenario.all_node_names())
    fixed = scenario.cloud_node_names()[0]

    def where(i: int, step: Any) -> str:
        return f"steps[{i}] ({step.action})"

    # references
    for i, s in enumerate(scenario.steps):
        pool = s.referenced_pool()
        if pool is not None and pool not in pools:
            problems.append(f"{where(i, s)}.pool: no pool {pool!r} in the topology "
                            f"(pools: {', '.join(pools)})")
            continue
        field = {"split": "sides", "kill": "node", "revive": "node", "skew": "node"}.get(s.action, "nodes")
        unknown = [n for n in s.referenced_nodes() if n not in nodes]
        if unknown:
            problems.append(f"{where(i, s)}.{field}: no node {', '.join(map(repr, unknown))} in the "
                            f"topology (nodes: {all_nodes})")
            continue
        if fixed in s.referenced_nodes():
            problems.append(f"{where(i, s)}.{field}: {fixed} is the control-plane node (this machine); "
                            "it cannot be faulted")
            continue
        if s.action == "skew" and scenario.is_real(s.node):
            problems.append(f"{where(i, s)}.node: {s.node} is a real node; its kubelet and containers "
                            "read the machine's clock, which cannot be skewed per node")
        if s.action == "split":
            outside = [n for n in s.referenced_nodes() if n not in pools[s.pool].node_names()]
            if outside:
                problems.append(f"{where(i, s)}.sides: {', '.join(map(repr, outside))} not in pool "
                                f"{s.pool!r}")
        if s.action in ("kill-leader", "kill-coordinator", "revive-coordinator"):
            if not pools[s.pool].coordinator:
                problems.append(f"{where(i, s)}.pool: pool {s.pool!r} has no coordinator "
                                f"(set coordinator: true in the topology to use {s.action})")

    # end
    ends = [i for i, s in enumerate(scenario.steps) if s.action == "end"]
    if len(ends) != 1:
        problems.append(f"steps: need exactly one 'end' step, found {len(ends)}"
                        + (f" ({', '.join(f'steps[{i}]' for i in ends)})" if ends else ""))
    else:
        end_at = scenario.steps[ends[0]].at
        late = [i for i, s in enumerate(scenario.steps) if i != ends[0] and s.at >= end_at]
        for i in late:
            problems.append(f"{where(i, scenario.steps[i])}.at: at {scenario.steps[i].at:g} s is not before "
                            f"the end step (steps[{ends[0]}] at {end_at:g} s); 'end' must be last")

    # duplicates, and kill/revive sequences, in time order (stable: file order at equal times)
    order = sorted(range(len(scenario.steps)), key=lambda i: scenario.steps[i].at)
    seen: dict[tuple, int] = {}
    dead_nodes: dict[str, int] = {}
    dead_coords: dict[str, int] = {}
    for i in order:
        s = scenario.steps[i]
        key = (s.at, s.action, s.target_key())
        if key in seen:
            problems.append(f"{where(i, s)}: duplicate of steps[{seen[key]}] (same action on the same "
                            f"target at {s.at:g} s)")
        else:
            seen[key] = i
        if problems:
            continue  # references may be broken; the sequence checks below assume they are not
        if s.action == "kill":
            if s.node in dead_nodes:
                problems.append(f"{where(i, s)}.node: {s.node} is already dead "
                                f"(killed by steps[{dead_nodes[s.node]}]); revive it first")
            dead_nodes[s.node] = i
        elif s.action == "revive":
            if s.node not in dead_nodes:
                problems.append(f"{where(i, s)}.node: {s.node} is not dead at {s.at:g} s "
                                "(revive only a killed node)")
            dead_nodes.pop(s.node, None)
        elif s.action == "kill-coordinator":
            if s.pool in dead_coords:
                problems.append(f"{where(i, s)}.pool: the coordinator of {s.pool} is already down "
                                f"(steps[{dead_coords[s.pool]}])")
            dead_coords[s.pool] = i
        elif s.action == "revive-coordinator":
            if s.pool not in dead_coords:
                problems.append(f"{where(i, s)}.pool: the coordinator of {s.pool} is not down at "
                                f"{s.at:g} s (revive-coordinator needs an earlier kill-coordinator)")
            dead_coords.pop(s.pool, None)

    # uninstall: at most one; nothing of edgewatch to roll or restart after it
    uninstalls = [i for i in order if scenario.steps[i].action == "uninstall"]
    for i in uninstalls[1:]:
        problems.append(f"{where(i, scenario.steps[i])}: edgewatch is already uninstalled by steps[{uninstalls[0]}]")
    if uninstalls:
        gone_at = scenario.steps[uninstalls[0]].at
        for i in order:
            s = scenario.steps[i]
            if s.action in ("rollout", "restart-controller", "kill-controller-leader", "scale-controller") \
                    and s.at >= gone_at:
                problems.append(f"{where(i, s)}.at: edgewatch is uninstalled at {gone_at:g} s "
                                f"(steps[{uninstalls[0]}]); nothing is left to {s.action.replace('-', ' ')}")

    # StatefulSets: unique names, on a node that takes workload pods
    workers = scenario.worker_node_names()
    names_seen: dict[str, int] = {}
    for i, sts in enumerate(scenario.statefulsets):
        if sts.name in names_seen:
            problems.append(f"statefulsets[{i}].name: {sts.name!r} is declared twice "
                            f"(statefulsets[{names_seen[sts.name]}])")
        names_seen.setdefault(sts.name, i)
        if sts.node not in nodes:
            problems.append(f"statefulsets[{i}].node: no node {sts.node!r} in the topology (nodes: {all_nodes})")
        elif sts.node not in workers:
            problems.append(f"statefulsets[{i}].node: {sts.node} is the control-plane node (tainted; it takes "
                            "no workload pods)")

    # expectations
    for i, e in enumerate(scenario.expect):
        if e.statefulset is not None and e.statefulset not in names_seen:
            problems.append(f"expect[{i}].statefulset: no StatefulSet {e.statefulset!r} in the scenario's "
                            f"statefulsets ({', '.join(names_seen) or 'none declared'})")
        if e.pool is not None and e.pool not in pools:
            problems.append(f"expect[{i}].pool: no pool {e.pool!r} in the topology "
                            f"(pools: {', '.join(pools)})")
        unknown = [n for n in (e.nodes or []) if n not in nodes]
        if unknown:
            problems.append(f"expect[{i}].nodes: no node {', '.join(map(repr, unknown))} in the "
                            f"topology (nodes: {all_nodes})")
        elif e.kube_proxy_follows_within_s is not None or e.kube_proxy_misses is not None:
            proxied = {n for p in scenario.topology.pools for n in p.kube_proxy}
            without = [n for n in e.target_nodes(scenario) if n not in proxied] if e.pool in pools or e.nodes else []
            if without:
                problems.append(f"expect[{i}]: kube_proxy checks on {', '.join(without)}, which run no "
                                "kube-proxy (list them in the pool's kube_proxy)")
        if not unknown and (e.coredns_follows_within_s is not None or e.coredns_misses is not None):
            resolvers = {n for p in scenario.topology.pools for n in p.coredns}
            without = [n for n in e.target_nodes(scenario) if n not in resolvers] if e.pool in pools or e.nodes else []
            if without:
                problems.append(f"expect[{i}]: coredns checks on {', '.join(without)}, which run no "
                                "CoreDNS (list them in the pool's coredns)")
        uninstall_keys = [k for k in UNINSTALL_KEYS if getattr(e, k) is not None]
        if uninstall_keys and not uninstalls:
            problems.append(f"expect[{i}]: {', '.join(uninstall_keys)} needs an uninstall step")
        coordinator_keys = [k for k in COORDINATOR_KEYS if getattr(e, k) is not None]
        if coordinator_keys and e.pool in pools and not pools[e.pool].coordinator:
            problems.append(f"expect[{i}]: {', '.join(coordinator_keys)} on pool {e.pool!r}, which has no "
                            "coordinator (set coordinator: true)")
        elif (e.coordinator_moved_within_s is not None and e.pool in pools
              and scenario.topology.coordinators != "pods"):
            problems.append(f"expect[{i}]: coordinator_moved_within_s needs coordinators: pods in the "
                            "topology (a lab process does not move)")
        if not unknown and (e.alert_within_s is not None or e.no_alerts is not None) and (e.pool in pools or e.nodes):
            uncovered = [n for n in e.target_nodes(scenario) if not scenario.is_covered(n)]
            if uncovered:
                problems.append(f"expect[{i}]: alert checks on {', '.join(uncovered)}, which edgewatch does not "
                                "cover (no agent, no alert names them)")
        if not unknown and e.containers_stopped is not None and (e.pool in pools or e.nodes):
            simulated = [n for n in e.target_nodes(scenario) if not scenario.is_real(n)]
            if simulated:
                problems.append(f"expect[{i}]: containers_stopped on {', '.join(simulated)}, which are "
                                "simulated (only real nodes run containers; see real_nodes)")

    return problems, order




def compact_node_names(names: list[str]) -> str:
    """``a-1..a-4, b-2`` for a list of node names (runs of consecutive numbers in one pool)."""
    out: list[str] = []
    run: list[tuple[str, int]] = []

    def flush() -> None:
        if not run:
            return
        p, first = run[0]
        last = run[-1][1]
        if len(run) >= 3:
            out.append(f"{p}-{first}..{p}-{last}")
        else:
            out.extend(f"{p}-{n}" for _, n in run)
        run.clear()

    for name in names:
        m = re.match(r"^(.*)-(\d+)$", name)
        if m is None:
            flush()
            out.append(name)
            continue
        p, n = m.group(1), int(m.group(2))
        if run and (run[-1][0] != p or run[-1][1] + 1 != n):
            flush()
        run.append((p, n))
    flush()
    return ", ".join(out)


"""How a playground report is judged: each ``expect`` entry of the scenario, check by check.

:func:`check_expectations` gives one :class:`ExpectationResult` per check key of each entry that
applies to the run (edgewatch or baseline); :func:`expectations_table` shows them. The definitions
(down intervals, live nodes, detection) are those of ``edgewatch_lab.playground.report``.

Limits: pure data in, data out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rich.table import Table

from edgewatch_lab.playground.proxycheck import follow_lags
from edgewatch_lab.playground.uninstallcheck import check_clean, check_evicted_after
from edgewatch_lab.playground.report import detection, detection_target, evictions_after, report_end, round_s
from edgewatch.names import OUT_OF_SERVICE_TAINT_KEY
from edgewatch_lab.playground.expectation import (
    ALERT_KEYS,
    COORDINATOR_KEYS,
    NODE_ALERTS,
    NODE_FAILED_ALERT,
    STATEFULSET_KEYS,
)
from edgewatch_lab.playground.expectation import Comparison
from edgewatch_lab.playground.scenario import Expectation, Scenario, compact_node_names

__all__ = ["ExpectationResult", "check_expectations", "expectations_table"]


@dataclass(frozen=True)
class ExpectationResult:
    """One check of one ``expect`` entry: what was expected, whether it held, and what was seen."""

    description: str
    passed: bool
    detail: str


def _fmt_s(x: float) -> str:
    return f"{x:g}"


def _renewal_note(kill: dict[str, Any]) -> str:
    """Where a kill fell in the node's heartbeat: a dead node is judged one grace after the last own
    renewal the controller saw (``edgewatch.controller.views.lease_grace_s``), so a detection time
    reads against that phase, not the kill alone."""
    last = kill.get("last_renewal")
    if last is None:
        return ""
    return f" (its last own Lease renewal seen {_fmt_s(round(kill['t'] - last, 3))} s before the kill)"


def check_expectations(scenario: Scenario, report: dict[str, Any]) -> list[ExpectationResult]:
    """Judge ``report`` against the scenario's expectations for its kind of run (``baseline`` flag);
    none for a SuperEdge run (``system: superedge``: measured side by side, not judged).

    One result per check key of each applicable entry, in file order.
    """
    if report["scenario"] != scenario.name:
        raise ValueError(f"report is of scenario {report['scenario']!r}, not {scenario.name!r}")
    if report.get("system") == "superedge":
        return []  # measured, not judged: the expectations are edgewatch's and stock Kubernetes' own
    results: list[ExpectationResult] = []
    end = report_end(report, scenario.end_time)
    for exp in scenario.expectations_for(baseline=bool(report["baseline"])):
        for key in exp.checks():
            results.append(_check_one(scenario, report, exp, key, end))
    return results


def _check_one(scenario: Scenario, report: dict[str, Any], exp: Expectation, key: str,
               end: float) -> ExpectationResult:
    targets = exp.target_nodes(scenario)
    label = f"pool {exp.pool}" if exp.pool is not None else compact_node_names(targets)
    nodes = report["nodes"]
    if key in COORDINATOR_KEYS:
        return _check_coordinator(report, exp, key, end)
    if key in STATEFULSET_KEYS:
        return _check_statefulset(report, exp, key)
    if exp.killed is not None:
        targets = [n for n in targets if bool(nodes.get(n, {}).get("kills")) == exp.killed]
        which = "killed" if exp.killed else "never killed"
        if not targets:
            return ExpectationResult(f"{label} ({which}): {key.replace('_', ' ')}", False,
                                     f"no node of {label} was {which} in this run")
        label = f"{compact_node_names(targets)} ({which} of {label})"
    missing = [n for n in targets if n not in nodes]
    value = getattr(exp, key)

    if key in ("evictions", "endpoint_removals"):
        comp = exp.comparison(key)
        words = key.replace("_", " ")
        desc = f"{label}: {words} {comp}"
        if missing:
            return ExpectationResult(desc, False, f"no record of {compact_node_names(missing)} in the report")
        counts = {n: len(nodes[n][key]) for n in targets}
        total = sum(counts.values())
        seen = f"saw {total}"
        if total:
            seen += ": " + ", ".join(f"{n} ({c})" for n, c in counts.items() if c)
        return ExpectationResult(desc, comp(total), f"expected {words} {comp} on {label}, {seen}")

    if key == "agents_updated":
        return _check_updated(report, exp, targets, label)

    if key == "clean_at_end":
        return ExpectationResult(*check_clean(report, targets, label, bool(value)))
    if key == "evicted_after_uninstall_within_s":
        return ExpectationResult(*check_evicted_after(report, targets, label, float(value)))

    if key == "never_not_ready":
        desc = f"{label}: {'never NotReady' if value else 'NotReady at some point'}"
        if missing:
            return ExpectationResult(desc, False, f"no record of {compact_node_names(missing)} in the report")
        went = []
        for n in targets:
            if nodes[n]["not_ready"]:
                start, stop = nodes[n]["not_ready"][0]
                how = f"until {_fmt_s(stop)} s" if stop is not None else "until the end"
                went.append(f"{n} from {_fmt_s(start)} s ({how})"
                            + (f" +{len(nodes[n]['not_ready']) - 1} more" if len(nodes[n]["not_ready"]) > 1 else ""))
        observed = not went
        if value:
            detail = (f"expected {label} never NotReady, "
                      + ("none was" if observed else "saw NotReady: " + "; ".join(went)))
        else:
            detail = (f"expected {label} NotReady at some point, "
                      + ("none was" if observed else "saw NotReady: " + "; ".join(went)))
        return ExpectationResult(desc, observed == value, detail)

    if key in ("evicted_within_s", "detected_within_s"):
        limit = float(value)
        target_state = detection_target(report, nodes[targets[0]] if targets and targets[0] in nodes else None)
        if key == "evicted_within_s":
            desc = f"{label}: pods evicted within {_fmt_s(limit)} s of a kill"
        else:
            desc = f"{label}: {target_state} within {_fmt_s(limit)} s of a kill"
        if missing:
            return ExpectationResult(desc, False, f"no record of {compact_node_names(missing)} in the report")
        ok = True
        seen: list[str] = []
        for n in targets:
            node = nodes[n]
            if not node["kills"]:
                ok = False
                seen.append(f"{n} never killed")
                continue
            for kill in node["kills"]:
                k = kill["t"]
                if key == "detected_within_s":
                    secs, detected = detection(node, kill, target_state, end)
                    if not detected:
                        ok = False
                        seen.append(f"{n} never {target_state} after the kill at {_fmt_s(k)} s "
                                    f"(waited {_fmt_s(secs)} s)")
                    else:
                        ok = ok and secs <= limit
                        seen.append(f"{n} {target_state} {_fmt_s(secs)} s after the kill at {_fmt_s(k)} s"
                                    + _renewal_note(kill))
                    continue
                if kill["pods"] == 0:
                    ok = False
                    seen.append(f"{n} had no pods at the kill at {_fmt_s(k)} s (nothing to evict)")
                    continue
                evs = evictions_after(node, kill)
                if not evs:
                    ok = False
                    seen.append(f"{n} no eviction after the kill at {_fmt_s(k)} s")
                    continue
                secs = round_s(max(e["t"] for e in evs) - k)
                pods = len({e["pod"] for e in evs})
                note = ""
                if kill["pods"] is not None and pods < kill["pods"]:
                    ok = False
                    note = f", only {pods} of its {kill['pods']} pods"
                ok = ok and secs <= limit
                seen.append(f"{n} last eviction {_fmt_s(secs)} s after the kill at {_fmt_s(k)} s{note}")
        what = "pods evicted" if key == "evicted_within_s" else target_state
        return ExpectationResult(desc, ok, f"expected {label} {what} within {_fmt_s(limit)} s of each kill, "
                                           f"saw {'; '.join(seen)}")

    if key == "untouched":
        desc = f"{label}: {'never touched' if value else 'touched'} by edgewatch"
        if missing:
            return ExpectationResult(desc, False, f"no record of {compact_node_names(missing)} in the report")
        marks = {n: nodes[n].get("touched", []) for n in targets}
        seen_m = "; ".join(f"{n}: " + ", ".join(f"{w} at {_fmt_s(t)} s" for t, w in m[:3]) for n, m in marks.items() if m)
        observed = not seen_m
        return ExpectationResult(desc, observed == value,
                                 f"expected {label} {'untouched' if value else 'touched'}, "
                                 + ("saw no mark" if observed else f"saw {seen_m}"))

    if key == "never_tainted":
        desc = f"{label}: {'never' if value else 'at some point'} tainted by edgewatch"
        if missing:
            return ExpectationResult(desc, False, f"no record of {compact_node_names(missing)} in the report")
        added = [f"{n}: {k} at {_fmt_s(t)} s" for n in targets for t, k, c in nodes[n]["taints"]
                 if c == "added" and k.startswith("edgewatch.io/")]
        return ExpectationResult(desc, (not added) == value,
                                 f"expected {label} {'never' if value else 'at some point'} tainted by edgewatch, "
                                 + ("saw no taint" if not added else "saw " + "; ".join(added[:4])))

    if key == "out_of_service_taint":
        desc = f"{label}: {'got' if value else 'never got'} the out-of-service taint"
        if missing:
            return ExpectationResult(desc, False, f"no record of {compact_node_names(missing)} in the report")
        got = {n: next((t for t, k, c in nodes[n]["taints"]
                        if c == "added" and k.split(":", 1)[0] == OUT_OF_SERVICE_TAINT_KEY), None) for n in targets}
        ok = all((t is not None) == value for t in got.values())
        seen_t = "; ".join(f"{n} at {_fmt_s(t)} s" for n, t in got.items() if t is not None)
        return ExpectationResult(desc, ok, f"expected {label} {'tainted' if value else 'never tainted'} "
                                           f"{OUT_OF_SERVICE_TAINT_KEY}, saw "
                                           + (f"it on {seen_t}" if seen_t else "it on none"))

    if key in ("kube_proxy_follows_within_s", "kube_proxy_misses", "coredns_follows_within_s", "coredns_misses"):
        return _check_follows(report, exp, key, targets, label, end)

    if key in ("lease_carried", "containers_stopped", "replaced_within_s"):
        checker = {"lease_carried": _check_lease_carried, "containers_stopped": _check_containers_stopped,
                   "replaced_within_s": _check_replaced}[key]
        desc = {"lease_carried": f"{label}: Lease {'carried, then its own again' if value else 'never carried'}",
                "containers_stopped": f"{label}: containers {'stopped' if value else 'kept running'} at each kill",
                "replaced_within_s": f"{label}: pods replaced within {_fmt_s(float(value))} s of a kill"}[key]
        if missing:
            return ExpectationResult(desc, False, f"no record of {compact_node_names(missing)} in the report")
        ok, seen = True, []
        for n in targets:
            n_ok, n_seen = checker(report, n, value, end)
            ok = ok and n_ok
            seen.append(n_seen)
        return ExpectationResult(desc, ok, f"saw {'; '.join(seen)}")

    if key in ALERT_KEYS:
        return _check_alerts(report, key, value, targets, label, missing)

    if key == "state_at_end":
        desc = f"{label}: state {value} at the end"
        if missing:
            return ExpectationResult(desc, False, f"no record of {compact_node_names(missing)} in the report")
        finals = {}
        for n in targets:
            states = [s for t, s in nodes[n]["states"] if t <= end]
            finals[n] = states[-1] if states else None
        ok = all(s == value for s in finals.values())
        seen_s = ", ".join(f"{n} {s if s is not None else 'no state recorded'}" for n, s in finals.items())
        return ExpectationResult(desc, ok, f"expected {label} {value} at the end, saw {seen_s}")

    raise AssertionError(f"unhandled expectation key {key!r}")  # pragma: no cover


def _check_follows(report: dict[str, Any], exp: Expectation, key: str, targets: list[str], label: str,
                   end: float) -> ExpectationResult:
    """kube-proxy's backends (``ip:port``) or CoreDNS's answers (``ip``: the cloud's endpoints
    without their ports) against the cloud's endpoints after each ``scale`` step."""
    value = getattr(exp, key)
    dns = key.startswith("coredns")
    who, field, did = ("CoreDNS", "coredns", "answered") if dns else ("kube-proxy", "kube_proxy", "programmed")
    follows = key.endswith("_follows_within_s")
    desc = (f"{label}: {who} follows each scale within {_fmt_s(value)} s" if follows
            else f"{label}: {who} {'misses' if value else 'never misses'} a scale")
    cloud = report.get("service_endpoints", [])
    if dns:
        cloud = [[t, sorted({m.rsplit(":", 1)[0] for m in members})] for t, members in cloud]
    faults = sorted(report["faults"], key=lambda f: float(f["t"]))
    scales = [float(f["t"]) for f in faults if f.get("action") == "scale"]
    if not scales:
        return ExpectationResult(desc, False, "the scenario has no scale step")
    ends = [next((float(f["t"]) for f in faults if float(f["t"]) > t and f.get("action") != "scale"), end)
            for t in scales]
    ends = [min(e, next((s for s in scales if s > t), e)) for t, e in zip(scales, ends)]
    seen, ok_all, missed = [], True, False
    for n in targets:
        lags = follow_lags(cloud=cloud, proxy=report["nodes"].get(n, {}).get(field, []), scale_times=scales,
                           next_times=ends)
        for lag in lags:
            if lag["lag_s"] is None:
                ok_all = False
                seen.append(f"{n}: the cloud did not settle after the scale at {_fmt_s(lag['t'])} s")
            elif math.isinf(lag["lag_s"]):
                missed = True
                ok_all = False
                seen.append(f"{n}: never {did} the {lag['target']} endpoints after the scale at "
                            f"{_fmt_s(lag['t'])} s")
            else:
                ok_all = ok_all and (not follows or lag["lag_s"] <= value)
                seen.append(f"{n}: {lag['target']} endpoints {_fmt_s(lag['lag_s'])} s after the cloud "
                            f"(scale at {_fmt_s(lag['t'])} s)")
    ok = ok_all if follows else missed == value
    return ExpectationResult(desc, ok, "; ".join(seen[:6]))




def _check_updated(report: dict[str, Any], exp: Expectation, targets: list[str], label: str) -> ExpectationResult:
    """``agents_updated``: per rollout, the count of targets that ran its version (Ready)."""
    specs = exp.agents_updated if isinstance(exp.agents_updated, list) else None
    rollouts = report.get("rollouts") or []
    comps = [Comparison.parse(x) for x in specs] if specs is not None else [Comparison.parse(exp.agents_updated)] * len(rollouts)
    desc = (f"{label}: agents on the rollout's version " + ", ".join(map(str, comps)) + " (per rollout)"
            if specs is not None else f"{label}: agents on the rollout's version {comps[0] if comps else exp.agents_updated} in every rollout")
    if not rollouts:
        return ExpectationResult(desc, False, "no rollout was recorded in this run")
    if len(comps) != len(rollouts):
        return ExpectationResult(desc, False, f"{len(comps)} counts for {len(rollouts)} rollouts")
    seen, ok = [], True
    for i, (r, comp) in enumerate(zip(rollouts, comps)):
        done = [n for n in targets if (r.get("nodes", {}).get(n) or {}).get("updated_s") is not None]
        ok = ok and comp(len(done))
        seen.append(f"rollout {i + 1} at {_fmt_s(r.get('started_at', 0))} s: {len(done)}"
                    + (f" ({compact_node_names(done)})" if done else ""))
    return ExpectationResult(desc, ok, f"expected {label} on the rollout's version, saw " + "; ".join(seen))


def _check_coordinator(report: dict[str, Any], exp: Expectation, key: str, end: float) -> ExpectationResult:
    """The pool's coordinator after each ``kill-coordinator``: its ``recoveries`` in the report."""
    value = float(getattr(exp, key))
    field, what = {"coordinator_moved_within_s": ("ready_s", "coordinator pod Ready on another node"),
                   "led_within_s": ("led_s", "a live leader"),
                   "cache_from_coordinator_within_s": ("cache_s", "every live node's cache from the coordinator")}[key]
    desc = f"pool {exp.pool}: {what} within {_fmt_s(value)} s of a coordinator kill"
    recoveries = report.get("coordinators", {}).get(exp.pool, {}).get("recoveries", [])
    if not recoveries:
        return ExpectationResult(desc, False, f"no kill-coordinator of pool {exp.pool} was recorded")
    ok, seen = True, []
    for rec in recoveries:
        secs = rec.get(field)
        where = f" ({rec['node']} killed" + (f", moved to {rec['moved_to']})" if rec.get("moved_to") else ")") \
            if rec.get("node") else ""
        if secs is None:
            ok = False
            seen.append(f"never after the kill at {_fmt_s(rec['t'])} s{where}")
        else:
            ok = ok and secs <= value
            seen.append(f"{_fmt_s(secs)} s after the kill at {_fmt_s(rec['t'])} s{where}")
    return ExpectationResult(desc, ok, f"saw {'; '.join(seen)}")


def _check_statefulset(report: dict[str, Any], exp: Expectation, key: str) -> ExpectationResult:
    """The StatefulSet's pod: the report's ``statefulsets`` entry (``statefulsets.statefulset_outcome``)."""
    name, value = exp.statefulset, getattr(exp, key)
    desc = {"moved_within_s": f"statefulset {name}: Ready on another node within {_fmt_s(float(value))} s "
                              "of its node's kill",
            "moved": f"statefulset {name}: {'moved' if value else 'never moved'} to another node",
            "stays": f"statefulset {name}: its pod " + ("stays (never deleted)" if value
                                                          else "does not stay (deleted or replaced)")}[key]
    sts = (report.get("statefulsets") or {}).get(name)
    if sts is None:
        return ExpectationResult(desc, False, f"no record of StatefulSet {name} in the report")
    start = sts.get("start")
    if start is None:
        return ExpectationResult(desc, False, f"no pod of StatefulSet {name} was seen")
    seen = f"{start['pod']} on {start['node'] or 'no node'} at the start"
    if sts.get("killed_at") is not None:
        seen += f", {start['node']} killed at {_fmt_s(sts['killed_at'])} s"
        if not sts.get("on_node_at_kill"):
            seen += " (the pod had left it before)"
    if sts.get("deleted_at") is None:
        seen += "; never deleted"
    elif sts.get("gone_at") is not None and sts["gone_at"] != sts["deleted_at"]:
        seen += f"; deleted at {_fmt_s(sts['deleted_at'])} s, gone at {_fmt_s(sts['gone_at'])} s"
    else:
        seen += f"; deleted at {_fmt_s(sts['deleted_at'])} s"
    if sts.get("moved_at") is not None:
        since = "the kill" if sts.get("on_node_at_kill") else "the start"
        seen += f"; Ready on {sts['moved_to']} at {_fmt_s(sts['moved_at'])} s ({_fmt_s(sts['moved_s'])} s after {since})"
    else:
        seen += "; never Ready on another node"
    at_end = sts.get("at_end") or []
    seen += "; at the end: " + (", ".join(
        f"{p['pod']} on {p['node'] or 'no node'}"
        + (" (the start pod)" if p["uid"] == start["uid"] else "")
        + (" Terminating" if p["deleting"] else (" Ready" if p["ready"] else " not Ready"))
        for p in at_end) or "no pod")
    if key == "moved_within_s":
        ok = sts.get("moved_s") is not None and float(sts["moved_s"]) <= float(value)
    elif key == "moved":
        ok = (sts.get("moved_at") is not None) == value
    else:
        ok = bool(sts.get("stays")) == value
    return ExpectationResult(desc, ok, f"saw {seen}")


def expectations_table(results: list[ExpectationResult], title: str | None = None) -> Table:
    """A ``rich.table.Table`` of expectation results (PASS / FAIL, what, what was seen)."""
    table = Table(title=title, header_style="bold")
    table.add_column("")
    table.add_column("expectation")
    table.add_column("seen")
    for r in results:
        table.add_row("[green]PASS[/]" if r.passed else "[red]FAIL[/]", r.description, r.detail)
    return table


def _check_lease_carried(report: dict[str, Any], name: str, value: bool, end: float) -> tuple[bool, str]:
    """The node's Lease states (``own``, ``carried``, ``mark-copied``, `` holder=...``): carried at
    some point, and ``own`` at the end (the node's kubelet renewed it and the mark is gone)."""
    states = [(t, w) for t, w in report["nodes"][name].get("lease", []) if t <= end]
    carried = [t for t, w in states if w.startswith("carried")]
    last = states[-1][1] if states else "no Lease seen"
    path = " -> ".join(f"{w} at {_fmt_s(t)} s" for t, w in states[-6:])
    if not value:
        return not carried, f"{name}: {path or 'no Lease seen'}"
    return bool(carried) and last == "own", f"{name}: {path or 'no Lease seen'}"


def _check_containers_stopped(report: dict[str, Any], name: str, value: bool, end: float) -> tuple[bool, str]:
    kills = report["nodes"][name]["kills"]
    if not kills:
        return False, f"{name} never killed"
    ok, seen = True, []
    for kill in kills:
        counts = kill.get("containers")
        if counts is None:
            ok = False
            seen.append(f"no container count at the kill at {_fmt_s(kill['t'])} s")
            continue
        before, after = counts
        stopped = before > 0 and after == 0
        ok = ok and stopped == value
        seen.append(f"{before} container process(es) before the kill at {_fmt_s(kill['t'])} s, {after} after")
    return ok, f"{name}: " + "; ".join(seen)


def _check_replaced(report: dict[str, Any], name: str, value: float, end: float) -> tuple[bool, str]:
    kills = report["nodes"][name]["kills"]
    if not kills:
        return False, f"{name} never killed"
    series = [(float(t), int(n)) for t, n in report.get("live_ready", [])]
    ok, seen = True, []
    for kill in kills:
        k = float(kill["t"])
        before = [n for t, n in series if t < k]
        if not before or before[-1] == 0:
            ok = False
            seen.append(f"no ready endpoints before the kill at {_fmt_s(k)} s")
            continue
        wanted = before[-1]
        until = kill["revived_at"] if kill["revived_at"] is not None else end
        drop = next((t for t, n in series if t >= k and n < wanted), None)
        back = k if drop is None else next((t for t, n in series if drop < t <= until and n >= wanted), None)
        if back is None:
            ok = False
            seen.append(f"never back to {wanted} live endpoints after the kill at {_fmt_s(k)} s")
            continue
        secs = round_s(back - k)
        ok = ok and secs <= value
        seen.append(f"{wanted} live endpoints again {_fmt_s(secs)} s after the kill at {_fmt_s(k)} s")
    return ok, f"{name}: " + "; ".join(seen)


def _check_alerts(report: dict[str, Any], key: str, value: Any, targets: list[str], label: str,
                  missing: list[str]) -> ExpectationResult:
    """``alert_within_s`` / ``no_alerts`` on the report's ``alerts`` (what a real Prometheus fired;
    None when the run had none, which fails the check)."""
    if key == "alert_within_s":
        desc = f"{label}: an alert fires within {_fmt_s(float(value))} s of each kill"
    else:
        desc = f"{label}: {'no' if value else 'some'} {'/'.join(NODE_ALERTS)} alert fires"
    alerts = report.get("alerts")
    if alerts is None:
        return ExpectationResult(desc, False, "needs --prometheus: this run had no Prometheus, so no alerts to judge")
    if missing:
        return ExpectationResult(desc, False, f"no record of {compact_node_names(missing)} in the report")
    firing = [a for a in alerts if a.get("firing_at_s") is not None]
    if key == "no_alerts":
        about = [a for a in firing if a["alertname"] in NODE_ALERTS and a.get("labels", {}).get("node") in targets]
        seen = "; ".join(f"{a['alertname']} on {a['labels']['node']} firing at {_fmt_s(a['firing_at_s'])} s"
                         for a in about[:4])
        detail = f"saw {seen}" if about else f"saw none on {label} ({len(firing)} alert(s) fired in all)"
        return ExpectationResult(desc, (not about) == bool(value), detail)
    ok, seen_k = True, []
    nodes = report["nodes"]
    for n in targets:
        if not nodes[n]["kills"]:
            ok = False
            seen_k.append(f"{n} never killed")
            continue
        for kill in nodes[n]["kills"]:
            k = float(kill["t"])
            hits = sorted((a["firing_at_s"] - k, a["alertname"]) for a in firing
                          if (a["alertname"] == NODE_FAILED_ALERT or a.get("labels", {}).get("node") == n)
                          and k <= a["firing_at_s"])
            if not hits:
                ok = False
                seen_k.append(f"no alert fired for {n} after the kill at {_fmt_s(k)} s")
                continue
            secs, name = hits[0]
            ok = ok and secs <= float(value)
            seen_k.append(f"{name} firing {_fmt_s(round_s(secs))} s after the kill of {n} at {_fmt_s(k)} s")
    return ExpectationResult(desc, ok, f"saw {'; '.join(seen_k)}")

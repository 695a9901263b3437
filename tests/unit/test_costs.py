"""edgewatch_lab.playground.costs: the agent pod of each system, its CPU and RSS, and the summary's
medians (pure parts; the meter's reads are exercised by the scenarios; traffic rates are
``TrafficCounters.delta``/``per_minute``, tested with the network lab)."""

from __future__ import annotations

import pytest

from edgewatch_lab.playground.costs import agent_cost, agent_pod, cost_summary

MIB = 1 << 20


@pytest.mark.parametrize(("system", "pods", "expected"), [
    ("edgewatch", ["edgewatch/edgewatch-agent-abcde", "default/web-1"], "edgewatch/edgewatch-agent-abcde"),
    ("superedge", ["edge-system/edge-health-admission-x", "edge-system/edge-health-q2"], "edge-system/edge-health-q2"),
    ("superedge", ["edge-system/edge-health-admission-x"], None),
    ("stock", ["edgewatch/edgewatch-agent-abcde"], None),
    ("edgewatch", ["edgewatch/edgewatch-controller-1", "edgewatch-nodes/edgewatch-agent-x"], None),
])
def test_agent_pod(system, pods, expected):
    assert agent_pod(system, pods) == expected


def test_agent_cost_charges_the_agent_alone_over_the_run():
    before = {"edgewatch/edgewatch-agent-a": ({10: 1.0}, 50 * MIB), "default/web": ({11: 5.0}, MIB)}
    after = {"edgewatch/edgewatch-agent-a": ({10: 4.0, 12: 2.0}, 72 * MIB), "default/web": ({11: 60.0}, MIB)}
    assert agent_cost("edgewatch", before, after, elapsed_s=100.0) == {
        "pod": "edgewatch/edgewatch-agent-a", "cpu_pct": 5.0, "rss_mib": 72.0}


def test_agent_replaced_during_the_run_is_charged_from_its_own_start():
    before = {"edge-system/edge-health-old": ({10: 30.0}, MIB)}
    after = {"edge-system/edge-health-new": ({20: 1.0}, 31 * MIB)}
    assert agent_cost("superedge", before, after, elapsed_s=50.0) == {
        "pod": "edge-system/edge-health-new", "cpu_pct": 2.0, "rss_mib": 31.0}


def test_no_agent_no_cost():
    assert agent_cost("stock", {}, {"default/web": ({1: 1.0}, MIB)}, elapsed_s=10.0) is None
    assert agent_cost("edgewatch", {}, {}, elapsed_s=10.0) is None  # the node is dead at the end


def test_summary_takes_medians_over_nodes_that_ran_the_whole_scenario():
    costs = {
        "a-1": {"agent": {"cpu_pct": 1.0, "rss_mib": 70.0}, "traffic": {"peer_packets": 60.0, "peer_bytes": 2048.0,
                                                                         "peer_connections": 3.0}},
        "a-2": {"agent": {"cpu_pct": 3.0, "rss_mib": 74.0}, "traffic": {"peer_packets": 90.0, "peer_bytes": 4096.0,
                                                                         "peer_connections": 5.0}},
        "a-3": {"agent": {"cpu_pct": 2.0, "rss_mib": 72.0}, "traffic": {"peer_packets": 30.0, "peer_bytes": 1024.0,
                                                                         "peer_connections": 1.0}},
        "a-5": {"traffic": {"peer_packets": 1.0, "peer_bytes": 1.0, "peer_connections": 0.0}},  # killed
    }
    s = cost_summary(costs, whole_run={"a-1", "a-2", "a-3"})
    assert s["agent_cpu_pct"] == 2.0 and s["agent_rss_mib"] == 72.0
    assert s["peer_packets_per_min"] == 60.0 and s["peer_kib_per_min"] == 2.0 and s["peer_connections_per_min"] == 3.0
    assert s["cloud_packets_per_min"] is None  # not counted on these nodes


def test_summary_of_a_run_without_costs_is_all_none():
    assert set(cost_summary({}, whole_run=set()).values()) == {None}

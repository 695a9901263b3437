"""The pure helpers of bench/coordinator_pod.py (the coordinator pod's cost figures, docs/benchmarks.md)."""

from __future__ import annotations

import pytest

from _scripts import load_script

bench = load_script("bench/coordinator_pod.py", name="bench_coordinator_pod")


def test_node_addresses_are_loopback_and_node_0_hosts_the_pod() -> None:
    assert bench.node_address(0) == "127.0.0.1"
    assert bench.node_address(19) == "127.0.0.20"
    with pytest.raises(ValueError):
        bench.node_address(254)
    assert [bench.is_cut(i) for i in range(4)] == [False, True, False, True]  # node 0 (the leader) keeps its link


def test_prom_value_reads_only_the_unlabelled_sample() -> None:
    text = ("# HELP etcd_mvcc_db_total_size_in_bytes x\n"
            "etcd_mvcc_db_total_size_in_bytes 1.2288e+06\n"
            "etcd_mvcc_db_total_size_in_use_in_bytes 491520\n"
            'edgewatch_pool_coordinator_certificate_expiry_seconds{certificate="root"} 3\n')
    assert bench.prom_value(text, "etcd_mvcc_db_total_size_in_bytes") == 1228800.0
    assert bench.prom_value(text, "etcd_mvcc_db_total_size_in_use_in_bytes") == 491520.0
    assert bench.prom_value(text, "edgewatch_pool_coordinator_certificate_expiry_seconds") is None


def test_parse_stat_copes_with_spaces_and_parentheses_in_the_name() -> None:
    fields = ["S", "42"] + ["0"] * 9 + ["150", "50"] + ["0"] * 10
    assert bench.parse_stat("1234 (etcd (x) y) " + " ".join(fields)) == (42, 200.0)


def test_tree_stats_summary() -> None:
    stats = bench.TreeStats(cpu_start={"python": 10.0, "etcd": 5.0}, cpu_end={"python": 16.0, "etcd": 8.0})
    stats.add(100.0, 60.0, 30.0)
    stats.add(110.0, 70.0, 35.0)
    stats.add(160.0, 65.0, 33.0)
    s = stats.summary()
    assert (s["python_rss_mib"], s["etcd_rss_mib"], s["total_rss_mib"]) == (65.0, 33.0, 98.0)
    assert (s["peak_total_rss_mib"], s["peak_python_rss_mib"], s["peak_etcd_rss_mib"]) == (105.0, 70.0, 35.0)
    assert (s["python_cpu"], s["etcd_cpu"], s["total_cpu"], s["window_s"]) == (0.1, 0.05, 0.15, 60.0)
    with pytest.raises(ValueError):
        bench.TreeStats().summary()


def test_first_time_skips_events_and_earlier_lines() -> None:
    history = [{"t": 1.0, "ready": 5}, {"event": "restarting", "t": 2.0}, {"t": 3.0, "ready": 0},
               {"t": 4.0, "ready": 2}, {"t": 5.0, "ready": 5}]
    assert bench.first_time(history, 2.0, lambda s: s["ready"] >= 1) == 4.0
    assert bench.first_time(history, 2.0, lambda s: s["ready"] == 5) == 5.0
    assert bench.first_time(history, 6.0, lambda s: True) is None


def test_table_has_one_line_per_row() -> None:
    out = bench.table([{"nodes": 5, "total_rss_mib": 98.0, "total_cpu": 0.0525}, {"nodes": 20}]).splitlines()
    assert len(out) == 3 and "total MiB" in out[0] and "98.0" in out[1]
    assert out[1].split() == ["5", "98.0", "5.2"] and len(out[2].split()) == 1  # CPU in % of a core; missing cells blank

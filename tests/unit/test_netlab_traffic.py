"""edgewatch_lab.testing.netlab.traffic: the counters' nft table and reading nft's JSON (pure)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgewatch_lab.testing.netlab.traffic import TRAFFIC_TABLE, TrafficCounters, parse_counters, render_table


def nft_json(counters: dict[str, tuple[int, int]], table: str = TRAFFIC_TABLE) -> str:
    items: list[dict] = [{"metainfo": {"version": "1.0.9", "json_schema_version": 1}}]
    items += [{"counter": {"family": "inet", "name": name, "table": table, "handle": i, "packets": p, "bytes": b}}
              for i, (name, (p, b)) in enumerate(counters.items())]
    return json.dumps({"nftables": items})


FULL = {"cloud": (3, 384), "peers": (8, 700), "cloud_connections": (1, 60), "peer_connections": (2, 120)}


def test_render_table_counts_after_the_fault_drops_and_splits_cloud_from_peers():
    script = render_table(cloud_address="198.18.7.1", subnet="198.18.7.0/24")
    assert f"table inet {TRAFFIC_TABLE}" in script
    assert "hook postrouting" in script  # after the fault table's output chain
    lines = [line.strip() for line in script.splitlines()]
    assert lines.index("ip daddr 198.18.7.1 return") < lines.index("ip daddr 198.18.7.0/24 counter name peers")
    for name in ("cloud", "peers", "cloud_connections", "peer_connections"):
        assert f"counter {name} {{ }}" in script and f"counter name {name}" in script


def test_parse_counters():
    assert parse_counters(nft_json(FULL)) == TrafficCounters(
        cloud_packets=3, cloud_bytes=384, cloud_connections=1, peer_packets=8, peer_bytes=700, peer_connections=2)


@pytest.mark.parametrize("text", [
    "", "not json", "[]", json.dumps({"nftables": "x"}), json.dumps({"nftables": [{"counter": {"name": "cloud"}}]}),
    nft_json({k: v for k, v in FULL.items() if k != "peers"}),  # one missing
    nft_json(FULL, table="edgewatch_lab"),  # another table's counters
    nft_json({**FULL, "cloud": ("many", 1)}),  # type: ignore[dict-item]
])
def test_parse_counters_rejects_what_is_not_the_counters(text):
    with pytest.raises(ValueError):
        parse_counters(text)


counters = st.builds(TrafficCounters, *(st.integers(0, 10**12) for _ in range(6)))


@given(counters, counters)
def test_minus_undoes_addition_and_refuses_going_down(a, b):
    total = TrafficCounters(*(x + y for x, y in zip(
        (a.cloud_packets, a.cloud_bytes, a.cloud_connections, a.peer_packets, a.peer_bytes, a.peer_connections),
        (b.cloud_packets, b.cloud_bytes, b.cloud_connections, b.peer_packets, b.peer_bytes, b.peer_connections))))
    assert total.minus(a) == b
    if b != TrafficCounters():
        with pytest.raises(ValueError):
            a.minus(total)

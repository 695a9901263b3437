"""edgewatch_lab.testing.netlab.traffic: the counters' nft table, reading nft's JSON, and the
snapshot arithmetic (all pure)."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgewatch_lab.testing.netlab.traffic import (
    COUNTER_NAMES,
    TRAFFIC_TABLE,
    TrafficCounters,
    parse_counters,
    render_traffic_table,
)

FIELDS = [f.name for f in dataclasses.fields(TrafficCounters)]


def nft_json(counters: dict[str, tuple[object, object]], table: str = TRAFFIC_TABLE) -> str:
    """What ``nft -j list counters table inet <table>`` prints for ``{name: (packets, bytes)}``."""
    items: list[dict] = [{"metainfo": {"version": "1.0.6", "json_schema_version": 1}}]
    items += [{"counter": {"family": "inet", "name": name, "table": table, "handle": i, "packets": p, "bytes": b}}
              for i, (name, (p, b)) in enumerate(counters.items(), start=2)]
    return json.dumps({"nftables": items})


FULL = {"cloud": (3, 384), "peers": (8, 700), "cloud_connections": (1, 60), "peer_connections": (2, 120),
        "cloud_answers": (5, 9000)}
SCRIPT = render_traffic_table(cloud_address="198.18.7.1", subnet="198.18.7.0/24")
RULES = [line.removeprefix(f"add rule inet {TRAFFIC_TABLE} postrouting ")
         for line in SCRIPT.splitlines() if line.startswith("add rule")]


def test_render_declares_the_table_its_counters_and_a_postrouting_chain():
    assert SCRIPT.startswith(f"table inet {TRAFFIC_TABLE} {{\n") and SCRIPT.endswith("\n")
    assert "type filter hook postrouting priority filter; policy accept;" in SCRIPT  # after the fault drops
    assert "hook output" not in SCRIPT and "hook input" not in SCRIPT
    for name in COUNTER_NAMES:
        assert f"  counter {name} {{ }}\n" in SCRIPT
    assert "edgewatch_lab " not in SCRIPT  # never touches the fault table


def test_render_is_idempotent_it_flushes_its_chain_before_adding_the_rules():
    lines = SCRIPT.splitlines()
    flush = lines.index(f"flush chain inet {TRAFFIC_TABLE} postrouting")
    assert all(i > flush for i, line in enumerate(lines) if line.startswith("add rule"))
    assert "delete" not in SCRIPT and "reset" not in SCRIPT  # re-running keeps the counters


@pytest.mark.parametrize(("before", "after"), [
    ('oifname "lo" return', "ip daddr 198.18.7.1 counter name cloud"),  # loopback (own address too) first
    ('oifname "lo" return', "ip daddr 198.18.7.0/24 counter name peers"),
    ("ip daddr 198.18.7.1 counter name cloud", "ip daddr 198.18.7.1 return"),
    ("ip daddr 198.18.7.1 return", "ip daddr 198.18.7.0/24 counter name peers"),  # cloud is not a peer
    ("ip daddr 198.18.7.1 return", "ip daddr 198.18.7.0/24 tcp flags & (syn | ack) == syn counter name peer_connections"),
    ("ip daddr 198.18.7.1 tcp flags & (syn | ack) == syn counter name cloud_connections", "ip daddr 198.18.7.1 return"),
    # answers on connections the cloud opened (the lab's reads) are counted apart, never as cloud
    ('oifname "lo" return', "ip daddr 198.18.7.1 ct direction reply counter name cloud_answers"),
    ("ip daddr 198.18.7.1 ct direction reply counter name cloud_answers", "ip daddr 198.18.7.1 ct direction reply return"),
    ("ip daddr 198.18.7.1 ct direction reply return", "ip daddr 198.18.7.1 counter name cloud"),
    ("ip daddr 198.18.7.1 ct direction reply return", "ip daddr 198.18.7.1 tcp flags & (syn | ack) == syn counter name cloud_connections"),
])
def test_render_rule_order(before, after):
    assert RULES.index(before) < RULES.index(after)


@pytest.mark.parametrize(("cloud", "subnet"), [("198.18.7.1", "198.18.7.0/24"), ("198.18.250.1", "198.18.250.0/24")])
def test_render_uses_the_given_addresses_only(cloud, subnet):
    rules = [line for line in render_traffic_table(cloud_address=cloud, subnet=subnet).splitlines()
             if line.startswith("add rule")]
    assert len(rules) == 8
    assert sum(f"ip daddr {cloud} " in r for r in rules) == 5 and sum(f"ip daddr {subnet} " in r for r in rules) == 2


@pytest.mark.parametrize(("counters", "expected"), [
    (FULL, TrafficCounters(cloud_packets=3, cloud_bytes=384, cloud_connections=1,
                           peer_packets=8, peer_bytes=700, peer_connections=2,
                           cloud_answer_packets=5, cloud_answer_bytes=9000)),
    ({name: (0, 0) for name in COUNTER_NAMES}, TrafficCounters()),
    ({**FULL, "peers": (10**15, 10**18)}, TrafficCounters(3, 384, 1, 10**15, 10**18, 2, 5, 9000)),
])
def test_parse_counters(counters, expected):
    assert parse_counters(nft_json(counters)) == expected


def test_parse_counters_ignores_other_tables_and_objects():
    doc = json.loads(nft_json(FULL))
    doc["nftables"].append({"counter": {"family": "inet", "name": "cloud", "table": "edgewatch_lab",
                                        "handle": 9, "packets": 99, "bytes": 99}})
    doc["nftables"].append({"table": {"family": "inet", "name": TRAFFIC_TABLE, "handle": 1}})
    assert parse_counters(json.dumps(doc)).cloud_packets == 3


@pytest.mark.parametrize("text", [
    "", "not json", "[]", "null", "3", json.dumps({}), json.dumps({"nftables": "x"}), json.dumps({"nftables": None}),
    json.dumps({"nftables": [{"counter": "x"}]}),
    json.dumps({"nftables": [{"counter": {"name": "cloud", "table": TRAFFIC_TABLE}}]}),
    nft_json({k: v for k, v in FULL.items() if k != "peers"}),  # one missing
    nft_json({k: v for k, v in FULL.items() if k != "cloud_answers"}),  # a table of before the answers
    nft_json({}),  # the table exists but no counters
    nft_json(FULL, table="edgewatch_lab"),  # another table's counters
    nft_json({**FULL, "cloud": ("many", 1)}),
    nft_json({**FULL, "cloud": (3, "384")}),  # a string, even of digits
    nft_json({**FULL, "cloud": (True, 1)}),
    nft_json({**FULL, "cloud": (1.5, 1)}),
    nft_json({**FULL, "cloud": (-1, 1)}),
    nft_json({**FULL, "cloud": (None, 1)}),
    json.dumps({"nftables": json.loads(nft_json(FULL))["nftables"] * 2}),  # a counter listed twice
])
def test_parse_counters_rejects_what_is_not_the_counters(text):
    with pytest.raises(ValueError):
        parse_counters(text)


@given(st.one_of(st.text(max_size=200), st.binary(max_size=50).map(lambda b: b.decode("latin-1")),
                 st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                              lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
                              max_leaves=20).map(lambda v: json.dumps({"nftables": v}))))
def test_parse_counters_only_ever_raises_value_error(text):
    try:
        parse_counters(text)
    except ValueError:
        pass  # anything else (KeyError, TypeError, AttributeError...) fails the test


counters = st.builds(TrafficCounters, *(st.integers(0, 10**12) for _ in FIELDS))


def _add(a: TrafficCounters, b: TrafficCounters) -> TrafficCounters:
    return TrafficCounters(**{f: getattr(a, f) + getattr(b, f) for f in FIELDS})


@given(counters, counters)
def test_delta_undoes_addition_and_refuses_going_down(a, b):
    total = _add(a, b)
    assert total.delta(a) == b and total.delta(b) == a
    assert a.delta(a) == TrafficCounters()
    if b != TrafficCounters():
        with pytest.raises(ValueError):
            a.delta(total)


@given(counters, counters, counters)
def test_deltas_of_consecutive_snapshots_add_up(a, b, c):
    s1, s2 = _add(a, b), _add(_add(a, b), c)
    assert _add(s1.delta(a), s2.delta(s1)) == s2.delta(a)


@given(counters, st.floats(min_value=1e-3, max_value=1e7, allow_nan=False))
def test_per_minute_times_minutes_gives_the_counts_back(c, elapsed_s):
    rates = c.per_minute(elapsed_s)
    assert list(rates) == FIELDS
    for field, rate in rates.items():
        assert rate >= 0
        assert math.isclose(rate * elapsed_s / 60.0, getattr(c, field), rel_tol=1e-9, abs_tol=1e-6)


@pytest.mark.parametrize(("counts", "elapsed_s", "expected_peer_packets"), [
    (TrafficCounters(peer_packets=30), 30.0, 60.0),
    (TrafficCounters(peer_packets=30), 60, 30.0),
    (TrafficCounters(peer_packets=30), 120.0, 15.0),
    (TrafficCounters(), 5.0, 0.0),
])
def test_per_minute_table(counts, elapsed_s, expected_peer_packets):
    assert counts.per_minute(elapsed_s)["peer_packets"] == expected_peer_packets


@pytest.mark.parametrize("elapsed_s", [0, 0.0, -1.0, math.inf, math.nan, "60", None, True])
def test_per_minute_rejects_a_bad_elapsed_time(elapsed_s):
    with pytest.raises(ValueError):
        TrafficCounters(peer_packets=1).per_minute(elapsed_s)


def test_counters_are_frozen_and_flat_ints():
    c = TrafficCounters(1, 2, 3, 4, 5, 6, 7, 8)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.cloud_packets = 0  # type: ignore[misc]
    assert dataclasses.asdict(c) == dict(zip(FIELDS, range(1, 9)))  # what playground/costs reads

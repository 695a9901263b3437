"""The pure parts of bench/detection_phases.py (``make bench-detection``): the scenario it plays is
one the playground accepts, its kills cover the renew interval's phases, and each kill's phase,
detection and eviction are read from a report as the playground writes it."""

from __future__ import annotations

from _scripts import load_script

from edgewatch_lab.playground.scenario import parse_scenario

bench = load_script("bench/detection_phases.py", name="bench_detection_phases")


def test_the_scenario_kills_every_node_in_turn_and_revives_it_before_the_next_kill() -> None:
    data = bench.scenario(kills=8, nodes=4, gap_s=20.0, seed=3)
    scenario = parse_scenario(data)
    assert scenario.name == "detection-phases-8"
    steps = data["steps"]
    kills = [s for s in steps if s["action"] == "kill"]
    revives = [s for s in steps if s["action"] == "revive"]
    assert [k["node"] for k in kills] == ["a-1", "a-2", "a-3", "a-4"] * 2
    for kill, revive, after in zip(kills, revives, kills[1:], strict=False):
        assert revive["node"] == kill["node"] and revive["at"] == kill["at"] + bench.REVIVE_AFTER_S
        assert after["at"] - revive["at"] >= 20.0  # one node down at a time
    offsets = [b["at"] - a["at"] - bench.REVIVE_AFTER_S - 20.0 for a, b in zip(kills, kills[1:], strict=False)]
    assert all(0.0 <= o <= bench.RENEW_INTERVAL_S for o in offsets) and len({round(o, 1) for o in offsets}) > 1
    assert steps[-1]["action"] == "end" and steps[-1]["at"] > revives[-1]["at"]


def test_kills_are_read_with_their_phase_detection_and_eviction() -> None:
    report = {
        "faults": [{"t": 0.0, "action": "kill"}, {"t": 100.0, "action": "end"}],
        "nodes": {
            "a-1": {"kills": [{"t": 20.0, "revived_at": 50.0, "pods": 2, "last_renewal": 14.5}],
                    "states": [[0.0, "normal"], [29.25, "failed"], [50.5, "normal"]],
                    "evictions": [{"t": 30.0}, {"t": 30.5}]},
            "a-2": {"kills": [{"t": 60.0, "revived_at": 90.0, "pods": 0}],
                    "states": [[0.0, "normal"]], "evictions": []},
        },
    }
    assert bench.kills_of(report) == [
        {"node": "a-1", "t": 20.0, "phase_s": 5.5, "detected_s": 9.25, "evicted_s": 10.5},
        {"node": "a-2", "t": 60.0, "phase_s": None, "detected_s": None, "evicted_s": None},
    ]
    assert bench.percentile([3.0, 1.0, 2.0], 50) == 2.0 and bench.percentile([], 99) is None

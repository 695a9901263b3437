"""Tests of edgewatch.core.detector: tables for the rule, exhaustive small
sequences, and hypothesis properties (a lost packet never kills a peer, a
dead peer is always found, queries never change outcomes, and on a lossy
link DEAD needs as many failures as the documented loss rule says, checked
against an oracle written from the docstring)."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgewatch.core.detector import (
    DetectorConfig,
    PeerDetector,
    advance,
    evaluate,
    initial_state,
    on_failure,
    on_success,
    record,
    required_failures,
    scaled_timeout,
    silence_s,
)
from edgewatch.core.types import Health

A, S, D = Health.ALIVE, Health.SUSPECT, Health.DEAD
DEFAULT = DetectorConfig()
FIXED = dataclasses.replace(DEFAULT, max_false_dead=None)  # the fixed-count rule, no loss awareness


# --------------------------------------------------------------------------- config


def test_defaults_are_the_documented_ones() -> None:
    assert DEFAULT.suspect_after_failures == 2
    assert DEFAULT.suspect_timeout_s == 3.0
    assert DEFAULT.dead_after_failures == 3
    assert DEFAULT.dead_timeout_s == 5.0
    assert DEFAULT.recover_successes == 2
    assert DEFAULT.max_false_dead == 1e-6
    assert DEFAULT.loss_memory == 10
    assert DEFAULT.max_dead_failures == 30


@pytest.mark.parametrize(
    "kwargs",
    [
        {"dead_timeout_s": 2.0},  # < suspect_timeout_s
        {"suspect_timeout_s": 0.0},
        {"suspect_timeout_s": -1.0},
        {"dead_timeout_s": math.inf},
        {"suspect_timeout_s": math.nan},
        {"suspect_after_failures": 0},
        {"dead_after_failures": 1, "suspect_after_failures": 1},  # one lost packet could kill
        {"dead_after_failures": 2, "suspect_after_failures": 3},  # dead before suspect
        {"recover_successes": 0},
        {"suspect_after_failures": 2.0},
        {"dead_after_failures": True},
        {"suspect_timeout_s": "3"},
        {"max_false_dead": 0.0},
        {"max_false_dead": 1.0},
        {"max_false_dead": True},
        {"max_false_dead": math.nan},
        {"loss_memory": 0},
        {"max_dead_failures": 2},  # < dead_after_failures
    ],
)
def test_nonsense_config_is_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        DetectorConfig(**kwargs)  # type: ignore[arg-type]


def test_config_is_frozen_and_keyword_only() -> None:
    with pytest.raises(AttributeError):
        DEFAULT.dead_timeout_s = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        DetectorConfig(2)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("base", "n", "expected"),
    [(5.0, 1, 5.0), (5.0, 2, 5.0), (5.0, 10, 5.0), (5.0, 100, 10.0), (5.0, 1000, 15.0), (0.0, 50, 0.0), (2.0, 10_000, 8.0)],
)
def test_scaled_timeout_table(base: float, n: int, expected: float) -> None:
    assert scaled_timeout(base_s=base, group_size=n) == pytest.approx(expected)


@pytest.mark.parametrize(("base", "n"), [(1.0, 0), (1.0, -3), (-1.0, 5), (math.nan, 5), (math.inf, 5), (1.0, 2.5), (1.0, True)])
def test_scaled_timeout_refuses_nonsense(base: float, n: int) -> None:
    with pytest.raises(ValueError):
        scaled_timeout(base_s=base, group_size=n)


@given(st.floats(min_value=0, max_value=1e6), st.integers(min_value=1, max_value=10**6))
def test_scaled_timeout_never_shrinks_and_grows_with_n(base: float, n: int) -> None:
    t = scaled_timeout(base_s=base, group_size=n)
    assert t >= base
    assert scaled_timeout(base_s=base, group_size=n + 1) >= t


def test_scaled_for_keeps_config_valid() -> None:
    big = DEFAULT.scaled_for(group_size=1000)
    assert big.suspect_timeout_s == pytest.approx(9.0)
    assert big.dead_timeout_s == pytest.approx(15.0)
    assert big.dead_after_failures == DEFAULT.dead_after_failures
    assert DEFAULT.scaled_for(group_size=3) == DEFAULT


# --------------------------------------------------------------------------- tables


def run(events: list[tuple[float, bool]], config: DetectorConfig = DEFAULT) -> list[Health]:
    d = PeerDetector(config=config, now=0.0)
    return [d.record(ok, now=t) for t, ok in events]


def test_never_heard_is_suspect_and_not_dead_without_evidence() -> None:
    d = PeerDetector(now=0.0)
    assert d.state(now=0.0) is S
    assert d.state(now=1e9) is S  # silence alone never kills


# Each row: events (time s, ok) and the health expected right after each event.
TABLE: list[tuple[str, list[tuple[float, bool]], list[Health]]] = [
    ("first success makes alive", [(1, True)], [A]),
    ("one lost packet changes nothing", [(1, True), (2, False), (3, True)], [A, A, A]),
    ("two failures make suspect", [(1, True), (2, False), (3, False)], [A, A, S]),
    ("one success clears suspicion", [(1, True), (2, False), (3, False), (4, True)], [A, A, S, A]),
    (
        "dead needs 3 failures and > 5 s silence",
        [(1, True), (2, False), (3, False), (4, False), (5, False), (6, False), (7, False)],
        [A, A, S, S, S, S, D],
    ),
    (
        "many fast failures are not enough without the timeout",
        [(1, True)] + [(1 + i * 0.1, False) for i in range(1, 40)],
        [A, A] + [S] * 38,
    ),
    (
        "dead then one success is only suspect, two are alive",
        [(0, True), (2, False), (4, False), (6, False), (7, True), (8, True)],
        [A, A, S, D, S, A],
    ),
    (
        "failure during recovery is dead again at once",
        [(0, True), (2, False), (4, False), (6, False), (7, True), (8, False), (9, True), (10, True)],
        [A, A, S, D, S, D, S, A],
    ),
    (
        "never heard, probes fail: dead after timeout and 3 failures",
        [(1, False), (2, False), (3, False), (5, False), (6, False)],
        [S, S, S, S, D],
    ),
    ("never heard then heard", [(1, False), (2, True)], [S, A]),
    (
        "slow successes within the suspect timeout keep it alive",
        [(3, True), (6, True), (9, True), (12, False), (15, True)],
        [A, A, A, A, A],
    ),
]


@pytest.mark.parametrize(("name", "events", "expected"), TABLE, ids=[row[0] for row in TABLE])
def test_transition_table(name: str, events: list[tuple[float, bool]], expected: list[Health]) -> None:
    assert run(events) == expected


def test_time_alone_makes_alive_suspect_at_the_timeout_boundary() -> None:
    d = PeerDetector(now=0.0)
    d.record(True, now=10.0)
    assert d.state(now=13.0) is A  # silence == timeout: not yet
    assert d.state(now=13.0001) is S
    assert d.state(now=1e6) is S  # never dead without failures


def test_dead_latches_even_if_nobody_asked_in_between() -> None:
    # Failures at 1,2,3 then silence until 7: DEAD was reached at 5+; a success at 7 must
    # therefore count as the first recovery success, not as a plain success.
    d = PeerDetector(now=0.0)
    d.record(True, now=0.0)
    for t in (1.0, 2.0, 3.0):
        d.record(False, now=t)
    assert d.record(True, now=7.0) is S
    assert d.record(True, now=8.0) is A


def test_recover_successes_one_means_one_success_revives() -> None:
    cfg = DetectorConfig(recover_successes=1)
    assert run([(0, True), (2, False), (4, False), (6, False), (7, True)], cfg)[-1] is A


def test_time_going_backwards_is_clamped() -> None:
    d = PeerDetector(now=0.0)
    d.record(True, now=10.0)
    d.record(False, now=11.0)
    d.record(False, now=12.0)
    d.record(False, now=13.0)
    # a late completion stamped in the past must not rewind the detector
    assert d.record(False, now=1.0) is S
    assert d.snapshot.last_event_at == 13.0
    assert d.state(now=0.0) is S
    assert d.state(now=15.5) is D


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, "1", None, True])
def test_non_finite_time_is_refused(bad: object) -> None:
    d = PeerDetector(now=0.0)
    with pytest.raises(ValueError):
        d.record(True, now=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        d.state(now=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        PeerDetector(now=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [1, 0, "yes", None])
def test_ok_must_be_bool(bad: object) -> None:
    with pytest.raises(ValueError):
        PeerDetector(now=0.0).record(bad, now=1.0)  # type: ignore[arg-type]


def test_pure_functions_do_not_mutate() -> None:
    s0 = initial_state(now=0.0)
    s1 = on_success(s0, config=DEFAULT, now=1.0)
    assert s0.last_success_at is None and s1.last_success_at == 1.0
    s2 = on_failure(s1, config=DEFAULT, now=2.0)
    assert s1.consecutive_failures == 0 and s2.consecutive_failures == 1
    assert silence_s(s2, now=4.0) == 3.0
    assert record(s1, ok=False, config=DEFAULT, now=2.0) == s2
    with pytest.raises(AttributeError):
        s2.dead = True  # type: ignore[misc]


def test_repr_shows_state() -> None:
    assert "PeerDetector" in repr(PeerDetector(now=0.0))


# --------------------------------------------------------------------------- exhaustive


def trailing(bits: tuple[bool, ...], value: bool) -> int:
    n = 0
    for b in reversed(bits):
        if b is not value:
            break
        n += 1
    return n


def has_run(bits: tuple[bool, ...], value: bool, length: int) -> bool:
    return any(len(list(g)) >= length for k, g in itertools.groupby(bits) if k is value)


@pytest.mark.parametrize("period", [0.5, 1.0, 2.0, 2.5])
def test_exhaustive_sequences_satisfy_the_rule(period: float) -> None:
    """All 2^11 success/failure sequences at a fixed probe period, checked
    against properties derived independently from the documented rule (the
    fixed count; the loss rule has its own oracle below)."""
    cfg = FIXED
    length = 11
    for bits in itertools.product((True, False), repeat=length):
        d = PeerDetector(config=cfg, now=0.0)
        for i, ok in enumerate(bits):
            t = (i + 1) * period
            before = d.state(now=t)  # health just before this event (DEAD can latch between events)
            health = d.record(ok, now=t)
            hist = bits[: i + 1]
            successes_at = [(j + 1) * period for j, b in enumerate(hist) if b]
            silence = t - (successes_at[-1] if successes_at else 0.0)
            tf = trailing(hist, False)
            ts = trailing(hist, True)
            if health is D:
                assert has_run(hist, False, cfg.dead_after_failures), bits
                assert not ok
            if not has_run(hist, False, cfg.dead_after_failures):
                assert health is not D, bits
            if health is A:
                assert tf < cfg.suspect_after_failures and silence <= cfg.suspect_timeout_s, bits
            if ok and ts >= cfg.recover_successes:
                assert health is A, bits
            if ok and ts == 1:
                assert health is A or before is D, bits
            if not ok and tf >= cfg.dead_after_failures and silence > cfg.dead_timeout_s:
                assert health is D, bits
            if not ok and before is D:
                assert health is D, bits
            if not successes_at:
                assert health is not A


# --------------------------------------------------------------------------- properties

configs = st.builds(
    lambda saf, extra_f, st_, extra_t, rec, bound, memory, extra_cap: DetectorConfig(
        suspect_after_failures=saf,
        dead_after_failures=max(2, saf + extra_f),
        suspect_timeout_s=st_,
        dead_timeout_s=st_ + extra_t,
        recover_successes=rec,
        max_false_dead=bound,
        loss_memory=memory,
        max_dead_failures=max(2, saf + extra_f) + extra_cap,
    ),
    st.integers(1, 5),
    st.integers(0, 4),
    st.floats(0.1, 20),
    st.floats(0, 20),
    st.integers(1, 4),
    st.none() | st.floats(1e-12, 0.5),
    st.integers(1, 50),
    st.integers(0, 40),
)

gaps = st.floats(min_value=0.0, max_value=20.0, allow_nan=False)
events = st.lists(st.tuples(gaps, st.booleans()), max_size=60)


def absolute(evts: list[tuple[float, bool]]) -> list[tuple[float, bool]]:
    t = 0.0
    out = []
    for gap, ok in evts:
        t += gap
        out.append((t, ok))
    return out


def max_failure_run(evts: list[tuple[float, bool]]) -> int:
    return max((len(list(g)) for k, g in itertools.groupby(ok for _, ok in evts) if not k), default=0)


@settings(max_examples=300, deadline=None)
@given(configs, events, st.lists(gaps, max_size=10))
def test_no_long_failure_run_never_dead(cfg: DetectorConfig, evts: list[tuple[float, bool]], queries: list[float]) -> None:
    """Whatever the timing, without a run of dead_after_failures failures the
    peer is never DEAD — not after an event, not at any query time."""
    seq = absolute(evts)
    if max_failure_run(seq) >= cfg.dead_after_failures:
        # break every long run by inserting a success
        fixed: list[tuple[float, bool]] = []
        run_len = 0
        for t, ok in seq:
            if not ok and run_len == cfg.dead_after_failures - 1:
                fixed.append((t, True))
                run_len = 0
                continue
            run_len = 0 if ok else run_len + 1
            fixed.append((t, ok))
        seq = fixed
    assert max_failure_run(seq) < cfg.dead_after_failures
    d = PeerDetector(config=cfg, now=0.0)
    for t, ok in seq:
        assert d.record(ok, now=t) is not D
        for q in queries:
            assert d.state(now=t + q) is not D


@settings(max_examples=150, deadline=None)
@given(configs, st.data())
def test_brief_property_regular_successes_never_dead_and_stay_alive(cfg: DetectorConfig, data: st.DataObject) -> None:
    """Successes at least every suspect_timeout, failure runs shorter than
    suspect_after_failures: always ALIVE after the first success."""
    n = data.draw(st.integers(1, 40))
    t = 0.0
    last_success = None
    d = PeerDetector(config=cfg, now=0.0)
    fails = 0
    for _ in range(n):
        latest = cfg.suspect_timeout_s if last_success is None else last_success + cfg.suspect_timeout_s - t
        gap = data.draw(st.floats(0.0, max(0.0, latest - 1e-6)))
        t += gap
        can_fail = last_success is not None and fails + 1 < cfg.suspect_after_failures
        ok = True if not can_fail else data.draw(st.booleans())
        health = d.record(ok, now=t)
        if ok:
            last_success, fails = t, 0
        else:
            fails += 1
        assert health is A
        assert d.state(now=t) is A


@settings(max_examples=200, deadline=None)
@given(configs, st.floats(0.05, 10.0), events)
def test_a_peer_that_stops_answering_is_found_dead(cfg: DetectorConfig, period: float, prefix: list[tuple[float, bool]]) -> None:
    """Liveness: after any history, failures every `period` seconds make the
    peer SUSPECT and then DEAD within the documented bounds."""
    d = PeerDetector(config=cfg, now=0.0)
    t = 0.0
    for t, ok in absolute(prefix):
        d.record(ok, now=t)
    d.record(True, now=t)
    d.record(True, now=t)  # recovered from anything
    last_success = t
    needed = required_failures(config=cfg, repeat=d.snapshot.repeat)  # checked against the oracle below
    suspect_by = last_success + max(cfg.suspect_after_failures * period, cfg.suspect_timeout_s) + period
    dead_by = last_success + max(needed * period, cfg.dead_timeout_s) + period
    seen = []
    k = 0
    while t <= dead_by + period:
        k += 1
        t = last_success + k * period
        seen.append((t, d.record(False, now=t)))
    assert all(h is not A for tt, h in seen if tt >= suspect_by - 1e-9)
    assert all(h is D for tt, h in seen if tt >= dead_by - 1e-9)


@settings(max_examples=200, deadline=None)
@given(configs, events, st.lists(st.floats(0, 50), max_size=30))
def test_queries_never_change_outcomes(cfg: DetectorConfig, evts: list[tuple[float, bool]], qs: list[float]) -> None:
    seq = absolute(evts)
    quiet = PeerDetector(config=cfg, now=0.0)
    chatty = PeerDetector(config=cfg, now=0.0)
    for i, (t, ok) in enumerate(seq):
        for q in qs[i % max(1, len(qs)) :][:3]:
            chatty.state(now=t + q)
        assert quiet.record(ok, now=t) == chatty.record(ok, now=t)
    assert quiet.snapshot == chatty.snapshot


@settings(max_examples=200, deadline=None)
@given(configs, events, st.floats(0, 100), st.floats(0, 100))
def test_advance_is_idempotent_and_order_insensitive(
    cfg: DetectorConfig, evts: list[tuple[float, bool]], a: float, b: float
) -> None:
    s = initial_state(now=0.0)
    for t, ok in absolute(evts):
        s = record(s, ok=ok, config=cfg, now=t)
    t1, t2 = sorted((s.last_event_at + a, s.last_event_at + b))
    assert advance(advance(s, config=cfg, now=t1), config=cfg, now=t2) == advance(s, config=cfg, now=t2)
    assert evaluate(advance(s, config=cfg, now=t1), config=cfg, now=t2) == evaluate(s, config=cfg, now=t2)


@settings(max_examples=200, deadline=None)
@given(configs, events)
def test_dead_needs_recover_successes_to_be_alive(cfg: DetectorConfig, evts: list[tuple[float, bool]]) -> None:
    d = PeerDetector(config=cfg, now=0.0)
    run_ok = 0
    was_dead = False
    for t, ok in absolute(evts):
        h = d.record(ok, now=t)
        run_ok = run_ok + 1 if ok else 0
        if h is D:
            was_dead = True
            run_ok = 0
        if was_dead and h is A:
            assert run_ok >= cfg.recover_successes
            was_dead = False


@settings(max_examples=150, deadline=None)
@given(configs, events, st.lists(st.floats(0, 30), min_size=1, max_size=5))
def test_stale_timestamps_act_as_now(cfg: DetectorConfig, evts: list[tuple[float, bool]], back: list[float]) -> None:
    """An event stamped in the past is the same as one at the latest time."""
    seq = absolute(evts)
    a = PeerDetector(config=cfg, now=0.0)
    b = PeerDetector(config=cfg, now=0.0)
    latest = 0.0
    for i, (t, ok) in enumerate(seq):
        latest = max(latest, t)
        a.record(ok, now=t - back[i % len(back)] if i % 2 else t)
        b.record(ok, now=max(t - back[i % len(back)], b.snapshot.last_event_at) if i % 2 else t)
    assert a.snapshot == b.snapshot


# --------------------------------------------------------------------------- loss awareness
# An oracle written from the module docstring, by another route than the code: the share is
# updated one event at a time (not in closed form) and k is found by counting up (not by logs).


def oracle_required(cfg: DetectorConfig, repeat: float) -> int:
    if cfg.max_false_dead is None or repeat == 0.0:
        return cfg.dead_after_failures
    k = 1
    while repeat ** (k - 1) > cfg.max_false_dead * (1 + 1e-9) and k < cfg.max_dead_failures:  # within float rounding
        k += 1
    return max(cfg.dead_after_failures, k)


def oracle_run(cfg: DetectorConfig, seq: list[tuple[float, bool]]) -> list[Health]:
    """The health after each event of ``seq`` (increasing times), by the documented rule."""
    ws = (1.0 / cfg.loss_memory, 1.0 / (10 * cfg.loss_memory))  # the short and the long mean
    heal = 1.0 / (20 * cfg.loss_memory)
    means, run, dead, ok_run, seen, repeat = [0.0, 0.0], 0, False, 0, 0, 0.0
    last_ok: float | None = None
    out = []
    for t, ok in seq:
        silence = t - (0.0 if last_ok is None else last_ok)
        if not dead and run >= oracle_required(cfg, repeat) and silence > cfg.dead_timeout_s:
            dead = True  # latched by time before this event
        if ok:
            for i, w in enumerate(ws):
                if run == 0:
                    means[i] = (1 - heal) * means[i]
                elif not dead:
                    for _ in range(run - 1):  # each failure but the last was followed by another
                        means[i] = (1 - w) * means[i] + w
                    means[i] = (1 - w) * means[i]  # the last was followed by this success
            if run and not dead:
                seen += run
            if seen:  # each mean divided by the weight it has gathered (it started at 0)
                least = max(seen, 2 * cfg.loss_memory)
                repeat = max(min(1.0, m / (1 - (1 - w) ** least)) for m, w in zip(means, ws, strict=True))
            run, ok_run, last_ok = 0, ok_run + 1, t
            if dead and ok_run >= cfg.recover_successes:
                dead = False
        else:
            run, ok_run = run + 1, 0
            if not dead and run >= oracle_required(cfg, repeat) and t - (0.0 if last_ok is None else last_ok) > cfg.dead_timeout_s:
                dead = True
        if dead:
            out.append(D if ok_run == 0 else S)
        elif last_ok is None or run >= cfg.suspect_after_failures or t - last_ok > cfg.suspect_timeout_s:
            out.append(S)
        else:
            out.append(A)
    return out


@settings(max_examples=300, deadline=None)
@given(configs, st.floats(0.0, 1.0))
def test_required_failures_is_the_documented_count(cfg: DetectorConfig, repeat: float) -> None:
    k = required_failures(config=cfg, repeat=repeat)
    assert k == oracle_required(cfg, repeat)
    assert cfg.dead_after_failures <= k <= cfg.max_dead_failures
    if cfg.max_false_dead is not None and k < cfg.max_dead_failures and repeat > 0.0:
        assert repeat ** (k - 1) <= cfg.max_false_dead * (1 + 1e-9)  # the bound of the docstring holds below the cap
    assert required_failures(config=cfg, repeat=min(1.0, repeat + 0.01)) >= k  # never fewer on a lossier link


@pytest.mark.parametrize("bad", [-0.1, 1.5, math.nan, True, "0.5"])
def test_required_failures_refuses_a_repeat_that_is_no_probability(bad: object) -> None:
    with pytest.raises(ValueError):
        required_failures(config=DEFAULT, repeat=bad)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(configs, st.lists(st.tuples(st.floats(0.01, 3.0), st.booleans()), max_size=120))
def test_the_loss_rule_matches_the_oracle(cfg: DetectorConfig, evts: list[tuple[float, bool]]) -> None:
    seq = absolute(evts)
    d = PeerDetector(config=cfg, now=0.0)
    assert [d.record(ok, now=t) for t, ok in seq] == oracle_run(cfg, seq)


def test_a_lossy_link_needs_a_longer_run_and_a_clean_one_does_not() -> None:
    """Failures in bursts of 2 and 3 for a minute (3 of 5 failures followed by another): DEAD then
    needs far more failures in a row than 3; failures that never come two in a row teach nothing
    (a run of 3 is as unlikely as ever); a clean link is judged as before (3 failures, 5 s)."""
    lossy = PeerDetector(config=DEFAULT, now=0.0)
    t = 0.0
    for i in range(120):
        t += 0.5
        lossy.record((True, False, False, False, True, False, False, True)[i % 8], now=t)
    assert 0.5 < lossy.snapshot.repeat < 0.7
    needed = required_failures(config=DEFAULT, repeat=lossy.snapshot.repeat)
    assert needed >= 13
    for k in range(1, needed):
        assert lossy.record(False, now=t + k) is not D, k
    assert lossy.record(False, now=t + needed) is D

    alternating = PeerDetector(config=DEFAULT, now=0.0)
    for i in range(121):
        alternating.record(i % 2 == 0, now=i * 0.5)
    assert alternating.snapshot.repeat == 0.0

    clean = PeerDetector(config=DEFAULT, now=0.0)
    for k in range(1, 61):
        clean.record(True, now=k * 0.5)
    assert required_failures(config=DEFAULT, repeat=clean.snapshot.repeat) == DEFAULT.dead_after_failures
    assert [clean.record(False, now=30 + k) for k in range(1, 7)] == [A, S, S, S, S, D]


def test_a_dead_peer_does_not_teach_the_detector_that_its_link_is_lossy() -> None:
    """The failures of an outage (a run that reached DEAD) are not loss: after the peer comes
    back, its next death is found as fast as its first."""
    d = PeerDetector(config=DEFAULT, now=0.0)
    for k in range(1, 21):
        d.record(True, now=float(k))
    for k in range(21, 80):
        d.record(False, now=float(k))
    assert d.state(now=79.0) is D
    for k in range(80, 90):
        d.record(True, now=float(k))
    assert d.state(now=89.0) is A
    assert required_failures(config=DEFAULT, repeat=d.snapshot.repeat) == DEFAULT.dead_after_failures
    assert [d.record(False, now=89.0 + k) for k in range(1, 7)][-1] is D


def test_the_failures_before_a_restarted_peer_came_back_are_not_loss() -> None:
    """A peer whose agent restarted (a rolling upgrade) misses a few probes: told so, the detector
    does not take them for a lossy link, and the peer's next death is found as fast as before."""
    told = PeerDetector(config=DEFAULT, now=0.0)
    untold = PeerDetector(config=DEFAULT, now=0.0)
    for d, outage in ((told, True), (untold, False)):
        for k in range(1, 21):
            d.record(True, now=float(k))
        for k in range(21, 25):  # 4 s of restart: 4 failures, not yet DEAD
            d.record(False, now=float(k))
        d.record(True, now=25.0, outage=outage)
    assert required_failures(config=DEFAULT, repeat=told.snapshot.repeat) == DEFAULT.dead_after_failures
    assert required_failures(config=DEFAULT, repeat=untold.snapshot.repeat) > DEFAULT.dead_after_failures


def test_a_link_that_healed_is_judged_by_the_fixed_count_again() -> None:
    d = PeerDetector(config=DEFAULT, now=0.0)
    t = 0.0
    for i in range(120):
        t += 0.5
        d.record((True, False, False, False, True, False, False, True)[i % 8], now=t)
    assert required_failures(config=DEFAULT, repeat=d.snapshot.repeat) > 10
    for _ in range(1_400):  # about twelve minutes of clean evidence
        t += 0.5
        d.record(True, now=t)
    assert required_failures(config=DEFAULT, repeat=d.snapshot.repeat) == DEFAULT.dead_after_failures

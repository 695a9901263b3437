"""Per-member write quotas, the pure ledger: the rate bucket, the stored bytes, suspension and its
end (a property: however a member writes, its live bytes never pass the bound unsuspended)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgewatch.pooletcd.quota import QuotaLedger, QuotaPolicy

POLICY = QuotaPolicy(write_bytes_per_s=100, burst_bytes=1_000, stored_bytes=2_000, suspend_s=60)


def test_a_burst_then_a_trickle_is_within_the_rate() -> None:
    ledger = QuotaLedger(POLICY)
    assert ledger.put("a", b"k1", 1_000, now=0.0) is None          # the whole bucket at once
    assert ledger.put("a", b"k1", 100, now=1.0) is None            # refilled 100 in 1 s (rewrites: stored 100)
    assert ledger.put("a", b"k1", 100, now=1.5) == "rate"          # 50 refilled, 100 asked
    assert ledger.suspended(now=1.5) == {"a"}
    assert ledger.put("b", b"k2", 900, now=1.5) is None            # another member's bucket is its own
    assert ledger.put("a", b"k1", 10_000, now=2.0) is None         # already suspended: one action
    assert ledger.lift(now=61.4) == [] and ledger.lift(now=61.5) == ["a"]
    assert ledger.suspended(now=61.5) == frozenset()
    assert ledger.put("a", b"k1", 1_000, now=61.5) is None         # a full bucket again


def test_stored_bytes_count_live_keys_only() -> None:
    ledger = QuotaLedger(QuotaPolicy(write_bytes_per_s=1e9, burst_bytes=10**9, stored_bytes=2_000, suspend_s=60))
    ledger.load([("a", b"old", 1_500), ("b", b"x", 10)])
    assert ledger.put("a", b"k", 400, now=0.0) is None
    ledger.delete(b"old")
    assert ledger.stored["a"] == 400
    assert ledger.put("a", b"k", 1_900, now=0.0) is None             # replaces its 400
    assert ledger.put("a", b"k2", 101, now=0.0) == "stored"
    assert ledger.stored == {"a": 2_001, "b": 10}


@given(st.lists(st.tuples(st.sampled_from([b"k1", b"k2", b"k3"]), st.integers(1, 1_500),
                          st.floats(0, 5), st.booleans()), max_size=60))
def test_a_member_never_passes_its_bounds_unsuspended(writes: list[tuple[bytes, int, float, bool]]) -> None:
    """Every write accepted while not suspended keeps the member within its stored bytes, and the
    bytes accepted since its bucket was last full within the bucket plus what the rate refilled."""
    ledger = QuotaLedger(POLICY)
    now, written, start = 0.0, 0, None
    for key, size, pause, delete in writes:
        now += pause
        if ledger.lift(now=now):
            written, start = 0, None
        if delete:
            ledger.delete(key)
            continue
        suspended_before = "a" in ledger.suspended(now=now)
        reason = ledger.put("a", key, size, now=now)
        if suspended_before or reason is not None:
            assert reason is None or "a" in ledger.suspended(now=now)
            continue
        start = now if start is None else start
        written += size
        assert ledger.stored["a"] <= POLICY.stored_bytes
        assert written <= POLICY.burst_bytes + (now - start) * POLICY.write_bytes_per_s + 1e-6


def test_a_policy_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        QuotaPolicy(stored_bytes=0)

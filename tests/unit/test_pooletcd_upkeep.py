"""The pool store's upkeep, the pure parts: when to compact, which leases to revoke."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgewatch.pooletcd.upkeep import MAX_MEMBER_LEASE_TTL_S, LeaseJudge, StoreUpkeep, needs_compaction


def test_compaction_past_the_high_water_or_on_nospace() -> None:
    assert not needs_compaction(db_size=499, quota_bytes=1000, alarms=[], high_water=0.5)
    assert needs_compaction(db_size=501, quota_bytes=1000, alarms=[], high_water=0.5)
    assert needs_compaction(db_size=10, quota_bytes=1000, alarms=[1], high_water=0.5)   # NOSPACE
    assert not needs_compaction(db_size=10, quota_bytes=1000, alarms=[2], high_water=0.5)  # CORRUPT: not ours


def test_a_keyless_lease_is_revoked_after_its_grace_and_a_long_one_at_once() -> None:
    judge = LeaseJudge(grace_s=120)
    looks = [(1, 40, True), (2, 5, False), (3, MAX_MEMBER_LEASE_TTL_S + 1, True)]
    assert judge.judge(looks, now=0.0) == {3: "long_lease"}
    assert judge.judge([(1, 40, True), (2, 5, False), (4, 300, False)], now=60.0) == {}
    assert judge.judge([(2, 5, False), (4, 300, False)], now=120.0) == {2: "keyless"}   # keyless since 0
    assert judge.judge([(4, 300, True)], now=200.0) == {}       # got its key: never revoked
    assert judge.judge([(4, 300, False)], now=300.0) == {}      # keyless again: its grace starts over


@given(st.lists(st.lists(st.tuples(st.integers(1, 20), st.integers(1, 300), st.booleans()),
                         unique_by=lambda t: t[0], max_size=20), max_size=8),
       st.floats(min_value=1, max_value=100))
def test_a_lease_is_revoked_only_when_keyless_at_every_look_of_its_grace(
        sweeps: list[list[tuple[int, int, bool]]], step_s: float) -> None:
    judge = LeaseJudge(grace_s=120)
    keyless_since: dict[int, float] = {}
    for i, looks in enumerate(sweeps):
        now = i * step_s
        verdicts = judge.judge(looks, now=now)
        seen = {}
        for lease, _ttl, has_keys in looks:
            since = keyless_since.get(lease, now)
            if has_keys:
                assert lease not in verdicts
            elif now - since >= 120:
                assert verdicts[lease] == "keyless"
            else:
                assert lease not in verdicts
                seen[lease] = since
        keyless_since = seen  # looked at and kept; revoked or unseen ones are forgotten


def test_the_high_water_is_a_fraction() -> None:
    with pytest.raises(ValueError, match="high_water"):
        StoreUpkeep(host="h", port=1, credentials=lambda: None, pool="p", quota_bytes=1, high_water=1.0)  # type: ignore[arg-type,return-value]

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


def test_a_keyless_lease_is_revoked_at_its_second_look_and_a_long_one_at_once() -> None:
    judge = LeaseJudge()
    assert judge.judge([(1, 40, True), (2, 5, False), (3, MAX_MEMBER_LEASE_TTL_S + 1, True)]) == {3: "long_lease"}
    assert judge.judge([(1, 40, True), (2, 5, False), (4, 300, False)]) == {2: "keyless"}
    assert judge.judge([(4, 300, True)]) == {}                  # got its key: never revoked
    assert judge.judge([(5, 10, False)]) == {} and judge.judge([(6, 10, False)]) == {}  # each seen once


@given(st.lists(st.lists(st.tuples(st.integers(1, 20), st.integers(1, 300), st.booleans()),
                         unique_by=lambda t: t[0], max_size=20), max_size=6))
def test_a_lease_with_a_key_at_either_look_is_never_revoked(rounds: list[list[tuple[int, int, bool]]]) -> None:
    judge = LeaseJudge()
    previous: dict[int, bool] = {}
    for looks in rounds:
        verdicts = judge.judge(looks)
        for lease, _ttl, has_keys in looks:
            if has_keys or previous.get(lease, True):
                assert lease not in verdicts
            else:
                assert verdicts.get(lease) == "keyless"
        previous = {lease: has_keys for lease, _ttl, has_keys in looks if lease not in verdicts}  # revoked: gone


def test_the_high_water_is_a_fraction() -> None:
    with pytest.raises(ValueError, match="high_water"):
        StoreUpkeep(host="h", port=1, credentials=lambda: None, pool="p", quota_bytes=1, high_water=1.0)  # type: ignore[arg-type,return-value]

"""Per-member write quotas, the pure ledger: the cost of a member's own keys (a bucket, etcd's
per-revision overhead, deletions charged, no refill on lift), its area's live bytes, the two
suspensions and their end (a property: however a member writes, nothing it writes unsuspended
passes its bounds)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgewatch.pooletcd.acl import Suspensions
from edgewatch.pooletcd.quota import REVISION_OVERHEAD_BYTES, QuotaLedger, QuotaPolicy

POLICY = QuotaPolicy(key_bytes_per_s=100, key_burst_bytes=1_000, area_bytes=2_000, suspend_s=60)
HB = b"/edgewatch/pools/p/heartbeats/a"


def test_each_revision_of_its_keys_costs_etcd_overhead_and_deletions_count() -> None:
    ledger = QuotaLedger(POLICY)
    cost = REVISION_OVERHEAD_BYTES + 50
    assert ledger.change("a", HB, area=False, size=50, now=0.0) is None          # 306 of 1,000
    assert ledger.change("a", HB, area=False, size=None, now=0.0) is None        # a deletion: 256 + key
    assert ledger.change("a", HB, area=False, size=50, now=0.0) is None
    assert ledger.change("a", HB, area=False, size=50, now=0.0) == "read_only"   # over 1,000
    assert cost * 3 + REVISION_OVERHEAD_BYTES + len(HB) > POLICY.key_burst_bytes
    assert ledger.suspensions(now=1.0) == Suspensions(read_only=frozenset({"a"}))
    assert ledger.change("a", HB, area=False, size=50, now=2.0) is None          # already suspended: one action
    assert ledger.change("b", b"k", area=False, size=600, now=2.0) is None        # another member's bucket
    assert not ledger.due(now=59.9) and ledger.lift(now=59.9, revision=7) == []
    assert ledger.due(now=60.0) and ledger.lift(now=60.0, revision=7) == ["a"]
    # not refilled by the lift: only what the rate gave back since
    assert ledger.change("a", HB, area=False, size=50, now=60.0) is None
    assert ledger.suspensions(now=60.0) == Suspensions()


def test_an_areas_live_bytes_are_bounded_and_its_owner_keeps_its_keys() -> None:
    ledger = QuotaLedger(POLICY)
    ledger.load([("a", b"old", 1_500), ("b", b"x", 10)])
    assert ledger.change("a", b"k", area=True, size=400, now=0.0) is None
    assert ledger.change("a", b"old", area=True, size=None, now=0.0) is None
    assert ledger.area["a"] == 400
    assert ledger.change("a", b"k", area=True, size=1_900, now=0.0) is None      # replaces its 400
    assert ledger.change("a", b"k2", area=True, size=101, now=0.0) == "no_area"
    assert ledger.suspensions(now=0.0) == Suspensions(no_area=frozenset({"a"}))
    assert ledger.area == {"a": 2_001, "b": 10}
    # many area writes cost its keys' bucket nothing: its heartbeat goes on
    assert ledger.change("a", HB, area=False, size=50, now=0.0) is None


@given(st.lists(st.tuples(st.sampled_from([b"k1", b"k2", b"k3", HB]), st.integers(1, 1_500),
                          st.floats(0, 5), st.booleans()), max_size=60))
def test_a_member_never_passes_its_bounds_unsuspended(changes: list[tuple[bytes, int, float, bool]]) -> None:
    """Accepted unsuspended: its area within its bytes, and its keys' cost since the start within
    the bucket plus what the rate gave back."""
    ledger = QuotaLedger(POLICY)
    now, spent = 0.0, 0
    for key, size, pause, delete in changes:
        now += pause
        ledger.lift(now=now, revision=0)
        area = key != HB
        before = ledger.suspensions(now=now)
        suspension = ledger.change("a", key, area=area, size=None if delete else size, now=now)
        if not area and "a" not in before.read_only:
            spent += REVISION_OVERHEAD_BYTES + (len(key) if delete else size)
            if suspension is None:
                assert spent <= POLICY.key_burst_bytes + now * POLICY.key_bytes_per_s + 1e-6
        if area and suspension is None and "a" not in before.no_area and not delete:
            assert ledger.area["a"] <= POLICY.area_bytes


def test_a_policy_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        QuotaPolicy(area_bytes=0)


def test_a_put_from_the_suspension_is_told_by_its_revision_however_late_the_watch() -> None:
    """Puts that land between the area's deletion and the revocation of its grant are deleted
    even when the watch delivers them after the lift: by revision, not by the clock."""
    ledger = QuotaLedger(POLICY)
    assert ledger.change("a", b"k", area=True, size=2_001, now=0.0) == "no_area"
    assert ledger.stale_area_put("a", revision=10)          # suspended: any put to its area
    assert not ledger.stale_area_put("b", revision=10)      # not another member's
    assert ledger.change("a", b"k", area=True, size=None, now=1.0) is None   # the area's deletion
    assert ledger.suspensions(now=61.0) == Suspensions()    # over by the clock, not yet lifted:
    assert ledger.stale_area_put("a", revision=40)          # its grant has not come back
    assert ledger.lift(now=61.0, revision=50) == ["a"]
    assert ledger.stale_area_put("a", revision=50)          # seen late, made before the lift
    assert not ledger.stale_area_put("a", revision=51)      # made once it may write again
    assert ledger.area["a"] == 0


class _Kv:
    def __init__(self, key: bytes, value: bytes, mod_revision: int) -> None:
        self.key, self.value, self.mod_revision = key, value, mod_revision


class _ListingEtcd:
    """One page of keys at revision 100, and the deletions asked for (the etcd client's surface the
    keeper's listing uses; the real one runs in tests/integration/test_pool_coordinator_pod.py)."""

    def __init__(self, kvs: list[_Kv]) -> None:
        self.kvs, self.deleted = kvs, []
        outer = self

        class _Stub:
            async def Range(self, request: object, timeout: float) -> object:  # noqa: N802 - gRPC's name
                header = type("H", (), {"revision": 100})()
                return type("R", (), {"header": header, "kvs": outer.kvs, "more": False})()

        self.kvstub = _Stub()

    async def delete(self, key: bytes) -> None:
        self.deleted.append(key)


async def test_a_new_session_deletes_what_a_lost_one_left_in_a_suspended_area() -> None:
    """The area's deletion is asked when the suspension starts; if that session ends first (seen in
    CI: etcd's "revision of auth store is old" as the grant was revoked), the keys stayed for good.
    Now the next session's listing deletes every key the watch would have: a suspended member's
    area, and puts made while it was suspended (by revision) after the lift."""
    from edgewatch.pooletcd.quota import QuotaKeeper
    from edgewatch.poolkeys import PoolKeys

    keys = PoolKeys("p")
    a, b = keys.writer("a").encode() + b"cache/", keys.writer("b").encode() + b"cache/"
    keeper = QuotaKeeper(host="127.0.0.1", port=1, credentials=lambda: None, pool="p",  # type: ignore[arg-type,return-value]
                         policy=POLICY)
    assert keeper.ledger.change("a", a + b"k0", area=True, size=2_001, now=0.0) == "no_area"
    etcd = _ListingEtcd([_Kv(a + b"k0", b"x" * 10, 5), _Kv(a + b"k1", b"x" * 10, 6), _Kv(b + b"k0", b"y", 7)])
    assert await keeper._listing(etcd) == 100  # noqa: SLF001 - the listing alone, without a session
    assert etcd.deleted == [a + b"k0", a + b"k1"] and keeper.ledger.area == {"b": len(b + b"k0") + 1}
    # lifted at revision 50: a put at 40 (made while suspended) goes, one at 60 stays
    assert keeper.ledger.lift(now=61.0, revision=50) == ["a"]
    etcd = _ListingEtcd([_Kv(a + b"k2", b"x", 40), _Kv(a + b"k3", b"x", 60)])
    await keeper._listing(etcd)  # noqa: SLF001
    assert etcd.deleted == [a + b"k2"] and keeper.ledger.area == {"a": len(a + b"k3") + 1}

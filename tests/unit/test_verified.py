"""Tests of edgewatch.controller.verified: the controller's own count of signed statements."""

from __future__ import annotations

from edgewatch.controller.model import EdgeView
from edgewatch.controller.verified import VerifiedEdge
from edgewatch.controller.views import edge_view
from edgewatch.core.evidence import encode_evidence
from edgewatch.core.grouping import GroupingConfig
from edgewatch.core.identity import NodeKey, NodeKeyring, PublicKeys
from edgewatch.core.types import NodeName, Verdict
from edgewatch.core.wire import Heartbeat, sign_heartbeat

POOL = "edgewatch.io/pool"
B1, B2 = "1" * 32, "2" * 32


class Fleet:
    """Nodes with their own keys, and a VerifiedEdge that has read their records."""

    def __init__(self, names: list[str], *, ttl_s: float = 30.0) -> None:
        self.results: list[str] = []
        self.edge = VerifiedEdge(ttl_s=ttl_s, on_result=self.results.append)
        self.rings = {n: NodeKeyring(node=NodeName(n), keys=(NodeKey.generate(),), public=PublicKeys())
                      for n in names}
        for n, ring in self.rings.items():
            self.edge.apply_keys(n, ring.record())
            self.edge.set_node(n, {POOL: "a"})
        self.edge.set_grouping(GroupingConfig(enabled=True, label_key=POOL))

    def stmt(self, origin: str, *, beacon: str = B1, seq: int = 1, alive: tuple[str, ...] = (),
             dead: tuple[str, ...] = (), cloud_ok: bool = True, signer: str | None = None) -> Heartbeat:
        return sign_heartbeat(origin=NodeName(origin), incarnation=1, seq=seq, kubelet_ok=True, cloud_ok=cloud_ok,
                              alive=[NodeName(a) for a in alive], dead=[NodeName(d) for d in dead],
                              keyring=self.rings[signer or origin], beacon=beacon)

    def write(self, writer: str, *statements: Heartbeat) -> list[str]:
        return self.edge.apply_evidence(writer, encode_evidence(statements[0], statements[1:]))


def test_majority_of_signed_statements_and_expiry() -> None:
    f = Fleet(["n1", "n2", "n3"], ttl_s=30.0)
    f.edge.beacons.record(B1, at=100.0)
    for n in ("n1", "n2"):
        assert f.write(n, f.stmt(n, alive=("n1", "n2"), dead=("n3",))) == ["new"]
    changed = f.edge.recount_all(now=101.0)
    assert changed == {NodeName("n1"), NodeName("n2"), NodeName("n3")}
    assert f.edge.verdict("n3").verdict is Verdict.UNHEALTHY  # type: ignore[union-attr]
    assert f.edge.verdict("n1").verdict is Verdict.HEALTHY  # type: ignore[union-attr]
    assert f.edge.verdict("n1").counted_at == 101.0  # type: ignore[union-attr]
    assert f.edge.recount_all(now=102.0) == set()  # nothing new
    assert f.edge.verdict("n1").counted_at == 102.0  # type: ignore[union-attr]  # counted again: fresh
    since = f.edge.counted("n3").since  # type: ignore[union-attr]
    # the statements' beacon gets old: everything becomes unknown, on the controller's clock alone
    assert f.edge.recount_all(now=131.0) == {NodeName("n1"), NodeName("n2"), NodeName("n3")}
    verdict = f.edge.verdict("n3")
    assert verdict is not None and verdict.verdict is Verdict.UNKNOWN and verdict.since == 131.0
    assert edge_view(verdict=verdict, now=131.0, ttl_s=60.0) is EdgeView.UNKNOWN
    assert since == 101.0


def test_forgeries_and_replays_are_refused_and_counted() -> None:
    f = Fleet(["n1", "n2", "n3"])
    f.edge.beacons.record(B1, at=10.0)
    f.edge.beacons.record(B2, at=20.0)
    # n1 forges n2's and n3's statements with its own key: refused, only its own counts
    assert f.write("n1", f.stmt("n1", beacon=B2, dead=("n2",)), f.stmt("n3", beacon=B2, dead=("n2",), signer="n1"),
                   f.stmt("n2", beacon=B2, dead=("n2",), signer="n1")) == ["sender_mismatch", "sender_mismatch", "new"]
    # n1 writes n2's genuine statement first in its own Lease: refused whole
    assert f.write("n1", f.stmt("n2", beacon=B2)) == ["sender_mismatch"]
    # a replay of an older beacon changes nothing
    assert f.write("n1", f.stmt("n1", beacon=B1, seq=99, alive=("n2",))) == ["older"]
    assert f.write("n1", f.stmt("n1", beacon="3" * 32, seq=100)) == ["unknown_beacon"]
    f.edge.recount_all(now=21.0)
    assert f.edge.verdict("n2").verdict is Verdict.UNKNOWN  # type: ignore[union-attr]  # 1 of 3 says dead
    assert "sender_mismatch" in f.results and "older" in f.results


def test_a_carried_statement_is_the_nodes_own_life_sign() -> None:
    f = Fleet(["n1", "n2", "n3"])
    f.edge.beacons.record(B1, at=10.0)
    assert f.edge.own_life("n3", now=11.0) is None
    f.write("n1", f.stmt("n1", alive=("n1", "n2", "n3")), f.stmt("n3", cloud_ok=False, alive=("n1", "n2", "n3")))
    life = f.edge.own_life("n3", now=11.0)
    assert life is not None and life.carrier == "n1" and not life.heartbeat.cloud_ok
    assert f.edge.own_life("n3", now=41.0) is None  # the beacon it names is too old


def test_a_rotated_out_key_no_longer_verifies() -> None:
    f = Fleet(["n1", "n2"])
    f.edge.beacons.record(B1, at=1.0)
    old = f.stmt("n1")
    new_ring = NodeKeyring(node=NodeName("n1"), keys=(NodeKey.generate(),), public=PublicKeys())
    f.edge.apply_keys("n1", new_ring.record())
    assert f.edge.apply_evidence("n1", encode_evidence(old)) == ["unknown_key"]
    f.edge.apply_keys("n1", "junk")
    assert "bad_key_record" in f.results


def test_statements_count_only_in_their_group() -> None:
    f = Fleet(["n1", "n2", "n3"])
    f.edge.set_node("n3", {POOL: "b"})  # n3 moves to its own group
    f.edge.beacons.record(B1, at=1.0)
    f.write("n3", f.stmt("n3", dead=("n1",)))
    f.write("n1", f.stmt("n1", alive=("n1",)))
    f.edge.recount_all(now=2.0)
    d = f.edge.counted("n1").decision  # type: ignore[union-attr]
    assert d.group_size == 2 and d.dead_count == 0 and d.alive_count == 1
    f.edge.set_node("n2", None)  # n2 leaves: the group shrinks, its statements go
    f.edge.recount_all(now=3.0)
    assert f.edge.counted("n1").decision.group_size == 1  # type: ignore[union-attr]
    assert f.edge.counted("n2") is None and f.edge.verdict("n2") is None


def test_only_what_places_a_node_in_a_group_regroups(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """kube-controller-manager labels every new Node (``beta.kubernetes.io/os``); such a label must
    not rebuild the monitoring topology nor recount every group (at 1,000 nodes that was once a
    second while the labels rolled in). Joining, leaving and the group label do."""
    import edgewatch.controller.verified as verified_module

    built: list[int] = []
    real = verified_module.neighbours
    monkeypatch.setattr(verified_module, "neighbours", lambda group, k: built.append(len(group)) or real(group, k=k))
    f = Fleet(["n1", "n2", "n3"])  # grouping on, by POOL: one group of three
    f.edge.beacons.record(B1, at=1.0)
    f.edge.recount_all(now=2.0)
    assert built == [3]
    f.edge.set_node("n1", {POOL: "a", "beta.kubernetes.io/os": "linux"})
    f.edge.recount_all(now=3.0)
    assert built == [3]  # the same groups: no new topology, nothing recounted
    f.edge.set_node("n1", {POOL: "b", "beta.kubernetes.io/os": "linux"})  # n1 moves to a group of its own
    f.edge.recount_all(now=4.0)
    assert sorted(built[1:]) == [1, 2] and f.edge.group_of(NodeName("n1")) == frozenset({"n1"})
    f.edge.set_node("n4", {POOL: "b"})  # joins n1's group
    f.edge.recount_all(now=5.0)
    assert f.edge.group_of(NodeName("n4")) == frozenset({"n1", "n4"})
    f.edge.set_grouping(GroupingConfig(enabled=False))  # off: everyone in one group, whatever the labels
    f.edge.recount_all(now=6.0)
    assert built[-1] == 4
    count = len(built)
    f.edge.set_node("n2", {POOL: "c"})
    f.edge.recount_all(now=7.0)
    assert len(built) == count and f.edge.group_of(NodeName("n2")) == frozenset({"n1", "n2", "n3", "n4"})


def test_a_group_is_recounted_once_a_statement_may_change(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The count depends on the time only through which statements are fresh: between new
    statements it is redone once the earliest one may expire, not at every recount (at 1,000 nodes a
    count is about 10 ms), and an expiry still changes the verdicts on time."""
    import edgewatch.controller.verified as verified_module

    counts: list[float] = []
    real = verified_module.verified_decisions
    monkeypatch.setattr(verified_module, "verified_decisions",
                        lambda **kw: counts.append(kw["now"]) or real(**kw))
    f = Fleet(["n1", "n2", "n3"], ttl_s=30.0)
    f.edge.beacons.record(B1, at=100.0)
    f.edge.beacons.record(B2, at=110.0)
    f.write("n1", f.stmt("n1", alive=("n1", "n2", "n3")))
    f.write("n2", f.stmt("n2", beacon=B2, alive=("n1", "n2", "n3")))
    assert f.edge.recount_all(now=111.0) == {NodeName("n1"), NodeName("n2"), NodeName("n3")}
    assert counts == [111.0] and f.edge.verdict("n3").verdict is Verdict.HEALTHY  # type: ignore[union-attr]
    for now in (112.0, 120.0, 129.5):
        assert f.edge.recount_all(now=now) == set()
    assert counts == [111.0]  # nothing can have changed before n1's statement (beacon at 100) expires
    assert f.edge.recount_all(now=130.0) == set() and counts == [111.0, 130.0]  # fresh at 130, still
    assert f.edge.recount_all(now=131.0) != set()  # stale right after: n1's word no longer counts
    assert f.edge.verdict("n3").verdict is Verdict.UNKNOWN  # type: ignore[union-attr]  # 1 of 3
    f.write("n1", f.stmt("n1", beacon=B2, seq=2, alive=("n1", "n2", "n3")))  # a new statement: at once
    assert f.edge.recount_all(now=132.0) != set() and counts[-1] == 132.0
    assert f.edge.verdict("n3").verdict is Verdict.HEALTHY  # type: ignore[union-attr]

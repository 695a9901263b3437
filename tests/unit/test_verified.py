"""Tests of edgewatch.controller.verified: the controller's own count of signed statements."""

from __future__ import annotations

from edgewatch.controller.verified import VerifiedEdge
from edgewatch.core.evidence import encode_evidence
from edgewatch.core.grouping import GroupingConfig
from edgewatch.core.identity import NodeKey, NodeKeyring, PublicKeys
from edgewatch.core.types import NodeName
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
    assert f.edge.condition("n3").status == "False"  # type: ignore[union-attr]
    assert f.edge.condition("n1").status == "True"  # type: ignore[union-attr]
    assert f.edge.recount_all(now=102.0) == set()  # nothing new
    since = f.edge.verdict("n3").since  # type: ignore[union-attr]
    # the statements' beacon gets old: everything becomes unknown, on the controller's clock alone
    assert f.edge.recount_all(now=131.0) == {NodeName("n1"), NodeName("n2"), NodeName("n3")}
    cond = f.edge.condition("n3")
    assert cond is not None and cond.status == "Unknown" and cond.observed_at is None and cond.status_since == 131.0
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
    assert f.edge.condition("n2").status == "Unknown"  # type: ignore[union-attr]  # 1 of 3 says dead
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
    d = f.edge.verdict("n1").decision  # type: ignore[union-attr]
    assert d.group_size == 2 and d.dead_count == 0 and d.alive_count == 1
    f.edge.set_node("n2", None)  # n2 leaves: the group shrinks, its statements go
    f.edge.recount_all(now=3.0)
    assert f.edge.verdict("n1").decision.group_size == 1  # type: ignore[union-attr]
    assert f.edge.verdict("n2") is None

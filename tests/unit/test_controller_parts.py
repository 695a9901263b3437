"""The controller's small parts: observations and the snapshots built from them, the EdgeHealthy
output, coverage, the ops endpoints, and what ``edgewatch status`` shows without judging any clock."""

from __future__ import annotations

import dataclasses
import urllib.error
import urllib.request

import pytest
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node
from prometheus_client import CollectorRegistry, Counter

from edgewatch.controller.coverage import Coverage, is_covered
from edgewatch.controller.edgecondition import ShownConditions
from edgewatch.controller.observations import Observations
from edgewatch.controller.ops import serve_ops
from edgewatch.controller.snapshots import lease_snapshot, node_snapshot
from edgewatch.controller.verified import CountedVerdict
from edgewatch.core.quorum import decision_from_counts
from edgewatch.core.types import NodeName
from edgewatch.names import (
    DELEGATE_HEARTBEAT_ANNOTATION,
    DELEGATED_RENEW_TIME_ANNOTATION,
    DELEGATED_VIA_ANNOTATION,
    EDGE_CONDITION_TYPE,
    POOL_LABEL,
)
from edgewatch.status import heartbeat_of

R1 = "2023-11-14T22:13:20.000000Z"
R2 = "2023-11-14T22:13:30.000000Z"


def lease(renew: str | None, annotations: dict[str, str] | None = None) -> Lease:
    spec = {"holderIdentity": "n1", "leaseDurationSeconds": 40}
    if renew:
        spec["renewTime"] = renew
    return Lease.from_dict({"metadata": {"name": "n1", "namespace": "kube-node-lease",
                                         "annotations": annotations or {}}, "spec": spec})


def node(status: str | None, heartbeat: str | None = "2023-11-14T22:13:20Z") -> Node:
    conditions = []
    if status is not None:
        cond = {"type": EDGE_CONDITION_TYPE, "status": status, "reason": "r", "message": "m"}
        if heartbeat:
            cond["lastHeartbeatTime"] = heartbeat
        conditions.append(cond)
    return Node.from_dict({"metadata": {"name": "n1"}, "status": {"conditions": conditions}})


def test_observations_time_changes_only() -> None:
    obs = Observations()
    first = obs.see(kind="lease", name="n1", value="a", now=100.0)
    assert (first.at, first.first) == (100.0, True)
    assert obs.see(kind="lease", name="n1", value="a", now=150.0) is first  # unchanged: the old time
    later = obs.see(kind="lease", name="n1", value="b", now=160.0)
    assert (later.at, later.first) == (160.0, False)
    obs.forget(name="n1")
    assert obs.get(kind="lease", name="n1") is None


def test_lease_snapshot_carries_the_observation_not_the_remote_time() -> None:
    obs = Observations()
    snap = lease_snapshot(lease(R1), name="n1", observations=obs, now=5000.0)
    assert snap is not None and (snap.renew_time, snap.observed_at, snap.first_sight) == (R1, 5000.0, True)
    snap = lease_snapshot(lease(R1), name="n1", observations=obs, now=5007.0)
    assert snap.observed_at == 5000.0  # no renewal since: ages on the controller's clock
    snap = lease_snapshot(lease(R2), name="n1", observations=obs, now=5010.0)
    assert (snap.observed_at, snap.first_sight) == (5010.0, False)
    assert lease_snapshot(None, name="n1", observations=obs, now=5011.0) is None
    snap = lease_snapshot(lease(R1), name="n1", observations=obs, now=5012.0)  # recreated: a watched change
    assert (snap.observed_at, snap.first_sight) == (5012.0, False)
    snap = lease_snapshot(lease(None), name="n2", observations=obs, now=1.0)
    assert snap is not None and snap.renew_time is None and snap.observed_at is None


def _carried(renew: str) -> Lease:
    return lease(renew, {DELEGATE_HEARTBEAT_ANNOTATION: "true", DELEGATED_RENEW_TIME_ANNOTATION: renew})


def test_lease_snapshot_keeps_the_nodes_own_renewal_while_carried_ones_follow() -> None:
    R3 = "2023-11-14T22:13:31.000000Z"
    obs = Observations()
    assert lease_snapshot(lease(R1), name="n1", observations=obs, now=100.0).own_observed_at is None  # first sight
    assert lease_snapshot(lease(R2), name="n1", observations=obs, now=110.0).own_observed_at == 110.0  # watched
    snap = lease_snapshot(_carried(R3), name="n1", observations=obs, now=111.0)
    assert (snap.observed_at, snap.own_observed_at) == (111.0, 110.0)  # the carry is newer; the own one kept
    assert lease_snapshot(_carried(R3), name="n1", observations=obs, now=130.0).own_observed_at == 110.0
    # a controller that starts on a carried renewal, then sees the node's own one happen
    fresh = Observations()
    assert lease_snapshot(_carried(R1), name="n1", observations=fresh, now=5.0).own_observed_at is None
    assert lease_snapshot(lease(R2), name="n1", observations=fresh, now=9.0).own_observed_at == 9.0
    assert lease_snapshot(_carried(R3), name="n1", observations=fresh, now=10.0).own_observed_at == 9.0
    # a first-sight own renewal followed by carries proves nothing about when the node reached the cloud
    restarted = Observations()
    lease_snapshot(lease(R1), name="n1", observations=restarted, now=5.0)
    assert lease_snapshot(_carried(R2), name="n1", observations=restarted, now=6.0).own_observed_at is None
    restarted.forget(name="n1")  # the Node was deleted
    assert restarted.get(kind="own-lease", name="n1") is None


def test_node_snapshot_takes_nothing_of_the_edgehealthy_condition() -> None:
    """EdgeHealthy is the controller's output (docs/architecture.md): whatever the Node shows there — a verdict
    anyone wrote, refreshed or not, or nothing — the decision core's snapshot is the same."""
    bare = node_snapshot(node(None))
    for status, heartbeat in (("True", "2023-11-14T22:13:25Z"), ("False", None), ("Unknown", "2023-11-14T22:13:20Z"),
                              ("bogus", None)):
        assert node_snapshot(node(status, heartbeat)) == bare
    assert {f.name for f in dataclasses.fields(bare)} == {"name", "labels", "annotations", "taints"}


def test_edgehealthy_is_written_from_what_was_last_written_never_from_the_node() -> None:
    """The EdgeHealthy condition is output only: when to write it follows what this controller last
    wrote (in memory), per Node object (uid): a new verdict at once, new counts alone rarely."""
    def counted(alive: int, dead: int, since: float) -> CountedVerdict:
        decision = decision_from_counts(NodeName("n1"), alive=alive, dead=dead, group_size=5, votes_counted=5)
        return CountedVerdict(decision=decision, since=since)

    shown = ShownConditions(refresh_s=600.0)
    healthy = counted(5, 0, since=1_700_000_000.0)
    first = shown.due(name="n1", uid="u1", counted=healthy, now=1_700_000_010.0)
    assert first is not None and (first["type"], first["status"], first["reason"]) == (
        EDGE_CONDITION_TYPE, "True", "PeersSeeAlive")
    assert first["lastTransitionTime"] == "2023-11-14T22:13:20Z"  # since the verdict holds (our clock)
    assert first["lastHeartbeatTime"] == "2023-11-14T22:13:30Z"  # the write
    shown.wrote(name="n1", uid="u1", condition=first, now=1_700_000_010.0)
    assert shown.due(name="n1", uid="u1", counted=healthy, now=1_700_000_020.0) is None
    fewer = counted(4, 1, since=1_700_000_000.0)  # one peer less sees it: only the counts moved
    assert shown.due(name="n1", uid="u1", counted=fewer, now=1_700_000_609.0) is None
    assert shown.due(name="n1", uid="u1", counted=fewer, now=1_700_000_610.0) is not None
    dead = counted(1, 4, since=1_700_000_100.0)  # a new verdict: at once
    assert shown.due(name="n1", uid="u1", counted=dead, now=1_700_000_100.0)["status"] == "False"  # type: ignore[index]
    assert shown.due(name="n1", uid="u2", counted=healthy, now=1_700_000_020.0) is not None  # a new Node object
    shown.forget("n1")
    assert shown.due(name="n1", uid="u1", counted=healthy, now=1_700_000_020.0) is not None


@pytest.mark.parametrize(("labels", "cover", "covered"), [
    ({}, "", True), ({POOL_LABEL: "a"}, POOL_LABEL, True), ({POOL_LABEL: ""}, POOL_LABEL, True),
    ({}, POOL_LABEL, False), ({"other": "x"}, POOL_LABEL, False),
])
def test_is_covered(labels: dict[str, str], cover: str, covered: bool) -> None:
    assert is_covered(labels=labels, cover_label=cover) is covered


def test_coverage_follows_the_configmap_and_refuses_bad_data() -> None:
    coverage = Coverage()
    assert coverage.covers({})  # default: every node
    assert coverage.apply({"coverLabel": POOL_LABEL}) is True
    assert not coverage.covers({}) and coverage.covers({POOL_LABEL: "a"})
    assert coverage.apply({"coverLabel": POOL_LABEL, "grouping": "on"}) is False  # cover label unchanged
    with pytest.raises(ValueError):
        coverage.apply({"coverLabl": ""})
    with pytest.raises(ValueError):
        coverage.apply({"coverLabel": "not a label!"})
    assert coverage.cover_label == POOL_LABEL  # the previous one stays
    assert coverage.apply(None) is True and coverage.covers({})  # deleted: the defaults


def test_ops_endpoints() -> None:
    registry = CollectorRegistry()
    Counter("edgewatch_controller_test", "A test counter.", registry=registry).inc()
    ready = {"value": False}
    with serve_ops(address="127.0.0.1", port=0, registry=registry, ready=lambda: ready["value"]) as port:
        base = f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(f"{base}/healthz", timeout=5) as resp:
            assert resp.status == 200
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{base}/readyz", timeout=5)
        assert err.value.code == 503
        ready["value"] = True
        with urllib.request.urlopen(f"{base}/readyz", timeout=5) as resp:
            assert resp.status == 200
        with urllib.request.urlopen(f"{base}/metrics", timeout=5) as resp:
            assert b"edgewatch_controller_test_total 1.0" in resp.read()
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{base}/other", timeout=5)
        assert err.value.code == 404


@pytest.mark.parametrize(("renew", "annotations", "heartbeat"), [
    (None, {}, "none"),
    (R1, {}, "own"),
    (R1, {DELEGATE_HEARTBEAT_ANNOTATION: "true", DELEGATED_RENEW_TIME_ANNOTATION: R1,
          DELEGATED_VIA_ANNOTATION: "peer"}, "delegated"),
    (R1, {DELEGATE_HEARTBEAT_ANNOTATION: "true", DELEGATED_RENEW_TIME_ANNOTATION: R1,
          DELEGATED_VIA_ANNOTATION: "autonomy"}, "held"),
    (R2, {DELEGATE_HEARTBEAT_ANNOTATION: "true", DELEGATED_RENEW_TIME_ANNOTATION: R1,
          DELEGATED_VIA_ANNOTATION: "autonomy"}, "own"),  # stale mark: the kubelet renewed since
])
def test_status_heartbeat_says_who_renewed_not_when(renew: str | None, annotations: dict[str, str],
                                                    heartbeat: str) -> None:
    assert heartbeat_of(lease(renew, annotations)) == heartbeat
    assert heartbeat_of(None) == "none"


async def test_status_rows_show_coverage_heartbeat_verdict_and_recorded_state() -> None:
    from _fakekube import FakeKube

    from edgewatch.status import collect

    kube = FakeKube()
    kube.put("ConfigMap", {"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "edgewatch-config", "namespace": "edgewatch"},
                           "data": {"coverLabel": POOL_LABEL}})
    for name, labels, ann in (("a-1", {POOL_LABEL: "a"}, {"edgewatch.io/state": "disconnected"}),
                              ("cloud-1", {}, {})):
        obj = node("True").to_dict()
        obj["metadata"] = {"name": name, "labels": labels, "annotations": ann}
        kube.put("Node", obj)
        held = {DELEGATE_HEARTBEAT_ANNOTATION: "true", DELEGATED_RENEW_TIME_ANNOTATION: R1,
                DELEGATED_VIA_ANNOTATION: "peer", "edgewatch.io/delegated-by": "a-2"} if name == "a-1" else {}
        lease_obj = lease(R1, held).to_dict()
        lease_obj["metadata"]["name"] = name
        kube.put("Lease", lease_obj)
    rows = {r["node"]: r for r in await collect(kube)}  # type: ignore[arg-type]
    assert rows["a-1"] | {"age_s": None} == {
        "node": "a-1", "pool": "a", "covered": True, "heartbeat": "delegated", "renew_time": R1, "edge": "healthy",
        "edge_message": "m", "state": "disconnected", "delegate": "a-2 (peer)", "role": None, "taints": [],
        "age_s": None}
    assert (rows["cloud-1"]["covered"], rows["cloud-1"]["state"], rows["cloud-1"]["heartbeat"]) == (False, None, "own")
    kube.put("ConfigMap", {"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "edgewatch-config", "namespace": "edgewatch"}, "data": {"typo": "x"}})
    rows = {r["node"]: r for r in await collect(kube)}  # type: ignore[arg-type]
    assert rows["cloud-1"]["covered"] is None and rows["cloud-1"]["state"] == "normal"  # unknown coverage


def test_status_role_column_shows_the_coordinator_state() -> None:
    """ROLE in ``edgewatch status``: the role and whether the coordinator is ready (pool cache
    synced), merely healthy (reachable) or unreachable, from the EdgePoolCoordinator condition."""
    from lightkube.resources.core_v1 import Node

    from edgewatch.names import ROLE_CONDITION_TYPE
    from edgewatch.status import role_of

    def with_condition(reason: str, message: str) -> Node:
        return Node.from_dict({"metadata": {"name": "a-1"}, "status": {"conditions": [{
            "type": ROLE_CONDITION_TYPE, "status": "True", "reason": reason, "message": message}]}})

    assert role_of(with_condition("Leader", "pool a: leader; leader a-1; coordinator ready")) == "leader/ready"
    assert role_of(with_condition("Follower", "pool a: follower; leader a-2; coordinator healthy")) == \
        "follower/healthy"
    assert role_of(with_condition("Pending", "pool a: pending; leader none; coordinator unreachable")) == \
        "pending/unreachable"
    assert role_of(with_condition("Follower", "free text")) == "follower"
    assert role_of(Node.from_dict({"metadata": {"name": "a-1"}, "status": {"conditions": []}})) is None


def test_a_renewal_first_seen_carried_stays_carried() -> None:
    """The two-step attack: a correct carry of a dead node's Lease, then its mark spoiled or removed
    without a renewal. The renewal was carried when first seen and stays so (it needs the node's own
    signed statement); it never becomes the node's own heartbeat."""
    from edgewatch.controller.views import is_delegated
    obs = Observations()
    lease_snapshot(lease(R1), name="n1", observations=obs, now=100.0)
    snap = lease_snapshot(_carried(R2), name="n1", observations=obs, now=110.0)
    assert snap.carried is True and is_delegated(snap)
    for spoiled in ({}, {DELEGATE_HEARTBEAT_ANNOTATION: "true", DELEGATED_RENEW_TIME_ANNOTATION: R1},
                    {DELEGATED_RENEW_TIME_ANNOTATION: R2}):
        snap = lease_snapshot(lease(R2, spoiled), name="n1", observations=obs, now=111.0)
        assert snap.carried is True and is_delegated(snap) and snap.own_observed_at is None
    # the node's own next renewal is its own, whatever stale mark it still shows
    snap = lease_snapshot(lease("2023-11-14T22:13:40.000000Z", {DELEGATE_HEARTBEAT_ANNOTATION: "true",
                                                                DELEGATED_RENEW_TIME_ANNOTATION: R2}),
                          name="n1", observations=obs, now=120.0)
    assert snap.carried is False and not is_delegated(snap) and snap.own_observed_at == 120.0
    # and an own renewal never turns into a carry by a mark added after it
    snap = lease_snapshot(_carried("2023-11-14T22:13:40.000000Z"), name="n1", observations=obs, now=121.0)
    assert snap.carried is False


def test_a_mark_in_another_spelling_of_the_same_instant_is_a_carry() -> None:
    """renewTime …:20.000000Z with the mark …:20Z: one instant, so carried (the apiserver's CEL agrees)."""
    from edgewatch.controller.views import is_delegated
    snap = lease_snapshot(lease(R1, {DELEGATE_HEARTBEAT_ANNOTATION: "true",
                                     DELEGATED_RENEW_TIME_ANNOTATION: "2023-11-14T22:13:20Z"}),
                          name="n1", observations=Observations(), now=1.0)
    assert snap.carried is True and is_delegated(snap)

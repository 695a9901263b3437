"""edgewatch.controller.standby: a replica that does not lead keeps the node Leases' renewal sightings
and the leader's beacons, so the reconciler it starts when it wins judges from that history.

The apiserver is the in-memory FakeKube (list, watch, get); the controller-failover scenario runs
the real thing (two controller replicas, the leader SIGKILLed, a node killed seconds later)."""

from __future__ import annotations

import asyncio
import base64

from _fakekube import FakeKube

from edgewatch.controller.observations import Observations
from edgewatch.controller.snapshots import lease_snapshot
from edgewatch.controller.standby import StandbyWatch
from edgewatch.controller.verified import VerifiedEdge
from edgewatch.core.beacon import Beacon, sign_beacon
from edgewatch.core.identity import NodeKey
from edgewatch.kube.api import Lease


def _node_lease(name: str, renew: str) -> dict:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": renew}}


def _beacon_lease(token: str) -> dict:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "edgewatch-beacon", "namespace": "edgewatch",
                         "annotations": {"edgewatch.io/beacon": token}},
            "spec": {"renewTime": "2026-11-28T10:00:00.000000Z"}}


def _standby(kube: FakeKube, now: list[float]) -> StandbyWatch:
    return StandbyWatch(client=kube, observations=Observations(), verified=VerifiedEdge(),  # type: ignore[arg-type]
                        clock=lambda: now[0], namespace="edgewatch", api_timeout_s=1.0, watch_timeout_s=5.0)


async def _until(check, timeout_s: float = 2.0) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not check():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


async def test_the_reconciler_takes_over_the_standbys_sightings() -> None:
    """A Lease the standby saw renewed at t=10 and not since is, to the reconciler that starts at
    t=40 from the same history, unrenewed for 30 s (not a first sight timed "now")."""
    kube, now = FakeKube(), [10.0]
    kube.put("Lease", _node_lease("a-3", "2026-11-28T10:00:00.000000Z"))
    standby = _standby(kube, now)
    standby.on_lease("ADDED", Lease.from_dict(_node_lease("a-3", "2026-11-28T10:00:00.000000Z")))  # first look
    now[0] = 12.0
    renewed = Lease.from_dict(_node_lease("a-3", "2026-11-28T10:00:10.000000Z"))
    standby.on_lease("MODIFIED", renewed)
    now[0] = 40.0
    snap = lease_snapshot(renewed, name="a-3", observations=standby.observations, now=now[0])
    assert snap is not None and snap.observed_at == 12.0 and not snap.first_sight
    standby.on_lease("DELETED", renewed)
    assert lease_snapshot(renewed, name="a-3", observations=standby.observations, now=41.0).first_sight  # type: ignore[union-attr]


async def test_watches_run_only_while_not_leading_and_beacons_are_recorded_if_signed() -> None:
    kube, now = FakeKube(), [100.0]
    key, stranger = NodeKey.generate(), NodeKey.generate()
    kube.put("Secret", {"apiVersion": "v1", "kind": "Secret",
                        "metadata": {"name": "edgewatch-beacon-key", "namespace": "edgewatch"},
                        "data": {"key.pem": base64.b64encode(key.pem()).decode()}})
    kube.put("Lease", _beacon_lease(sign_beacon(Beacon(generation=1, value="a" * 32), key)))
    kube.put("Lease", _node_lease("a-1", "2026-11-28T10:00:00.000000Z"))
    standby = _standby(kube, now)
    task = asyncio.create_task(standby.run())
    try:
        await _until(lambda: standby.verified.beacons.issued_at("a" * 32) == 100.0)
        await _until(lambda: standby.observations.get(kind="lease", name="a-1") is not None)
        # a beacon the controller's key did not sign is not recorded
        now[0] = 105.0
        kube.put("Lease", _beacon_lease(sign_beacon(Beacon(generation=2, value="b" * 32), stranger)))
        await asyncio.sleep(0.2)
        assert standby.verified.beacons.issued_at("b" * 32) is None
        # leading: the watches stop; a renewal then is not the standby's to see
        standby.leading_changed(True)
        await asyncio.sleep(0.2)
        watches_open = len(kube.watchers)
        kube.put("Lease", _node_lease("a-1", "2026-11-28T10:00:10.000000Z"))
        await asyncio.sleep(0.2)
        assert watches_open == 0
        assert standby.observations.get(kind="lease", name="a-1").value == "2026-11-28T10:00:00.000000Z"  # type: ignore[union-attr]
        # leadership lost: watching again
        standby.leading_changed(False)
        await _until(lambda: standby.observations.get(kind="lease", name="a-1").value  # type: ignore[union-attr]
                     == "2026-11-28T10:00:10.000000Z")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

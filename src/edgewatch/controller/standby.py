"""A warm standby: what a controller replica that does not lead keeps observing, so that when it wins
the election it judges every node from the history it watched instead of from nothing.

Why: the controller never compares another machine's timestamp with its own clock; it times a
Lease renewal from the moment *it saw* the renewTime change (``edgewatch.controller.observations``).
A replica that starts watching only when it wins has no such moment for any node, and gives every
node a full grace from its first look, so a node that died during the leader change was failed up
to one grace late (22.8 s instead of ~7 s in a measured rollout). A standby that watched the Leases
all along knows how long each has been unrenewed, on its own clock, the moment it leads.

What a standby keeps warm (and nothing it would write):

* every node Lease's renewal sightings (``Observations``: the renewTime and when this replica saw it
  appear, through :func:`edgewatch.controller.snapshots.lease_snapshot`, the same function the
  reconciler uses);
* the agents' published keys and signed statements (``VerifiedEdge``, through the same
  ``EvidenceInformer`` the leader runs);
* the leader's beacons, each recorded at the moment this replica saw it on the beacon Lease
  (:class:`BeaconFollower`): statements are timed by their beacon, and a replica that never issued
  a beacon could otherwise time no statement until its own beacons have gone round the agents.
  A beacon is taken only if the controller's key (the beacon Secret) signed it.

Clock: one ``clock`` for the standby and the reconciler that follows it (the same seconds).

Cost: while standing by, the replica holds the watches the leader holds for these (node Leases, the
agents' key ConfigMaps and evidence Leases) plus one on the beacon Lease; nothing while it leads
(the reconciler's own informers take over, and the sightings stay).

Limits: a beacon seen through a delayed watch is recorded as fresher than it is, by that delay (the
agents take it the same way); the history is memory only (a restarted replica starts cold).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from edgewatch.controller.evidence import EvidenceInformer, controller_informer_config, load_beacon_key
from edgewatch.controller.observations import Observations
from edgewatch.controller.snapshots import LEASE, lease_snapshot
from edgewatch.controller.verified import VerifiedEdge
from edgewatch.core.beacon import verify_beacon
from edgewatch.kube.api import AsyncClient, Lease
from edgewatch.kube.errors import API_ERRORS
from edgewatch.kube.informer import Informer, InformerConfig
from edgewatch.kube.listwatch import lister_watcher
from edgewatch.kube.resources import LEASES
from edgewatch.kube.store import Store
from edgewatch.names import BEACON_ANNOTATION, BEACON_LEASE_NAME, IDENTITY_NAMESPACE, NODE_LEASE_NAMESPACE
from edgewatch.waits import stop_task

__all__ = ["BeaconFollower", "StandbyWatch"]

log = logging.getLogger(__name__)

#: Pause before the beacon key is read again after a failure, seconds.
KEY_RETRY_S = 2.0


class BeaconFollower:
    """Records the leader's beacons as this replica sees them on the beacon Lease.

    Args (keyword-only):
        client: the controller's API client (get on the beacon Secret, watch on the Lease).
        verified: where each beacon is recorded (``verified.beacons``), with ``clock()`` at sight.
        clock: the controller's clock, seconds.
        namespace: the controller's namespace (beacon Lease and Secret).
        informer_config: the controller's informer timings.
        api_timeout_s: bound of the key read, seconds.
    """

    def __init__(self, *, client: AsyncClient, verified: VerifiedEdge, clock: Callable[[], float], namespace: str,
                 informer_config: InformerConfig, api_timeout_s: float) -> None:
        self._client = client
        self._verified = verified
        self._clock = clock
        self._namespace = namespace
        self._informer_config = informer_config
        self._api_timeout_s = api_timeout_s
        self._public: Ed25519PublicKey | None = None
        self.recorded = 0

    def on_lease(self, op: str, lease: Lease) -> None:
        """A beacon Lease event: its beacon recorded now if the controller's key signed it and it is
        not recorded yet (a forged or malformed token is logged and dropped)."""
        if op == "DELETED" or self._public is None:
            return
        token = (lease.metadata.annotations or {}).get(BEACON_ANNOTATION) if lease.metadata else None
        if not token:
            return
        try:
            beacon = verify_beacon(token, self._public)
        except ValueError as exc:
            log.warning("the beacon Lease holds a beacon this controller's key did not sign: %s", exc,
                        extra={"kind": "beacon_refused"})
            return
        if self._verified.beacons.issued_at(beacon.value) is None:
            self._verified.beacons.record(beacon.value, at=self._clock())
            self.recorded += 1

    async def run(self) -> None:
        """Read the controller's key, then follow the beacon Lease until cancelled."""
        while self._public is None:
            try:
                self._public = Ed25519PublicKey.from_public_bytes((await load_beacon_key(
                    self._client, namespace=self._namespace, api_timeout_s=self._api_timeout_s)).public_raw)
            except (*API_ERRORS, ValueError) as exc:
                log.info("standby: cannot read the beacon key yet: %s", exc or type(exc).__name__)
                await asyncio.sleep(KEY_RETRY_S)
        informer: Informer[Any] = Informer(
            source=lister_watcher(self._client, LEASES, namespace=self._namespace,
                                  field_selector=f"metadata.name={BEACON_LEASE_NAME}"),
            sink=Store(on_event=self.on_lease), decode=Lease.from_dict, name="standby-beacon",
            config=self._informer_config)
        await informer.run()


class StandbyWatch:
    """Runs the standby's watches while this replica does not lead (see the module docstring).

    Args (keyword-only):
        client: the controller's API client.
        observations: the Lease sightings the reconciler will take over.
        verified: the verified edge view the reconciler will take over.
        clock: the controller's clock, seconds (the reconciler's too).
        namespace: the controller's namespace.
        identity_namespace: where the agents' keys and evidence live.
        api_timeout_s: bound of every list page and read, seconds.
        watch_timeout_s: a watch silent this long is re-opened, seconds.
    """

    def __init__(self, *, client: AsyncClient, observations: Observations, verified: VerifiedEdge,
                 clock: Callable[[], float], namespace: str, identity_namespace: str = IDENTITY_NAMESPACE,
                 api_timeout_s: float = 10.0, watch_timeout_s: float = 150.0) -> None:
        self._client = client
        self.observations = observations
        self.verified = verified
        self._clock = clock
        self._config = controller_informer_config(api_timeout_s=api_timeout_s, watch_timeout_s=watch_timeout_s)
        self.beacons = BeaconFollower(client=client, verified=verified, clock=clock, namespace=namespace,
                                      informer_config=self._config, api_timeout_s=api_timeout_s)
        self.evidence = EvidenceInformer(client=client, verified=verified, clock=clock, on_change=_ignore,
                                         namespace=identity_namespace, watch_timeout_s=watch_timeout_s,
                                         api_timeout_s=api_timeout_s)
        self._standing_by = asyncio.Event()
        self._leading = asyncio.Event()
        self._standing_by.set()

    def leading_changed(self, leading: bool) -> None:
        """The elector's news: watch while not leading, stop while leading."""
        (self._leading if leading else self._standing_by).set()
        (self._standing_by if leading else self._leading).clear()

    def on_lease(self, op: str, lease: Lease) -> None:
        """A node Lease event: its renewal sighting noted (a deleted Lease's forgotten)."""
        name = lease.metadata.name
        if op == "DELETED":
            self.observations.forget(name=name, kind=LEASE)
            return
        lease_snapshot(lease, name=name, observations=self.observations, now=self._clock())

    async def run(self) -> None:
        """Until cancelled: while not leading, run the watches; when leadership comes, stop them
        (cancelled and awaited) and wait for it to end."""
        while True:
            await self._standing_by.wait()
            log.info("standing by: watching node Leases, evidence and beacons", extra={"kind": "standby"})
            task = asyncio.create_task(self._watch(), name="controller-standby")
            try:
                await self._leading.wait()
            finally:
                await stop_task(task)
            log.info("leading: the standby's history goes to the reconciler", extra={"kind": "standby"})

    async def _watch(self) -> None:
        informer: Informer[Any] = Informer(
            source=lister_watcher(self._client, LEASES, namespace=NODE_LEASE_NAMESPACE),
            sink=Store(on_event=self.on_lease), decode=Lease.from_dict, name="standby", config=self._config)
        async with asyncio.TaskGroup() as tg:
            tg.create_task(informer.run())
            tg.create_task(self.evidence.run())
            tg.create_task(self.beacons.run())


def _ignore(_node: str) -> None:
    """The standby queues nothing: the reconciler looks at every node when it starts."""

"""A test stand-in for the agents' signed evidence: per-node Ed25519 keys published in
``edgewatch-nodes``, and evidence Leases whose statements name the controller's current beacon.

Controller tests use it instead of running agents: ``set(node, "True" | "False" | None)`` says what
the node's peers see (alive, dead, nothing), ``carry(node, by=peer)`` makes a node cut off from the
cloud with its own statement carried in a peer's Lease. Every node with a status signs the same view
of the group (alive: the "True" nodes, dead: the "False" ones), so a strict majority agrees exactly as
the statuses say. Statements are signed with each node's own key, exactly as an agent signs them.

Two ways to write: :meth:`SignedEdge.sync_fake` (the unit tests' in-memory API) and
:meth:`SignedEdge.publish` (a real API client).

Test helper only: it holds every node's private key.
"""

from __future__ import annotations

import base64
import itertools
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ConfigMap

from edgewatch.core.beacon import BeaconHolder
from edgewatch.core.evidence import encode_evidence
from edgewatch.core.identity import NodeKey, NodeKeyring, PublicKeys
from edgewatch.core.types import NodeName
from edgewatch.core.wire import Heartbeat, sign_heartbeat
from edgewatch.names import (
    BEACON_ANNOTATION,
    BEACON_KEY_ANNOTATION,
    BEACON_LEASE_NAME,
    EVIDENCE_ANNOTATION,
    IDENTITY_NAMESPACE,
    KEY_RECORD_KEY,
)

__all__ = ["SignedEdge"]


class SignedEdge:
    """See the module docstring. ``beacon_namespace``: the controller's namespace."""

    def __init__(self, *, beacon_namespace: str = "edgewatch", identity_namespace: str = IDENTITY_NAMESPACE) -> None:
        self.beacon_namespace = beacon_namespace
        self.identity_namespace = identity_namespace
        self.statuses: dict[str, str | None] = {}
        self.carriers: dict[str, str] = {}
        self.kubelet_down: set[str] = set()
        self.beacon = BeaconHolder()
        self._public = PublicKeys()
        self._rings: dict[str, NodeKeyring] = {}
        self._seq = itertools.count(1)
        self._published: set[str] = set()

    def ring(self, node: str) -> NodeKeyring:
        """``node``'s keyring (made on first use)."""
        if node not in self._rings:
            self._rings[node] = NodeKeyring(node=NodeName(node), keys=(NodeKey.generate(),), public=self._public)
        return self._rings[node]

    def set(self, node: str, status: str | None) -> None:
        """What ``node``'s peers see: "True" alive, "False" dead, None / "Unknown" nothing."""
        self.statuses[node] = status if status in ("True", "False") else None
        self.ring(node)

    def carry(self, node: str, *, by: str | None) -> None:
        """``node`` is cut off from the cloud and its statement is carried by ``by`` (None: not cut off)."""
        if by is None:
            self.carriers.pop(node, None)
        else:
            self.carriers[node] = by

    # -- objects -----------------------------------------------------------------------------------

    def key_configmap(self, node: str) -> dict[str, Any]:
        """The ConfigMap ``edgewatch-nodes/<node>`` an agent publishes."""
        return {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": node, "namespace": self.identity_namespace},
                "data": {KEY_RECORD_KEY: self.ring(node).record()}}

    def adopt_beacon(self, annotations: dict[str, str]) -> bool:
        """Take the controller key and beacon from the beacon Lease's annotations."""
        key = annotations.get(BEACON_KEY_ANNOTATION)
        if key:
            self.beacon.trust(base64.b64decode(key))
        return self.beacon.offer(annotations.get(BEACON_ANNOTATION, ""))

    def statement(self, node: str) -> Heartbeat:
        """``node``'s signed statement now."""
        alive = [NodeName(n) for n, s in self.statuses.items() if s == "True"]
        dead = [NodeName(n) for n, s in self.statuses.items() if s == "False"]
        return sign_heartbeat(origin=NodeName(node), incarnation=1, seq=next(self._seq),
                              kubelet_ok=node not in self.kubelet_down and self.statuses.get(node) != "False",
                              cloud_ok=node not in self.carriers, alive=alive, dead=dead,
                              keyring=self.ring(node), beacon=self.beacon.value)

    def evidence(self) -> dict[str, str]:
        """writer -> evidence annotation, for every node that writes (has a status, is not cut off)."""
        if not self.beacon.value:
            return {}
        speakers = [n for n, s in self.statuses.items() if s is not None]
        out: dict[str, str] = {}
        for writer in speakers:
            if writer in self.carriers:
                continue
            carried = [self.statement(n) for n, by in self.carriers.items() if by == writer and n in speakers]
            out[writer] = encode_evidence(self.statement(writer), carried)
        return out

    def _lease(self, writer: str, text: str) -> dict[str, Any]:
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": writer, "namespace": self.identity_namespace,
                             "annotations": {EVIDENCE_ANNOTATION: text}},
                "spec": {"holderIdentity": writer}}

    # -- writers -----------------------------------------------------------------------------------

    def sync_fake(self, kube: Any) -> None:
        """Publish keys and evidence into the unit tests' ``FakeKube`` (synchronous ``put``)."""
        beacon = kube.objects.get(("Lease", self.beacon_namespace, BEACON_LEASE_NAME))
        if beacon is not None:
            self.adopt_beacon(beacon["metadata"].get("annotations") or {})
        for node in self._rings:
            if node not in self._published:
                kube.put("ConfigMap", self.key_configmap(node))
                self._published.add(node)
        for writer, text in self.evidence().items():
            kube.put("Lease", self._lease(writer, text))

    async def publish(self, client: AsyncClient) -> None:
        """Publish keys and evidence through a real API client (create or replace)."""
        try:
            lease = await client.get(Lease, BEACON_LEASE_NAME, namespace=self.beacon_namespace)
            self.adopt_beacon(dict(lease.metadata.annotations or {}))
        except ApiError as exc:
            if exc.status.code != 404:
                raise
        for node in list(self._rings):
            if node not in self._published:
                await _upsert(client, ConfigMap, self.key_configmap(node))
                self._published.add(node)
        for writer, text in self.evidence().items():
            await _upsert(client, Lease, self._lease(writer, text))


async def _upsert(client: AsyncClient, res: Any, obj: dict[str, Any]) -> None:
    meta = obj["metadata"]
    try:
        current = await client.get(res, meta["name"], namespace=meta["namespace"])
    except ApiError as exc:
        if exc.status.code != 404:
            raise
        await client.create(res.from_dict(obj))
        return
    obj = {**obj, "metadata": {**meta, "resourceVersion": current.metadata.resourceVersion}}
    await client.replace(res.from_dict(obj))

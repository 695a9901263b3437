"""The compromised-agent toolkit of the adversarial tests (test_adversary.py): a-1's real pod-bound
ServiceAccount token and signing key, used by hostile code, and readers of what the lab shows.

Each attack lives in a test module of its own or in test_adversary.py; all of them run against the
one 5-node pool of test_adversary.py (a cluster costs about two minutes to bring up).
"""

from __future__ import annotations

import base64
import json
import urllib.request

import _pool
from lightkube import ApiError
from lightkube.resources.coordination_v1 import Lease

from edgewatch.core.beacon import BeaconHolder
from edgewatch.core.identity import NodeKeyring, load_or_create_key_file
from edgewatch.core.types import NodeName
from edgewatch.core.wire import sign_heartbeat
from edgewatch.names import BEACON_ANNOTATION, BEACON_KEY_ANNOTATION, BEACON_LEASE_NAME, EVIDENCE_ANNOTATION, IDENTITY_NAMESPACE
from edgewatch_lab.playground.cluster import PlaygroundCluster
from edgewatch_lab.testing.kubeletsim import make_client

AGENT_SUBJECT = "system:serviceaccount:edgewatch:edgewatch-agent"


def taints(c: PlaygroundCluster, name: str) -> set[str]:
    """The node's taints as ``key:effect``."""
    return {f"{t['key']}:{t['effect']}" for t in _pool.node(c, name)["spec"].get("taints") or []}


def agent_token(c: PlaygroundCluster, node: str) -> str:
    """The agent pod's projected ServiceAccount token on ``node`` (what root on that node can read)."""
    for path in (c.nodes[node].root / "var/lib/kubelet/pods").glob("*/volumes/*/token"):
        token = path.read_text().strip()
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        if claims.get("sub") == AGENT_SUBJECT:
            return token
    raise AssertionError(f"no agent token found on {node}")


class Attacker:
    """a-1 compromised: its agent's token and signing key, used by hostile code."""

    def __init__(self, c: PlaygroundCluster, node: str = "a-1") -> None:
        assert c.cp is not None and c.cp.ca_file is not None and c.workdir is not None
        self.node = node
        kubeconfig = c.workdir / f"attacker-{node}.kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "x",
            "clusters": [{"name": "x", "cluster": {"server": c.cp.apiserver_url,
                                                   "certificate-authority": str(c.cp.ca_file)}}],
            "users": [{"name": "x", "user": {"token": agent_token(c, node)}}],
            "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}]}))
        self.kubeconfig = kubeconfig
        key_file = c.nodes[node].root / "var/lib/edgewatch/identity.key"
        self.ring = NodeKeyring(node=NodeName(node), keys=load_or_create_key_file(key_file))
        self.beacon = BeaconHolder()
        self.seq = 10**9

    def client(self):  # type: ignore[no-untyped-def]
        return make_client(str(self.kubeconfig), timeout_s=10)

    async def refresh_beacon(self, client) -> None:  # type: ignore[no-untyped-def]
        lease = await client.get(Lease, BEACON_LEASE_NAME, namespace="edgewatch")
        annotations = lease.metadata.annotations or {}
        self.beacon.trust(base64.b64decode(annotations[BEACON_KEY_ANNOTATION]))
        self.beacon.offer(annotations[BEACON_ANNOTATION])

    def own_statement(self, *, alive: list[str], dead: list[str]):  # type: ignore[no-untyped-def]
        self.seq += 1
        return sign_heartbeat(origin=NodeName(self.node), incarnation=1, seq=self.seq, kubelet_ok=True, cloud_ok=True,
                              alive=[NodeName(n) for n in alive], dead=[NodeName(n) for n in dead],
                              keyring=self.ring, beacon=self.beacon.value)

    def forged_statement(self, origin: str, *, dead: list[str]) -> dict[str, object]:
        """A statement claiming to be ``origin``'s, signed with the attacker's own (published) key."""
        payload = {"v": 4, "origin": origin, "incarnation": 1, "seq": 1, "kubelet_ok": True, "cloud_ok": True,
                   "alive": [], "dead": sorted(dead), "carrier": "", "beacon": self.beacon.value}
        return self.ring.sign(payload, domain="edgewatch/heartbeat/v4")

    async def write_evidence(self, client, text: str) -> None:  # type: ignore[no-untyped-def]
        lease = await client.get(Lease, self.node, namespace=IDENTITY_NAMESPACE)
        lease.metadata.annotations = {**(lease.metadata.annotations or {}), EVIDENCE_ANNOTATION: text}
        await client.replace(lease)


def controller_metric(c: PlaygroundCluster, name: str, labels: dict[str, str]) -> float:
    """A counter summed over the controller replicas' /metrics (each on its cloud node, port 51006)."""
    total = 0.0
    for node in c.scenario.cloud_node_names():
        try:
            with urllib.request.urlopen(urllib.request.Request(f"http://{c.nodes[node].address}:51006/metrics",
                                                               headers=c.metrics_headers()), timeout=5) as resp:
                text = resp.read().decode()
        except OSError:
            continue
        want = ",".join(f'{k}="{v}"' for k, v in labels.items())
        for line in text.splitlines():
            if line.startswith(f"{name}{{{want}}} "):
                total += float(line.split()[-1])
    return total


def forbidden(exc: ApiError) -> bool:
    """The apiserver refused (403: RBAC or an admission policy)."""
    return exc.status.code == 403

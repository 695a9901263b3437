"""A compromised agent on the real control plane (issue 12): valid credentials, malicious code.

The lab runs edgewatch as shipped (agents and controller as pods, the shipped RBAC and admission
policies). The attacker holds a-1's pod-bound ServiceAccount token (read from the pod's projected
volume, as root on a-1 would) and a-1's signing key (from a-1's state folder), and uses them
directly. Every attempt must be refused by the apiserver or the controller, counted, and harmless:
no live node evicted, no dead node kept.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from _pool import NODES, edge, five_node_pool, node, wait
from lightkube import ApiError
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ConfigMap, Node

from edgewatch.core.beacon import BeaconHolder
from edgewatch.core.identity import NodeKeyring, load_or_create_key_file
from edgewatch.core.types import NodeName
from edgewatch.core.wire import sign_heartbeat
from edgewatch.leases import renew_on_behalf
from edgewatch.names import (
    BEACON_ANNOTATION,
    BEACON_KEY_ANNOTATION,
    BEACON_LEASE_NAME,
    EDGE_CONDITION_TYPE,
    EVIDENCE_ANNOTATION,
    FAILED_TAINT_KEY,
    IDENTITY_NAMESPACE,
)
from edgewatch.playground.cluster import PlaygroundCluster
from edgewatch.testing.kubeletsim import make_client

pytestmark = [pytest.mark.root, pytest.mark.controlplane]

AGENT_SUBJECT = "system:serviceaccount:edgewatch:edgewatch-agent"


@pytest.fixture(scope="module")
def cluster(binaries) -> Iterator[PlaygroundCluster]:  # type: ignore[no-untyped-def]
    with five_node_pool(binaries, "adversary-test") as c:
        yield c


_wait, _node, _edge = wait, node, edge


def _taints(c: PlaygroundCluster, name: str) -> set[str]:
    return {f"{t['key']}:{t['effect']}" for t in _node(c, name)["spec"].get("taints") or []}


def _agent_token(c: PlaygroundCluster, node: str) -> str:
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
            "users": [{"name": "x", "user": {"token": _agent_token(c, node)}}],
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


def _controller_metric(c: PlaygroundCluster, name: str, labels: dict[str, str]) -> float:
    """A counter summed over the controller replicas' /metrics (each on its cloud node, port 51006)."""
    total = 0.0
    for node in c.scenario.cloud_node_names():
        try:
            with urllib.request.urlopen(f"http://{c.nodes[node].address}:51006/metrics", timeout=5) as resp:
                text = resp.read().decode()
        except OSError:
            continue
        want = ",".join(f'{k}="{v}"' for k, v in labels.items())
        for line in text.splitlines():
            if line.startswith(f"{name}{{{want}}} "):
                total += float(line.split()[-1])
    return total


def _forbidden(exc: ApiError) -> bool:
    return exc.status.code == 403


def test_a_stolen_token_cannot_write_a_verdict_or_another_nodes_objects(cluster: PlaygroundCluster) -> None:
    attacker = Attacker(cluster)

    async def attempts() -> list[str]:
        refused = []
        client = attacker.client()
        try:
            for what, call in [
                ("EdgeHealthy=False on a-2", client.patch(Node.Status, "a-2", {"status": {"conditions": [{
                    "type": EDGE_CONDITION_TYPE, "status": "False", "reason": "Forged", "message": "x",
                    "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})),
                ("a second key for a-2", client.patch(ConfigMap, "a-2", {"data": {"keys": attacker.ring.record()}},
                                                      namespace=IDENTITY_NAMESPACE)),
                ("a-2's evidence", client.patch(Lease, "a-2", {"metadata": {"annotations": {
                    EVIDENCE_ANNOTATION: "[]"}}}, namespace=IDENTITY_NAMESPACE)),
                ("a key for a node that does not exist", client.create(ConfigMap.from_dict({
                    "metadata": {"name": "a-9", "namespace": IDENTITY_NAMESPACE},
                    "data": {"keys": attacker.ring.record()}}))),
                ("the controller's beacon", client.patch(Lease, BEACON_LEASE_NAME, {"metadata": {"annotations": {
                    BEACON_ANNOTATION: "1.2.3"}}}, namespace="edgewatch")),
            ]:
                try:
                    await call
                except ApiError as exc:
                    assert _forbidden(exc), f"{what}: {exc.status.code} {exc.status.message}"
                    refused.append(what)
        finally:
            await client.close()
        return refused

    refused = asyncio.run(attempts())
    assert len(refused) == 5, refused
    assert _edge(cluster, "a-2") == "True"


def test_one_compromised_node_cannot_make_a_live_node_unhealthy(cluster: PlaygroundCluster) -> None:
    """a-1 signs that a-2 is dead and forges a-3's and a-4's statements saying the same: the forgeries
    are refused (a-1's key is not theirs) and a-1's own vote is one of five."""
    attacker = Attacker(cluster)
    before = _controller_metric(cluster, "edgewatch_controller_evidence_total", {"result": "sender_mismatch"})

    async def attack(seconds: float) -> None:
        client = attacker.client()
        try:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                await attacker.refresh_beacon(client)
                own = attacker.own_statement(alive=["a-1"], dead=["a-2"])
                items = [own.to_wire(), attacker.forged_statement("a-3", dead=["a-2"]),
                         attacker.forged_statement("a-4", dead=["a-2"])]
                try:
                    await attacker.write_evidence(client, json.dumps(items, separators=(",", ":")))
                except ApiError as exc:
                    assert exc.status.code == 409, exc  # racing the real agent's own writes
                for _ in range(5):
                    assert _edge(cluster, "a-2") == "True", "a live node judged unhealthy on forged evidence"
                    await asyncio.sleep(0.1)
        finally:
            await client.close()

    asyncio.run(attack(20.0))
    assert FAILED_TAINT_KEY + ":NoExecute" not in _taints(cluster, "a-2")
    after = _controller_metric(cluster, "edgewatch_controller_evidence_total", {"result": "sender_mismatch"})
    assert after > before, "the forged statements were not counted as refused"


def test_a_dead_node_is_not_kept_alive_by_a_forged_carry(cluster: PlaygroundCluster) -> None:
    """a-5 dies. a-1 keeps renewing a-5's Lease with a delegate mark (its RBAC allows that much) and
    carries a-5's last genuine statement (a replay). The controller needs a-5's own *fresh* signed
    word: without it the mark is no heartbeat, the peers' signed statements say dead, a-5 is failed."""
    assert cluster.cp is not None
    attacker = Attacker(cluster)
    recorded = json.loads(json.loads(cluster.cp.kubectl("get", "lease", "a-5", "-n", IDENTITY_NAMESPACE, "-o", "json"))
                          ["metadata"]["annotations"][EVIDENCE_ANNOTATION])[0]
    assert recorded["origin"] == "a-5"
    replayed_before = _controller_metric(cluster, "edgewatch_controller_evidence_total", {"result": "older"}) + \
        _controller_metric(cluster, "edgewatch_controller_evidence_total", {"result": "unknown_beacon"})
    cluster.kill_node("a-5")
    try:
        async def attack() -> float:
            client = attacker.client()
            killed = time.monotonic()
            try:
                while time.monotonic() - killed < 90:
                    await renew_on_behalf(client=client, node="a-5", delegate="a-1", via="peer",
                                          alive_at=dt.datetime.now(dt.timezone.utc))
                    await attacker.refresh_beacon(client)
                    own = attacker.own_statement(alive=["a-1", "a-2", "a-3", "a-4", "a-5"], dead=[])
                    items = [own.to_wire(), recorded]
                    try:
                        await attacker.write_evidence(client, json.dumps(items, separators=(",", ":")))
                    except ApiError as exc:
                        assert exc.status.code == 409, exc
                    if FAILED_TAINT_KEY + ":NoExecute" in _taints(cluster, "a-5"):
                        return time.monotonic() - killed
                    await asyncio.sleep(1)
            finally:
                await client.close()
            raise AssertionError("a dead node with a forged carry was never judged failed")

        took = asyncio.run(attack())
        print(f"\nforged carry of a dead node: failed taint after {took:.1f} s")
        replayed_after = _controller_metric(cluster, "edgewatch_controller_evidence_total", {"result": "older"}) + \
            _controller_metric(cluster, "edgewatch_controller_evidence_total", {"result": "unknown_beacon"})
        assert replayed_after > replayed_before, "the replayed statement was not seen and refused"
        assert _edge(cluster, "a-5") == "False"
    finally:
        cluster.revive_node("a-5")
    _wait(lambda: _edge(cluster, "a-5") == "True" and FAILED_TAINT_KEY + ":NoExecute" not in _taints(cluster, "a-5"),
          120, "a-5 healthy again after revive")


def test_a_flood_is_rate_limited_and_harmless(cluster: PlaygroundCluster) -> None:
    url = f"http://{cluster.nodes['a-2'].host.address}:51005/v1/exchange"  # type: ignore[union-attr]
    codes: dict[int, int] = {}
    for _ in range(400):
        req = urllib.request.Request(url, data=b"x" * 100, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                code = resp.status
        except urllib.error.HTTPError as exc:
            code = exc.code
        codes[code] = codes.get(code, 0) + 1
    assert codes.get(429, 0) >= 300, codes
    time.sleep(3)
    assert all(_edge(cluster, n) == "True" for n in NODES), "the flood changed a verdict"

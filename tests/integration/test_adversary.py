"""A compromised agent on the real control plane (docs/security.md): valid credentials, malicious code.

The lab runs edgewatch as shipped (agents and controller as pods, the shipped RBAC and admission
policies). The attacker holds a-1's pod-bound ServiceAccount token (read from the pod's projected
volume, as root on a-1 would) and a-1's signing key (from a-1's state folder), and uses them
directly. Every attempt must be refused by the apiserver or the controller, counted, and harmless:
no live node evicted, no dead node kept.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from _attack_keys import attack_squatted_key
from _attack_port import attack_liveness_datagrams, attack_slow_bodies_and_connection_flood
from _attack_renewals import (
    attack_bare_renewals_of_a_dead_node,
    attack_carries_ahead_of_a_live_node,
    attack_future_renewal,
    attack_respelled_and_spoiled_marks,
    carry_not_believed_events,
)
from _attacker import Attacker, controller_metric, forbidden, taints
from _pool import NODES, edge, five_node_pool, wait
from lightkube import ApiError
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ConfigMap, Node

from edgewatch.kube.leases import renew_on_behalf
from edgewatch.names import (
    BEACON_ANNOTATION,
    BEACON_LEASE_NAME,
    EDGE_CONDITION_TYPE,
    EVIDENCE_ANNOTATION,
    FAILED_TAINT_KEY,
    IDENTITY_NAMESPACE,
)
from edgewatch_lab.playground.cluster import PlaygroundCluster

pytestmark = [pytest.mark.root, pytest.mark.controlplane]


@pytest.fixture(scope="module")
def cluster(binaries) -> Iterator[PlaygroundCluster]:  # type: ignore[no-untyped-def]
    with five_node_pool(binaries, "adversary-test") as c:
        yield c


def _exists(c: PlaygroundCluster, kind: str, name: str, namespace: str) -> bool:
    assert c.cp is not None
    try:
        c.cp.kubectl("get", kind, name, "-n", namespace, "-o", "name")
    except subprocess.CalledProcessError:  # not there yet (or a failed read): poll again
        return False
    return True


def test_a_stolen_token_cannot_write_a_verdict_or_another_nodes_objects(cluster: PlaygroundCluster) -> None:
    # The objects under attack must exist first: a patch of a missing object is a 404 whether or
    # not the policy would refuse it. (EdgeHealthy can be True on the others' evidence before
    # a-2's agent wrote its own Lease.)
    wait(lambda: _exists(cluster, "lease", "a-2", IDENTITY_NAMESPACE)
         and _exists(cluster, "configmap", "a-2", IDENTITY_NAMESPACE), 60, "a-2's evidence Lease and key record")
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
                    assert forbidden(exc), f"{what}: {exc.status.code} {exc.status.message}"
                    refused.append(what)
        finally:
            await client.close()
        return refused

    refused = asyncio.run(attempts())
    assert len(refused) == 5, refused
    assert edge(cluster, "a-2") == "True"


def test_one_compromised_node_cannot_make_a_live_node_unhealthy(cluster: PlaygroundCluster) -> None:
    """a-1 signs that a-2 is dead and forges a-3's and a-4's statements saying the same: the forgeries
    are refused (a-1's key is not theirs) and a-1's own vote is one of five."""
    attacker = Attacker(cluster)
    before = controller_metric(cluster, "edgewatch_controller_evidence_total", {"result": "sender_mismatch"})

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
                    assert edge(cluster, "a-2") == "True", "a live node judged unhealthy on forged evidence"
                    await asyncio.sleep(0.1)
        finally:
            await client.close()

    asyncio.run(attack(20.0))
    assert FAILED_TAINT_KEY + ":NoExecute" not in taints(cluster, "a-2")
    after = controller_metric(cluster, "edgewatch_controller_evidence_total", {"result": "sender_mismatch"})
    assert after > before, "the forged statements were not counted as refused"


def test_a_dead_node_is_not_kept_alive_by_a_forged_carry(cluster: PlaygroundCluster) -> None:
    """a-5 dies. a-1 keeps renewing a-5's Lease with a delegate mark (its RBAC allows that much),
    carries a-5's last genuine statement (a replay) and names a-5 alive in its own statements. The
    controller needs a-5's own *fresh* signed word: without it the mark is no heartbeat, the peers'
    signed statements say dead, a-5 is failed. And it never looks alive again: a-5's own last
    statement is fresh for 30 s after it died, but its neighbours' newer statements supersede it,
    so a-1's word alone never makes it look linked (sampled every second for 40 s after the kill;
    while a-1 names it alive its verdict may read unknown, never healthy)."""
    assert cluster.cp is not None
    attacker = Attacker(cluster)
    recorded = json.loads(json.loads(cluster.cp.kubectl("get", "lease", "a-5", "-n", IDENTITY_NAMESPACE, "-o", "json"))
                          ["metadata"]["annotations"][EVIDENCE_ANNOTATION])[0]
    assert recorded["origin"] == "a-5"
    replayed_before = controller_metric(cluster, "edgewatch_controller_evidence_total", {"result": "older"}) + \
        controller_metric(cluster, "edgewatch_controller_evidence_total", {"result": "unknown_beacon"})
    cluster.kill_node("a-5")
    try:
        async def attack() -> float:
            client = attacker.client()
            killed = time.monotonic()
            failed_after: float | None = None
            event_seen = False
            verdicts: list[tuple[float, str | None]] = []  # (seconds after the kill, EdgeHealthy)
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
                    if failed_after is None and FAILED_TAINT_KEY + ":NoExecute" in taints(cluster, "a-5"):
                        failed_after = time.monotonic() - killed
                    verdicts.append((time.monotonic() - killed, edge(cluster, "a-5")))
                    # the attacker keeps at it until the controller names it in an Event (the
                    # controller's own autonomy hold may also write the Lease in between) and
                    # past the 30 s a-5's own last statement stays fresh
                    event_seen = event_seen or (failed_after is not None and any(
                        "renewals by a-1" in m for m in carry_not_believed_events(cluster, "a-5")))
                    if event_seen and time.monotonic() - killed > 40:
                        break
                    await asyncio.sleep(1)
            finally:
                await client.close()
            assert failed_after is not None, "a dead node with a forged carry was never judged failed"
            assert event_seen, "no CarryNotBelieved Event naming a-1 on a-5 while a-1 kept renewing"
            # once a-5 no longer reads healthy (unhealthy, or unknown while a-1's word is counted
            # against its neighbours'), it never reads healthy again
            lost = next((at for at, v in verdicts if v in ("False", "Unknown")), None)
            assert lost is not None, f"a-5 never stopped reading healthy: {verdicts}"
            resurrected = [(round(at, 1), v) for at, v in verdicts if at > lost and v == "True"]
            assert not resurrected, f"a-5 looked healthy again after it was judged dead: {resurrected}"
            return failed_after

        took = asyncio.run(attack())
        print(f"\nforged carry of a dead node: failed taint after {took:.1f} s")
        replayed_after = controller_metric(cluster, "edgewatch_controller_evidence_total", {"result": "older"}) + \
            controller_metric(cluster, "edgewatch_controller_evidence_total", {"result": "unknown_beacon"})
        assert replayed_after > replayed_before, "the replayed statement was not seen and refused"
    finally:
        cluster.revive_node("a-5")
    wait(lambda: edge(cluster, "a-5") == "True" and FAILED_TAINT_KEY + ":NoExecute" not in taints(cluster, "a-5"),
          120, "a-5 healthy again after revive")


def test_a_bare_renewal_keeps_no_dead_node_alive(cluster: PlaygroundCluster) -> None:
    """Attack 1 (docs/security.md): a-1's token renewing dead a-5's Lease with no mark is refused by the apiserver
    (tests/integration/_attack_renewals.py); a-5 is failed and evicted as without the attacker."""
    failed_after = attack_bare_renewals_of_a_dead_node(cluster)
    assert failed_after < 60


def test_one_field_has_one_meaning_for_the_apiserver_and_the_controller(cluster: PlaygroundCluster) -> None:
    """A mark in another spelling of the renewal's instant, or spoiled after a correct carry, kept a
    dead node NORMAL; now refused by the apiserver (tests/integration/_attack_renewals.py), and a-5
    is failed as without the attacker."""
    respelled, spoiled, failed_after = attack_respelled_and_spoiled_marks(cluster)
    assert respelled >= 5 and spoiled >= 10
    assert failed_after < 30


def test_carries_at_the_bound_never_make_a_live_node_not_ready(cluster: PlaygroundCluster) -> None:
    """The bound is derived from the kubelet's 10 s interval and the lab's 20 s grace (5 s): a-1's
    carries as far ahead as admitted hide a-2's kubelet for at most 15 s, so a-2 stays Ready."""
    admitted, refused, not_ready = attack_carries_ahead_of_a_live_node(cluster)
    assert admitted >= 2 and refused >= 2
    assert not_ready == 0


def test_a_far_future_renewal_is_refused(cluster: PlaygroundCluster) -> None:
    attack_future_renewal(cluster)


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
    assert all(edge(cluster, n) == "True" for n in NODES), "the flood changed a verdict"


def test_slow_bodies_and_a_connection_flood_leave_the_agent_whole(cluster: PlaygroundCluster) -> None:
    attack_slow_bodies_and_connection_flood(cluster)


def test_liveness_datagrams_prove_peers_alive_and_a_strangers_are_dropped(cluster: PlaygroundCluster) -> None:
    attack_liveness_datagrams(cluster)


def test_a_squatted_key_silences_no_one(cluster: PlaygroundCluster) -> None:
    """a-1 publishes a-2's key as its own, then a controller fail-over and a fresh agent follow
    (tests/integration/_attack_keys.py): a-2 stays healthy, the squatted key is refused."""
    attack_squatted_key(cluster)

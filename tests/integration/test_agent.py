"""The agent on real parts: five nodes in network namespaces (kubelet simulator + the real agent
process each), the real control plane on the lab's cloud address, real faults from nftables.

Covers: hostile messages are rejected (forged, replayed, oversized, malformed, unsigned) with a
metric and no harm (the replayed one in the middle of real traffic from the same sender); a node cut from the cloud keeps its Lease renewed with the delegate mark and
its EdgeHealthy condition; a killed node turns unhealthy within a few probe periods; a 3|2 split
judges the minority and never the majority.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from _pool import NODES, edge, five_node_pool, node, wait

from edgewatch.names import DELEGATE_HEARTBEAT_ANNOTATION, DELEGATED_VIA_ANNOTATION, EDGE_CONDITION_TYPE
from edgewatch_lab.playground.cluster import PlaygroundCluster
from edgewatch_lab.testing.kubeletsim import make_client

pytestmark = [pytest.mark.root, pytest.mark.controlplane]


@pytest.fixture(scope="module")
def cluster(binaries) -> Iterator[PlaygroundCluster]:  # type: ignore[no-untyped-def]
    with five_node_pool(binaries, "agent-test", settle_s=90) as c:
        yield c


_wait, _node, _edge = wait, node, edge


def _condition(c: PlaygroundCluster, name: str) -> object:
    """The whole EdgeHealthy condition (for failure messages), or the read error."""
    try:
        conds = _node(c, name)["status"].get("conditions", [])
    except Exception as exc:  # noqa: BLE001 - reported, not judged
        return repr(exc)
    return next((x for x in conds if x["type"] == EDGE_CONDITION_TYPE), None)


def _lease(c: PlaygroundCluster, name: str) -> dict:  # type: ignore[type-arg]
    assert c.cp is not None
    return json.loads(c.cp.kubectl("get", "lease", name, "-n", "kube-node-lease", "-o", "json"))


def _url(c: PlaygroundCluster, name: str, path: str) -> str:
    return f"http://{c.nodes[name].host.address}:51005{path}"


def _post(url: str, body: bytes) -> int:
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _metric(c: PlaygroundCluster, name: str, metric: str, labels: str) -> float:
    req = urllib.request.Request(_url(c, name, "/metrics"), headers=c.metrics_headers())
    with urllib.request.urlopen(req, timeout=5) as resp:
        text = resp.read().decode()
    m = re.search(rf"^{re.escape(metric)}\{{{re.escape(labels)}\}} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


SEND = """
import sys, time, secrets, urllib.request, urllib.error
from edgewatch.core.identity import NodeKeyring, load_or_create_key_file
from edgewatch.core.wire import encode_envelope, sign_heartbeat
keyring = NodeKeyring(node="a-2", keys=load_or_create_key_file(sys.argv[1]))
own = sign_heartbeat(origin="a-2", incarnation=time.time_ns(), seq=1, kubelet_ok=True, cloud_ok=True,
                     alive=["a-2"], dead=[], keyring=keyring)
raw = encode_envelope(sender="a-2", receiver="a-1", epoch=time.time_ns(), seq=1, nonce=secrets.token_hex(16),
                      own=own, keyring=keyring)
for _ in range(2):  # the same bytes twice: the second is a replay
    try:
        with urllib.request.urlopen(urllib.request.Request(sys.argv[2], data=raw, method="POST"), timeout=5) as r:
            print(r.status)
    except urllib.error.HTTPError as e:
        print(e.code, e.headers.get("X-Edgewatch-Refused"))
"""


def _identity_file(cluster: PlaygroundCluster, node: str) -> Path:
    """The node's agent key, in the DaemonSet's hostPath state folder on that node."""
    return cluster.nodes[node].root / "var/lib/edgewatch/identity.key"


def _envelope(keyring, *, dead: list[str]) -> bytes:  # type: ignore[no-untyped-def]
    from edgewatch.core.wire import encode_envelope, sign_heartbeat

    own = sign_heartbeat(origin="a-2", incarnation=time.time_ns(), seq=1, kubelet_ok=True, cloud_ok=True,
                         alive=["a-2"], dead=dead, keyring=keyring)
    return encode_envelope(sender="a-2", receiver="a-1", epoch=time.time_ns(), seq=1, nonce=secrets.token_hex(16),
                           own=own, keyring=keyring)


def test_hostile_messages_are_rejected_counted_and_harmless(cluster: PlaygroundCluster) -> None:
    url = _url(cluster, "a-1", "/v1/exchange")
    before = {r: _metric(cluster, "a-1", "edgewatch_agent_messages_received_total", f'result="{r}"')
              for r in ("malformed", "unsigned", "bad_signature", "unknown_key", "oversized", "replayed",
                        "sender_mismatch")}
    assert _post(url, b"\xff not json") == 400
    assert _post(url, b'{"v": 1, "sender": "a-2"}') == 400  # JSON without the v2 frame (a v1 agent)
    from edgewatch.core.identity import NodeKey, NodeKeyring, load_or_create_key_file
    from edgewatch.core.wire import ENVELOPE_MAGIC

    real = NodeKeyring(node="a-2", keys=load_or_create_key_file(_identity_file(cluster, "a-2")))
    assert _post(url, ENVELOPE_MAGIC + b" " + real.primary_key_id.encode() + b"\n{}") == 403  # no signature
    # Forged: a-2's published key id with a signature made by a key it is not.
    header, body = _envelope(real, dead=["a-1"]).split(b"\n", 1)
    stranger = NodeKeyring(node="a-2", keys=(NodeKey.generate(),))
    _, wrong = stranger.sign_bytes(body, domain="edgewatch/envelope/v4")
    assert _post(url, b" ".join(header.split(b" ")[:2] + [wrong.encode()]) + b"\n" + body) == 403  # bad signature
    assert _post(url, _envelope(stranger, dead=["a-1"])) == 403  # a key nobody published: unknown key
    # A compromised a-3 signs as a-2 with its own, published key: refused (a node signs only as itself).
    a3 = NodeKeyring(node="a-3", keys=load_or_create_key_file(_identity_file(cluster, "a-3")))
    assert _post(url, _envelope(a3, dead=["a-1"])) == 403
    assert _post(url, b"{" + b" " * 300_000 + b"}") == 413
    # Signed with the real key but sent from the wrong address (the test runs in the cloud
    # namespace, not on a-2): the sender is bound to its InternalIP.
    assert _post(url, _envelope(real, dead=["a-1"])) == 403
    # A valid envelope from a-2's own address, sent twice: accepted, then refused as a replay (and
    # still answered, 409, so a genuine sender's probe would not fail).
    done = cluster.nodes["a-2"].host.run([sys.executable, "-c", SEND, str(_identity_file(cluster, "a-2")), url],
                                         timeout=30)
    lines = done.stdout.strip().splitlines()
    assert lines[0] == "200", done.stdout + done.stderr
    assert lines[1] == "409 replayed", lines
    after = {r: _metric(cluster, "a-1", "edgewatch_agent_messages_received_total", f'result="{r}"') for r in before}
    for reason in before:
        assert after[reason] >= before[reason] + 1, f"{reason} not counted: {before[reason]} -> {after[reason]}"
    # No harm: the agent is healthy and a-1 is still judged healthy by the group.
    with urllib.request.urlopen(_url(cluster, "a-1", "/healthz"), timeout=5) as resp:
        assert resp.status == 200
    time.sleep(3)
    assert _edge(cluster, "a-1") == "True"


def test_cut_node_keeps_its_heartbeat_through_a_peer(cluster: PlaygroundCluster) -> None:
    lab = cluster.lab
    assert lab is not None
    lab.cut_cloud(["a-2"])
    try:
        def marked() -> bool:
            ann = _lease(cluster, "a-2")["metadata"].get("annotations", {})
            return ann.get(DELEGATE_HEARTBEAT_ANNOTATION) == "true" and ann.get(DELEGATED_VIA_ANNOTATION) == "peer"

        took = _wait(marked, 30, "the delegate mark on a-2's Lease")
        print(f"\ncut -> first delegated renewal: {took:.1f} s")
        # For longer than kube-controller-manager's grace (20 s): renewTime keeps moving, node stays
        # Ready, and the group keeps judging it healthy.
        renewals = set()
        end = time.monotonic() + 30
        while time.monotonic() < end:
            renewals.add(_lease(cluster, "a-2")["spec"]["renewTime"])
            node = _node(cluster, "a-2")
            ready = next(x for x in node["status"]["conditions"] if x["type"] == "Ready")
            assert ready["status"] == "True", "a cut-off node whose heartbeat is carried must stay Ready"
            assert _edge(cluster, "a-2") == "True"
            time.sleep(2)
        assert len(renewals) >= 4, f"the carried Lease was renewed only {len(renewals)} times in 30 s"
    finally:
        lab.restore_cloud(["a-2"])

    def unmarked() -> bool:
        return DELEGATE_HEARTBEAT_ANNOTATION not in _lease(cluster, "a-2")["metadata"].get("annotations", {})

    _wait(unmarked, 40, "the mark to go once a-2's kubelet renews by itself")


def test_killed_node_is_judged_unhealthy_within_a_few_periods(cluster: PlaygroundCluster) -> None:
    cluster.kill_node("a-5")
    try:
        took = _wait(lambda: _edge(cluster, "a-5") == "False", 30, "EdgeHealthy=False on a-5", interval_s=0.1)
        print(f"\nkill -> unhealthy verdict published: {took:.1f} s")
        assert took < 12  # detector: 5 s of silence and 3 failed probes, then one exchange period
        assert all(_edge(cluster, n) == "True" for n in NODES[:4])
    finally:
        cluster.revive_node("a-5")
    _wait(lambda: _edge(cluster, "a-5") == "True", 60, "a-5 healthy again after revive")


def test_split_3_2_judges_the_minority_never_the_majority(cluster: PlaygroundCluster) -> None:
    lab = cluster.lab
    assert lab is not None
    lab.split("a", [NODES[:3], NODES[3:]])
    try:
        _wait(lambda: _edge(cluster, "a-4") == "False" and _edge(cluster, "a-5") == "False", 30,
              "the 2-node side judged unhealthy")
        for _ in range(10):  # and the 3-node side is never judged anything but healthy
            seen = {n: _edge(cluster, n) for n in NODES[:3]}
            assert all(v == "True" for v in seen.values()), (seen, {n: _condition(cluster, n) for n in NODES[:3]})
            time.sleep(1)
    finally:
        lab.unsplit("a")
    _wait(lambda: all(_edge(cluster, n) == "True" for n in NODES), 40, "everyone healthy after the heal")


def test_kubectl_describe_shows_the_verdict(cluster: PlaygroundCluster) -> None:
    assert cluster.cp is not None
    out = cluster.cp.kubectl("describe", "node", "a-1")
    assert re.search(r"EdgeHealthy\s+True\s.*PeersSeeAlive\s+healthy: \d of 5 peers see it alive", out), out


def test_agent_status_command_lists_every_node(cluster: PlaygroundCluster) -> None:
    from edgewatch.status import collect

    async def rows() -> list[dict]:  # type: ignore[type-arg]
        client = make_client(str(cluster.admin_kubeconfig), timeout_s=5)
        try:
            return await collect(client)
        finally:
            await client.close()

    table = {r["node"]: r for r in asyncio.run(rows())}
    assert set(NODES) <= set(table)
    assert all(table[n]["edge"] == "healthy" and table[n]["pool"] == "a" for n in NODES)


def _read(url: str, token: str | None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def test_metrics_tell_the_map_only_to_the_metrics_reader(cluster: PlaygroundCluster) -> None:
    """The attack: from the LAN, or as root on a-1 with a-1's own pod-bound agent token, or with any
    pod's ServiceAccount token, read a-2's /metrics (the group's members, the pool's leader, every
    link state) and the controller's. Each is refused (401/403) and counted; the shipped scraper
    ServiceAccount's token reads them; the kubelet's probes (/healthz, /readyz) stay open."""
    from _attacker import agent_token

    assert cluster.cp is not None
    victim = _url(cluster, "a-2", "/metrics")
    controllers = [f"http://{cluster.nodes[n].address}:51006" for n in cluster.scenario.cloud_node_names()]
    controller = next(url for url in controllers if _read(f"{url}/healthz", None)[0] == 200) + "/metrics"
    any_pod = cluster.cp.kubectl("create", "token", "default", "--namespace", "default").strip()
    stolen = agent_token(cluster, "a-1")
    for url in (victim, controller):
        code, body = _read(url, None)
        assert code == 401 and "edgewatch_" not in body, (url, code, body[:300])
        code, body = _read(url, "not-a-token")
        assert code == 401 and "edgewatch_" not in body, (url, code, body[:300])
        for token in (stolen, any_pod):
            code, body = _read(url, token)
            assert code == 403 and 'cannot get path "/edgewatch/metrics"' in body, (url, code, body[:300])
        code, body = _read(url, cluster.metrics_token())
        assert code == 200 and "edgewatch_metrics_access_refused_requests_total" in body, (url, code, body[:300])
    assert _metric(cluster, "a-2", "edgewatch_metrics_access_refused_requests_total",
                   'code="401",reason="no_token"') >= 1
    assert _metric(cluster, "a-2", "edgewatch_metrics_access_refused_requests_total",
                   'code="403",reason="forbidden"') >= 2
    assert _read(_url(cluster, "a-2", "/readyz"), None) == (200, "ok\n")
    assert _read(_url(cluster, "a-2", "/healthz"), None) == (200, "ok\n")

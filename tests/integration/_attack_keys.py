"""Key squatting (docs/security.md), as a compromised a-1 would do it, on the real control plane.

The apiserver lets a-1 write only its own key record, ConfigMap ``edgewatch-nodes/a-1``, but not
what is in it. So a-1 lists a-2's public key there as its own second key: a-2's published line
copied verbatim, then with a proof a-1 forged with its own key. Readers used to keep the first-seen
owner of a key, and a fresh reader reads records in name order (a-1 < a-2): after a controller
fail-over, and in an agent started without saved state, a-1 owned a-2's key, every statement of
a-2 was refused as ``sender_mismatch``, and a-1's lie that a-2 is dead weighed as much as the truth.

Each key line now carries the key's own signature over its node's name, which a-1 cannot make for
a-2's key: the squatted line is refused everywhere (``bad_key_proof``) and a-2 keeps its key.

The attacker, root on a-1, also firewalls its own agent off the apiserver (an nftables rule on the
agent's uid in a-1's namespace): the honest agent would otherwise put its true record back at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
import urllib.parse
import urllib.request
from pathlib import Path

from _attacker import Attacker, taints
from _pool import NODES, edge, wait
from lightkube import ApiError
from lightkube.resources.core_v1 import ConfigMap

from edgewatch.core.signing import canonical_json
from edgewatch.names import FAILED_TAINT_KEY, IDENTITY_NAMESPACE, KEY_RECORD_KEY
from edgewatch_lab.playground.cluster import PlaygroundCluster

ATTACK_TABLE = "edgewatch_attack"
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def metric(url: str, name: str, headers: dict[str, str], /, **labels: str) -> float | None:
    """Sum of the samples of ``name`` whose labels include ``labels`` at a /metrics ``url`` (read
    with ``headers``: the lab's scraper token); None when the endpoint does not answer."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    total = 0.0
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match and match[1] == name and labels.items() <= dict(_LABEL.findall(match[2] or "")).items():
            total += float(match[3])
    return total


def controller(cluster: PlaygroundCluster, name: str, /, **labels: str) -> float:
    """A controller metric summed over the replicas that answer (each on its cloud node, port 51006)."""
    values = [metric(f"http://{cluster.nodes[n].address}:51006/metrics", name, cluster.metrics_headers(), **labels)
              for n in cluster.scenario.cloud_node_names()]
    return sum(v for v in values if v is not None)


def agent(cluster: PlaygroundCluster, host: str, name: str, /, **labels: str) -> float | None:
    """A metric of the agent on ``host`` (port 51005), None while it does not answer."""
    return metric(f"http://{cluster.nodes[host].address}:51005/metrics", name, cluster.metrics_headers(), **labels)


def _agent_pid(cluster: PlaygroundCluster, node: str) -> int:
    """The pid of ``node``'s agent container (a descendant of its kubelet)."""
    kubelet = cluster.nodes[node].kubelet
    assert kubelet is not None, f"{node} has no kubelet"
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    tree, todo = [], [kubelet.pid]
    while todo:
        parent = todo.pop()
        children = [p for p, pp in parents.items() if pp == parent]
        tree += children
        todo += children
    for pid in tree:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"edgewatch" in argv and b"agent" in argv:
            return pid
    raise AssertionError(f"no agent process on {node}")


def _uid(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Uid:")))


def _firewall_agent(cluster: PlaygroundCluster, node: str, *, on: bool) -> None:
    """Root on ``node`` cuts its own agent (by uid) off the apiserver, or lets it back."""
    host = cluster.nodes[node].host
    assert host is not None and cluster.cp is not None
    if not on:
        host.run(["nft", "delete", "table", "inet", ATTACK_TABLE], timeout=10)
        return
    url = urllib.parse.urlsplit(cluster.cp.apiserver_url)
    uid = _uid(_agent_pid(cluster, node))
    host.run(["nft", "-f", "-"], timeout=10, check=True, input=(
        f"table inet {ATTACK_TABLE} {{\n"
        "  chain output { type filter hook output priority filter; policy accept;\n"
        f"    meta skuid {uid} ip daddr {url.hostname} tcp dport {url.port} reject with tcp reset\n"
        "  }\n}\n"))


def _restart_agent_without_state(cluster: PlaygroundCluster, node: str) -> None:
    """Kill ``node``'s agent after removing its saved key records; its kubelet starts it again."""
    pid = _agent_pid(cluster, node)
    os.kill(pid, signal.SIGSTOP)  # it cannot save its records again between the unlink and the kill
    (cluster.nodes[node].root / "var/lib/edgewatch/public-keys.json").unlink(missing_ok=True)
    os.kill(pid, signal.SIGKILL)


def _healthy_for(cluster: PlaygroundCluster, node: str, *, seconds: float, within_s: float) -> None:
    """Wait until ``node`` reads EdgeHealthy=True for ``seconds`` in a row (within ``within_s``)."""
    deadline = time.monotonic() + within_s
    since: float | None = None
    while time.monotonic() < deadline:
        if edge(cluster, node) == "True":
            since = since if since is not None else time.monotonic()
            if time.monotonic() - since >= seconds:
                return
        else:
            since = None
        time.sleep(0.5)
    raise TimeoutError(f"{node} not healthy for {seconds} s in a row within {within_s} s")


def attack_squatted_key(cluster: PlaygroundCluster) -> None:
    """a-1 publishes a-2's key as its own; a controller fail-over and a fresh agent on a-3 follow,
    while a-1 also votes a-2 dead. a-2 stays healthy, its statements keep counting, the squatted
    key is refused by the controller and by a-3. a-1's true record is put back at the end."""
    attacker = Attacker(cluster)

    async def record(client, node: str) -> str:  # type: ignore[no-untyped-def]
        cm = await client.get(ConfigMap, node, namespace=IDENTITY_NAMESPACE)
        return str((cm.data or {})[KEY_RECORD_KEY])

    async def publish(client, text: str) -> None:  # type: ignore[no-untyped-def]
        await client.patch(ConfigMap, "a-1", {"data": {KEY_RECORD_KEY: text}}, namespace=IDENTITY_NAMESPACE)

    async def read_records() -> tuple[str, str]:
        client = attacker.client()
        try:
            return await record(client, "a-1"), await record(client, "a-2")
        finally:
            await client.close()

    async def write(text: str) -> None:
        client = attacker.client()
        try:
            await publish(client, text)
        finally:
            await client.close()

    async def vote_and_watch(seconds: float) -> list[str | None]:
        """a-1 signs that a-2 is dead every 2 s; a-2's EdgeHealthy is read meanwhile."""
        client = attacker.client()
        seen: list[str | None] = []
        try:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                await attacker.refresh_beacon(client)
                own = attacker.own_statement(alive=["a-1"], dead=["a-2"])
                try:
                    await attacker.write_evidence(client, json.dumps([own.to_wire()], separators=(",", ":")))
                except ApiError as exc:
                    assert exc.status.code == 409, exc  # a lost race with a carrier's write
                for _ in range(4):
                    seen.append(edge(cluster, "a-2"))
                    await asyncio.sleep(0.5)
        finally:
            await client.close()
        return seen

    true_record, a2_record = asyncio.run(read_records())
    a1_line, a2_line = true_record.splitlines()[0], a2_record.splitlines()[0]
    squat = f"{a1_line}\n{a2_line}\n"  # a-2's signing key, its line verbatim, as a-1's second key
    a2_id, a2_key = a2_line.split()[:2]
    forged_proof = attacker.ring.own_keys[0].sign(canonical_json({"key_id": a2_id, "node": "a-1"}),
                                                  domain="edgewatch/key-binding/v1")
    forged = f"{a1_line}\n{a2_id} {a2_key} {forged_proof}\n"  # the best proof a-1 can make
    assert all(edge(cluster, n) == "True" for n in NODES)

    _firewall_agent(cluster, "a-1", on=True)
    try:
        asyncio.run(write(squat))
        # Fresh readers: a controller fail-over, and a-3's agent started without its saved records.
        _restart_agent_without_state(cluster, "a-3")
        assert cluster.restart_controller() >= 1
        wait(lambda: controller(cluster, "edgewatch_controller_leader") >= 1
             and controller(cluster, "edgewatch_controller_evidence_total", result="new") > 0,
             120, "a new controller leader counting statements")
        wait(lambda: (agent(cluster, "a-3", "edgewatch_agent_probes_total", result="ok") or 0) > 0,
             120, "a-3's fresh agent exchanging with its peers")
        # A new leader knows none of the beacons its predecessor issued: every verdict is Unknown
        # until statements name its own (seconds). Once it judges the untouched a-4 and a-5 healthy
        # again, a-2 must be healthy too, and stay so.
        wait(lambda: edge(cluster, "a-4") == "True" and edge(cluster, "a-5") == "True", 90,
             "the new leader judging the untouched nodes healthy")
        wait(lambda: edge(cluster, "a-2") == "True", 5, "a-2 healthy along with a-4 and a-5 after the fail-over")
        # ... and counted under the new leader's beacons by every agent's evidence (written at least
        # every 10 s): a-2 healthy for 12 s in a row before the attack window opens
        _healthy_for(cluster, "a-2", seconds=12.0, within_s=60.0)
        mismatch_before = controller(cluster, "edgewatch_controller_evidence_total", result="sender_mismatch")
        seen = asyncio.run(vote_and_watch(30.0))
        mismatch_after = controller(cluster, "edgewatch_controller_evidence_total", result="sender_mismatch")
        print(f"\nkey squatting, after the fail-over: a-2's EdgeHealthy read {len(seen)} times in 30 s: "
              f"{ {str(v): seen.count(v) for v in set(seen)} }; sender_mismatch {mismatch_before:.0f} -> "
              f"{mismatch_after:.0f}; the controller's bad_key_proof: "
              f"{controller(cluster, 'edgewatch_controller_evidence_total', result='bad_key_proof'):.0f}")
        assert mismatch_after == mismatch_before, (
            f"a-2's statements refused as sender_mismatch after the fail-over ({mismatch_before} -> "
            f"{mismatch_after}): a-1 took a-2's key")
        assert "True" in seen and set(seen) <= {"True", None}, f"a-2's EdgeHealthy during the attack: {seen}"
        assert FAILED_TAINT_KEY + ":NoExecute" not in taints(cluster, "a-2")
        assert controller(cluster, "edgewatch_controller_evidence_total", result="bad_key_proof") >= 1, \
            "the new controller did not refuse the squatted key"
        assert (agent(cluster, "a-3", "edgewatch_agent_key_records_rejected_total", reason="bad_key_proof") or 0) >= 1, \
            "a-3's fresh agent did not refuse the squatted key"
        assert agent(cluster, "a-3", "edgewatch_agent_peer_health", node="a-2", health="alive") == 1, \
            "a-3's fresh agent does not hear a-2"

        # Then a proof forged with a-1's own key: refused by the running controller and agents alike.
        refused_before = controller(cluster, "edgewatch_controller_evidence_total", result="bad_key_proof")
        refused_a3 = agent(cluster, "a-3", "edgewatch_agent_key_records_rejected_total", reason="bad_key_proof") or 0
        asyncio.run(write(forged))
        wait(lambda: controller(cluster, "edgewatch_controller_evidence_total", result="bad_key_proof") > refused_before
             and (agent(cluster, "a-3", "edgewatch_agent_key_records_rejected_total", reason="bad_key_proof")
                  or 0) > refused_a3, 30, "the forged proof refused")
        assert edge(cluster, "a-2") == "True"
    finally:
        try:
            asyncio.run(write(true_record))
        finally:
            _firewall_agent(cluster, "a-1", on=False)
    wait(lambda: all(edge(cluster, n) == "True" for n in NODES)
         and not any(FAILED_TAINT_KEY + ":NoExecute" in taints(cluster, n) for n in NODES),
         120, "every node healthy again after a-1's record is back")

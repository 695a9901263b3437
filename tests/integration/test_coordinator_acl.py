"""A compromised pool member, with its own real certificate, against the pool coordinator's etcd
with access control on (docs/security.md): it can write its own keys and nothing the others act on or
serve; the election and what followers read are unchanged by its attempts.

The etcd is the real binary with TLS from the pool's CA and ``--client-cert-auth``; its users and
roles come from ``edgewatch.pooletcd.reconcile_acl`` with a root certificate from the same CA; the
agents are real ``PoolCoordinator`` sessions with their own node certificates.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from edgewatch.core.identity import NodeKey, NodeKeyring, PublicKeys
from edgewatch.agent.certstore import CertificateFiles
from edgewatch.agent.coordinator import CoordinatorConfig, NodeCertificateTLS, PoolCoordinator, Role, EtcdClient
from edgewatch.controller.poolca import PoolCA, make_ca
from edgewatch.kube.api import AsyncClient
from edgewatch.poolkeys import PoolKeys
from edgewatch.pooletcd.provisioner import reconcile_acl
from edgewatch_lab.testing.binaries import Binaries
from edgewatch_lab.testing.etcd import EtcdServer

from _pki import issue, now, pool_ca_etcd

pytestmark = pytest.mark.controlplane

FAST = CoordinatorConfig(heartbeat_interval_s=2.0, forward_interval_s=2.0, health_interval_s=1.0,
                         connect_backoff_max_s=2.0)


def _issue(ca: PoolCA, node: str, folder: Path) -> NodeCertificateTLS:
    files = CertificateFiles.under(folder / node)
    issue(ca, node, files)
    return NodeCertificateTLS(ca_pem=ca.cert_pem(), cert_file=files.cert_file, key_file=files.key_file)


async def _wait(predicate: Callable[[], object], *, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        await asyncio.sleep(0.1)


async def _denied(call: Callable[[], object]) -> str:
    """Run one etcd call that must be refused for lack of permission; the error text."""
    try:
        async with asyncio.timeout(10):
            await call()  # type: ignore[misc]
    except Exception as exc:  # noqa: BLE001 - what etcd said is the point
        text = str(exc).lower()
        assert "permission denied" in text or "user name is empty" in text, text
        return text
    raise AssertionError("etcd let the write through")


async def _stop(coordinators: dict[str, PoolCoordinator], tasks: dict[str, asyncio.Task[None]],
                *clients: EtcdClient) -> None:
    """Close the coordinators, cancel and await the tasks, close the raw clients."""
    for c in coordinators.values():
        await c.close()
    for t in tasks.values():
        t.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await t
    for client in clients:
        with contextlib.suppress(Exception):
            await client.close()


@pytest.fixture
async def world(binaries: Binaries) -> AsyncIterator[tuple[EtcdServer, PoolCA, str, Path]]:
    folder = Path(tempfile.mkdtemp(prefix="edgewatch-coord-acl-"))
    pool = f"acl-{secrets.token_hex(3)}"
    ca = make_ca(pool, now=now())
    server = pool_ca_etcd(binaries, folder, ca)
    try:
        await asyncio.to_thread(server.start)
        yield server, ca, pool, folder
    finally:
        await asyncio.to_thread(server.cleanup)
        shutil.rmtree(folder, ignore_errors=True)


async def test_a_member_writes_only_its_own_keys_and_cannot_move_the_election(
        kube: AsyncClient, world: tuple[EtcdServer, PoolCA, str, Path]) -> None:
    server, ca, pool, folder = world
    keys = PoolKeys(pool)
    n1, n2 = "edge-1", "edge-2"
    target = f"{server.address}:{server.client_port}"
    root = _issue(ca, "root", folder)

    # The coordinator's access control: a user and a role per member, then auth on. Idempotent.
    first = await reconcile_acl(target=target, credentials=root.credentials(), pool=pool, members=[n1, n2])
    assert first.enabled_auth and {s.name for s in first.steps if s.op == "add_user"} == {n1, n2}
    again = await reconcile_acl(target=target, credentials=root.credentials(), pool=pool, members=[n1, n2])
    assert again.steps == () and not again.enabled_auth

    published = PublicKeys()  # each agent holds the other's published keys
    coordinators = {n: PoolCoordinator(url=server.client_url, pool=pool, node=n, kube=kube, cloud_ok=lambda: True,
                                       verdict_of=lambda _n: "healthy", config=FAST, tls=_issue(ca, n, folder),
                                       signer=NodeKeyring(node=n, keys=[NodeKey.generate()], public=published))
                    for n in (n1, n2)}
    tasks: dict[str, asyncio.Task[None]] = {}
    attacker = EtcdClient(host=server.address, port=server.client_port, timeout=3.0,
                           credentials=_issue(ca, n2, folder).credentials())
    try:
        tasks[n1] = asyncio.create_task(coordinators[n1].run())
        await _wait(lambda: coordinators[n1].role is Role.LEADER, timeout_s=20, what=f"{n1} to lead")
        tasks[n2] = asyncio.create_task(coordinators[n2].run())
        await _wait(lambda: coordinators[n2].ready and coordinators[n2].leader == n1, timeout_s=20,
                    what=f"{n2} to follow {n1} and see its sync")
        term = coordinators[n2]._term
        assert coordinators[n2].cache_area.prefix == keys.writer(n1)

        # The attacker's credentials work for its own keys (so the refusals below are access control).
        await attacker.put(keys.heartbeat(n2), b'{"forged": "but own"}')
        forged_slice = (b'{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"kubernetes",'
                        b'"namespace":"default","resourceVersion":"999999999"},"addressType":"IPv4",'
                        b'"endpoints":[{"addresses":["10.66.6.6"]}]}')
        await attacker.put(keys.writer(n2).encode() + b"cache/discovery.k8s.io/v1/endpointslices/o/default/kubernetes",
                           forged_slice)
        await attacker.put(keys.candidate(n2), n2.encode())  # a candidacy without a lease: never obeyed

        # Everything the others act on or serve: refused by etcd.
        leader_area = keys.writer(n1).encode() + b"cache/discovery.k8s.io/v1/endpointslices/o/default/kubernetes"
        await _denied(lambda: attacker.put(leader_area, forged_slice))
        await _denied(lambda: attacker.put(keys.prefix.encode() + b"cache/discovery.k8s.io/v1/endpointslices/o/"
                                           b"default/kubernetes", forged_slice))  # the old shared cache
        await _denied(lambda: attacker.put(keys.heartbeat(n1), b'{"node":"edge-1"}'))
        await _denied(lambda: attacker.delete(keys.heartbeat(n1)))
        await _denied(lambda: attacker.put(keys.candidate(n1), n1.encode()))
        await _denied(lambda: attacker.delete(keys.candidate(n1)))
        await _denied(lambda: attacker.put(keys.sync(n1), b"{}"))
        await _denied(lambda: attacker.put(keys.prefix.encode() + b"leader", n2.encode()))  # the old leader key
        await _denied(lambda: attacker.put(b"/edgewatch/pools/other/heartbeats/" + n2.encode(), b"{}"))

        # The election and what followers read are unchanged.
        await asyncio.sleep(3 * FAST.health_interval_s)
        for n in (n1, n2):
            assert coordinators[n].leader == n1, n
            assert coordinators[n].cache_area.prefix == keys.writer(n1), n
        assert coordinators[n2]._term == term and coordinators[n1].role is Role.LEADER

        # A certificate from the pool CA for a node that is not a member gets nothing at all.
        stranger = EtcdClient(host=server.address, port=server.client_port, timeout=3.0,
                               credentials=_issue(ca, "edge-9", folder).credentials())
        try:
            await _denied(lambda: stranger.get(keys.heartbeat(n1)))
            await _denied(lambda: stranger.put(keys.heartbeat("edge-9"), b"{}"))
        finally:
            await stranger.close()

        # A node that leaves the pool loses its user: its certificate no longer opens anything.
        await reconcile_acl(target=target, credentials=root.credentials(), pool=pool, members=[n1])
        await _denied(lambda: attacker.get(keys.heartbeat(n1)))
    finally:
        await _stop(coordinators, tasks, attacker)


async def test_the_cli_reconciles_and_is_idempotent(world: tuple[EtcdServer, PoolCA, str, Path]) -> None:
    """``edgewatch pool-etcd-acl``, as an operator runs it, with a root certificate of the pool CA."""
    import subprocess
    import sys

    server, ca, pool, folder = world
    keys = PoolKeys(pool)
    root = _issue(ca, "root", folder)
    ca_file = folder / "pool-ca.crt"
    ca_file.write_bytes(ca.cert_pem())
    argv = [sys.executable, "-m", "edgewatch", "pool-etcd-acl", "--endpoint", f"{server.address}:{server.client_port}",
            "--pool", pool, "--ca", str(ca_file), "--cert", str(root.cert_file), "--key", str(root.key_file),
            "--member", "edge-1", "--member", "edge-2"]

    def run(args: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)

    first = await asyncio.to_thread(run, argv)
    assert first.returncode == 0, first.stderr
    assert "add_user     edge-1" in first.stdout and "authentication switched on" in first.stdout, first.stdout
    second = await asyncio.to_thread(run, argv)
    assert second.returncode == 0 and second.stdout.strip() == "0 change(s); authentication on", second.stdout
    bad = await asyncio.to_thread(run, [*argv[:-4], "--member", "Not_A_Node"])
    assert bad.returncode == 2 and "DNS-1123" in bad.stderr, bad.stderr

    edge2 = EtcdClient(host=server.address, port=server.client_port, timeout=3.0,
                        credentials=_issue(ca, "edge-2", folder).credentials())
    try:
        await edge2.put(keys.heartbeat("edge-2"), b"{}")
        await _denied(lambda: edge2.put(keys.heartbeat("edge-1"), b"{}"))
    finally:
        await edge2.close()


async def test_a_member_cannot_make_itself_next_in_line(kube: AsyncClient,
                                                        world: tuple[EtcdServer, PoolCA, str, Path]) -> None:
    """The attack as a compromised member runs it, with only its own certificate and key: while n1
    leads, n2 puts its sealed candidacy under a 30-day lease (standing in line, and outliving its
    own death), then again under a 5 s lease it keeps alive; n1's agent restarts (a routine leader
    change). Without the coordinator's janitor n2 led the pool after the restart, and every follower
    read its cache area; now its candidacies are disqualified and revoked, it never leads, and an
    honest node does. When n2 leaves the pool its keys are removed."""
    from edgewatch.core.seal import seal
    from edgewatch.pooletcd.janitor import ElectionJanitor

    server, ca, pool, folder = world
    keys = PoolKeys(pool)
    n1, n2, n3 = "edge-1", "edge-2", "edge-3"
    target = f"{server.address}:{server.client_port}"
    root = _issue(ca, "root", folder)
    await reconcile_acl(target=target, credentials=root.credentials(), pool=pool, members=[n1, n2, n3])
    members = {"now": frozenset({n1, n2, n3})}
    actions: list[str] = []
    janitor = ElectionJanitor(host=server.address, port=server.client_port, credentials=root.credentials, pool=pool,
                              members=lambda: members["now"], sweep_s=0.5, on_action=actions.append)
    published = PublicKeys()
    signers = {n: NodeKeyring(node=n, keys=[NodeKey.generate()], public=published) for n in (n1, n2, n3)}

    def coordinator(n: str) -> PoolCoordinator:
        return PoolCoordinator(url=server.client_url, pool=pool, node=n, kube=kube, cloud_ok=lambda: True,
                               verdict_of=lambda _n: "healthy", config=FAST, tls=_issue(ca, n, folder),
                               signer=signers[n])

    coordinators = {n1: coordinator(n1), n3: coordinator(n3)}
    tasks: dict[str, asyncio.Task[None]] = {"janitor": asyncio.create_task(janitor.run())}
    attacker = EtcdClient(host=server.address, port=server.client_port, timeout=3.0,
                           credentials=_issue(ca, n2, folder).credentials())
    try:
        await asyncio.wait_for(janitor.synced.wait(), 20)
        tasks[n1] = asyncio.create_task(coordinators[n1].run())
        await _wait(lambda: coordinators[n1].role is Role.LEADER, timeout_s=20, what=f"{n1} to lead")
        tasks[n3] = asyncio.create_task(coordinators[n3].run())
        await _wait(lambda: coordinators[n3].leader == n1, timeout_s=20, what=f"{n3} to follow {n1}")

        # n2 stands in line under a 30-day lease, its candidacy sealed with its own key
        candidacy = seal(n2.encode(), key=keys.candidate(n2), signer=signers[n2])
        long_lease = await attacker.lease(30 * 86400)
        await attacker.put(keys.candidate(n2), candidacy, lease=long_lease)
        await attacker.put(keys.writer(n2).encode() + b"cache/forged", b"x")
        await _wait(lambda: "long_lease" in actions, timeout_s=10, what="the long-lease candidacy disqualified")
        await _wait(lambda: n2 not in coordinators[n3]._candidates, timeout_s=10, what="its lease revoked")

        # again, under a short lease it keeps alive: standing in line behind n1
        short = await attacker.lease(5)
        await attacker.put(keys.candidate(n2), candidacy, lease=short)
        await _wait(lambda: "standing" in actions, timeout_s=10, what="the standing candidacy disqualified")
        await _wait(lambda: n2 not in coordinators[n3]._candidates, timeout_s=10, what="its lease revoked")
        assert coordinators[n3].leader == n1

        # a routine restart of the leader's agent: an honest node leads, never n2
        short = await attacker.lease(5)
        await attacker.put(keys.candidate(n2), candidacy, lease=short)  # in line again right before
        await coordinators[n1].close()
        tasks.pop(n1).cancel()
        coordinators[n1] = coordinator(n1)
        tasks[n1] = asyncio.create_task(coordinators[n1].run())
        await _wait(lambda: coordinators[n3].leader in (n1, n3) and coordinators[n1].leader == coordinators[n3].leader,
                    timeout_s=30, what="an honest leader after the restart")
        for _ in range(20):
            assert coordinators[n3].leader != n2 and coordinators[n1].leader != n2
            await asyncio.sleep(0.1)

        # n2 leaves the pool: its keys and its area are removed
        members["now"] = frozenset({n1, n3})
        await _wait(lambda: "departed" in actions, timeout_s=10, what="n2's keys removed")
        probe = EtcdClient(host=server.address, port=server.client_port, timeout=3.0, credentials=root.credentials())
        try:
            left = await probe.get_prefix(keys.writer(n2).encode())
            assert list(left) == []
            assert await probe.get(keys.candidate(n2)) is None or (await probe.get(keys.candidate(n2))).value is None
        finally:
            await probe.close()
    finally:
        await _stop(coordinators, tasks, attacker)


async def test_a_member_cannot_pile_up_leases_or_history(world: tuple[EtcdServer, PoolCA, str, Path]) -> None:
    """The attack as a compromised member runs it, with only its own certificate and key: grant
    leases with no key in a loop (etcd checks no key permission for a grant, and a lease is
    invisible to the write quotas), and rewrite a 256 KiB value in its own area (history until
    compaction, a file that never shrinks by itself). Before the coordinator's upkeep every lease
    stayed and the file only grew; now the keyless leases are revoked after their grace, a
    lease over 600 s at its first, an honest member's lease with its key stays, and the store is
    compacted and defragmented once past its high water (half the quota)."""
    from aetcd import rpc as etcd_rpc

    from edgewatch.pooletcd.upkeep import StoreUpkeep

    server, ca, pool, folder = world
    keys = PoolKeys(pool)
    n1, n2 = "edge-1", "edge-2"
    target = f"{server.address}:{server.client_port}"
    root = _issue(ca, "root", folder)
    await reconcile_acl(target=target, credentials=root.credentials(), pool=pool, members=[n1, n2])
    actions: list[str] = []
    honest = EtcdClient(host=server.address, port=server.client_port, timeout=3.0,
                         credentials=_issue(ca, n1, folder).credentials())
    attacker = EtcdClient(host=server.address, port=server.client_port, timeout=3.0,
                           credentials=_issue(ca, n2, folder).credentials())
    probe = EtcdClient(host=server.address, port=server.client_port, timeout=10.0, credentials=root.credentials())
    tasks: dict[str, asyncio.Task[None]] = {}

    async def leases() -> set[int]:
        reply = await probe.leasestub.LeaseLeases(etcd_rpc.LeaseLeasesRequest(), timeout=5)
        return {int(x.ID) for x in reply.leases}

    async def db_size() -> int:
        return int((await probe.maintenancestub.Status(etcd_rpc.StatusRequest(), timeout=5)).dbSize)

    try:
        await probe.connect()
        heartbeat = await honest.lease(40)
        await honest.put(keys.heartbeat(n1), b"alive", lease=heartbeat)
        flood = {int((await attacker.lease(300)).id) for _ in range(300)}
        forever = int((await attacker.lease(30 * 86400)).id)
        value = secrets.token_bytes(256 * 1024)
        for _ in range(32):  # 8 MiB of history in its own area
            await attacker.put(keys.writer(n2).encode() + b"cache/churn", value)
        grown = await db_size()
        for _ in range(50):  # etcd's backend commits in batches (100 ms): its size may lag the puts
            if grown > 2**20:
                break
            await asyncio.sleep(0.1)
            grown = await db_size()
        assert grown > 2**20 and flood | {forever} <= await leases()  # all of it landed

        # a quota the file has passed half of (the real one is 2 GiB)
        upkeep = StoreUpkeep(host=server.address, port=server.client_port, credentials=root.credentials, pool=pool,
                             quota_bytes=grown + 1, high_water=0.5, interval_s=0.5, lease_every=1,
                             keyless_grace_s=1.0, on_action=actions.append)  # 120 s in a pod
        tasks["upkeep"] = asyncio.create_task(upkeep.run())
        await _wait(lambda: "defragmented" in actions and actions.count("keyless") >= 300, timeout_s=30,
                    what="the store compacted and the keyless leases revoked")
        left = await leases()
        assert not (flood | {forever}) & left and int(heartbeat.id) in left
        assert "long_lease" in actions and "compacted" in actions
        assert await db_size() < grown
        assert (await honest.get(keys.heartbeat(n1))).value == b"alive"
    finally:
        await _stop({}, tasks, honest, attacker, probe)

"""The pool coordinator authenticated per node (docs/security.md), on a real etcd that serves TLS with a
certificate from the pool's CA and lets in only clients with a certificate from that same CA
(``--client-cert-auth``, ``EtcdServerTLS.signed_by_ca``).

The certificates are signed here with the controller's pure ``poolca`` functions (what its CSR
signer does); the agent side is the product's: ``CoordinatorRunner`` with ``node_certificate``
(the requester's files), the pool CA read from its ConfigMap on the real apiserver, and
``certificate_changed`` as the requester calls it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import shutil
import tempfile
from pathlib import Path

import grpc
import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import ConfigMap, Namespace
from prometheus_client import CollectorRegistry

from edgewatch.core.identity import NodeKey, NodeKeyring
from edgewatch.core.seal import unseal
from edgewatch.agent.certstore import CertificateFiles
from edgewatch.agent.coordinating import CoordinatorRunner
from edgewatch.poolkeys import PoolKeys
from edgewatch.agent.coordinator import KEY_ROOT, NodeCertificateTLS, Role, EtcdClient, classify_error
from edgewatch.controller.poolca import make_ca
from edgewatch.names import POOL_CA_CONFIGMAP_KEY, pool_ca_name
from edgewatch_lab.testing.binaries import Binaries
from edgewatch_lab.testing.etcd import EtcdServer

from _pki import Clock, Link, Settings, Verdicts, issue, now, pool_ca_etcd, stop_pool, wait_until

pytestmark = pytest.mark.controlplane


def client(server: EtcdServer, credentials: object) -> EtcdClient:
    return EtcdClient(host=server.address, port=server.client_port, timeout=3.0,
                       credentials=credentials)  # type: ignore[arg-type]


async def refused(server: EtcdServer, credentials: object) -> Exception:
    """The error a one-key read with these credentials ends in (the test fails if it succeeds)."""
    c = client(server, credentials)
    try:
        async with asyncio.timeout(10):
            await c.get(b"/edgewatch/x")
    except Exception as exc:  # noqa: BLE001 - what etcd / gRPC said is the point
        return exc
    finally:
        with contextlib.suppress(Exception):
            await c.close()
    raise AssertionError("etcd let the client in")


@pytest.fixture
def folder() -> Path:
    path = Path(tempfile.mkdtemp(prefix="edgewatch-coord-node-tls-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def test_etcd_refuses_clients_without_a_certificate_of_the_pool_ca(binaries: Binaries, folder: Path) -> None:
    ca, other = make_ca("pool-a", now=now()), make_ca("pool-b", now=now())
    server = pool_ca_etcd(binaries, folder, ca)
    try:
        await asyncio.to_thread(server.start)
        assert server.client_url.startswith("https://")
        assert "--client-cert-auth=true" in server.argv()
        good, foreign = CertificateFiles.under(folder / "n1"), CertificateFiles.under(folder / "n2")
        issue(ca, "n1", good)
        issue(other, "n2", foreign)

        # n1's own certificate from the pool CA: in.
        c = client(server, NodeCertificateTLS(ca_pem=ca.cert_pem(), cert_file=good.cert_file,
                                              key_file=good.key_file).credentials())
        try:
            await c.put(b"/edgewatch/x", b"1")
            got = await c.get(b"/edgewatch/x")
            assert got is not None and got.value == b"1"
        finally:
            await c.close()

        # No client certificate at all (the server verified against the pool CA): refused.
        no_cert = await refused(server, grpc.ssl_channel_credentials(root_certificates=ca.cert_pem()))
        # A certificate for n2 from ANOTHER pool's CA: refused.
        from_other_ca = await refused(server, NodeCertificateTLS(
            ca_pem=ca.cert_pem(), cert_file=foreign.cert_file, key_file=foreign.key_file).credentials())
        # The pool CA is the only root the agent trusts: a client that trusts another CA refuses etcd.
        wrong_root = await refused(server, NodeCertificateTLS(
            ca_pem=other.cert_pem(), cert_file=good.cert_file, key_file=good.key_file).credentials())
        # etcd ends the handshake (certificate required / unknown CA): the client sees its alert.
        assert "Unwrap failed" in str(no_cert) and "Unwrap failed" in str(from_other_ca), (no_cert, from_other_ca)
        assert "CERTIFICATE_VERIFY_FAILED" in str(wrong_root), wrong_root
        for error in (no_cert, from_other_ca, wrong_root):  # what the coordinator logs and counts
            assert classify_error(error, url=server.client_url).reason == "tls", error
        with open(server.log_path, errors="replace") as log:
            text = log.read()
        assert "bad certificate" in text or "certificate required" in text or "unknown certificate" in text \
            or "rejected connection" in text, text[-2000:]
    finally:
        await asyncio.to_thread(server.cleanup)


async def test_node_session_with_its_own_certificate_waits_connects_leads_and_rotates(
        kube: AsyncClient, binaries: Binaries, folder: Path) -> None:
    tag = secrets.token_hex(3)
    pool, node, namespace = f"tls-{tag}", f"n1-{tag}", f"ew-tls-{tag}"
    ca, rogue = make_ca(pool, now=now()), make_ca("rogue", now=now())
    server = pool_ca_etcd(binaries, folder, ca)
    files = CertificateFiles.under(folder / "state")
    registry = CollectorRegistry()
    keyring = NodeKeyring(node=node, keys=[NodeKey.generate()])
    runner = CoordinatorRunner(node=node, url=server.client_url, pool=pool, tls=None, kube=kube,  # type: ignore[arg-type]
                               registry=registry, link=Link(), verdicts=Verdicts(), settings=Settings(),
                               signer=keyring, clock=Clock(), node_certificate=files, namespace=namespace,
                               ca_retry_s=0.3)
    task = None
    await kube.create(Namespace.from_dict({"metadata": {"name": namespace}}))
    try:
        await asyncio.to_thread(server.start)
        task = asyncio.create_task(runner.run(poll_s=0.1))

        # 1. No certificate yet: no coordinator at all (the peer path carries heartbeats).
        await asyncio.sleep(1.0)
        assert runner.current_coordinator() is None and not runner.covers_delegation()

        # 2. A certificate, but the pool CA ConfigMap is not there yet: still waiting.
        serial1 = issue(ca, node, files)
        runner.certificate_changed(files)
        await asyncio.sleep(1.0)
        assert runner.current_coordinator() is None

        # 3. The controller publishes the pool CA: the session starts, heartbeats and is elected.
        await kube.create(ConfigMap.from_dict({
            "metadata": {"name": pool_ca_name(pool), "namespace": namespace},
            "data": {POOL_CA_CONFIGMAP_KEY: ca.cert_pem().decode()}}))
        await wait_until(lambda: runner.current is not None and runner.current.role is Role.LEADER,
                         timeout_s=20, what="n1 to connect with its own certificate and lead")
        coordinator = runner.current
        assert coordinator is not None and isinstance(coordinator.tls, NodeCertificateTLS)
        assert coordinator.tls.ca_pem == ca.cert_pem() and coordinator.leader == node
        admin = client(server, coordinator.tls.credentials())
        try:
            hb_key = f"{KEY_ROOT}{pool}/heartbeats/{node}".encode()
            heartbeat = await admin.get(hb_key)
            assert heartbeat is not None
            assert json.loads(unseal(heartbeat.value, key=hb_key, writer=node, verifier=keyring))["node"] == node
            candidacy = await admin.get(PoolKeys(pool).candidate(node))
            assert candidacy is not None and candidacy.lease != 0
        finally:
            await admin.close()

        # 4. "Rotation" to a certificate etcd does not accept (another CA), then etcd restarts: the
        #    next session reads the new files and is refused -- so a session reads them anew.
        for f in (files.key_file, files.cert_file):
            f.unlink()
        issue(rogue, node, files)
        runner.certificate_changed(files)
        await asyncio.to_thread(server.restart)
        tls_errors = lambda: registry.get_sample_value("edgewatch_coordinator_errors_total",  # noqa: E731
                                                       {"reason": "tls"}) or 0.0
        await wait_until(lambda: tls_errors() >= 1, timeout_s=20, what="a TLS refusal of the rogue certificate")
        assert coordinator.role is Role.PENDING and runner.current is coordinator

        # 5. The real rotation: old files deleted, a new key and certificate from the pool CA: the
        #    next session (same coordinator object, no agent restart) connects and leads again.
        for f in (files.key_file, files.cert_file):
            f.unlink()
        serial2 = issue(ca, node, files)
        assert serial2 != serial1
        runner.certificate_changed(files)
        await wait_until(lambda: coordinator.role is Role.LEADER, timeout_s=25,
                         what="the next session to connect with the rotated certificate")
        assert runner.current is coordinator  # not restarted
    finally:
        await stop_pool(task, server, kube, namespace)

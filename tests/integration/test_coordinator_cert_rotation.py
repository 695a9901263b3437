"""A coordinator session lives no longer than its client certificate and follows rotations of its
certificate and of the pool CA (docs/security.md), on a real etcd with ``--client-cert-auth`` and a
serving certificate from the pool CA (as ``test_coordinator_tls``).

The certificates come from the controller's pure ``poolca`` functions and are stored as the
agent's requester stores them (``certstore.save``: key, certificate, and the record of when we
received it and its validity then); a short remaining validity is the record's receipt time set in
the past (the API's minimum lifetime is 10 min), the same path a restarted agent reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from lightkube import AsyncClient
from lightkube.resources.core_v1 import ConfigMap, Namespace
from prometheus_client import CollectorRegistry

from edgewatch.core.identity import NodeKey, NodeKeyring
from edgewatch.agent import certstore
from edgewatch.agent.certificates import check_certificate
from edgewatch.agent.certstore import CertificateFiles
from edgewatch.agent.coordinating import CoordinatorRunner
from edgewatch.agent.coordinator import NodeCertificateTLS, PoolCoordinator, Role
from edgewatch.controller.poolca import PoolCA, make_ca, sign_client_certificate
from edgewatch.names import POOL_CA_CONFIGMAP_KEY, pool_ca_name
from edgewatch_lab.testing.binaries import Binaries
from edgewatch_lab.testing.etcd import EtcdServer

from _pki import Clock, Link, Settings, Verdicts, now, pool_ca_etcd, stop_pool, wait_until

pytestmark = pytest.mark.controlplane

LIFETIME_S = 3600


def store(ca: PoolCA, node: str, files: CertificateFiles, *, left_s: float = LIFETIME_S) -> None:
    """What the requester stores on receipt of a certificate from ``ca``; ``left_s``: the validity
    left, by the record (received ``LIFETIME_S - left_s`` seconds ago on our wall clock)."""
    key = ec.generate_private_key(ec.SECP256R1())
    pem = sign_client_certificate(ca, public_key=key.public_key(), node=node, lifetime_s=LIFETIME_S, now=now())
    files.key_file.parent.mkdir(parents=True, exist_ok=True)
    certstore.save(files, key=key, certificate=check_certificate(pem, node=node, key=key, requested_s=LIFETIME_S),
                   received_at=time.time() - (LIFETIME_S - left_s))


@dataclass
class Pool:
    ca: PoolCA
    node: str
    pool: str
    namespace: str
    files: CertificateFiles
    server: EtcdServer
    runner: CoordinatorRunner
    registry: CollectorRegistry

    def sample(self, name: str, reason: str) -> float:
        return self.registry.get_sample_value(name, {"reason": reason}) or 0.0

    def coordinator(self) -> PoolCoordinator:
        assert self.runner.current is not None
        return self.runner.current


@contextlib.asynccontextmanager
async def running_pool(kube: AsyncClient, binaries: Binaries, *, left_s: float = LIFETIME_S) -> AsyncIterator[Pool]:
    """A TLS etcd from a new pool CA, its ConfigMap, and a runner whose node leads the pool."""
    folder = Path(tempfile.mkdtemp(prefix="edgewatch-coord-rotation-"))
    tag = secrets.token_hex(3)
    pool, node, namespace = f"rot-{tag}", f"n1-{tag}", f"ew-rot-{tag}"
    ca = make_ca(pool, now=now())
    server = pool_ca_etcd(binaries, folder, ca)
    files = CertificateFiles.under(folder / "state")
    registry = CollectorRegistry()
    runner = CoordinatorRunner(node=node, url=server.client_url, pool=pool, tls=None, kube=kube,  # type: ignore[arg-type]
                               registry=registry, link=Link(), verdicts=Verdicts(), settings=Settings(),
                               signer=NodeKeyring(node=node, keys=[NodeKey.generate()]),
                               clock=Clock(), node_certificate=files, namespace=namespace, ca_retry_s=0.3,
                               ca_refresh_s=0.3, rotation_jitter_s=0.5)
    task = None
    await kube.create(Namespace.from_dict({"metadata": {"name": namespace}}))
    try:
        await kube.create(ConfigMap.from_dict({
            "metadata": {"name": pool_ca_name(pool), "namespace": namespace},
            "data": {POOL_CA_CONFIGMAP_KEY: ca.cert_pem().decode()}}))
        await asyncio.to_thread(server.start)
        store(ca, node, files, left_s=left_s)
        runner.certificate_changed(files)
        task = asyncio.create_task(runner.run(poll_s=0.1))
        await wait_until(lambda: runner.current is not None and runner.current.role is Role.LEADER,
                         timeout_s=20, what="the node to connect with its own certificate and lead")
        yield Pool(ca=ca, node=node, pool=pool, namespace=namespace, files=files, server=server, runner=runner,
                   registry=registry)
    finally:
        await stop_pool(task, server, kube, namespace)
        shutil.rmtree(folder, ignore_errors=True)


async def test_a_session_ends_when_its_certificate_expires(kube: AsyncClient, binaries: Binaries) -> None:
    async with running_pool(kube, binaries, left_s=6.0) as p:
        coordinator = p.coordinator()
        assert p.sample("edgewatch_coordinator_errors_total", "certificate_expired") == 0
        # The open session ends at the end of the validity the record gives (our monotonic clock),
        # though etcd would go on accepting the connection (the certificate is valid for an hour).
        await wait_until(lambda: p.sample("edgewatch_coordinator_errors_total", "certificate_expired") >= 1,
                         timeout_s=15, what="the session to end as certificate_expired")
        assert coordinator.role is Role.PENDING and not coordinator.healthy
        assert "expired" in (coordinator.last_error or "")
        # No session is opened with it any more; the peer path carries heartbeats.
        await asyncio.sleep(2.0)
        assert coordinator.role is Role.PENDING and not p.runner.covers_delegation()
        # A new certificate: the next attempt connects and leads again (same coordinator).
        store(p.ca, p.node, p.files)
        p.runner.certificate_changed(p.files)
        await wait_until(lambda: coordinator.role is Role.LEADER, timeout_s=25,
                         what="a session with the new certificate")
        assert p.runner.current is coordinator


async def test_a_rotation_reconnects_the_open_session_with_the_new_certificate(
        kube: AsyncClient, binaries: Binaries) -> None:
    async with running_pool(kube, binaries) as p:
        coordinator = p.coordinator()
        lease = coordinator._leader_lease
        candidacy = coordinator._candidates[p.node]
        # 1. A rotation to a good certificate: the session reconnects within the jitter and the
        #    leader keeps leading (its lease survived the quick reconnect; no new election).
        store(p.ca, p.node, p.files)
        p.runner.certificate_changed(p.files)
        await wait_until(lambda: p.sample("edgewatch_coordinator_reconnects_total", "certificate_rotated") >= 1,
                         timeout_s=10, what="the session to reconnect after the rotation")
        await wait_until(lambda: coordinator.role is Role.LEADER, timeout_s=10, what="leading again")
        assert coordinator._leader_lease == lease
        assert coordinator._candidates[p.node].create_revision == candidacy.create_revision
        assert p.sample("edgewatch_coordinator_errors_total", "tls") == 0

        # 2. A "rotation" to a certificate etcd refuses (another CA): with no etcd restart, the open
        #    session ends and the next one presents the new certificate -- and is refused.
        store(make_ca("rogue", now=now()), p.node, p.files)
        p.runner.certificate_changed(p.files)
        await wait_until(lambda: p.sample("edgewatch_coordinator_errors_total", "tls") >= 1, timeout_s=15,
                         what="the reconnect with the refused certificate to fail with tls")
        assert p.sample("edgewatch_coordinator_reconnects_total", "certificate_rotated") >= 2
        assert coordinator.role is Role.PENDING and p.runner.current is coordinator


async def test_a_pool_ca_change_restarts_the_session_with_the_new_root(kube: AsyncClient, binaries: Binaries) -> None:
    async with running_pool(kube, binaries) as p:
        coordinator = p.coordinator()
        other = make_ca("next", now=now())
        name = pool_ca_name(p.pool)
        # 1. ca.crt now names another CA only: the agent no longer trusts this etcd's serving
        #    certificate; the open session reconnects with the new root and is refused (TLS).
        cm = await kube.get(ConfigMap, name, namespace=p.namespace)
        cm.data = {POOL_CA_CONFIGMAP_KEY: other.cert_pem().decode()}
        await kube.replace(cm)
        await wait_until(lambda: p.sample("edgewatch_coordinator_reconnects_total", "trust_changed") >= 1,
                         timeout_s=10, what="the session to reconnect after the pool CA change")
        await wait_until(lambda: p.sample("edgewatch_coordinator_errors_total", "tls") >= 1, timeout_s=15,
                         what="the new root to refuse etcd's serving certificate")
        assert isinstance(coordinator.tls, NodeCertificateTLS) and coordinator.tls.ca_pem == other.cert_pem()
        assert p.runner.current is coordinator and coordinator.role is Role.PENDING

        # 2. The rotation bundle (new and old CA): trusted again, the session connects and leads.
        cm = await kube.get(ConfigMap, name, namespace=p.namespace)
        cm.data = {POOL_CA_CONFIGMAP_KEY: (other.cert_pem() + p.ca.cert_pem()).decode()}
        await kube.replace(cm)
        await wait_until(lambda: coordinator.role is Role.LEADER, timeout_s=25,
                         what="a session trusting the bundle")
        assert coordinator.tls.ca_pem == other.cert_pem() + p.ca.cert_pem()

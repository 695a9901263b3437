"""The agent's coordinator client certificate (edgewatch.agent.certrequester) on the real apiserver:
the controller runs in-process (the whole Reconciler, which runs the signer) with its own token and
its shipped RBAC; the agent's CertificateRequester runs with n1's REAL pod-bound token (a
TokenRequest bound to Pod agent-n1 on node n1) and the agent's shipped RBAC (set up as in
test_csr_signer.py, whose helpers are reused).
"""

from __future__ import annotations

import asyncio
import json
import stat
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID
from prometheus_client import CollectorRegistry
from test_csr_signer import POOL, Token, _setup, _teardown

from edgewatch.agent.certrequester import CertificateRequester
from edgewatch.agent.certstore import CertificateFiles
from edgewatch.controller.metrics import ControllerMetrics
from edgewatch.controller.model import ControllerConfig
from edgewatch.controller.reconciler import Reconciler
from edgewatch.core.types import node_name
from edgewatch.kube.api import AsyncClient, ConfigMap
from edgewatch.kube.client import api_client
from edgewatch.names import POOL_CA_CONFIGMAP_KEY, pool_ca_name
from edgewatch_lab.testing.controlplane import ControlPlane

pytestmark = pytest.mark.controlplane


@dataclass
class World:
    admin: ControlPlane
    n1: Token
    agent: AsyncClient          # n1's pod-bound token
    requested: list[str]        # every CSR the requesters made, for the teardown


@pytest.fixture(scope="module")
async def world(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    cp = control_plane
    n1, _unbound, controller_kubeconfig = await asyncio.to_thread(_setup, cp, tmp_path_factory.mktemp("agentcsr"))
    controller = api_client(str(controller_kubeconfig), timeout_s=10, component="controller")
    agent = api_client(str(n1.kubeconfig), timeout_s=10, component="agent")
    reconciler = Reconciler(client=controller, config=ControllerConfig(),
                            metrics=ControllerMetrics(CollectorRegistry()), namespace="edgewatch")
    task = asyncio.create_task(reconciler.run())
    w = World(admin=cp, n1=n1, agent=agent, requested=[])
    try:
        yield w
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await controller.close()
        await agent.close()
        if w.requested:
            await asyncio.to_thread(cp.kubectl, "delete", "csr", *w.requested, "--ignore-not-found")
        await asyncio.to_thread(_teardown, cp)


class Listener:
    def __init__(self) -> None:
        self.told: list[CertificateFiles] = []

    def certificate_changed(self, files: CertificateFiles) -> None:
        self.told.append(files)


def _requester(w: World, state: Path, listener: Listener, *, lifetime_s: int = 3600,
               fraction: float = 2 / 3) -> CertificateRequester:
    return CertificateRequester(client=w.agent, node=node_name("n1"), state_dir=state, registry=CollectorRegistry(),
                                timeout_s=5.0, lifetime_s=lifetime_s, fraction=fraction, listeners=[listener],
                                poll_s=0.5, wait_s=60.0, backoff_initial_s=0.5, backoff_cap_s=2.0)


async def _until(check: object, timeout_s: float) -> None:
    async with asyncio.timeout(timeout_s):
        while not check():  # type: ignore[operator]
            await asyncio.sleep(0.1)


async def _pool_ca(w: World) -> x509.Certificate:
    cm = await w.agent.get(ConfigMap, pool_ca_name(POOL), namespace="edgewatch")  # the agent's own token reads it
    return x509.load_pem_x509_certificate(cm.data[POOL_CA_CONFIGMAP_KEY].encode())


def _files(state: Path) -> tuple[x509.Certificate, object]:
    files = CertificateFiles.under(state)
    cert = x509.load_pem_x509_certificate(files.cert_file.read_bytes())
    key = serialization.load_pem_private_key(files.key_file.read_bytes(), password=None)
    return cert, key


async def test_the_agent_obtains_stores_and_reuses_its_certificate(world: World, tmp_path: Path) -> None:
    listener = Listener()
    r = _requester(world, tmp_path, listener)
    task = asyncio.create_task(r.run(), name="coordinator-certificate")
    try:
        await _until(lambda: listener.told, 60)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        world.requested += r.requested
    assert len(r.requested) == 1 and r.requested[0].startswith("n1-coordinator-")
    assert r.metrics.requests.labels("issued")._value.get() == 1
    csr = json.loads(await asyncio.to_thread(world.admin.kubectl, "get", "csr", r.requested[0], "-o", "json"))
    assert csr["spec"]["username"] == "system:serviceaccount:edgewatch:edgewatch-agent"
    assert csr["spec"]["expirationSeconds"] == 3600 and csr["spec"]["usages"] == ["client auth"]

    cert, key = _files(tmp_path)
    cert.verify_directly_issued_by(await _pool_ca(world))
    assert cert.subject.rfc4514_string() == "CN=n1"
    assert cert.public_key() == key.public_key()  # type: ignore[attr-defined]
    assert cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value == \
        x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])
    assert stat.S_IMODE(CertificateFiles.under(tmp_path).key_file.stat().st_mode) == 0o600
    assert r.certificate is not None and r.certificate.valid_s == 3600.0 and r.certificate.lifetime_s == 3900.0
    assert 3500 < r.expiry_s() <= 3600

    # a restart with the stored files: no new request, the same certificate announced
    again_told = Listener()
    again = _requester(world, tmp_path, again_told)
    task = asyncio.create_task(again.run())
    try:
        await _until(lambda: again_told.told, 10)
        await asyncio.sleep(3)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert again.requested == [] and again.certificate == r.certificate
    assert _files(tmp_path)[0] == cert


async def test_a_short_certificate_is_rotated_with_a_new_key(world: World, tmp_path: Path) -> None:
    listener = Listener()
    # expirationSeconds 600 (the minimum), rotation after 1 % of it: 6 s
    r = _requester(world, tmp_path, listener, lifetime_s=600, fraction=0.01)
    task = asyncio.create_task(r.run())
    seen: list[tuple[x509.Certificate, object]] = []

    def rotated() -> bool:
        if len(listener.told) > len(seen):
            seen.append(_files(tmp_path))
        return len(seen) >= 2

    try:
        await _until(rotated, 90)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        world.requested += r.requested
    (first, first_key), (second, second_key) = seen[0], seen[1]
    assert len(r.requested) >= 2 and r.requested[0] != r.requested[1]
    assert first.serial_number != second.serial_number
    assert first.public_key() != second.public_key()
    assert first.public_key() == first_key.public_key()  # type: ignore[attr-defined]
    assert second.public_key() == second_key.public_key()  # type: ignore[attr-defined]
    ca = await _pool_ca(world)
    for cert in (first, second):
        cert.verify_directly_issued_by(ca)
        assert cert.subject.rfc4514_string() == "CN=n1"
        assert (cert.not_valid_after_utc - cert.not_valid_before_utc).total_seconds() == 900  # 600 + 5 min backdating
    assert r.certificate is not None and r.certificate.valid_s == 600.0

"""``edgewatch pool-coordinator``'s program (edgewatch.poolcoordinator.PoolCoordinator) run for real:
the real etcd binary under its supervisor, its access control following real Nodes of a real
apiserver, its ops endpoints; and its certificate requests against the real CSR API with a stand-in
signer.

The controller's signer is not used (its policy for the coordinator's requests is tested on its
own): the first test issues the serving and root certificates with the pool CA
(``edgewatch.controller.poolca``) into ``<data-dir>/tls`` as the requester would have stored them,
so the program uses them and requests nothing; the second lets the program request them and signs
them with a fake approver.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import datetime as dt
import ipaddress
import json
import os
import secrets
import shutil
import socket
import ssl
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from aetcd import rpc as etcd_rpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from edgewatch import certs
from edgewatch.controller.poolca import PoolCA, make_ca, sign_client_certificate
from edgewatch.kube.api import AsyncClient, CertificateSigningRequest, ConfigMap, Node, PatchType
from edgewatch.kube.informer import InformerConfig
from edgewatch.names import (
    COORDINATOR_CLIENT_SIGNER, COORDINATOR_SERVING_SIGNER, POOL_CA_CONFIGMAP_KEY, POOL_LABEL, pool_ca_name,
)
from edgewatch.poolcoordinator.certificates import TlsFiles
from edgewatch.poolcoordinator.coordinator import CoordinatorConfig, PoolCoordinator
from edgewatch.poolkeys import PoolKeys
from edgewatch.pooletcd.quota import QuotaPolicy
from edgewatch_lab.testing.binaries import Binaries
from edgewatch_lab.testing.controlplane import ControlPlane
from edgewatch_lab.testing.coordinatorpki import free_port_block, issue_pod_certificates

pytestmark = pytest.mark.controlplane

NAMESPACE = "default"
COORDINATOR_NODE = "coordinator-node"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def sign_serving(ca: PoolCA, *, public_key: Any, ips: list[str], dns: list[str], lifetime_s: int = 3600) -> bytes:
    """A serving certificate as the controller's signer makes it (poolca has no serving function)."""
    now = _now()
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    ca_ski = ca.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "edgewatch-coordinator")]))
            .issuer_name(ca.cert.subject).public_key(public_key).serial_number(secrets.randbits(120) + 1)
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(seconds=lifetime_s))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=False, crl_sign=False,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
            .sign(ca.key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM)


def _issue_as_the_requester(ca: PoolCA, tls: TlsFiles) -> None:
    """Both certificates into tls/, with their records, as edgewatch.csr would have stored them."""
    issue_pod_certificates(ca, tls.folder.parent, node=COORDINATOR_NODE, host_ip="127.0.0.1", lifetime_s=3600,
                           write_ca=False)


def _node_credentials(ca: PoolCA, node: str) -> grpc.ChannelCredentials:
    key = certs.new_key()
    pem = sign_client_certificate(ca, public_key=key.public_key(), node=node, lifetime_s=3600, now=_now())
    return grpc.ssl_channel_credentials(root_certificates=ca.cert_pem(), private_key=_pem_key(key),
                                        certificate_chain=pem)


async def _put(target: str, credentials: grpc.ChannelCredentials, key: bytes, value: bytes = b"x") -> str | None:
    """None if etcd accepted the put, else its error (code: details). A put racing a change of the
    access control ("revision of auth store is old", which every etcd client retries) is retried."""
    for _ in range(5):
        channel = etcd_rpc.secure_channel(target, credentials, options=[("grpc.enable_retries", 0)])
        try:
            await etcd_rpc.KVStub(channel).Put(etcd_rpc.PutRequest(key=key, value=value), timeout=5)
        except grpc.RpcError as exc:
            error = f"{exc.code().name}: {exc.details()}"  # type: ignore[attr-defined]
            if "auth store is old" not in error:
                return error
        else:
            return None
        finally:
            await channel.close()
    return error


async def _wait(predicate: Callable[[], Any], *, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        await asyncio.sleep(0.2)


def _get(url: str, token: str = "") -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _served_certificate(port: int, tls: TlsFiles) -> x509.Certificate:
    """The certificate etcd presents on a new TLS connection to 127.0.0.1 (no SNI: an IP address)."""
    ctx = ssl.create_default_context(cafile=str(tls.ca_file))
    ctx.load_cert_chain(str(tls.root.cert_file), str(tls.root.key_file))
    ctx.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
        der = conn.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def _make_node(kube: AsyncClient, name: str, pool: str | None) -> None:
    labels = {POOL_LABEL: pool} if pool else {}
    await kube.create(Node.from_dict({"apiVersion": "v1", "kind": "Node",
                                      "metadata": {"name": name, "labels": labels}}))


async def _set_pool(kube: AsyncClient, name: str, pool: str | None) -> None:
    await kube.patch(Node, name, {"metadata": {"labels": {POOL_LABEL: pool}}}, patch_type=PatchType.MERGE)


@pytest.fixture
async def pool_world(kube: AsyncClient) -> AsyncIterator[tuple[str, PoolCA, Path, list[str]]]:
    pool = f"pc-{secrets.token_hex(3)}"
    ca = make_ca(pool, now=_now())
    folder = Path(tempfile.mkdtemp(prefix="edgewatch-pc-"))
    nodes: list[str] = []
    await kube.create(ConfigMap.from_dict({"apiVersion": "v1", "kind": "ConfigMap",
                                           "metadata": {"name": pool_ca_name(pool), "namespace": NAMESPACE},
                                           "data": {POOL_CA_CONFIGMAP_KEY: ca.cert_pem().decode()}}))
    try:
        yield pool, ca, folder, nodes
    finally:
        for name in nodes:
            with contextlib.suppress(Exception):  # best-effort cleanup
                await kube.delete(Node, name)
        await kube.delete(ConfigMap, pool_ca_name(pool), namespace=NAMESPACE)
        shutil.rmtree(folder, ignore_errors=True)


def _config(pool: str, folder: Path, binaries: Binaries, port: int) -> CoordinatorConfig:
    return CoordinatorConfig(pool=pool, namespace=NAMESPACE, node=COORDINATOR_NODE, host_ip="127.0.0.1", port=port,
                             ops_port=0, data_dir=folder / "data", etcd_binary=str(binaries.etcd), api_timeout_s=10,
                             csr_poll_s=0.5, probe_interval_s=0.5, debounce_s=0.5, ca_refresh_s=0.5,
                             informer=InformerConfig(backoff_initial_s=0.2, backoff_max_s=2))


async def test_the_coordinator_runs_an_authenticated_etcd_that_follows_the_pools_nodes(
        kube: AsyncClient, binaries: Binaries, pool_world: tuple[str, PoolCA, Path, list[str]],
        metrics_token: str) -> None:
    pool, ca, folder, nodes = pool_world
    keys = PoolKeys(pool)
    n1, n2, n3 = (f"{pool}-edge-{i}" for i in (1, 2, 3))
    for name, in_pool in ((n1, True), (n2, True), (n3, False)):
        await _make_node(kube, name, pool if in_pool else None)
        nodes.append(name)
    port = free_port_block()
    target = f"127.0.0.1:{port}"
    config = _config(pool, folder, binaries, port)
    tls = TlsFiles.under(config.data_dir)
    tls.folder.mkdir(parents=True)
    _issue_as_the_requester(ca, tls)

    coordinator = PoolCoordinator(client=kube, config=config)
    task = asyncio.create_task(coordinator.run())
    etcd_pid: int | None = None
    try:
        await _wait(lambda: coordinator.ops_ports, timeout_s=10, what="the ops endpoints")
        ops = f"http://127.0.0.1:{coordinator.ops_ports['127.0.0.1']}"
        assert _get(f"{ops}/healthz") == (200, "ok\n")
        await _wait(lambda: _get(f"{ops}/readyz")[0] == 200, timeout_s=60, what="/readyz 200")
        etcd_pid = coordinator.supervisor.pid
        assert etcd_pid is not None
        assert coordinator.serving.requested == [] and coordinator.root.requested == []  # the stored ones
        assert tls.ca_file.read_bytes() == ca.cert_pem()
        assert coordinator.members.members == {n1, n2}

        # TLS with client-certificate authentication: no certificate, or one from another CA, is refused.
        anonymous = grpc.ssl_channel_credentials(root_certificates=ca.cert_pem())
        assert await _put(target, anonymous, keys.heartbeat(n1)) is not None
        stranger_ca = make_ca("elsewhere", now=_now())
        assert await _put(target, _node_credentials(stranger_ca, n1), keys.heartbeat(n1)) is not None

        # A member writes its own heartbeat, not another's; a node outside the pool writes nothing.
        creds = {n: _node_credentials(ca, n) for n in (n1, n2, n3)}
        assert await _put(target, creds[n1], keys.heartbeat(n1)) is None
        refused = await _put(target, creds[n1], keys.heartbeat(n2))
        assert refused is not None and "permission denied" in refused.lower(), refused
        assert await _put(target, creds[n3], keys.heartbeat(n3)) is not None

        # A Node joining the pool gets in within a few seconds; one leaving is shut out.
        await _set_pool(kube, n3, pool)
        joined = time.monotonic()
        await _wait(lambda: _put_ok(target, creds[n3], keys.heartbeat(n3)), timeout_s=15, what=f"{n3} let in")
        assert time.monotonic() - joined < 10
        await _set_pool(kube, n1, None)
        await _wait(lambda: _put_refused(target, creds[n1], keys.heartbeat(n1)), timeout_s=15, what=f"{n1} shut out")
        await _wait(lambda: coordinator.members.current(), timeout_s=10, what="the access control current")
        assert coordinator.members.members == {n2, n3}
        assert _get(f"{ops}/readyz")[0] == 200

        # who may read it: the scraper's token (edgewatch.metricsauth, checked on this event loop: read from a thread)
        assert (await asyncio.to_thread(_get, f"{ops}/metrics"))[0] == 401
        metrics = (await asyncio.to_thread(_get, f"{ops}/metrics", metrics_token))[1]
        assert "edgewatch_pool_coordinator_ready 1.0" in metrics
        assert "edgewatch_pool_coordinator_members 2.0" in metrics
        assert 'edgewatch_pool_coordinator_acl_reconciles_total{result="ok"}' in metrics
        assert 'edgewatch_pool_coordinator_certificate_expiry_seconds{certificate="serving"}' in metrics
        # one restart already: etcd listened on loopback only until the access control was on
        assert "edgewatch_pool_coordinator_etcd_restarts_total 1.0" in metrics

        # A rotated serving certificate is served on the next handshake, without an etcd restart.
        before = _served_certificate(port, tls)
        _issue_as_the_requester(ca, tls)
        after = await _wait(lambda: (c := _served_certificate(port, tls)).serial_number != before.serial_number and c,
                            timeout_s=10, what="the new serving certificate served")
        assert after.serial_number == x509.load_pem_x509_certificate(tls.server.cert_file.read_bytes()).serial_number
        assert coordinator.supervisor.pid == etcd_pid and coordinator.supervisor.starts == 2
        assert await _put(target, creds[n2], keys.heartbeat(n2)) is None

        # etcd killed: restarted, counted, ready again with its data and users.
        os.kill(etcd_pid, 9)
        await _wait(lambda: coordinator.supervisor.starts == 3 and coordinator.supervisor.pid, timeout_s=20,
                    what="etcd restarted")
        await _wait(lambda: _get(f"{ops}/readyz")[0] == 200, timeout_s=30, what="/readyz 200 again")
        assert "edgewatch_pool_coordinator_etcd_restarts_total 2.0" in (
            await asyncio.to_thread(_get, f"{ops}/metrics", metrics_token))[1]
        assert await _put(target, creds[n2], keys.heartbeat(n2)) is None

        # The pool CA rotated (the bundle new + old in its ConfigMap): etcd restarted to load it
        # (it reads its client CA pool only at start); then a node certificate of the new CA gets
        # in, and one of the old CA still does.
        new_ca = make_ca(pool, now=_now())
        bundle = new_ca.cert_pem() + ca.cert_pem()
        await kube.patch(ConfigMap, pool_ca_name(pool), {"data": {POOL_CA_CONFIGMAP_KEY: bundle.decode()}},
                         namespace=NAMESPACE, patch_type=PatchType.MERGE)
        await _wait(lambda: tls.ca_file.read_bytes() == bundle and coordinator.supervisor.starts == 4
                    and coordinator.supervisor.pid, timeout_s=20, what="etcd restarted with the new CA")
        await _wait(lambda: _get(f"{ops}/readyz")[0] == 200, timeout_s=30, what="/readyz 200 after the CA change")
        key = certs.new_key()
        new_cert = sign_client_certificate(new_ca, public_key=key.public_key(), node=n2, lifetime_s=3600, now=_now())
        by_new_ca = grpc.ssl_channel_credentials(root_certificates=bundle, private_key=_pem_key(key),
                                                 certificate_chain=new_cert)
        assert await _put(target, by_new_ca, keys.heartbeat(n2)) is None
        assert await _put(target, creds[n2], keys.heartbeat(n2)) is None
        metrics = (await asyncio.to_thread(_get, f"{ops}/metrics", metrics_token))[1]
        assert 'edgewatch_pool_coordinator_ca_reads_total{result="changed"} 1.0' in metrics
        assert 'edgewatch_pool_coordinator_ca_reads_total{result="unchanged"}' in metrics
        etcd_pid = coordinator.supervisor.pid
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    # Cancellation (what SIGTERM does through run_until_signalled) stops etcd: no process left.
    assert task.cancelled()
    assert etcd_pid is not None and not _alive(etcd_pid)
    assert coordinator.supervisor.pid is None
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


async def test_a_member_cannot_fill_the_pool_store(
        kube: AsyncClient, binaries: Binaries, pool_world: tuple[str, PoolCA, Path, list[str]]) -> None:
    """The attack as a compromised member runs it, with only its own certificate and key: n1 writes
    512 KiB values into its own area as fast as etcd takes them, then rewrites its heartbeat key
    as fast (each revision kept until compaction). On the code before per-member quotas every write
    was accepted until etcd's quota tripped NOSPACE for the whole pool. Now (quotas scaled down for
    the test: a 2 MiB area, 16 KiB at once on its keys) its area's writes stop within a few and the
    area is emptied while its heartbeat goes on; the heartbeat churn makes it read-only; the
    honest n2 writes throughout; n1 writes again once each suspension is over."""
    pool, ca, folder, nodes = pool_world
    keys = PoolKeys(pool)
    n1, n2 = (f"{pool}-edge-{i}" for i in (1, 2))
    for name in (n1, n2):
        await _make_node(kube, name, pool)
        nodes.append(name)
    port = free_port_block()
    target = f"127.0.0.1:{port}"
    quota = QuotaPolicy(key_bytes_per_s=1024, key_burst_bytes=16 * 1024, area_bytes=2 * 2**20, suspend_s=6)
    config = dataclasses.replace(_config(pool, folder, binaries, port), quota=quota)
    tls = TlsFiles.under(config.data_dir)
    tls.folder.mkdir(parents=True)
    _issue_as_the_requester(ca, tls)
    coordinator = PoolCoordinator(client=kube, config=config)
    task = asyncio.create_task(coordinator.run())
    creds = {n: _node_credentials(ca, n) for n in (n1, n2)}
    area = keys.writer(n1).encode() + b"cache/"
    value = secrets.token_bytes(512 * 1024)
    try:
        await _wait(lambda: coordinator.opened and coordinator.members.current(), timeout_s=60,
                    what="the coordinator open with its access control on")
        await _wait(lambda: _put_ok(target, creds[n2], keys.heartbeat(n2)), timeout_s=30, what="etcd serving")
        await _wait(lambda: coordinator.quota.synced.is_set(), timeout_s=10, what="the quota keeper following")

        # many large keys in its area: refused once past 2 MiB, within a few writes; its keys stay
        accepted, refused = 0, None
        for i in range(128):  # 64 MiB: all of it landed before
            refused = await _put(target, creds[n1], area + f"k{i}".encode(), value)
            if refused is not None:
                break
            accepted += 1
        assert refused is not None and "permission denied" in refused.lower(), (accepted, refused)
        # 4 fit; the rest land in the moment the reconcile takes (a few on a busy host)
        assert accepted < 128, accepted
        assert n1 in coordinator.quota.suspended().no_area
        assert await _put(target, creds[n1], keys.heartbeat(n1)) is None   # its heartbeat goes on
        assert await _put(target, creds[n2], keys.heartbeat(n2)) is None   # honest members write on
        probe = _EtcdRoot(target, tls)
        # the watch delivers the puts that landed before the revocation late on a loaded host (at
        # 512 KiB each); they are deleted by revision even after the suspension is over
        await _wait(lambda: probe.empty(keys.writer(n1).encode()), timeout_s=30, what="n1's area deleted")
        await _wait(lambda: _put_ok(target, creds[n1], area + b"again"), timeout_s=30, what="n1's area writable again")

        # its heartbeat rewritten as fast as etcd takes it: read-only past 16 KiB of cost
        accepted, refused = 0, None
        for _ in range(400):
            refused = await _put(target, creds[n1], keys.heartbeat(n1), value[:1024])
            if refused is not None:
                break
            accepted += 1
        assert refused is not None and "permission denied" in refused.lower(), (accepted, refused)
        assert accepted < 400, accepted  # 12 fit in the bucket; the rest before the revocation
        assert n1 in coordinator.quota.suspended().read_only
        assert await _put(target, creds[n2], keys.heartbeat(n2)) is None
        metrics = coordinator.registry.get_sample_value
        assert metrics("edgewatch_pool_coordinator_quota_actions_total", {"action": "no_area"}) == 1
        assert metrics("edgewatch_pool_coordinator_quota_actions_total", {"action": "read_only"}) == 1
        assert metrics("edgewatch_pool_coordinator_quota_actions_total", {"action": "lifted"}) >= 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class _EtcdRoot:
    """Counts keys with the coordinator's root certificate (what the test reads, not what it attacks)."""

    def __init__(self, target: str, tls: TlsFiles) -> None:
        self.target, self.tls = target, tls

    async def empty(self, prefix: bytes) -> bool:
        return await self.count(prefix) == 0

    async def count(self, prefix: bytes) -> int:
        from edgewatch.poolcoordinator.certificates import root_credentials
        from edgewatch.poolkeys import prefix_end
        channel = etcd_rpc.secure_channel(self.target, root_credentials(self.tls), options=[("grpc.enable_retries", 0)])
        try:
            reply = await etcd_rpc.KVStub(channel).Range(
                etcd_rpc.RangeRequest(key=prefix, range_end=prefix_end(prefix), count_only=True), timeout=5)
            return int(reply.count)
        finally:
            await channel.close()


async def _put_ok(target: str, credentials: grpc.ChannelCredentials, key: bytes) -> bool:
    return await _put(target, credentials, key) is None


async def _put_refused(target: str, credentials: grpc.ChannelCredentials, key: bytes) -> bool:
    return await _put(target, credentials, key) is not None


async def _fake_approver(kube: AsyncClient, ca: PoolCA, control_plane: ControlPlane, signed: list[str]) -> None:
    """Signs every pending coordinator CSR with the pool CA (the controller's job, not under test here)."""
    while True:
        async for csr in kube.list(CertificateSigningRequest):
            spec, status = csr.spec, csr.status
            if spec.signerName not in (COORDINATOR_SERVING_SIGNER, COORDINATOR_CLIENT_SIGNER):
                continue
            if not csr.metadata.name.startswith(f"edgewatch-coordinator-{COORDINATOR_NODE}-"):
                continue
            if status is not None and status.certificate:
                continue
            request = x509.load_pem_x509_csr(base64.b64decode(spec.request))
            if spec.signerName == COORDINATOR_SERVING_SIGNER:
                san = request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
                pem = sign_serving(ca, public_key=request.public_key(),
                                   ips=[str(i) for i in san.get_values_for_type(x509.IPAddress)],
                                   dns=san.get_values_for_type(x509.DNSName), lifetime_s=spec.expirationSeconds)
            else:
                pem = sign_client_certificate(ca, public_key=request.public_key(),  # type: ignore[arg-type]
                                              node="root", lifetime_s=spec.expirationSeconds, now=_now())
            name = csr.metadata.name
            await asyncio.to_thread(control_plane.kubectl, "certificate", "approve", name)
            body = json.loads(await asyncio.to_thread(control_plane.kubectl, "get", "csr", name, "-o", "json"))
            body["status"]["certificate"] = base64.b64encode(pem).decode()
            await asyncio.to_thread(control_plane.kubectl, "replace", "--raw",
                                    f"/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}/status",
                                    "-f", "-", input_text=json.dumps(body))
            signed.append(name)
        await asyncio.sleep(0.3)


async def test_the_coordinator_requests_its_certificates_through_csrs(
        kube: AsyncClient, binaries: Binaries, control_plane: ControlPlane,
        pool_world: tuple[str, PoolCA, Path, list[str]]) -> None:
    pool, ca, folder, nodes = pool_world
    n1 = f"{pool}-edge-1"
    await _make_node(kube, n1, pool)
    nodes.append(n1)
    port = free_port_block()
    config = _config(pool, folder, binaries, port)
    tls = TlsFiles.under(config.data_dir)
    coordinator = PoolCoordinator(client=kube, config=config)
    signed: list[str] = []
    approver = asyncio.create_task(_fake_approver(kube, ca, control_plane, signed))
    task = asyncio.create_task(coordinator.run())
    try:
        await _wait(lambda: coordinator.ops_ports, timeout_s=10, what="the ops endpoints")
        ops = f"http://127.0.0.1:{coordinator.ops_ports['127.0.0.1']}"
        await _wait(lambda: _get(f"{ops}/readyz")[0] == 200, timeout_s=90, what="/readyz 200")
        assert len(coordinator.serving.requested) == 1 and len(coordinator.root.requested) == 1
        assert set(signed) == {*coordinator.serving.requested, *coordinator.root.requested}
        for files in (tls.server, tls.root):
            assert files.key_file.stat().st_mode & 0o777 == 0o600
        served = _served_certificate(port, tls)
        assert served.subject.rfc4514_string() == "CN=edgewatch-coordinator"
        assert await _put(f"127.0.0.1:{port}", _node_credentials(ca, n1), PoolKeys(pool).heartbeat(n1)) is None
    finally:
        task.cancel()
        approver.cancel()
        await asyncio.gather(task, approver, return_exceptions=True)
        for name in signed:
            await asyncio.to_thread(control_plane.kubectl, "delete", "csr", name, "--ignore-not-found")

"""Pool-CA certificates for the coordinator's TLS tests: node certificates issued with the signer's
pure function, a TLS etcd from a pool CA, and the stand-ins a ``CoordinatorRunner`` is given."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Namespace

from edgewatch.agent.certstore import CertificateFiles
from edgewatch.controller.poolca import PoolCA, sign_client_certificate
from edgewatch.core.poolconfig import PoolCoordinators
from edgewatch_lab.testing.binaries import Binaries
from edgewatch_lab.testing.etcd import EtcdServer, EtcdServerTLS


def now() -> dt.datetime:
    """The wall clock, in UTC."""
    return dt.datetime.now(dt.timezone.utc)


def issue(ca: PoolCA, node: str, files: CertificateFiles) -> int:
    """A new key and a certificate for ``node`` from ``ca`` (the signer's pure function), written
    where the agent's certificate requester keeps them; returns the certificate's serial."""
    key = ec.generate_private_key(ec.SECP256R1())
    pem = sign_client_certificate(ca, public_key=key.public_key(), node=node, lifetime_s=3600, now=now())
    files.key_file.parent.mkdir(parents=True, exist_ok=True)
    files.key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                 serialization.NoEncryption()))
    files.cert_file.write_bytes(pem)
    return x509.load_pem_x509_certificate(pem).serial_number


def csr_request(*, cn: str, sans: list[x509.GeneralName] | None = None) -> tuple[ec.EllipticCurvePrivateKey, str]:
    """A new P-256 key and a PKCS#10 request for ``CN=<cn>`` (and ``sans``), base64 as a CSR's spec.request."""
    key = ec.generate_private_key(ec.SECP256R1())
    builder = x509.CertificateSigningRequestBuilder().subject_name(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    pem = builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
    return key, base64.b64encode(pem).decode()


def csr_conditions(csr: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A CertificateSigningRequest's status conditions, by type."""
    return {c["type"]: c for c in (csr.get("status") or {}).get("conditions") or []}


async def wait_csr(read: Callable[[], Awaitable[dict[str, Any]]], name: str, done: Callable[[dict[str, Any]], bool],
                   timeout_s: float) -> dict[str, Any]:
    """``read()`` CSR ``name`` every 0.3 s until ``done`` of it (an AssertionError after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        csr = await read()
        if done(csr):
            return csr
        assert time.monotonic() < deadline, f"CSR {name} not done after {timeout_s} s: {csr.get('status')}"
        await asyncio.sleep(0.3)


def pool_ca_etcd(binaries: Binaries, folder: Path, ca: PoolCA) -> EtcdServer:
    """An etcd (not started) serving TLS from ``ca`` and letting in only clients of that CA."""
    return EtcdServer(binary=binaries.etcd, data_dir=folder / "data",
                      tls=EtcdServerTLS.signed_by_ca(folder / "etcd", ca_cert_pem=ca.cert_pem(),
                                                     ca_key_pem=ca.key_pem()))


async def stop_pool(task: asyncio.Task[Any] | None, server: EtcdServer, kube: AsyncClient, namespace: str) -> None:
    """Cancel the runner's task (if started), clean etcd up and delete the namespace (errors ignored)."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await asyncio.to_thread(server.cleanup)
    with contextlib.suppress(Exception):
        await kube.delete(Namespace, namespace)


async def wait_until(predicate: Callable[[], object], *, timeout_s: float, what: str) -> None:
    """Poll ``predicate`` every 0.1 s; an AssertionError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.1)


class Link:
    """The cloud link, always up."""

    up = True


class Verdicts:
    """Every node healthy."""

    @staticmethod
    def verdict_of(node: str) -> str:
        return "healthy"


class Settings:
    """Synced settings with no coordinator configuration of the pool's own."""

    def __init__(self) -> None:
        self.config_synced = asyncio.Event()
        self.config_synced.set()
        self.own = None
        self.pool_coordinators = PoolCoordinators()
        self.pool_resources = ()


class Clock:
    """The wall clock, as the runner reads it."""

    @staticmethod
    def now() -> dt.datetime:
        return now()

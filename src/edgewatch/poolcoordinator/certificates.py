"""The pool coordinator's certificates and their files under ``<data-dir>/tls`` (docs/security.md).

* ``ca.crt``: the pool's CA certificate, from the ConfigMap :func:`edgewatch.names.pool_ca_name`
  (key ``ca.crt``) in edgewatch's namespace (:func:`install_pool_ca`): etcd trusts only client
  certificates it signed, and our own etcd client verifies etcd against it.
* ``server.crt``/``server.key``/``server.json``: etcd's serving certificate (:func:`serving_spec`):
  signer :data:`edgewatch.names.COORDINATOR_SERVING_SIGNER`, usages server auth and digital
  signature, subject ``CN=edgewatch-coordinator``, SANs the node's IP address, ``127.0.0.1`` and
  ``localhost``.
* ``root.crt``/``root.key``/``root.json``: etcd's administrator (:func:`root_spec`): signer
  :data:`edgewatch.names.COORDINATOR_CLIENT_SIGNER`, usage client auth, subject
  ``CN=root`` (:data:`edgewatch.names.COORDINATOR_ROOT_USER`).

Both are requested, stored (keys 0600, atomic writes) and rotated by :class:`edgewatch.csr.CertificateRequester`.

Limits: the CA is read once at start (a pool CA is not rotated in this version).
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from edgewatch.certfiles import CertificateFiles, fsync_dir, write_atomic
from edgewatch.csr import CertificateSpec
from edgewatch.kube.api import AsyncClient, ConfigMap
from edgewatch.kube.backoff import backoff_delay
from edgewatch.kube.errors import API_ERRORS, is_not_found
from edgewatch.names import (
    COORDINATOR_CLIENT_SIGNER, COORDINATOR_ROOT_USER, COORDINATOR_SERVICE_ACCOUNT, COORDINATOR_SERVING_SIGNER,
    POOL_CA_CONFIGMAP_KEY, pool_ca_name,
)

__all__ = ["SERVING_COMMON_NAME", "TlsFiles", "install_pool_ca", "parse_ca", "read_pool_ca", "write_pool_ca", "root_credentials", "root_spec",
           "serving_spec"]

log = logging.getLogger(__name__)

SERVING_COMMON_NAME = COORDINATOR_SERVICE_ACCOUNT
"""The subject CN of the coordinator's serving certificate (``edgewatch-coordinator``)."""


@dataclass(frozen=True)
class TlsFiles:
    """The files under ``<data-dir>/tls`` (module docstring)."""

    folder: Path
    ca_file: Path
    server: CertificateFiles
    root: CertificateFiles

    @classmethod
    def under(cls, data_dir: Path) -> TlsFiles:
        """The files of the coordinator whose data folder is ``data_dir``."""
        folder = data_dir / "tls"
        return cls(folder=folder, ca_file=folder / "ca.crt", server=CertificateFiles.named(folder, stem="server"),
                   root=CertificateFiles.named(folder, stem="root"))


def serving_spec(*, node: str, host_ip: str) -> CertificateSpec:
    """What the serving certificate of the coordinator on ``node`` (address ``host_ip``) is."""
    ips = tuple(dict.fromkeys((host_ip, "127.0.0.1")))
    return CertificateSpec(signer_name=COORDINATOR_SERVING_SIGNER, usages=("server auth", "digital signature"),
                           common_name=SERVING_COMMON_NAME, usage=ExtendedKeyUsageOID.SERVER_AUTH,
                           dns_names=("localhost",), ip_addresses=ips,
                           generate_name=f"{COORDINATOR_SERVICE_ACCOUNT}-{node}-serving-"[:200],
                           what="pool coordinator serving")


def root_spec(*, node: str) -> CertificateSpec:
    """What etcd's root client certificate, requested by the coordinator on ``node``, is."""
    return CertificateSpec(signer_name=COORDINATOR_CLIENT_SIGNER, usages=("client auth",),
                           common_name=COORDINATOR_ROOT_USER, usage=ExtendedKeyUsageOID.CLIENT_AUTH,
                           generate_name=f"{COORDINATOR_SERVICE_ACCOUNT}-{node}-root-"[:200],
                           what="pool coordinator root")


def parse_ca(pem: object) -> bytes:
    """``pem`` if it is one PEM CA certificate (BasicConstraints CA:true), as bytes.

    Raises:
        ValueError: anything else.
    """
    if not isinstance(pem, str | bytes) or not pem:
        raise ValueError("no CA certificate")
    data = pem.encode() if isinstance(pem, str) else pem
    try:
        cert = x509.load_pem_x509_certificate(data)
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except (ValueError, TypeError, x509.ExtensionNotFound, x509.DuplicateExtension) as exc:
        raise ValueError(f"not a CA certificate: {exc}") from None
    if not constraints.ca:
        raise ValueError("the certificate is not a CA")
    return data


async def read_pool_ca(*, client: AsyncClient, namespace: str, pool: str, timeout_s: float) -> bytes:
    """The pool's CA certificate(s) from its ConfigMap (one GET, bounded by ``timeout_s`` seconds).

    Raises:
        ValueError: no usable CA in the ConfigMap. The API's errors (``API_ERRORS``), 404 included.
    """
    async with asyncio.timeout(timeout_s):
        cm = await client.get(ConfigMap, pool_ca_name(pool), namespace=namespace)
    return parse_ca((cm.data or {}).get(POOL_CA_CONFIGMAP_KEY))


def write_pool_ca(ca_file: Path, pem: bytes) -> None:
    """Write ``pem`` to ``ca_file`` (0644, atomically, the folder synced).

    Raises:
        OSError: it cannot be written.
    """
    ca_file.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(ca_file, pem, mode=0o644)
    fsync_dir(ca_file.parent)


async def install_pool_ca(*, client: AsyncClient, namespace: str, pool: str, ca_file: Path, timeout_s: float,
                          backoff_initial_s: float = 1.0, backoff_cap_s: float = 30.0,
                          rng: random.Random | None = None) -> bytes:
    """Read the pool's CA certificate from its ConfigMap and write it to ``ca_file`` (0644,
    atomically); returns it. Retries (capped jittered backoff) until the ConfigMap exists and holds
    a CA: the controller makes it at its first signing for the pool. Each GET is bounded by
    ``timeout_s`` seconds.

    Raises:
        OSError: the file cannot be written.
    """
    name = pool_ca_name(pool)
    attempt = 0
    while True:
        try:
            pem = await read_pool_ca(client=client, namespace=namespace, pool=pool, timeout_s=timeout_s)
        except (ValueError, *API_ERRORS) as exc:
            missing = is_not_found(exc)
            attempt += 1
            delay = backoff_delay(attempt, initial=backoff_initial_s, cap=backoff_cap_s, rng=rng)
            log.log(logging.WARNING if attempt == 1 else logging.INFO, "pool CA %s/%s not usable (%s); retrying in "
                    "%.1f s", namespace, name, "absent" if missing else f"{type(exc).__name__}: {exc}", delay,
                    extra={"pool": pool})
            await asyncio.sleep(delay)
            continue
        write_pool_ca(ca_file, pem)
        log.info("pool CA installed", extra={"pool": pool, "file": str(ca_file)})
        return pem


def root_credentials(tls: TlsFiles) -> grpc.ChannelCredentials:
    """gRPC TLS credentials for etcd as ``root``: the root certificate and key, and the pool CA as
    the only trust root (read from the files now: call again after a rotation).

    Raises:
        OSError: a file cannot be read.
    """
    return grpc.ssl_channel_credentials(root_certificates=tls.ca_file.read_bytes(),
                                        private_key=tls.root.key_file.read_bytes(),
                                        certificate_chain=tls.root.cert_file.read_bytes())

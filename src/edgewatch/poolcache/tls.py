"""TLS for the node-local pool cache endpoint: a self-signed certificate and the kubeconfig of the
node's clients.

What it is for
    kube-proxy, CoreDNS and kubectl talk HTTPS only. The agent serves the cache on loopback with a
    self-signed ECDSA P-256 certificate (valid one year, CA and server certificate at once) kept in
    a folder, and writes a kubeconfig that trusts exactly that certificate.

Limits
    The certificate is renewed (a new key, so the kubeconfig must be rewritten) when it is missing,
    unreadable, does not match its key, does not name every requested host, or expires within
    :data:`RENEW_BEFORE_S` seconds. Files are written atomically; the key is mode 0600. No client
    certificates: the endpoint authenticates nobody (see :mod:`edgewatch.poolcache.apiserver`).
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import os
import ssl
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CERT_FILE", "KEY_FILE", "RENEW_BEFORE_S", "VALIDITY_S", "client_kubeconfig", "self_signed_tls"]

CERT_FILE: Final = "poolcache-tls.crt"
KEY_FILE: Final = "poolcache-tls.key"
VALIDITY_S: Final = 365 * 24 * 3600
"""Lifetime of a new certificate, seconds (one year)."""
RENEW_BEFORE_S: Final = 30 * 24 * 3600
"""A certificate expiring sooner than this (seconds) is replaced."""


def _san(hosts: Sequence[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for h in hosts:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            out.append(x509.DNSName(h))
    return out


def _usable(cert_path: Path, key_path: Path, hosts: Sequence[str]) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, TypeError, x509.ExtensionNotFound, x509.DuplicateExtension):
        return False
    if key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo) != \
            cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo):
        return False
    left = cert.not_valid_after_utc - datetime.datetime.now(datetime.timezone.utc)
    return left.total_seconds() > RENEW_BEFORE_S and all(n in names for n in _san(hosts))


def _write(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _create(cert_path: Path, key_path: Path, hosts: Sequence[str]) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "edgewatch-poolcache")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(seconds=VALIDITY_S))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False, key_agreement=False,
                                     crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(_san(hosts)), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write(key_path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()), 0o600)
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)


def self_signed_tls(*, dir: Path, hosts: Sequence[str] = ("127.0.0.1", "localhost", "::1")  # noqa: A002
                    ) -> tuple[ssl.SSLContext, bytes]:
    """A server TLS context for the cache endpoint, and the certificate PEM clients must trust.

    Args:
        dir: folder of ``poolcache-tls.crt`` / ``poolcache-tls.key``; created if missing. Files
            there are reused when valid (module docstring), else replaced.
        hosts: names and IP addresses the certificate must carry.

    Returns:
        (server context, TLS 1.2 at least; the certificate in PEM for ``certificate-authority-data``).

    Raises:
        OSError: the folder or files cannot be created or written.
    """
    dir.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = dir / CERT_FILE, dir / KEY_FILE
    if not _usable(cert_path, key_path, hosts):
        _create(cert_path, key_path, hosts)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_path, key_path)
    return ctx, cert_path.read_bytes()


def client_kubeconfig(*, server: str, ca_pem: bytes, token: str | None = None, token_file: str | None = None) -> str:
    """A kubeconfig (YAML) for a node client of the cache endpoint.

    Args:
        server: ``https://127.0.0.1:<port>``.
        ca_pem: the certificate from :func:`self_signed_tls`.
        token: a bearer token to send, or None: the cache serves its objects only to a token the
            cloud authenticates and authorizes (:mod:`edgewatch.poolcache.authn`), and passes it
            through unchanged on forwarded requests.
        token_file: a file the client re-reads its token from (``tokenFile``, e.g. a projected
            ServiceAccount token that rotates), or None.

    With neither, client-go clients send no Authorization header: cached reads get 401 and
    forwarded requests are anonymous (kubectl even prompts for a username: client-go's interactive
    loader does so for an https server without credentials).
    """
    user: dict[str, str] = {}
    if token:
        user["token"] = token
    if token_file:
        user["tokenFile"] = token_file
    doc = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "edgewatch-poolcache", "cluster": {
            "server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "users": [{"name": "edgewatch-poolcache", "user": user}],
        "contexts": [{"name": "edgewatch-poolcache", "context": {"cluster": "edgewatch-poolcache",
                                                                "user": "edgewatch-poolcache"}}],
        "current-context": "edgewatch-poolcache",
        "preferences": {},
    }
    return yaml.safe_dump(doc, sort_keys=False)

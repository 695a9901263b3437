"""Real PKCS#10 requests and CSR specs for the signer policies' unit tests."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.x509.oid import NameOID

from edgewatch.names import NODE_NAME_EXTRA

SA_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:edgewatch", "system:authenticated")


def build_csr(*, cn: str | None, key: Any, names: Sequence[x509.NameAttribute] | None = None,
              sans: Sequence[x509.GeneralName] | None = (), extensions: Sequence[x509.ExtensionType] = ()) -> bytes:
    """A PEM request signed by ``key``: subject ``names`` (else ``CN=<cn>``, none without ``cn``), ``sans``, ``extensions``."""
    attrs = list(names) if names is not None else ([x509.NameAttribute(NameOID.COMMON_NAME, cn)] if cn else [])
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(attrs))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    for ext in extensions:
        builder = builder.add_extension(ext, critical=False)
    algorithm = None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()
    return builder.sign(key, algorithm).public_bytes(serialization.Encoding.PEM)


def node_extra(node: str | None, extra: dict[str, tuple[str, ...]] | None) -> dict[str, tuple[str, ...]]:
    """``extra`` if given, else the node claim of ``node`` (none without a node)."""
    if extra is None:
        extra = {NODE_NAME_EXTRA: (node,)} if node is not None else {}
    return extra


def pem_block(der: bytes) -> bytes:
    """``der`` (any bytes) base64-encoded in a CERTIFICATE REQUEST PEM block."""
    return b"-----BEGIN CERTIFICATE REQUEST-----\n" + base64.encodebytes(der) + b"-----END CERTIFICATE REQUEST-----\n"

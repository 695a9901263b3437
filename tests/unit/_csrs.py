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


def _der_length(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(body)]) + body


def _tlv_end(der: bytes, start: int) -> int:
    """The offset just past the DER element that starts at ``start``."""
    first = der[start + 1]
    if first < 0x80:
        return start + 2 + first
    count = first & 0x7F
    return start + 2 + count + int.from_bytes(der[start + 2:start + 2 + count], "big")


def duplicate_key_usage_csr(key: Any, cn: str) -> bytes:
    """A PEM request, validly signed by ``key`` (an EC key), that lists KeyUsage twice: what a
    builder refuses to make but an attacker writes by hand (its ExtendedKeyUsage OID 2.5.29.37 is
    rewritten to KeyUsage's 2.5.29.15 before signing)."""
    from cryptography.hazmat.primitives.asymmetric import ec

    csr = (x509.CertificateSigningRequestBuilder()
           .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
           .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                        data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                        crl_sign=False, encipher_only=False, decipher_only=False), critical=False)
           .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
           .sign(key, hashes.SHA256()))
    der = csr.public_bytes(serialization.Encoding.DER)
    tbs = csr.tbs_certrequest_bytes
    assert tbs.count(b"\x06\x03\x55\x1d\x25") == 1
    patched = tbs.replace(b"\x06\x03\x55\x1d\x25", b"\x06\x03\x55\x1d\x0f")
    outer_content = 2 + (der[1] & 0x7F if der[1] & 0x80 else 0)
    alg_start = outer_content + len(tbs)
    algorithm = der[alg_start:_tlv_end(der, alg_start)]
    signature = key.sign(patched, ec.ECDSA(hashes.SHA256()))
    bits = b"\x03" + _der_length(len(signature) + 1) + b"\x00" + signature
    body = patched + algorithm + bits
    return pem_block(b"\x30" + _der_length(len(body)) + body)

"""Certificates obtained through a CertificateSigningRequest, pure: a key, the request, the checks
of what comes back, and when to rotate (docs/security.md). No I/O, no clock of its own:
times are passed in. Shared by the agent's coordinator client certificate
(``edgewatch.agent.certificates``) and the pool coordinator's serving and root certificates
(``edgewatch.poolcoordinator.certificates``); the files are ``edgewatch.certfiles``, the request
loop ``edgewatch.csr``.

**The request** (:func:`build_request`): a PKCS#10 request for a fresh ECDSA P-256 key
(:func:`new_key`, a new one at every rotation) with the subject exactly ``CN=<common name>`` and,
for a serving certificate, a SubjectAlternativeName extension with the DNS names and IP addresses
asked for; nothing else. The signer sets every other extension of the certificate itself.

**What comes back is untrusted** (:func:`check_certificate`): it must be one PEM certificate (at
most :data:`MAX_CERTIFICATE_BYTES`) that parses, whose subject is exactly ``CN=<common name>``,
whose public key is ours, whose extended key usage includes the one asked for (client auth or
server auth), whose SANs include every name asked for, and which is valid for at least
:data:`MIN_VALID_S`. Anything else is a :class:`CertificateError` with a ``reason`` (a bounded
metric label) and a message; never another exception.

**Clocks.** The project's rule: never compare a timestamp written by another machine with our own
clock. notBefore and notAfter are written by the controller, so they are never compared with our
clock. Only durations are taken from the certificate, and every instant is ours:

- ``lifetime_s = notAfter - notBefore`` (a duration, clock-independent);
- the validity left when we received it, ``valid_s = min(lifetime_s, requested_s)``: the signer
  issues at most what was asked (``expirationSeconds``) and backdates notBefore a little for clock
  skew (5 min for edgewatch's signer), so the requested lifetime is the tighter bound of what is
  left from the moment the certificate was issued, and the moment we receive it is later still;
  ``lifetime_s`` alone bounds it when the signer gave less (a CA near its own end);
- ``received_at``: when WE received it, on our own clock (the monotonic clock in the process; our
  own wall clock in the stored record, written and read by this machine only);
- rotation at ``received_at + fraction * valid_s`` (:func:`rotation_at`, fraction 2/3 by default),
  expiry (for the metric) at ``received_at + valid_s``. With a 24 h certificate the holder renews
  after 16 h and has 8 h of margin for a controller or a link that is down.

The estimate is late by at most the time from signing to our receipt (the CSR's round trip, a few
seconds) plus what our clock drifts in a day, both small against the third of the lifetime left.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID, ObjectIdentifier

__all__ = [
    "DEFAULT_FRACTION", "MAX_CERTIFICATE_BYTES", "MIN_VALID_S", "CertificateError", "IssuedCertificate",
    "build_request", "check_certificate", "new_key", "rotation_at", "rotation_due",
]

DEFAULT_FRACTION: Final = 2 / 3
"""Rotate after this fraction of the validity left at receipt."""

MIN_VALID_S: Final = 600.0
"""Shortest validity accepted, seconds (10 min: the API's minimum ``expirationSeconds``). A shorter
certificate would make its holder rotate in a tight loop; it is refused, and the next request
waits its backoff."""

MAX_CERTIFICATE_BYTES: Final = 64 * 1024
"""Largest ``status.certificate`` parsed, bytes of PEM (ours is under 1 KiB)."""

_PEM_LABEL = b"-----BEGIN CERTIFICATE-----"
_PARSE_ERRORS = (ValueError, TypeError, UnsupportedAlgorithm, x509.InvalidVersion, x509.DuplicateExtension)


class CertificateError(ValueError):
    """A certificate that cannot be used. ``reason`` is a metric label: ``malformed``, ``subject``,
    ``key``, ``usage``, ``san``, ``lifetime``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class IssuedCertificate:
    """A checked certificate: its PEM, the durations read from it and the validity left at receipt.

    Attributes:
        pem: the certificate, PEM (the first block of what came back).
        lifetime_s: notAfter - notBefore, seconds.
        valid_s: validity left when received, seconds: ``min(lifetime_s, requested_s)``.
    """

    pem: bytes
    lifetime_s: float
    valid_s: float


def new_key() -> ec.EllipticCurvePrivateKey:
    """A fresh ECDSA P-256 private key."""
    return ec.generate_private_key(ec.SECP256R1())


def build_request(*, common_name: str, key: ec.EllipticCurvePrivateKey, dns_names: Sequence[str] = (),
                  ip_addresses: Sequence[str] = ()) -> bytes:
    """A PEM PKCS#10 request signed by ``key``, subject exactly ``CN=<common_name>``; with
    ``dns_names`` or ``ip_addresses`` one SubjectAlternativeName extension naming them, else no
    extension.

    Raises:
        ValueError: an IP address that does not parse.
    """
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    builder = x509.CertificateSigningRequestBuilder().subject_name(subject)
    names = _san(dns_names, ip_addresses)
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    request = builder.sign(key, hashes.SHA256())
    return request.public_bytes(serialization.Encoding.PEM)


def _san(dns_names: Sequence[str], ip_addresses: Sequence[str]) -> list[x509.GeneralName]:
    return [*(x509.DNSName(d) for d in dns_names),
            *(x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses)]


def _public_bytes(key: object) -> bytes | None:
    if not isinstance(key, ec.EllipticCurvePublicKey):
        return None
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


_USAGE_NAMES: Final = {ExtendedKeyUsageOID.CLIENT_AUTH: "client auth", ExtendedKeyUsageOID.SERVER_AUTH: "server auth"}


def check_certificate(pem: bytes, *, common_name: str, key: ec.EllipticCurvePrivateKey, requested_s: float | None,
                      usage: ObjectIdentifier = ExtendedKeyUsageOID.CLIENT_AUTH, dns_names: Sequence[str] = (),
                      ip_addresses: Sequence[str] = ()) -> IssuedCertificate:
    """The certificate in ``pem`` if it is one we can use (see the module docstring).

    Args:
        pem: what the signer returned (``status.certificate``, base64-decoded), or a stored file.
        common_name: the subject's CN asked for (the whole subject).
        key: our private key, whose public half the certificate must hold.
        requested_s: the ``expirationSeconds`` we asked for (None: no bound but the certificate's).
        usage: the extended key usage it must have (client auth by default, or server auth).
        dns_names / ip_addresses: SubjectAlternativeNames it must have (more are accepted).

    Raises:
        CertificateError: anything wrong, with its reason.
    """
    if not isinstance(pem, bytes) or len(pem) > MAX_CERTIFICATE_BYTES:
        raise CertificateError("malformed", "the certificate is not PEM bytes of at most "
                                            f"{MAX_CERTIFICATE_BYTES} bytes")
    start = pem.find(_PEM_LABEL)
    if start < 0:
        raise CertificateError("malformed", "no PEM CERTIFICATE block")
    try:
        cert = x509.load_pem_x509_certificate(pem[start:])
        subject = cert.subject.rfc4514_string()
        public = cert.public_key()
        not_before, not_after = cert.not_valid_before_utc, cert.not_valid_after_utc
        try:
            usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        except x509.ExtensionNotFound:
            usages = None
        try:
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            has_dns, has_ips = set(san.get_values_for_type(x509.DNSName)), set(san.get_values_for_type(x509.IPAddress))
        except x509.ExtensionNotFound:
            has_dns, has_ips = set(), set()
        want_ips = {ipaddress.ip_address(ip) for ip in ip_addresses}
        first = cert.public_bytes(serialization.Encoding.PEM)
    except _PARSE_ERRORS as exc:
        raise CertificateError("malformed", f"the certificate does not parse: {exc}") from None
    expected = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    if cert.subject != expected:
        raise CertificateError("subject", f"subject must be exactly CN={common_name}, got {subject!r}")
    if _public_bytes(public) != _public_bytes(key.public_key()):
        raise CertificateError("key", "the certificate's public key is not ours")
    if usages is None or usage not in list(usages):
        name = _USAGE_NAMES.get(usage, usage.dotted_string)
        raise CertificateError("usage", f"the certificate has no {name} extended key usage")
    missing = sorted(set(dns_names) - has_dns) + sorted(str(ip) for ip in want_ips - has_ips)
    if missing:
        raise CertificateError("san", f"the certificate's SubjectAlternativeNames lack {missing}")
    lifetime_s = (not_after - not_before).total_seconds()
    valid_s = lifetime_s if requested_s is None else min(lifetime_s, float(requested_s))
    if valid_s < MIN_VALID_S:
        raise CertificateError("lifetime", f"valid for {valid_s:.0f} s, less than {MIN_VALID_S:.0f} s")
    return IssuedCertificate(pem=first, lifetime_s=lifetime_s, valid_s=valid_s)


def rotation_at(*, received_at: float, valid_s: float, fraction: float = DEFAULT_FRACTION) -> float:
    """When to rotate a certificate received at ``received_at`` (our clock), valid ``valid_s``
    seconds from then: ``received_at + fraction * valid_s``, on the same clock."""
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must be in (0, 1), got {fraction}")
    return received_at + fraction * valid_s


def rotation_due(*, received_at: float, valid_s: float, now: float, fraction: float = DEFAULT_FRACTION) -> bool:
    """Whether the rotation is due at ``now`` (the clock ``received_at`` was taken on). A
    ``received_at`` in our future (our wall clock went back since) makes it due: the age of the
    certificate is then unknown."""
    return now < received_at or now >= rotation_at(received_at=received_at, valid_s=valid_s, fraction=fraction)

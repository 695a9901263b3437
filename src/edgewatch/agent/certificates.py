"""The coordinator client certificate, pure: the request an agent makes, the checks of what comes
back, and when to rotate (issue 23, deliverable 2). No I/O, no clock of its own: times are passed
in. The I/O is ``edgewatch.agent.certrequester`` (the API) and ``edgewatch.agent.certstore``
(the files).

**The request** (:func:`build_request`): a PKCS#10 request for a fresh ECDSA P-256 key
(:func:`new_key`, a new one at every rotation) with the subject exactly ``CN=<node>`` and nothing
else: no other attribute, no extension. That is all the controller's signer accepts
(``edgewatch.controller.csrpolicy``); it sets every extension of the certificate itself.

**What comes back is untrusted** (:func:`check_certificate`): it must be one PEM certificate (at
most :data:`MAX_CERTIFICATE_BYTES`) that parses, whose subject is exactly ``CN=<node>``, whose
public key is ours, whose extended key usage includes client auth, and which is valid for at least
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
  own wall clock in the stored record, written and read by this node only);
- rotation at ``received_at + fraction * valid_s`` (:func:`rotation_at`, fraction 2/3 by default),
  expiry (for the metric) at ``received_at + valid_s``. With a 24 h certificate the agent renews
  after 16 h and has 8 h of margin for a controller or a link that is down.

The estimate is late by at most the time from signing to our receipt (the CSR's round trip, a few
seconds) plus what our clock drifts in a day, both small against the third of the lifetime left.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "DEFAULT_FRACTION", "MAX_CERTIFICATE_BYTES", "MIN_VALID_S", "CertificateError", "IssuedCertificate",
    "build_request", "check_certificate", "new_key", "rotation_at", "rotation_due",
]

DEFAULT_FRACTION: Final = 2 / 3
"""Rotate after this fraction of the validity left at receipt."""

MIN_VALID_S: Final = 600.0
"""Shortest validity accepted, seconds (10 min: the API's minimum ``expirationSeconds``). A shorter
certificate would make the agent rotate in a tight loop; it is refused, and the next request
waits its backoff."""

MAX_CERTIFICATE_BYTES: Final = 64 * 1024
"""Largest ``status.certificate`` parsed, bytes of PEM (ours is under 1 KiB)."""

_PEM_LABEL = b"-----BEGIN CERTIFICATE-----"
_PARSE_ERRORS = (ValueError, TypeError, UnsupportedAlgorithm, x509.InvalidVersion)


class CertificateError(ValueError):
    """A certificate that cannot be used. ``reason`` is a metric label: ``malformed``, ``subject``,
    ``key``, ``usage``, ``lifetime``."""

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


def build_request(node: str, key: ec.EllipticCurvePrivateKey) -> bytes:
    """A PEM PKCS#10 request signed by ``key``, subject exactly ``CN=<node>``, no extension."""
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node)])
    request = x509.CertificateSigningRequestBuilder().subject_name(subject).sign(key, hashes.SHA256())
    return request.public_bytes(serialization.Encoding.PEM)


def _public_bytes(key: object) -> bytes | None:
    if not isinstance(key, ec.EllipticCurvePublicKey):
        return None
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def check_certificate(pem: bytes, *, node: str, key: ec.EllipticCurvePrivateKey,
                      requested_s: float | None) -> IssuedCertificate:
    """The certificate in ``pem`` if it is one this node can use (see the module docstring).

    Args:
        pem: what the signer returned (``status.certificate``, base64-decoded), or a stored file.
        node: this node.
        key: our private key, whose public half the certificate must hold.
        requested_s: the ``expirationSeconds`` we asked for (None: no bound but the certificate's).

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
            usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        except x509.ExtensionNotFound:
            usage = None
        first = cert.public_bytes(serialization.Encoding.PEM)
    except _PARSE_ERRORS as exc:
        raise CertificateError("malformed", f"the certificate does not parse: {exc}") from None
    expected = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node)])
    if cert.subject != expected:
        raise CertificateError("subject", f"subject must be exactly CN={node}, got {subject!r}")
    if _public_bytes(public) != _public_bytes(key.public_key()):
        raise CertificateError("key", "the certificate's public key is not ours")
    if usage is None or ExtendedKeyUsageOID.CLIENT_AUTH not in list(usage):
        raise CertificateError("usage", "the certificate has no client auth extended key usage")
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

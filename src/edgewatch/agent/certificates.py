"""The agent's coordinator client certificate, pure (docs/security.md): the request an agent
makes and the checks of what comes back, for the subject exactly ``CN=<node>`` and the usage client
auth: what the controller's signer accepts (``edgewatch.controller.csrpolicy``), which sets every
extension of the certificate itself.

The machinery (keys, requests, checks, rotation times, the clock rules) is shared with the pool
coordinator and lives in :mod:`edgewatch.certs`; this module fixes the agent's subject and usage.
The I/O is ``edgewatch.agent.certrequester`` (the API) and ``edgewatch.agent.certstore`` (the
files).
"""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from edgewatch import certs
from edgewatch.certs import (
    DEFAULT_FRACTION, MAX_CERTIFICATE_BYTES, MIN_VALID_S, CertificateError, IssuedCertificate, new_key, rotation_at,
    rotation_due,
)

__all__ = [
    "DEFAULT_FRACTION", "MAX_CERTIFICATE_BYTES", "MIN_VALID_S", "CertificateError", "IssuedCertificate",
    "build_request", "check_certificate", "new_key", "rotation_at", "rotation_due",
]


def build_request(node: str, key: ec.EllipticCurvePrivateKey) -> bytes:
    """A PEM PKCS#10 request signed by ``key``, subject exactly ``CN=<node>``, no extension."""
    return certs.build_request(common_name=node, key=key)


def check_certificate(pem: bytes, *, node: str, key: ec.EllipticCurvePrivateKey,
                      requested_s: float | None) -> IssuedCertificate:
    """The certificate in ``pem`` if this node can use it: subject exactly ``CN=<node>``, our key,
    client auth, at least :data:`MIN_VALID_S` of validity (:func:`edgewatch.certs.check_certificate`).

    Raises:
        CertificateError: anything wrong, with its reason.
    """
    return certs.check_certificate(pem, common_name=node, key=key, requested_s=requested_s,
                                   usage=ExtendedKeyUsageOID.CLIENT_AUTH)

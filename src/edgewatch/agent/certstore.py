"""The coordinator client certificate's files in the agent's state folder (docs/security.md):
``coordinator-client.key`` (0600), ``coordinator-client.crt`` and ``coordinator-client.json`` (when
we received it, on this node's own wall clock, and its validity then), each written atomically by
:mod:`edgewatch.certfiles` (shared with the pool coordinator), which describes the order of the
writes and why a torn state reads as "absent".

Errors: :func:`save` raises ``OSError``; :func:`load` never raises for a missing, unreadable or
inconsistent file (it logs why and returns None).
"""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import ec

from edgewatch import certfiles
from edgewatch.agent.certificates import IssuedCertificate, check_certificate
from edgewatch.certfiles import KEY_MODE, StoredCertificate

__all__ = ["KEY_MODE", "CertificateFiles", "StoredCertificate", "load", "save"]

_STEM = "coordinator-client"


class CertificateFiles(certfiles.CertificateFiles):
    """Where the certificate, its key and its record live (``CertificateFiles.under(state_dir)``)."""

    @classmethod
    def under(cls, folder: Path) -> CertificateFiles:
        """The agent's files in ``folder``: ``coordinator-client.key``, ``.crt`` and ``.json``."""
        return cls(key_file=folder / f"{_STEM}.key", cert_file=folder / f"{_STEM}.crt",
                   record_file=folder / f"{_STEM}.json")


def save(files: certfiles.CertificateFiles, *, key: ec.EllipticCurvePrivateKey, certificate: IssuedCertificate,
         received_at: float) -> None:
    """Write the key (0600), the certificate (0644) and the record, each atomically.

    Raises:
        OSError: a file cannot be written.
    """
    certfiles.save(files, key=key, certificate=certificate, received_at=received_at)


def load(files: certfiles.CertificateFiles, *, node: str) -> StoredCertificate | None:
    """The stored key and certificate if all three files are there and agree (``CN=<node>``, our
    key, client auth), else None (logged)."""
    def check(pem: bytes, key: ec.EllipticCurvePrivateKey, valid_s: float) -> IssuedCertificate:
        return check_certificate(pem, node=node, key=key, requested_s=valid_s)

    return certfiles.load(files, check=check, what="coordinator client")

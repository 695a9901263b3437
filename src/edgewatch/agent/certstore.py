"""The coordinator client certificate's files in the agent's state folder (issue 23, deliverable 2).

Three files, each written atomically (a temporary file in the same folder, written, fsynced,
renamed over the old one; then the folder is fsynced):

- ``coordinator-client.key``: the private key (PKCS#8 PEM, mode 0600), a new one at every rotation;
- ``coordinator-client.crt``: the certificate (PEM);
- ``coordinator-client.json``: when we received it, on this node's own wall clock
  (``received_at``), and the validity it had then (``valid_s``): written and read by this node
  only, so comparing it with our clock breaks no rule (``edgewatch.agent.certificates``).

Order: the key and the certificate first, the record last. A crash between two renames leaves a
key and a certificate that do not match, or an older record: :func:`load` checks the pair again
(``check_certificate``: CN, our public key, client auth) and reads nothing it cannot trust as
"absent", so the agent requests a new certificate.

Errors: :func:`save` raises ``OSError``; :func:`load` never raises for a missing, unreadable or
inconsistent file (it logs why and returns None).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from edgewatch.agent.certificates import CertificateError, IssuedCertificate, check_certificate

log = logging.getLogger(__name__)

__all__ = ["CertificateFiles", "StoredCertificate", "load", "save"]

KEY_MODE = 0o600


@dataclass(frozen=True)
class CertificateFiles:
    """Where the certificate, its key and its record live (``CertificateFiles.under(state_dir)``)."""

    key_file: Path
    cert_file: Path
    record_file: Path

    @classmethod
    def under(cls, folder: Path) -> CertificateFiles:
        return cls(key_file=folder / "coordinator-client.key", cert_file=folder / "coordinator-client.crt",
                   record_file=folder / "coordinator-client.json")


@dataclass(frozen=True)
class StoredCertificate:
    """A loaded key and certificate, with when we received it (our wall clock) and its validity then."""

    key: ec.EllipticCurvePrivateKey
    certificate: IssuedCertificate
    received_at: float


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        try:
            os.fchmod(fd, mode)  # a leftover temporary file keeps its old mode otherwise
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save(files: CertificateFiles, *, key: ec.EllipticCurvePrivateKey, certificate: IssuedCertificate,
         received_at: float) -> None:
    """Write the key (0600), the certificate (0644) and the record, each atomically.

    Raises:
        OSError: a file cannot be written.
    """
    files.key_file.parent.mkdir(parents=True, exist_ok=True)
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    _write_atomic(files.key_file, key_pem, KEY_MODE)
    _write_atomic(files.cert_file, certificate.pem, 0o644)
    record = {"received_at": received_at, "valid_s": certificate.valid_s}
    _write_atomic(files.record_file, json.dumps(record).encode(), 0o644)
    _fsync_dir(files.key_file.parent)


def load(files: CertificateFiles, *, node: str) -> StoredCertificate | None:
    """The stored key and certificate if all three files are there and agree, else None (logged)."""
    if not files.record_file.exists():
        return None
    try:
        record = json.loads(files.record_file.read_text())
        received_at, valid_s = float(record["received_at"]), float(record["valid_s"])
        key = serialization.load_pem_private_key(files.key_file.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise CertificateError("key", "the stored key is not an ECDSA key")
        certificate = check_certificate(files.cert_file.read_bytes(), node=node, key=key, requested_s=valid_s)
    except CertificateError as exc:
        log.warning("stored coordinator client certificate not used (%s): %s", exc.reason, exc)
        return None
    except (OSError, ValueError, TypeError, KeyError, UnsupportedAlgorithm) as exc:
        log.warning("stored coordinator client certificate not used: %s: %s", type(exc).__name__, exc)
        return None
    return StoredCertificate(key=key, certificate=certificate, received_at=received_at)

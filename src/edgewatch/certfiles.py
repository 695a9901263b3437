"""A certificate's files (docs/security.md): its key, its certificate and a record of when
we received it, each written atomically. Shared by the agent (``edgewatch.agent.certstore``) and
the pool coordinator (``edgewatch.poolcoordinator.certificates``).

Three files (:class:`CertificateFiles`), each written atomically (a temporary file in the same
folder, written, fsynced, renamed over the old one; then the folder is fsynced):

- ``<stem>.key``: the private key (PKCS#8 PEM, mode 0600), a new one at every rotation;
- ``<stem>.crt``: the certificate (PEM);
- ``<stem>.json``: when we received it, on this machine's own wall clock (``received_at``), and the
  validity it had then (``valid_s``): written and read by this machine only, so comparing it with
  our clock breaks no rule (``edgewatch.certs``).

Order: the key and the certificate first, the record last. A crash between two renames leaves a
key and a certificate that do not match, or an older record: :func:`load` checks the pair again
(the caller's ``check``: subject, our public key, usage) and reads nothing it cannot trust as
"absent", so its owner requests a new certificate.

Errors: :func:`save` and :func:`write_atomic` raise ``OSError``; :func:`load` never raises for a
missing, unreadable or inconsistent file (it logs why and returns None).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from edgewatch.certs import CertificateError, IssuedCertificate

log = logging.getLogger(__name__)

__all__ = ["KEY_MODE", "CertificateFiles", "Check", "StoredCertificate", "fsync_dir", "load", "save", "write_atomic"]

KEY_MODE = 0o600

Check = Callable[[bytes, ec.EllipticCurvePrivateKey, float], IssuedCertificate]
"""Checks a stored certificate (PEM) against our key and the validity recorded (seconds); raises
``CertificateError`` (e.g. ``edgewatch.certs.check_certificate`` with the subject and usage)."""


@dataclass(frozen=True)
class CertificateFiles:
    """Where a certificate, its key and its record live."""

    key_file: Path
    cert_file: Path
    record_file: Path

    @classmethod
    def named(cls, folder: Path, *, stem: str) -> CertificateFiles:
        """``<folder>/<stem>.key``, ``.crt`` and ``.json``."""
        return cls(key_file=folder / f"{stem}.key", cert_file=folder / f"{stem}.crt",
                   record_file=folder / f"{stem}.json")


@dataclass(frozen=True)
class StoredCertificate:
    """A loaded key and certificate, with when we received it (our wall clock) and its validity then."""

    key: ec.EllipticCurvePrivateKey
    certificate: IssuedCertificate
    received_at: float


def write_atomic(path: Path, data: bytes, *, mode: int) -> None:
    """Replace ``path`` with ``data`` (file mode ``mode``) atomically: a temporary file beside it,
    written, fsynced, renamed over it. The folder is not fsynced (:func:`fsync_dir`).

    Raises:
        OSError: the file cannot be written.
    """
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


def fsync_dir(folder: Path) -> None:
    """fsync ``folder`` (makes the renames in it durable). Raises OSError."""
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
    write_atomic(files.key_file, key_pem, mode=KEY_MODE)
    write_atomic(files.cert_file, certificate.pem, mode=0o644)
    record = {"received_at": received_at, "valid_s": certificate.valid_s}
    write_atomic(files.record_file, json.dumps(record).encode(), mode=0o644)
    fsync_dir(files.key_file.parent)


def load(files: CertificateFiles, *, check: Check, what: str) -> StoredCertificate | None:
    """The stored key and certificate if all three files are there and agree (``check`` passes),
    else None (logged, naming the certificate ``what``)."""
    if not files.record_file.exists():
        return None
    try:
        record = json.loads(files.record_file.read_text())
        received_at, valid_s = float(record["received_at"]), float(record["valid_s"])
        key = serialization.load_pem_private_key(files.key_file.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise CertificateError("key", "the stored key is not an ECDSA key")
        certificate = check(files.cert_file.read_bytes(), key, valid_s)
    except CertificateError as exc:
        log.warning("stored %s certificate not used (%s): %s", what, exc.reason, exc)
        return None
    except (OSError, ValueError, TypeError, KeyError, UnsupportedAlgorithm) as exc:
        log.warning("stored %s certificate not used: %s: %s", what, type(exc).__name__, exc)
        return None
    return StoredCertificate(key=key, certificate=certificate, received_at=received_at)

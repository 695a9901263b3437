"""A certificate obtained from a signer through a CertificateSigningRequest, stored, and rotated
before it expires (docs/security.md): the loop shared by the agent's coordinator client
certificate (``edgewatch.agent.certrequester``) and the pool coordinator's serving and root
certificates (``edgewatch.poolcoordinator.certificates``). The pure parts are ``edgewatch.certs``,
the files ``edgewatch.certfiles``.

The loop (:meth:`CertificateRequester.run`):

1. At start, a stored certificate that is still good (``certfiles.load`` with the spec's checks)
   and whose rotation is not yet due is used: no request is made, its listeners are told.
2. Otherwise, and at every rotation (2/3 of the validity by default), one request: a new P-256
   key, a CSR named ``<generate_name><random>`` for the spec's signer and usages,
   ``expirationSeconds`` as configured; then a GET of that one CSR every ``poll_s`` until it has a
   certificate, a ``Denied`` or a ``Failed`` condition, or ``wait_s`` passed.
3. A certificate is checked (``check_certificate``: CN, our key, usage, SANs, lifetime), stored
   (key 0600, atomically) and handed to every :class:`CertificateListener`. A denial or failure is
   logged with its reason (WARNING); every failed attempt is reported to ``on_result`` and
   followed by a jittered backoff (``edgewatch.kube.backoff``), then a fresh request with a fresh
   key. The certificate in use stays in use meanwhile.

Results handed to ``on_result`` (metric labels): ``issued``, ``denied``, ``failed``, ``invalid``
(the certificate returned did not pass the checks), ``timeout`` (not decided within ``wait_s``),
``error`` (an API call or the store failed).

Every API call is bounded by ``timeout_s`` (``asyncio.timeout``, which never drops a
cancellation). Nothing here ends its owner but a bug; cancellation is never swallowed.

RBAC it needs: ``certificates.k8s.io`` ``certificatesigningrequests``: ``create``, ``get``.
The CSRs are not deleted (that would need ``delete``): kube-controller-manager's cleaner removes
issued ones after an hour, denied and failed ones after an hour, pending ones after a day.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, ObjectIdentifier

from edgewatch import certfiles
from edgewatch.certfiles import CertificateFiles
from edgewatch.certs import (
    DEFAULT_FRACTION, CertificateError, IssuedCertificate, build_request, check_certificate, new_key, rotation_at,
    rotation_due,
)
from edgewatch.kube.api import AsyncClient, CertificateSigningRequest
from edgewatch.kube.backoff import backoff_delay
from edgewatch.kube.errors import API_ERRORS

log = logging.getLogger(__name__)

__all__ = ["CertificateListener", "CertificateRequester", "CertificateSpec", "NotDecided", "RequestRefused"]

DEFAULT_LIFETIME_S = 86400
"""``expirationSeconds`` asked for by default (24 h, the signers' maximum)."""


class CertificateListener(Protocol):
    """Told when a new certificate is in the files (e.g. a client rebuilds its TLS context)."""

    def certificate_changed(self, files: CertificateFiles) -> None: ...


class RequestRefused(Exception):
    """The signer denied or failed a request. ``result`` (``denied``, ``failed``) is a metric label."""

    def __init__(self, result: str, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.result = result
        self.reason = reason


class NotDecided(Exception):
    """A request neither signed, denied nor failed within ``wait_s``."""


@dataclass(frozen=True, kw_only=True)
class CertificateSpec:
    """What to request and what to accept.

    Attributes:
        signer_name: the CSR's ``spec.signerName``.
        usages: the CSR's ``spec.usages`` (e.g. ``["client auth"]``).
        common_name: the subject, exactly ``CN=<common_name>``.
        usage: the extended key usage the certificate must have.
        dns_names / ip_addresses: SubjectAlternativeNames to request and require.
        generate_name: the CSR's ``metadata.generateName`` (the API appends 5 random characters).
        what: the certificate's name in logs (e.g. ``"coordinator client"``).
    """

    signer_name: str
    usages: tuple[str, ...]
    common_name: str
    usage: ObjectIdentifier = ExtendedKeyUsageOID.CLIENT_AUTH
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()
    generate_name: str
    what: str = field(default="")

    def request(self, key: ec.EllipticCurvePrivateKey) -> bytes:
        """The PEM PKCS#10 request for ``key``."""
        return build_request(common_name=self.common_name, key=key, dns_names=self.dns_names,
                             ip_addresses=self.ip_addresses)

    def check(self, pem: bytes, key: ec.EllipticCurvePrivateKey, requested_s: float | None) -> IssuedCertificate:
        """``pem`` checked against this spec (``edgewatch.certs.check_certificate``).

        Raises:
            CertificateError: it does not fit.
        """
        return check_certificate(pem, common_name=self.common_name, key=key, requested_s=requested_s,
                                 usage=self.usage, dns_names=self.dns_names, ip_addresses=self.ip_addresses)


@dataclass(frozen=True)
class _Current:
    certificate: IssuedCertificate
    received_mono: float  # when we received it, time.monotonic()


def _ignore(_result: str) -> None:
    return None


class CertificateRequester:
    """Obtains, stores and rotates one certificate (module docstring).

    Args (keyword-only):
        client: the API client (a pod-bound token, if the signer wants the node claim).
        spec: what to request and accept (:class:`CertificateSpec`).
        files: where the key, certificate and record live.
        timeout_s: bound of one API call, seconds.
        lifetime_s: ``expirationSeconds`` asked for (600 .. 86400; default 24 h).
        fraction: rotate after this fraction of the validity (default 2/3; tests use less).
        listeners: told of every new certificate (and of a stored one at start).
        on_result: told each attempt's result (a metric label, module docstring); must not raise.
        poll_s: time between two GETs of the pending CSR, seconds (default 2 s).
        wait_s: give a request up after this long without a decision, seconds (default 300 s).
        backoff_initial_s / backoff_cap_s: the retry schedule after a failed attempt (default 5 s
            doubling up to 300 s, jittered).
        wall: our wall clock (the stored record's ``received_at``); ``time.time`` by default.
        rng: random source of the backoff's jitter.

    Raises:
        ValueError: ``lifetime_s`` or ``fraction`` out of range.
    """

    def __init__(self, *, client: AsyncClient, spec: CertificateSpec, files: CertificateFiles, timeout_s: float,
                 lifetime_s: int = DEFAULT_LIFETIME_S, fraction: float = DEFAULT_FRACTION,
                 listeners: Sequence[CertificateListener] = (), on_result: Callable[[str], None] = _ignore,
                 poll_s: float = 2.0, wait_s: float = 300.0, backoff_initial_s: float = 5.0,
                 backoff_cap_s: float = 300.0, wall: Callable[[], float] = time.time,
                 rng: random.Random | None = None) -> None:
        if not 600 <= lifetime_s <= 86400:
            raise ValueError(f"lifetime_s must be 600 .. 86400 seconds, got {lifetime_s}")
        if not 0 < fraction < 1:
            raise ValueError(f"fraction must be in (0, 1), got {fraction}")
        self._client = client
        self.spec = spec
        self.files = files
        self.timeout_s = timeout_s
        self.lifetime_s = lifetime_s
        self.fraction = fraction
        self._listeners = tuple(listeners)
        self._on_result = on_result
        self.poll_s = poll_s
        self.wait_s = wait_s
        self.backoff_initial_s = backoff_initial_s
        self.backoff_cap_s = backoff_cap_s
        self._wall = wall
        self._rng = rng
        self._current: _Current | None = None
        self.requested: list[str] = []  # names of the CSRs this requester created, oldest first
        self._what = spec.what or spec.common_name

    # -- queries ---------------------------------------------------------------------------------------

    @property
    def certificate(self) -> IssuedCertificate | None:
        """The certificate in use, or None."""
        return self._current.certificate if self._current else None

    def expiry_s(self) -> float:
        """Seconds until the certificate in use expires, by our monotonic clock (0 without one)."""
        if self._current is None:
            return 0.0
        return max(0.0, self._current.received_mono + self._current.certificate.valid_s - time.monotonic())

    def _rotation_mono(self) -> float:
        assert self._current is not None
        return rotation_at(received_at=self._current.received_mono, valid_s=self._current.certificate.valid_s,
                           fraction=self.fraction)

    # -- the loop --------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Use the stored certificate or obtain one, then rotate it, until cancelled."""
        self._load_stored()
        while True:
            if self._current is not None:
                await asyncio.sleep(max(0.0, self._rotation_mono() - time.monotonic()))
                log.info("rotating the %s certificate", self._what)
            await self._obtain()

    def _load_stored(self) -> None:
        stored = certfiles.load(self.files, check=self.spec.check, what=self._what)
        if stored is None:
            return
        valid_s = stored.certificate.valid_s
        if rotation_due(received_at=stored.received_at, valid_s=valid_s, now=self._wall(), fraction=self.fraction):
            log.info("stored %s certificate is due for rotation: requesting a new one", self._what)
            return
        age_s = self._wall() - stored.received_at
        self._current = _Current(certificate=stored.certificate, received_mono=time.monotonic() - age_s)
        log.info("using the stored %s certificate (%.0f s old, valid %.0f s at receipt)", self._what,
                 age_s, valid_s)
        self._notify()

    async def _obtain(self) -> None:
        """One certificate, with as many attempts (each after a backoff) as it takes."""
        attempt = 0
        while True:
            try:
                key, issued = await self._attempt()
                received_wall, received_mono = self._wall(), time.monotonic()
                certfiles.save(self.files, key=key, certificate=issued, received_at=received_wall)
            except RequestRefused as exc:
                log.warning("%s certificate request %s: %s", self._what, exc.result, exc)
                self._on_result(exc.result)
            except CertificateError as exc:
                log.warning("%s certificate refused (%s): %s", self._what, exc.reason, exc)
                self._on_result("invalid")
            except NotDecided:
                log.warning("%s certificate request not decided within %.0f s", self._what, self.wait_s)
                self._on_result("timeout")
            except API_ERRORS as exc:
                log.warning("%s certificate request failed: %s: %s", self._what, type(exc).__name__, exc)
                self._on_result("error")
            else:
                self._current = _Current(certificate=issued, received_mono=received_mono)
                self._on_result("issued")
                log.info("%s certificate issued, valid %.0f s, rotation in %.0f s", self._what,
                         issued.valid_s, self.fraction * issued.valid_s)
                self._notify()
                return
            attempt += 1
            await asyncio.sleep(backoff_delay(attempt, initial=self.backoff_initial_s, cap=self.backoff_cap_s,
                                              rng=self._rng))

    async def _attempt(self) -> tuple[ec.EllipticCurvePrivateKey, IssuedCertificate]:
        """One request: create the CSR, wait for its decision, check the certificate.

        Raises:
            RequestRefused, CertificateError, NotDecided (within ``wait_s``), an API error (``API_ERRORS``;
            a call over ``timeout_s`` is a ``TimeoutError``).
        """
        key = new_key()
        body = CertificateSigningRequest.from_dict({
            "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"generateName": self.spec.generate_name},
            "spec": {"signerName": self.spec.signer_name, "usages": list(self.spec.usages),
                     "expirationSeconds": self.lifetime_s,
                     "request": base64.b64encode(self.spec.request(key)).decode()},
        })
        async with asyncio.timeout(self.timeout_s):
            created = await self._client.create(body)
        name = str(created.metadata.name)
        self.requested.append(name)
        log.info("requested a %s certificate: CSR %s", self._what, name)
        give_up = time.monotonic() + self.wait_s
        while True:
            async with asyncio.timeout(self.timeout_s):
                csr = await self._client.get(CertificateSigningRequest, name)
            pem = _decision(csr.to_dict())
            if pem is not None:
                return key, self.spec.check(pem, key, self.lifetime_s)
            if time.monotonic() >= give_up:
                raise NotDecided(f"CSR {name} not decided")
            await asyncio.sleep(self.poll_s)

    def _notify(self) -> None:
        for listener in self._listeners:
            listener.certificate_changed(self.files)


def _decision(csr: dict[str, Any]) -> bytes | None:
    """The certificate (PEM) of a decided CSR as the API returned it, None while pending.

    Raises:
        RequestRefused: a ``Denied`` or ``Failed`` condition.
        CertificateError: ``status.certificate`` is not base64.
    """
    status = csr.get("status") or {}
    for condition in status.get("conditions") or []:
        kind = condition.get("type")
        if kind in ("Denied", "Failed"):
            raise RequestRefused(str(kind).lower(), str(condition.get("reason") or "-"),
                                 str(condition.get("message") or ""))
    certificate = status.get("certificate")
    if not certificate:
        return None
    try:
        return base64.b64decode(certificate, validate=True)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise CertificateError("malformed", f"status.certificate is not base64: {exc}") from None

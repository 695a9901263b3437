"""A pool's certificate authority: the CA that signs its nodes' client certificates for the pool
coordinator (docs/security.md; the requests are judged by ``edgewatch.controller.csrpolicy``).

* **Pure** (:func:`make_ca`, :func:`load_ca`, :func:`sign_client_certificate`,
  :func:`sign_serving_certificate`): an ECDSA P-256 CA
  valid :data:`CA_LIFETIME_S` (subject ``CN=edgewatch pool <pool> CA``, CA:true, pathlen 0), and
  leaf certificates: subject exactly ``CN=<node>``, a random 128-bit serial, notBefore 5 min in the
  past (:data:`CLOCK_SKEW_S`: a node whose clock is a little behind accepts it at once), notAfter
  the lifetime later (never past the CA's own end), KeyUsage digitalSignature, ExtendedKeyUsage
  clientAuth, BasicConstraints CA:false, Authority and Subject Key Identifiers, signed ECDSA-SHA256;
  a pool coordinator's serving certificate is the same with serverAuth and its IP/DNS SANs
  (judged by ``edgewatch.controller.coordinatorcsr``).
* **I/O** (:class:`PoolCAs`): every pool's CA lives in the one Secret
  ``<namespace>/edgewatch-pool-cas`` (``edgewatch.names.POOL_CA_SECRET_NAME``; keys ``<name>.crt``
  and ``<name>.key``, ``<name>`` = ``edgewatch.names.pool_ca_name(pool)``), which only the
  controller may read (no agent has any right on Secrets; one Secret, so RBAC names it: pool names
  come from label values). A pool's CA is made on first need and added by a create (the Secret's
  first) or an update carrying the resourceVersion read: a replica that lost the race gets a 409,
  reads again and uses the CA the winner stored, so every replica signs with the same CA. An
  operator may store a CA of their own there beforehand (ECDSA P-256, a CA). The CA certificate
  alone goes in the ConfigMap ``<name>`` (key ``ca.crt``), which agents may read, to verify the
  coordinator later.

Limits: the CA is not rotated in this version; it lasts a year, and a leaf never outlives it. A
CA within :data:`edgewatch.controller.csrpolicy.MIN_LIFETIME_S` of its end signs nothing (the
controller logs it; an operator removes the pool's two keys from the Secret and a new CA is made).
One Secret holds about 1.7 KB per pool (base64), so up to about 500 pools under the API's 1 MiB.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime as dt
import ipaddress
import logging
import secrets
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from edgewatch.controller.csrpolicy import MIN_LIFETIME_S
from edgewatch.kube.api import ApiError, AsyncClient, ConfigMap, ObjectMeta, Secret
from edgewatch.kube.errors import is_conflict
from edgewatch.kube.upsert import Outcome, create_or_update
from edgewatch.names import POOL_CA_CONFIGMAP_KEY, POOL_CA_SECRET_NAME, POOL_LABEL, pool_ca_name

__all__ = ["CA_LIFETIME_S", "CLOCK_SKEW_S", "PoolCA", "PoolCAs", "load_ca", "make_ca", "sign_client_certificate",
           "sign_serving_certificate"]

log = logging.getLogger(__name__)

CA_LIFETIME_S: Final = 365 * 24 * 3600
"""A pool CA's validity, seconds (1 year)."""

CLOCK_SKEW_S: Final = 300
"""notBefore of every certificate is this far in the past, seconds (5 min of clock skew)."""

_T = TypeVar("_T")


@dataclass(frozen=True)
class PoolCA:
    """One pool's CA: its private key and certificate."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    def cert_pem(self) -> bytes:
        """The CA certificate, PEM."""
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        """The CA key, PKCS#8 PEM, unencrypted (it is kept in a Secret)."""
        return self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())


def _ski(public: ec.EllipticCurvePublicKey | Ed25519PublicKey) -> x509.SubjectKeyIdentifier:
    return x509.SubjectKeyIdentifier.from_public_key(public)


def make_ca(pool: str, *, now: dt.datetime) -> PoolCA:
    """A new CA for ``pool``: ECDSA P-256, ``CN=edgewatch pool <pool> CA``, valid from
    ``now - CLOCK_SKEW_S`` for :data:`CA_LIFETIME_S` seconds (``now``: aware UTC)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"edgewatch pool {pool} CA")])
    ski = _ski(key.public_key())
    cert = (x509.CertificateBuilder()
            .subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(max(1, secrets.randbits(128)))
            .not_valid_before(now - dt.timedelta(seconds=CLOCK_SKEW_S))
            .not_valid_after(now + dt.timedelta(seconds=CA_LIFETIME_S))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .add_extension(ski, critical=False)
            .sign(key, hashes.SHA256()))
    return PoolCA(key=key, cert=cert)


def load_ca(cert_pem: bytes, key_pem: bytes) -> PoolCA:
    """A CA from its PEMs (a Secret's ``tls.crt`` and ``tls.key``).

    Raises:
        ValueError: they do not parse, the key is not ECDSA P-256, it does not match the
            certificate, or the certificate is not a CA.
    """
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"CA does not parse: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
        raise ValueError("CA key is not ECDSA P-256")
    if cert.public_key() != key.public_key():
        raise ValueError("CA key does not match its certificate")
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        raise ValueError("CA certificate has no BasicConstraints") from None
    except x509.DuplicateExtension as exc:
        raise ValueError(f"CA certificate does not parse: {exc}") from None
    if not constraints.ca:
        raise ValueError("CA certificate is not a CA")
    return PoolCA(key=key, cert=cert)


def sign_client_certificate(ca: PoolCA, *, public_key: ec.EllipticCurvePublicKey | Ed25519PublicKey, node: str,
                            lifetime_s: int, now: dt.datetime) -> bytes:
    """A client certificate for ``node`` (subject exactly ``CN=<node>``), PEM; see the module docstring.

    Args:
        ca: the pool's CA.
        public_key: the requester's key (from its CSR, checked by ``csrpolicy``).
        node: the node name (or ``root``, etcd's administrator, for the coordinator: ``coordinatorcsr``).
        lifetime_s: seconds from ``now`` to notAfter (cut at the CA's notAfter).
        now: aware UTC.

    Raises:
        ValueError: the CA ends in less than ``MIN_LIFETIME_S`` seconds.
    """
    return _leaf(ca, public_key=public_key, cn=node, usage=ExtendedKeyUsageOID.CLIENT_AUTH, sans=None,
                 lifetime_s=lifetime_s, now=now)


def sign_serving_certificate(ca: PoolCA, *, public_key: ec.EllipticCurvePublicKey | Ed25519PublicKey, cn: str,
                             ips: Sequence[ipaddress.IPv4Address | ipaddress.IPv6Address], dns_names: Sequence[str],
                             lifetime_s: int, now: dt.datetime) -> bytes:
    """A TLS serving certificate for a pool coordinator, PEM: subject exactly ``CN=<cn>``, SANs exactly
    ``ips`` and ``dns_names`` (checked by ``coordinatorcsr``), ExtendedKeyUsage serverAuth, KeyUsage
    digitalSignature (what an ECDSA or Ed25519 TLS server signs with), CA:false; serial, notBefore and
    notAfter as :func:`sign_client_certificate`.

    Args:
        ca: the pool's CA.
        public_key: the requester's key.
        cn: the subject's CN.
        ips / dns_names: the subjectAltNames (at least one of them non-empty).
        lifetime_s: seconds from ``now`` to notAfter (cut at the CA's notAfter).
        now: aware UTC.

    Raises:
        ValueError: no SAN, or the CA ends in less than ``MIN_LIFETIME_S`` seconds.
    """
    sans: list[x509.GeneralName] = [x509.IPAddress(ip) for ip in ips]
    sans += [x509.DNSName(name) for name in dns_names]
    if not sans:
        raise ValueError("a serving certificate needs at least one subjectAltName")
    return _leaf(ca, public_key=public_key, cn=cn, usage=ExtendedKeyUsageOID.SERVER_AUTH, sans=sans,
                 lifetime_s=lifetime_s, now=now)


def _leaf(ca: PoolCA, *, public_key: ec.EllipticCurvePublicKey | Ed25519PublicKey, cn: str,
          usage: x509.ObjectIdentifier, sans: list[x509.GeneralName] | None, lifetime_s: int,
          now: dt.datetime) -> bytes:
    ca_end = ca.cert.not_valid_after_utc
    end = min(now + dt.timedelta(seconds=lifetime_s), ca_end)
    if end - now < dt.timedelta(seconds=MIN_LIFETIME_S):
        raise ValueError(f"the pool CA ends at {ca_end.isoformat()}: too soon to sign")
    ca_ski = ca.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
               .issuer_name(ca.cert.subject).public_key(public_key)
               .serial_number(max(1, secrets.randbits(128)))  # random 128 bits, positive
               .not_valid_before(now - dt.timedelta(seconds=CLOCK_SKEW_S))
               .not_valid_after(end)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=False, crl_sign=False,
                                            content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False, encipher_only=False,
                                            decipher_only=False),
                              critical=True)
               .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
               .add_extension(_ski(public_key), critical=False))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca.key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


class PoolCAs:
    """Each pool's CA, from the pool CA Secret, made on first need (see the module docstring).

    Args (keyword-only):
        client: the controller's API client.
        namespace: the controller's namespace (the Secret and the ConfigMaps).
        api_timeout_s: bound of every API call, seconds.
        tries: reads and writes of the Secret before giving up on a race (409s), per call.
    """

    def __init__(self, *, client: AsyncClient, namespace: str = "edgewatch", api_timeout_s: float = 10.0,
                 tries: int = 5) -> None:
        self.client = client
        self.namespace = namespace
        self.api_timeout_s = api_timeout_s
        self.tries = tries
        self._cas: dict[str, PoolCA] = {}
        self._lock = asyncio.Lock()

    async def _call(self, call: Awaitable[_T]) -> _T:
        async with asyncio.timeout(self.api_timeout_s):
            return await call

    async def get(self, pool: str) -> PoolCA:
        """``pool``'s CA (cached once loaded); made and stored if missing, its ConfigMap written.

        Raises:
            API errors (the caller retries); ValueError if the Secret holds no usable CA for the
            pool, or the race for it was lost ``tries`` times.
        """
        async with self._lock:
            ca = self._cas.get(pool)
            if ca is None:
                ca = await self._load_or_make(pool)
                await self._publish(pool, ca)
                self._cas[pool] = ca
            return ca

    async def _load_or_make(self, pool: str) -> PoolCA:
        name = pool_ca_name(pool)
        made: list[PoolCA] = []

        def add_ca(secret: Secret) -> None:
            """Add a new CA for the pool to the Secret, unless one is stored (then: nothing)."""
            made.clear()
            data = dict(secret.data or {})
            if f"{name}.crt" in data or f"{name}.key" in data:
                return
            ca = make_ca(pool, now=dt.datetime.now(dt.UTC))
            data[f"{name}.crt"] = base64.b64encode(ca.cert_pem()).decode("ascii")
            data[f"{name}.key"] = base64.b64encode(ca.key_pem()).decode("ascii")
            secret.data = data
            made.append(ca)

        template = Secret(metadata=ObjectMeta(name=POOL_CA_SECRET_NAME, namespace=self.namespace,
                                              labels={"app.kubernetes.io/part-of": "edgewatch"}), type="Opaque")
        try:
            # a replica that wrote first makes ours a 409: read again, use its CA if it made ours
            done = await create_or_update(client=self.client, template=template, mutate=add_ca,
                                          timeout_s=self.api_timeout_s, conflict_retries=max(self.tries - 1, 0))
        except ApiError as exc:
            if not is_conflict(exc):
                raise
            raise ValueError(f"the pool CA Secret kept changing: {self.tries} tries for pool {pool}") from None
        if done.outcome is Outcome.UNCHANGED or not made:
            return _from_secret(dict(done.obj.data or {}), name)
        log.info("made the CA of pool %s (Secret %s/%s, %s)", pool, self.namespace, POOL_CA_SECRET_NAME, name,
                 extra={"kind": "pool_ca_created", "pool": pool})
        return made[-1]

    async def _publish(self, pool: str, ca: PoolCA) -> None:
        """The ConfigMap with the CA certificate alone; updated (resourceVersion-checked) if it differs."""
        name = pool_ca_name(pool)
        data = {POOL_CA_CONFIGMAP_KEY: ca.cert_pem().decode("ascii")}
        meta = ObjectMeta(name=name, namespace=self.namespace,
                          labels={"app.kubernetes.io/part-of": "edgewatch", POOL_LABEL: pool})
        try:
            await self._call(self.client.create(ConfigMap(metadata=meta, data=data)))
            return
        except ApiError as exc:
            if not is_conflict(exc):
                raise
        current = await self._call(self.client.get(ConfigMap, name, namespace=self.namespace))
        if (current.data or {}) != data:
            current.data = data  # carries the resourceVersion read: a concurrent write is a 409
            await self._call(self.client.replace(current))


def _from_secret(data: dict[str, str], name: str) -> PoolCA:
    """The CA stored under ``name`` in the Secret's ``data`` (base64 values). Raises ValueError."""
    try:
        cert_pem = base64.b64decode(data.get(f"{name}.crt", ""), validate=True)
        key_pem = base64.b64decode(data.get(f"{name}.key", ""), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"Secret {POOL_CA_SECRET_NAME}: {name} is not base64") from None
    try:
        return load_ca(cert_pem, key_pem)
    except ValueError as exc:
        raise ValueError(f"Secret {POOL_CA_SECRET_NAME}: {name}: {exc}") from None

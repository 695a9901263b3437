"""Which CertificateSigningRequest for edgewatch's coordinator-client signer the controller signs:
a pure decision over the request as the apiserver stored it (docs/security.md).

A node's agent asks for the client certificate it will show its pool coordinator (etcd, which
authenticates a client by the certificate's CN: one etcd user per node) with a CSR whose
``spec.signerName`` is :data:`edgewatch.names.COORDINATOR_CLIENT_SIGNER`. The apiserver fills
``spec.username``, ``spec.groups`` and ``spec.extra`` from the requester's credentials; nobody can
set them (https://kubernetes.io/docs/reference/access-authn-authz/certificate-signing-requests/).
:func:`decide` signs only when every rule holds, in this order (the first broken one is the
Deny's ``reason``, a metric label):

===============  ==================================================================================
reason           rule
===============  ==================================================================================
``not_agent``    the requester is the agent's ServiceAccount (``system:serviceaccount:<ns>:<name>``)
``node_claim``   ``spec.extra["authentication.kubernetes.io/node-name"]`` is exactly one node name:
                 the token is bound to a Pod on that node (a plain token has no claim)
``reserved``     the node is not named ``root`` (etcd's administrator: the CN is the etcd user)
``malformed``    ``spec`` has the API's shape, ``spec.request`` is one PEM ``CERTIFICATE REQUEST``
                 (at most 16 KiB) that parses as PKCS#10
``signature``    the request's self-signature verifies (the requester holds the private key)
``subject``      the subject is exactly ``CN=<the claimed node>``: one attribute, no O, no OU
``san``          no subjectAltName extension (a client certificate names the node by CN only)
``extensions``   no other requested extension either (the signer sets every extension itself)
``key``          the key is ECDSA P-256 or Ed25519; RSA of any size is refused (the agent makes
                 P-256 keys; etcd's Go TLS takes both; one small set to review)
``usages``       ``spec.usages`` is exactly {client auth} or {client auth, digital signature}
``no_pool``      the node is known, covered and has a non-empty ``edgewatch.io/pool`` label
                 (``pool_of``): the pool names the CA that signs
===============  ==================================================================================

A request for another signer is :class:`Ignore`: not ours to approve, deny or sign.

Lifetime: ``min(spec.expirationSeconds, 24 h)``, at least 10 min (the API's own minimum for
``expirationSeconds``); 24 h when the request names none. An agent renews well before the end, so
a stolen certificate is good for a day at most.

Untrusted input: every field of ``spec`` may be anything; every malformed value is a
:class:`Deny`, never an exception (property-tested with random bytes, ``tests/unit/test_csrpolicy.py``).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.x509.oid import ExtensionOID, NameOID

from edgewatch.names import COORDINATOR_CLIENT_SIGNER, NODE_NAME_EXTRA

__all__ = [
    "ALLOWED_USAGES", "DEFAULT_LIFETIME_S", "MAX_LIFETIME_S", "MAX_REQUEST_BYTES", "MIN_LIFETIME_S",
    "PARSE_ERRORS", "AgentIdentity", "CsrSpec", "Decision", "Deny", "Ignore", "Sign", "check_key", "decide",
    "decide_api", "lifetime_for", "load_request", "parse_spec",
]

RESERVED_ETCD_USERS = frozenset({"root"})  # etcd takes the CN as the user; root is its administrator

MIN_LIFETIME_S: Final = 600
"""Shortest certificate issued, seconds (10 min: the API's minimum ``expirationSeconds``)."""

MAX_LIFETIME_S: Final = 24 * 3600
"""Longest certificate issued, seconds (24 h)."""

DEFAULT_LIFETIME_S: Final = MAX_LIFETIME_S
"""Lifetime of a request without ``expirationSeconds``, seconds."""

MAX_REQUEST_BYTES: Final = 16 * 1024
"""Largest ``spec.request`` parsed, bytes of PEM (a P-256 request is about 400)."""

ALLOWED_USAGES: Final = (frozenset({"client auth"}), frozenset({"client auth", "digital signature"}))
"""The ``spec.usages`` sets accepted (each value once)."""

_PEM_LABEL = b"-----BEGIN CERTIFICATE REQUEST-----"
PARSE_ERRORS: Final = (ValueError, TypeError, UnsupportedAlgorithm, x509.InvalidVersion, x509.DuplicateExtension,
                       # a general name cryptography does not model (x400Address, EDIPartyName), e.g.
                       # in a SAN: raised while the extensions are parsed (found by fuzzing a byte)
                       x509.UnsupportedGeneralNameType)
"""What cryptography raises for a request it cannot read (InvalidVersion and DuplicateExtension,
raised when the extensions are first read, are no ValueError)."""


@dataclass(frozen=True)
class AgentIdentity:
    """The agent's ServiceAccount (``deploy/10-rbac-agent.yaml``: ``edgewatch/edgewatch-agent``)."""

    namespace: str = "edgewatch"
    name: str = "edgewatch-agent"

    @property
    def username(self) -> str:
        """The username the apiserver gives its tokens: ``system:serviceaccount:<ns>:<name>``."""
        return f"system:serviceaccount:{self.namespace}:{self.name}"


@dataclass(frozen=True)
class CsrSpec:
    """A CSR's ``spec``, typed (:func:`parse_spec` builds it from the API's JSON).

    Attributes:
        signer_name: ``spec.signerName``.
        request: the PEM bytes of the PKCS#10 request (``spec.request`` base64-decoded).
        usages: ``spec.usages`` in order.
        username / groups / extra: the requester, as the apiserver recorded it.
        expiration_seconds: ``spec.expirationSeconds``, seconds, or None.
    """

    signer_name: str
    request: bytes = field(repr=False)
    usages: tuple[str, ...]
    username: str
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    expiration_seconds: int | None = None


@dataclass(frozen=True)
class Sign:
    """Approve and sign: a client certificate ``CN=<node>`` from ``pool``'s CA, valid ``lifetime_s``
    seconds, for ``public_key`` (the request's)."""

    node: str
    pool: str
    lifetime_s: int
    public_key: ec.EllipticCurvePublicKey | Ed25519PublicKey = field(compare=False, repr=False)


@dataclass(frozen=True)
class Deny:
    """Deny: ``reason`` is one of the module's table (a metric label), ``message`` says what was wrong."""

    reason: str
    message: str


@dataclass(frozen=True)
class Ignore:
    """Another signer's request: leave it alone."""

    signer_name: str


Decision = Sign | Deny | Ignore


def _strings(value: object) -> tuple[str, ...] | None:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    return tuple(value)


def parse_spec(spec: object) -> CsrSpec | Deny:
    """A CSR's ``spec`` as the API serves it in JSON (``request`` base64 of the PEM) -> :class:`CsrSpec`,
    or a ``malformed`` :class:`Deny`. Never raises."""
    if not isinstance(spec, Mapping):
        return Deny("malformed", "spec is not an object")
    signer, username, request = spec.get("signerName"), spec.get("username", ""), spec.get("request")
    if not isinstance(signer, str) or not isinstance(username, str):
        return Deny("malformed", "spec.signerName or spec.username is not a string")
    usages = _strings(spec.get("usages", []))
    groups = _strings([] if spec.get("groups") is None else spec.get("groups"))
    if usages is None or groups is None:
        return Deny("malformed", "spec.usages or spec.groups is not a list of strings")
    raw_extra = {} if spec.get("extra") is None else spec.get("extra")
    if not isinstance(raw_extra, Mapping):
        return Deny("malformed", "spec.extra is not an object")
    extra: dict[str, tuple[str, ...]] = {}
    for key, values in raw_extra.items():
        parsed = _strings(values)
        if not isinstance(key, str) or parsed is None:
            return Deny("malformed", "spec.extra is not a map of string lists")
        extra[key] = parsed
    expiration = spec.get("expirationSeconds")
    if expiration is not None and (isinstance(expiration, bool) or not isinstance(expiration, int)):
        return Deny("malformed", "spec.expirationSeconds is not an integer")
    if not isinstance(request, str) or len(request) > MAX_REQUEST_BYTES * 4 // 3 + 4:
        return Deny("malformed", f"spec.request is not a string of at most {MAX_REQUEST_BYTES} bytes")
    try:
        pem = base64.b64decode(request, validate=True)
    except (binascii.Error, ValueError):
        return Deny("malformed", "spec.request is not base64")
    return CsrSpec(signer_name=signer, request=pem, usages=usages, username=username, groups=groups,
                   extra=extra, expiration_seconds=expiration)


def load_request(pem: bytes) -> x509.CertificateSigningRequest | Deny:
    """``pem`` as one PKCS#10 request (one PEM block, at most :data:`MAX_REQUEST_BYTES`), or a
    ``malformed`` :class:`Deny`. Never raises (fields parsed later may: catch :data:`PARSE_ERRORS`)."""
    if len(pem) > MAX_REQUEST_BYTES:
        return Deny("malformed", f"request over {MAX_REQUEST_BYTES} bytes")
    if pem.count(_PEM_LABEL) != 1:
        return Deny("malformed", "request is not exactly one PEM CERTIFICATE REQUEST block")
    try:
        csr = x509.load_pem_x509_csr(pem)
        list(csr.extensions)  # parsed lazily: a duplicate extension raises here, not in a later rule
        return csr
    except PARSE_ERRORS as exc:
        return Deny("malformed", f"request does not parse as PKCS#10: {str(exc)[:200]}")


def _check_subject(csr: x509.CertificateSigningRequest, node: str) -> Deny | None:
    rdns = list(csr.subject.rdns)
    attrs = [a for rdn in rdns for a in rdn]
    if len(rdns) != 1 or len(attrs) != 1 or attrs[0].oid != NameOID.COMMON_NAME or attrs[0].value != node:
        return Deny("subject", f"subject must be exactly CN={node}, got {csr.subject.rfc4514_string()[:200]!r}")
    return None


def _check_extensions(csr: x509.CertificateSigningRequest) -> Deny | None:
    extensions = list(csr.extensions)
    if any(e.oid == ExtensionOID.SUBJECT_ALTERNATIVE_NAME for e in extensions):
        return Deny("san", "a subjectAltName is not allowed: the certificate names the node by CN only")
    if extensions:
        names = ", ".join(sorted({e.oid.dotted_string for e in extensions}))[:200]
        return Deny("extensions", f"requested extensions are not allowed ({names}): the signer sets them")
    return None


def check_key(csr: x509.CertificateSigningRequest) -> ec.EllipticCurvePublicKey | Ed25519PublicKey | Deny:
    """The request's key if ECDSA P-256 or Ed25519, else a ``key`` :class:`Deny`."""
    key = csr.public_key()
    if isinstance(key, Ed25519PublicKey):
        return key
    if isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, ec.SECP256R1):
        return key
    return Deny("key", f"key must be ECDSA P-256 or Ed25519, got {type(key).__name__.removeprefix('_')}")


def lifetime_for(requested: int | None) -> int:
    """Seconds of validity for ``expirationSeconds`` = ``requested`` (None: the default), bounded to
    [:data:`MIN_LIFETIME_S`, :data:`MAX_LIFETIME_S`]."""
    if requested is None:
        return DEFAULT_LIFETIME_S
    return max(MIN_LIFETIME_S, min(requested, MAX_LIFETIME_S))


def decide(spec: CsrSpec, *, agent: AgentIdentity, pool_of: Callable[[str], str | None],
           signer_name: str = COORDINATOR_CLIENT_SIGNER) -> Decision:
    """Sign, deny or ignore ``spec`` (see the module docstring). Never raises for any ``spec``.

    Args:
        spec: the request.
        agent: the only ServiceAccount whose requests may be signed.
        pool_of: the pool of a node the controller covers, or None (unknown, uncovered, no pool).
        signer_name: the signer this controller is.
    """
    if spec.signer_name != signer_name:
        return Ignore(spec.signer_name)
    if spec.username != agent.username:
        return Deny("not_agent", f"only {agent.username} may request this signer, not {spec.username[:200]!r}")
    claim = spec.extra.get(NODE_NAME_EXTRA, ())
    if len(claim) != 1 or not claim[0]:
        return Deny("node_claim", f"the requester's token must name exactly one node ({NODE_NAME_EXTRA}); "
                                  "use the pod-bound token of the agent on that node")
    node = claim[0]
    if node in RESERVED_ETCD_USERS:
        return Deny("reserved", f"a node named {node!r} cannot get a certificate: etcd would take its CN for "
                                "its own administrator")
    csr = load_request(spec.request)
    if isinstance(csr, Deny):
        return csr
    try:
        return _decide_parsed(spec, csr, node=node, pool_of=pool_of)
    except PARSE_ERRORS as exc:  # lazily parsed fields of a bad request
        return Deny("malformed", f"request does not parse: {str(exc)[:200]}")


def _decide_parsed(spec: CsrSpec, csr: x509.CertificateSigningRequest, *, node: str,
                   pool_of: Callable[[str], str | None]) -> Decision:
    try:
        valid = csr.is_signature_valid
    except (InvalidSignature, ValueError, UnsupportedAlgorithm):
        valid = False
    if not valid:
        return Deny("signature", "the request's signature does not verify with its own key")
    for check in (_check_subject(csr, node), _check_extensions(csr)):
        if check is not None:
            return check
    key = check_key(csr)
    if isinstance(key, Deny):
        return key
    usages = frozenset(spec.usages)
    if len(usages) != len(spec.usages) or usages not in ALLOWED_USAGES:
        return Deny("usages", f"usages must be [client auth] or [client auth, digital signature], "
                              f"got {list(spec.usages)[:8]}")
    pool = pool_of(node)
    if not pool:
        return Deny("no_pool", f"node {node} is not a covered node of a pool (label edgewatch.io/pool)")
    return Sign(node=node, pool=pool, lifetime_s=lifetime_for(spec.expiration_seconds), public_key=key)


def decide_api(spec: object, *, agent: AgentIdentity, pool_of: Callable[[str], str | None],
               signer_name: str = COORDINATOR_CLIENT_SIGNER) -> Decision:
    """:func:`decide` over a CSR's ``spec`` as the API serves it in JSON: another signer's request
    is :class:`Ignore` whatever its shape; a malformed one of ours is a ``malformed`` Deny. Never raises."""
    if not isinstance(spec, Mapping) or spec.get("signerName") != signer_name:
        name = spec.get("signerName") if isinstance(spec, Mapping) else None
        return Ignore(name if isinstance(name, str) else "")
    parsed = parse_spec(spec)
    if isinstance(parsed, Deny):
        return parsed
    return decide(parsed, agent=agent, pool_of=pool_of, signer_name=signer_name)

"""Which CertificateSigningRequests of the pool coordinator the controller signs: a pure decision
over the request as the apiserver stored it (docs/security.md).

An ``auto`` pool's coordinator runs as the Deployment ``edgewatch-coordinator-<pool>`` (ServiceAccount
:data:`edgewatch.names.COORDINATOR_SERVICE_ACCOUNT`, host network, pinned to the pool's nodes). With
its pod-bound token (the apiserver puts the pod's node in ``spec.extra``
``authentication.kubernetes.io/node-name``) it asks for two certificates:

* a **serving certificate** for its etcd (signer :data:`edgewatch.names.COORDINATOR_SERVING_SIGNER`):
  subject exactly ``CN=edgewatch-coordinator`` (:data:`SERVING_CN`; agents check the pool CA and the
  IP SAN, never the CN), SANs only the claimed node's own addresses, ``127.0.0.1`` and ``localhost``;
* a **root client certificate** to manage its etcd's users and roles (signer
  :data:`edgewatch.names.COORDINATOR_CLIENT_SIGNER`, the agents' one): subject exactly ``CN=root``
  (:data:`edgewatch.names.COORDINATOR_ROOT_USER`). Only the coordinator's ServiceAccount gets it; an
  agent asking for ``CN=root`` is denied by ``edgewatch.controller.csrpolicy`` (``reserved``), and
  the coordinator's ServiceAccount never gets a node's CN (its client-signer requests come here).

:func:`decide_api` routes: the serving signer to :func:`decide_serving`; the client signer to
:func:`decide_root` if the requester is the coordinator's ServiceAccount, else to
``csrpolicy.decide`` (the agents' rules, unchanged); any other signer is :class:`Ignore`.
Each signs only when every rule of its table holds, in this order (the first broken one is the
Deny's ``reason``, a metric label).

Serving certificate (``edgewatch.io/coordinator-serving``):

===================  ==============================================================================
reason               rule
===================  ==============================================================================
``not_coordinator``  the requester is ``system:serviceaccount:<ns>:edgewatch-coordinator`` with the
                     group ``system:serviceaccounts``
``node_claim``       ``spec.extra["authentication.kubernetes.io/node-name"]`` is exactly one node
``malformed``        ``spec`` has the API's shape; one PEM PKCS#10 request of at most 16 KiB
``signature``        the request's self-signature verifies
``subject``          the subject is exactly ``CN=edgewatch-coordinator``
``extensions``       no requested extension but subjectAltName
``key``              ECDSA P-256 or Ed25519
``usages``           exactly {server auth}, {server auth, digital signature} or
                     {server auth, digital signature, key encipherment}
``no_pool``          the node is known, covered and in a pool (``pool_of``): the pool names the CA
``san``              a subjectAltName with IP addresses and DNS names only, each once: every IP is one
                     of the node's own (``node_addresses``: InternalIP, ExternalIP) or ``127.0.0.1``,
                     at least one is the node's, and the only DNS name is ``localhost``
===================  ==============================================================================

Root client certificate (``edgewatch.io/coordinator-client``, coordinator's ServiceAccount):

===================  ==============================================================================
reason               rule
===================  ==============================================================================
``not_coordinator``  as above
``node_claim``       as above (the token of a pod on a pool node: a plain token gets nothing)
``malformed``        as above
``signature``        as above
``subject``          the subject is exactly ``CN=root``
``san``              no subjectAltName
``extensions``       no other requested extension
``key``              ECDSA P-256 or Ed25519
``usages``           exactly {client auth} or {client auth, digital signature}
``no_pool``          the claimed node is covered and in a pool: that pool's CA signs
===================  ==============================================================================

Lifetime: as the agents' (``csrpolicy.lifetime_for``): ``min(spec.expirationSeconds, 24 h)``, at
least 10 min; 24 h when the request names none.

Untrusted input: every field of ``spec`` may be anything; every malformed value is a
:class:`Deny`, never an exception (property-tested, ``tests/unit/test_coordinatorcsr.py``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Final

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.x509.oid import ExtensionOID, NameOID

from edgewatch.controller import csrpolicy
from edgewatch.controller.csrpolicy import (
    PARSE_ERRORS,
    AgentIdentity,
    CsrSpec,
    Deny,
    Ignore,
    Sign,
    check_key,
    lifetime_for,
    load_request,
    parse_spec,
)
from edgewatch.names import (
    COORDINATOR_CLIENT_SIGNER,
    COORDINATOR_ROOT_USER,
    COORDINATOR_SERVICE_ACCOUNT,
    COORDINATOR_SERVING_SIGNER,
    NODE_NAME_EXTRA,
)

__all__ = [
    "LOOPBACK_DNS", "LOOPBACK_IP", "ROOT_USAGES", "SERVING_CN", "SERVING_USAGES", "CoordinatorIdentity",
    "Decision", "SignRoot", "SignServing", "decide", "decide_api", "decide_root", "decide_serving",
]

SERVING_CN: Final = COORDINATOR_SERVICE_ACCOUNT
"""The subject CN of a coordinator's serving certificate: ``edgewatch-coordinator`` (the same on
every node and pool; agents verify the pool CA and the node's IP in the SANs, not the CN)."""

LOOPBACK_IP: Final = ipaddress.ip_address("127.0.0.1")
"""The one IP SAN allowed besides the node's own addresses (the pod's local clients)."""

LOOPBACK_DNS: Final = "localhost"
"""The one DNS SAN allowed."""

SERVING_USAGES: Final = (frozenset({"server auth"}), frozenset({"server auth", "digital signature"}),
                         frozenset({"server auth", "digital signature", "key encipherment"}))
"""The ``spec.usages`` sets accepted for a serving certificate (each value once)."""

ROOT_USAGES: Final = csrpolicy.ALLOWED_USAGES
"""The ``spec.usages`` sets accepted for the root client certificate (the agents' ones)."""

_ServingKey = ec.EllipticCurvePublicKey | Ed25519PublicKey
_IP = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class CoordinatorIdentity:
    """The pool coordinator's ServiceAccount (``deploy/12-rbac-coordinator.yaml``:
    ``edgewatch/edgewatch-coordinator``)."""

    namespace: str = "edgewatch"
    name: str = COORDINATOR_SERVICE_ACCOUNT

    @property
    def username(self) -> str:
        """The username the apiserver gives its tokens: ``system:serviceaccount:<ns>:<name>``."""
        return f"system:serviceaccount:{self.namespace}:{self.name}"

    def is_requester(self, spec: CsrSpec) -> bool:
        """True if ``spec`` was made with one of its tokens (username, and the ServiceAccounts group)."""
        return spec.username == self.username and "system:serviceaccounts" in spec.groups


@dataclass(frozen=True)
class SignServing:
    """Approve and sign a serving certificate ``CN=edgewatch-coordinator`` from ``pool``'s CA for the
    coordinator on ``node``, with exactly ``ips`` and ``dns_names`` as SANs (the request's, checked),
    valid ``lifetime_s`` seconds, for ``public_key``."""

    node: str
    pool: str
    lifetime_s: int
    ips: tuple[_IP, ...]
    dns_names: tuple[str, ...]
    public_key: _ServingKey = field(compare=False, repr=False)


@dataclass(frozen=True)
class SignRoot:
    """Approve and sign etcd's root client certificate (``CN=root``) from ``pool``'s CA for the
    coordinator on ``node``, valid ``lifetime_s`` seconds, for ``public_key``."""

    node: str
    pool: str
    lifetime_s: int
    public_key: _ServingKey = field(compare=False, repr=False)


Decision = Sign | SignServing | SignRoot | Deny | Ignore


def _requester(spec: CsrSpec, coordinator: CoordinatorIdentity) -> str | Deny:
    """The claimed node of a request by the coordinator's ServiceAccount, or the Deny."""
    if not coordinator.is_requester(spec):
        return Deny("not_coordinator", f"only {coordinator.username} may request this certificate, "
                                       f"not {spec.username[:200]!r}")
    claim = spec.extra.get(NODE_NAME_EXTRA, ())
    if len(claim) != 1 or not claim[0]:
        return Deny("node_claim", f"the requester's token must name exactly one node ({NODE_NAME_EXTRA}); "
                                  "use the pod-bound token of the coordinator's pod")
    return claim[0]


def _parsed(spec: CsrSpec, *, cn: str) -> x509.CertificateSigningRequest | Deny:
    """The request, its signature and subject checked (the rules common to both certificates)."""
    csr = load_request(spec.request)
    if isinstance(csr, Deny):
        return csr
    try:
        valid = csr.is_signature_valid
    except (InvalidSignature, ValueError, UnsupportedAlgorithm):
        valid = False
    if not valid:
        return Deny("signature", "the request's signature does not verify with its own key")
    rdns = list(csr.subject.rdns)
    attrs = [a for rdn in rdns for a in rdn]
    if len(rdns) != 1 or len(attrs) != 1 or attrs[0].oid != NameOID.COMMON_NAME or attrs[0].value != cn:
        return Deny("subject", f"subject must be exactly CN={cn}, got {csr.subject.rfc4514_string()[:200]!r}")
    return csr


def _usages_ok(spec: CsrSpec, allowed: Collection[frozenset[str]]) -> bool:
    usages = frozenset(spec.usages)
    return len(usages) == len(spec.usages) and usages in allowed


def _check_sans(csr: x509.CertificateSigningRequest, *, node: str,
                addresses: Collection[str]) -> tuple[tuple[_IP, ...], tuple[str, ...]] | Deny:
    try:
        names = list(csr.extensions.get_extension_for_oid(ExtensionOID.SUBJECT_ALTERNATIVE_NAME).value)
    except x509.ExtensionNotFound:
        return Deny("san", "a serving certificate needs a subjectAltName with the node's IP address")
    own: set[_IP] = set()
    for text in addresses:
        try:
            own.add(ipaddress.ip_address(text))
        except ValueError:
            continue  # a Node's address that is no IP (a hostname) is never an IP SAN
    ips: list[_IP] = []
    dns: list[str] = []
    for name in names:
        if isinstance(name, x509.IPAddress) and isinstance(name.value, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
            if name.value not in own and name.value != LOOPBACK_IP:
                return Deny("san", f"IP {name.value} is not an address of node {node} (nor 127.0.0.1)")
            ips.append(name.value)
        elif isinstance(name, x509.DNSName):
            if name.value != LOOPBACK_DNS:
                return Deny("san", f"DNS name {name.value[:100]!r} is not allowed: only {LOOPBACK_DNS}")
            dns.append(name.value)
        else:
            return Deny("san", f"a {type(name).__name__} SAN is not allowed: IP addresses and localhost only")
    if len(set(ips)) != len(ips) or len(set(dns)) != len(dns):
        return Deny("san", "each subjectAltName may appear once")
    if not own.intersection(ips):
        return Deny("san", f"the SANs must include an address of node {node} "
                           f"({', '.join(sorted(map(str, own))) or 'none known'})")
    return tuple(ips), tuple(dns)


def decide_serving(spec: CsrSpec, *, coordinator: CoordinatorIdentity, pool_of: Callable[[str], str | None],
                   node_addresses: Callable[[str], Collection[str]]) -> SignServing | Deny:
    """Sign or deny a serving-certificate request (the module's first table). Never raises.

    Args:
        spec: the request (its signer is not checked here: :func:`decide` routes).
        coordinator: the only ServiceAccount whose requests may be signed.
        pool_of: the pool of a node the controller covers, or None.
        node_addresses: the node's InternalIP and ExternalIP addresses (strings; empty if unknown).
    """
    node = _requester(spec, coordinator)
    if isinstance(node, Deny):
        return node
    try:
        return _serving(spec, node=node, pool_of=pool_of, node_addresses=node_addresses)
    except PARSE_ERRORS as exc:  # lazily parsed fields of a bad request
        return Deny("malformed", f"request does not parse: {str(exc)[:200]}")


def _serving(spec: CsrSpec, *, node: str, pool_of: Callable[[str], str | None],
             node_addresses: Callable[[str], Collection[str]]) -> SignServing | Deny:
    csr = _parsed(spec, cn=SERVING_CN)
    if isinstance(csr, Deny):
        return csr
    san_oid = ExtensionOID.SUBJECT_ALTERNATIVE_NAME.dotted_string
    others = sorted({e.oid.dotted_string for e in csr.extensions} - {san_oid})
    if others:
        return Deny("extensions", f"requested extensions are not allowed ({', '.join(others)[:200]}): "
                                  "the signer sets them")
    key = check_key(csr)
    if isinstance(key, Deny):
        return key
    if not _usages_ok(spec, SERVING_USAGES):
        return Deny("usages", "usages must be [server auth], optionally with digital signature and key "
                              f"encipherment, got {list(spec.usages)[:8]}")
    pool = pool_of(node)
    if not pool:
        return Deny("no_pool", f"node {node} is not a covered node of a pool (label edgewatch.io/pool)")
    sans = _check_sans(csr, node=node, addresses=node_addresses(node))
    if isinstance(sans, Deny):
        return sans
    return SignServing(node=node, pool=pool, lifetime_s=lifetime_for(spec.expiration_seconds), ips=sans[0],
                       dns_names=sans[1], public_key=key)


def decide_root(spec: CsrSpec, *, coordinator: CoordinatorIdentity,
                pool_of: Callable[[str], str | None]) -> SignRoot | Deny:
    """Sign or deny a request for etcd's root client certificate (the module's second table).
    Never raises. Args as :func:`decide_serving`."""
    node = _requester(spec, coordinator)
    if isinstance(node, Deny):
        return node
    try:
        return _root(spec, node=node, pool_of=pool_of)
    except PARSE_ERRORS as exc:
        return Deny("malformed", f"request does not parse: {str(exc)[:200]}")


def _root(spec: CsrSpec, *, node: str, pool_of: Callable[[str], str | None]) -> SignRoot | Deny:
    csr = _parsed(spec, cn=COORDINATOR_ROOT_USER)
    if isinstance(csr, Deny):
        return csr
    extensions = list(csr.extensions)
    if any(e.oid == ExtensionOID.SUBJECT_ALTERNATIVE_NAME for e in extensions):
        return Deny("san", "a subjectAltName is not allowed in the root client certificate")
    if extensions:
        names = ", ".join(sorted({e.oid.dotted_string for e in extensions}))[:200]
        return Deny("extensions", f"requested extensions are not allowed ({names}): the signer sets them")
    key = check_key(csr)
    if isinstance(key, Deny):
        return key
    if not _usages_ok(spec, ROOT_USAGES):
        return Deny("usages", f"usages must be [client auth] or [client auth, digital signature], "
                              f"got {list(spec.usages)[:8]}")
    pool = pool_of(node)
    if not pool:
        return Deny("no_pool", f"node {node} is not a covered node of a pool (label edgewatch.io/pool)")
    return SignRoot(node=node, pool=pool, lifetime_s=lifetime_for(spec.expiration_seconds), public_key=key)


def decide(spec: CsrSpec, *, agent: AgentIdentity, coordinator: CoordinatorIdentity,
           pool_of: Callable[[str], str | None], node_addresses: Callable[[str], Collection[str]]) -> Decision:
    """Route ``spec`` to its policy (see the module docstring) and decide. Never raises.

    Args:
        spec: the request.
        agent: the agents' ServiceAccount (client signer, node certificates: ``csrpolicy.decide``).
        coordinator: the coordinator's ServiceAccount (serving, and root on the client signer).
        pool_of: the pool of a covered node, or None.
        node_addresses: a node's InternalIP and ExternalIP addresses (empty if unknown).
    """
    if spec.signer_name == COORDINATOR_SERVING_SIGNER:
        return decide_serving(spec, coordinator=coordinator, pool_of=pool_of, node_addresses=node_addresses)
    if spec.signer_name == COORDINATOR_CLIENT_SIGNER and spec.username == coordinator.username:
        return decide_root(spec, coordinator=coordinator, pool_of=pool_of)
    return csrpolicy.decide(spec, agent=agent, pool_of=pool_of)


def decide_api(spec: object, *, agent: AgentIdentity, coordinator: CoordinatorIdentity,
               pool_of: Callable[[str], str | None], node_addresses: Callable[[str], Collection[str]]) -> Decision:
    """:func:`decide` over a CSR's ``spec`` as the API serves it in JSON: a request for neither of
    edgewatch's two signers is :class:`Ignore` whatever its shape; a malformed one of ours is a
    ``malformed`` Deny. Never raises."""
    signers = (COORDINATOR_CLIENT_SIGNER, COORDINATOR_SERVING_SIGNER)
    if not isinstance(spec, Mapping) or spec.get("signerName") not in signers:
        name = spec.get("signerName") if isinstance(spec, Mapping) else None
        return Ignore(name if isinstance(name, str) else "")
    parsed = parse_spec(spec)
    if isinstance(parsed, Deny):
        return parsed
    return decide(parsed, agent=agent, coordinator=coordinator, pool_of=pool_of, node_addresses=node_addresses)

"""Configuration of the pool coordinator: its timings and limits (``CoordinatorConfig``), client
TLS (``CoordinatorTLS``: files given by the operator; ``NodeCertificateTLS``: this node's own
certificate and its pool's CA, docs/security.md; ``check_pool_ca``), the pool etcd's URL
(``parse_coordinator_url``, ``CoordinatorEndpoint``) and the key root every pool's keys live under (``KEY_ROOT``)."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from edgewatch.agent.coordinator.errors import CoordinatorError
from edgewatch.poolkeys import KEY_ROOT, MAX_LEADER_TTL_S

if TYPE_CHECKING:  # gRPC is loaded by credentials(), once a coordinator connects
    import grpc

__all__ = ["DEFAULT_ETCD_PORT", "KEY_ROOT", "MAX_CA_PEM_BYTES", "MAX_POOL_CA_CERTS", "ClientTLS", "CoordinatorConfig",
           "CoordinatorEndpoint", "CoordinatorTLS", "NodeCertificateTLS", "check_pool_ca", "parse_coordinator_url"]


DEFAULT_ETCD_PORT = 2379
# Node names are DNS-1123 subdomains, pool names DNS-1123 labels (no dots or slashes, so keys
# cannot nest): the checks of edgewatch.core.types.


@dataclass(frozen=True)
class CoordinatorConfig:
    """Timings and limits of the pool coordinator; all durations in seconds.

    Attributes:
        heartbeat_ttl_s: etcd lease of a heartbeat key: 40 s like the kubelet Lease, so a node's
            heartbeat lives in the pool exactly as long as the cloud would believe a Lease renewal.
        heartbeat_interval_s: re-put of the heartbeat: 10 s, the kubelet's renew rate (25 % of
            the TTL, so three puts may be lost before it expires). Also the dominant term of the
            hand-over bound (``edgewatch.agent.coordinator``'s docstring).
        leader_ttl_s: etcd lease of the leader key: 5 s. The time a dead leader blocks the
            election; short enough that hand-over fits well inside the 40 s Lease, long enough to
            ride out a GC pause or a slow etcd on a 2-core edge box (etcd's minimum is 1.5 s).
        leader_keepalive_s: keep-alive of the leader lease: 1 s, a fifth of the TTL, so four
            keep-alives may be lost before the lease expires.
        forward_interval_s: re-forward every delegated node at least this often: 10 s, the
            kubelet's rate; also re-checks that the mark is still in place.
        forward_workers: concurrent forwards (each is one GET and one PUT to the cloud).
        queue_size: bound of the forward queue (one entry per node at most).
        forward_backoff_initial_s, forward_backoff_max_s: per-node backoff after a failed forward:
            1 s doubling up to 10 s (not above forward_interval_s, so a failing node is retried at
            least as often as a healthy one is renewed).
        rpc_timeout_s: timeout of every etcd call: 3 s, below leader_ttl_s so a stuck call is
            noticed before the lease could have expired.
        api_timeout_s: timeout of one forward or one pool-sync list against the cloud API.
        health_interval_s: re-read of the leader keys (health probe and fallback to the watch).
        cloud_poll_interval_s: how often a leader re-checks that it may go on leading (its lease
            still confirmed; its own cloud link): 0.5 s.
        cloud_recheck_s: the own cloud link is re-read this often even without a change notice
            (:meth:`PoolCoordinator.cloud_link_changed`, which the agent's coordinator runner calls
            the moment the link monitor tells it of a flip): 5 s, a safety net for a ``cloud_ok`` source that gives none.
        connect_backoff_initial_s, connect_backoff_max_s: reconnect backoff (jittered, capped at
            10 s so a restarted coordinator is back in use within seconds).
        sync_stale_s: ``leader-informer-sync`` unchanged this long (by this agent's own clock) is
            stale and the coordinator not Ready: 30 s, three of the leader's 10 s renewals
            (OpenYurt's Yurt-Coordinator figures).
        max_value_bytes: larger values read from etcd are rejected (a heartbeat is ~150 bytes).
    """

    heartbeat_ttl_s: int = 40
    heartbeat_interval_s: float = 10.0
    leader_ttl_s: int = 5
    leader_keepalive_s: float = 1.0
    forward_interval_s: float = 10.0
    forward_workers: int = 4
    queue_size: int = 1024
    forward_backoff_initial_s: float = 1.0
    forward_backoff_max_s: float = 10.0
    rpc_timeout_s: float = 3.0
    api_timeout_s: float = 10.0
    health_interval_s: float = 2.0
    cloud_poll_interval_s: float = 0.5
    cloud_recheck_s: float = 5.0
    connect_backoff_initial_s: float = 0.5
    connect_backoff_max_s: float = 10.0
    sync_stale_s: float = 30.0
    max_value_bytes: int = 4096

    def __post_init__(self) -> None:
        problems = []
        if not 2 <= self.leader_ttl_s <= MAX_LEADER_TTL_S:
            problems.append(f"leader_ttl_s must be in [2, {MAX_LEADER_TTL_S}] (etcd's minimum lease TTL is about "
                            "1.5 s; the pool coordinator disqualifies a candidacy under a longer lease)")
        if not 0 < self.leader_keepalive_s <= self.leader_ttl_s / 3:
            problems.append("leader_keepalive_s must be in (0, leader_ttl_s / 3]")
        if not 0 < self.heartbeat_interval_s <= self.heartbeat_ttl_s / 3:
            problems.append("heartbeat_interval_s must be in (0, heartbeat_ttl_s / 3]")
        if self.rpc_timeout_s <= 0 or self.api_timeout_s <= 0:
            problems.append("timeouts must be positive")
        if self.forward_workers < 1 or self.queue_size < 1:
            problems.append("forward_workers and queue_size must be >= 1")
        if self.forward_backoff_max_s < self.forward_backoff_initial_s:
            problems.append("forward_backoff_max_s must be >= forward_backoff_initial_s")
        if problems:
            raise CoordinatorError("config", "invalid CoordinatorConfig: " + "; ".join(problems))

    def handover_bound_s(self, *, expiry_check_s: float = 0.5, overhead_s: float = 0.5) -> float:
        """Worst-case age of a delegated node's last forwarded renewTime when a successor
        forwards its next heartbeat after the leader died (``edgewatch.agent.coordinator``'s
        docstring): heartbeat interval + leader TTL + etcd's expiry check + campaign/list/forward
        overhead."""
        return self.heartbeat_interval_s + self.leader_ttl_s + expiry_check_s + overhead_s


@dataclass(frozen=True)
class CoordinatorTLS:
    """Client TLS to a production etcd: the CA that signed etcd's serving certificate and this
    agent's client certificate and key (PEM files; read at every connect)."""

    ca_file: Path
    cert_file: Path
    key_file: Path

    def credentials(self) -> grpc.ChannelCredentials:
        """gRPC channel credentials from the files.

        Raises:
            CoordinatorError: a file cannot be read.
        """
        import grpc  # noqa: PLC0415 - not with this module: agents without a coordinator never load gRPC

        try:
            return grpc.ssl_channel_credentials(
                root_certificates=Path(self.ca_file).read_bytes(),
                private_key=Path(self.key_file).read_bytes(),
                certificate_chain=Path(self.cert_file).read_bytes(),
            )
        except OSError as exc:
            raise CoordinatorError("tls", f"cannot read coordinator TLS file: {exc}") from exc


MAX_CA_PEM_BYTES = 16 * 1024
"""A pool CA bundle read from the cloud larger than this is refused (one P-256 CA is ~700 B)."""

MAX_POOL_CA_CERTS = 4
"""At most this many CA certificates in the pool CA bundle: the current CA and the one being
rotated to (or from), with room for one more; each must be a CA."""


def check_pool_ca(pem: bytes | str | None) -> bytes:
    """The pool CA bundle (``ca.crt`` of the pool CA ConfigMap) as the coordinator's only trust
    roots: 1 to :data:`MAX_POOL_CA_CERTS` PEM certificates and nothing else, at most
    :data:`MAX_CA_PEM_BYTES`, each a CA (BasicConstraints ``ca=True``). Several certificates let
    the old and the new pool CA both be trusted while the pool CA is rotated. Returns them
    re-encoded (PEM, in order), so nothing but those certificates is trusted.

    Raises:
        CoordinatorError: (reason ``tls``) missing, too large, no or too many certificates, another
            PEM block (a key, say), or one that is not a CA.
    """
    if pem is None or not pem:
        raise CoordinatorError("tls", "the pool CA certificate is missing (ConfigMap key ca.crt)")
    data = pem.encode() if isinstance(pem, str) else bytes(pem)
    if len(data) > MAX_CA_PEM_BYTES:
        raise CoordinatorError("tls", f"the pool CA certificate is {len(data)} bytes (at most {MAX_CA_PEM_BYTES})")
    blocks = data.count(b"-----BEGIN")
    if blocks < 1 or blocks != data.count(b"-----BEGIN CERTIFICATE-----"):
        raise CoordinatorError("tls", "the pool CA must be one or more PEM certificates and nothing else")
    if blocks > MAX_POOL_CA_CERTS:
        raise CoordinatorError("tls", f"the pool CA bundle has {blocks} certificates (at most {MAX_POOL_CA_CERTS})")
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise CoordinatorError("tls", f"the pool CA certificate does not parse: {exc}") from None
    if len(certs) != blocks:
        raise CoordinatorError("tls", "the pool CA bundle does not parse: a certificate block is malformed")
    for number, cert in enumerate(certs, start=1):
        try:
            constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
        except x509.ExtensionNotFound:
            raise CoordinatorError("tls", f"the pool CA certificate #{number} has no BasicConstraints") from None
        except (ValueError, x509.DuplicateExtension) as exc:
            raise CoordinatorError("tls", f"the pool CA certificate #{number} does not parse: {exc}") from None
        if not constraints.ca:
            raise CoordinatorError("tls", f"the pool CA certificate #{number} is not a CA certificate")
    return b"".join(cert.public_bytes(serialization.Encoding.PEM) for cert in certs)


@dataclass(frozen=True)
class NodeCertificateTLS:
    """Client TLS from this node's own coordinator client certificate (``--coordinator-certificate``,
    docs/security.md): the key and certificate files the agent's certificate requester keeps in its state
    folder (``edgewatch.agent.certstore``), and, as the only trust roots, the pool CA bundle
    (``ca_pem``, checked by :func:`check_pool_ca`; never the system roots).

    The key and certificate are read at every new client (every session and every pool-cache
    client), so a rotated pair (written over the same paths) is used by the next connection without
    restarting anything; the session opened before is ended soon after (``certlife``).
    """

    ca_pem: bytes
    cert_file: Path
    key_file: Path

    def credentials(self) -> grpc.ChannelCredentials:
        """gRPC channel credentials: the stored key and certificate, the pool CA as root.

        Raises:
            CoordinatorError: (reason ``tls``) a file cannot be read or does not parse, or the key
                does not match the certificate (a rotation caught between its two renames: the
                next attempt reads the finished pair).
        """
        try:
            key_pem = Path(self.key_file).read_bytes()
            cert_pem = Path(self.cert_file).read_bytes()
        except OSError as exc:
            raise CoordinatorError("tls", f"cannot read this node's coordinator client certificate: {exc}") from exc
        try:
            key = serialization.load_pem_private_key(key_pem, password=None)
            cert = x509.load_pem_x509_certificate(cert_pem)
        except (ValueError, TypeError) as exc:
            raise CoordinatorError("tls", f"this node's coordinator client certificate does not parse: {exc}") from None
        if cert.public_key() != key.public_key():
            raise CoordinatorError("tls", "this node's coordinator client key and certificate do not match "
                                          "(being rotated?); retrying")
        import grpc  # noqa: PLC0415 - not with this module: agents without a coordinator never load gRPC

        return grpc.ssl_channel_credentials(root_certificates=self.ca_pem, private_key=key_pem,
                                            certificate_chain=cert_pem)


ClientTLS = CoordinatorTLS | NodeCertificateTLS
"""What a coordinator's client TLS can be: anything with ``credentials()``, read at every new client."""


@dataclass(frozen=True)
class CoordinatorEndpoint:
    """A parsed coordinator URL."""

    scheme: str
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def parse_coordinator_url(url: str) -> CoordinatorEndpoint:
    """Parse ``http://host[:port]`` or ``https://host[:port]`` (port defaults to 2379).

    Raises:
        CoordinatorError: (reason ``config``) anything else, with what was wrong and the form expected.
    """
    expected = "expected http://HOST:PORT or https://HOST:PORT (the pool's etcd client URL)"
    try:
        parts = urllib.parse.urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise CoordinatorError("config", f"invalid coordinator URL {url!r}: {exc}; {expected}") from exc
    if parts.scheme not in ("http", "https"):
        raise CoordinatorError("config", f"unsupported scheme {parts.scheme!r} in coordinator URL {url!r}; {expected}")
    if not parts.hostname:
        raise CoordinatorError("config", f"no host in coordinator URL {url!r}; {expected}")
    if parts.username or parts.password:
        raise CoordinatorError("config", f"credentials in the coordinator URL are not supported; use client "
                                         f"certificates (CoordinatorTLS); {expected}")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise CoordinatorError("config", f"coordinator URL {url!r} must not have a path or query; {expected}")
    return CoordinatorEndpoint(scheme=parts.scheme, host=parts.hostname, port=port or DEFAULT_ETCD_PORT)

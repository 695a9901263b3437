"""The agent's coordinator client certificate: obtained from the controller's signer through a
CertificateSigningRequest, stored in the state folder, rotated before it expires
(docs/security.md). The loop is :class:`edgewatch.csr.CertificateRequester` (shared with the pool
coordinator; its docstring tells the steps); this module fixes what the agent asks for and exports:

- the CSR: named ``<node>-coordinator-<random>`` (``generateName``), for the signer
  :data:`edgewatch.names.COORDINATOR_CLIENT_SIGNER`, usages ``["client auth"]``, subject exactly
  ``CN=<node>`` (``edgewatch.agent.certificates``);
- the files: ``coordinator-client.*`` in the state folder (``edgewatch.agent.certstore``);
- the metrics: ``edgewatch_agent_certificate_requests_total{result}`` (``issued``, ``denied``,
  ``failed``, ``invalid``, ``timeout``, ``error``) and ``edgewatch_agent_certificate_expiry_seconds``
  (seconds until the certificate in use expires, on our monotonic clock; 0 without one).

RBAC it needs: ``certificates.k8s.io`` ``certificatesigningrequests``: ``create``, ``get``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography.x509.oid import ExtendedKeyUsageOID
from prometheus_client import CollectorRegistry, Counter, Gauge

from edgewatch import csr
from edgewatch.agent.certstore import CertificateFiles
from edgewatch.core.types import NodeName
from edgewatch.csr import CertificateListener, NotDecided, RequestRefused
from edgewatch.kube.api import AsyncClient
from edgewatch.names import COORDINATOR_CLIENT_SIGNER

__all__ = ["CertificateListener", "CertificateMetrics", "CertificateRequester", "NotDecided", "RequestRefused"]

DEFAULT_LIFETIME_S = csr.DEFAULT_LIFETIME_S
"""``expirationSeconds`` asked for by default (24 h, the signer's maximum)."""


class CertificateMetrics:
    """``requests`` by ``result``, and ``expiry`` (seconds left of the certificate in use)."""

    def __init__(self, registry: CollectorRegistry, expiry: Callable[[], float]) -> None:
        self.requests = Counter("edgewatch_agent_certificate_requests", "Coordinator client certificate requests "
                                "by result.", ["result"], registry=registry)
        self.expiry = Gauge("edgewatch_agent_certificate_expiry_seconds", "Seconds until the coordinator client "
                            "certificate in use expires (0 without one).", registry=registry)
        self.expiry.set_function(expiry)


class CertificateRequester(csr.CertificateRequester):
    """Obtains, stores and rotates this node's coordinator client certificate (module docstring).

    Args (keyword-only):
        client: the agent's API client (its token must be pod-bound: the signer wants the node claim).
        node: this node.
        state_dir: where the files live (``CertificateFiles.under``).
        registry: where the metrics are registered.
        options: the rest of :class:`edgewatch.csr.CertificateRequester`'s arguments, documented
            there (``timeout_s`` required; ``lifetime_s``, ``fraction``, ``listeners``, ``poll_s``,
            ``wait_s``, the backoff, ``wall``, ``rng``); not ``on_result``, which counts here.

    Raises:
        ValueError: ``lifetime_s`` or ``fraction`` out of range.
    """

    def __init__(self, *, client: AsyncClient, node: NodeName, state_dir: Path, registry: CollectorRegistry,
                 **options: Any) -> None:
        spec = csr.CertificateSpec(signer_name=COORDINATOR_CLIENT_SIGNER, usages=("client auth",), common_name=node,
                                   usage=ExtendedKeyUsageOID.CLIENT_AUTH, generate_name=f"{node}-coordinator-",
                                   what="coordinator client")
        super().__init__(client=client, spec=spec, files=CertificateFiles.under(state_dir), on_result=self._count,
                         **options)
        self.node = node
        self.metrics = CertificateMetrics(registry, self.expiry_s)

    def _count(self, result: str) -> None:
        self.metrics.requests.labels(result).inc()

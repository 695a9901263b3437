"""The Kubernetes API as the rest of edgewatch sees it: the client type, its errors, the resource
and model types it reads and writes, and the raw HTTP types of :attr:`~edgewatch.kube.client.CloudApi.http`.

This is the door's front: the agent, the controller, the pool cache and the CLI import these names
from here, never from lightkube or httpx2 (an import-linter contract in ``pyproject.toml`` keeps it
so, ``tests/unit/test_architecture.py``). Which client library sits behind the door is then one
package's business: swapping it, or giving the agent a lighter one (the agent's memory budget, docs/scaling.md),
touches ``edgewatch.kube`` only.

Limits: these are the library's own classes, re-exported (no wrapping): their behaviour and
documentation are lightkube's (``https://lightkube.readthedocs.io``) and httpx's.
"""

from __future__ import annotations

import httpx2
from lightkube import ApiError, AsyncClient
from lightkube.core.exceptions import ConfigError
from lightkube.models.certificates_v1 import CertificateSigningRequestCondition
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.certificates_v1 import (
    CertificateSigningRequest,
    CertificateSigningRequestApproval,
    CertificateSigningRequestStatus,
)
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ConfigMap, Event, Node, Pod, Secret, ServiceAccount
from lightkube.types import PatchType

__all__ = [
    "ApiError", "AsyncClient", "CertificateSigningRequest", "CertificateSigningRequestApproval",
    "CertificateSigningRequestCondition", "CertificateSigningRequestStatus", "ConfigError", "ConfigMap", "Deployment",
    "Event",
    "HttpClient", "HttpError", "HttpTimeout", "HttpTimeoutError", "Lease", "LeaseSpec", "Node", "ObjectMeta",
    "PatchType", "Pod", "Secret", "ServiceAccount",
]

HttpClient = httpx2.AsyncClient
"""The raw HTTP client type (:attr:`edgewatch.kube.client.CloudApi.http`)."""

HttpError = httpx2.HTTPError
"""Any failure of a raw HTTP request: transport errors and timeouts (not HTTP error statuses)."""

HttpTimeoutError = httpx2.TimeoutException
"""A raw HTTP request that ran out of time (a subclass of :data:`HttpError`)."""

HttpTimeout = httpx2.Timeout
"""Per-request timeouts of a raw HTTP request, seconds (``HttpTimeout(5.0)``)."""

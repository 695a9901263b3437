"""Which API resource an informer lists and watches: its group, version, plural and kind, and the
paths the apiserver serves it at.

One small value type for every part of edgewatch that builds an API path itself (the informer,
the pool cache): the well-known resources edgewatch reads are named here once.

Limits
    Pure: no I/O. Paths follow the Kubernetes API conventions
    (https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-uris).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["ApiResource", "CERTIFICATE_SIGNING_REQUESTS", "CONFIGMAPS", "LEASES", "NODES", "PODS"]


@dataclass(frozen=True, order=True)
class ApiResource:
    """One Kubernetes API resource.

    Attributes:
        group: API group, ``""`` for the core group.
        version: API version, e.g. ``"v1"``.
        resource: plural resource name as in URLs, e.g. ``"endpointslices"``.
        kind: object kind, e.g. ``"EndpointSlice"``; lists are ``<kind>List``.
    """

    group: str
    version: str
    resource: str
    kind: str

    @property
    def api_version(self) -> str:
        """``group/version``, or ``version`` for the core group (the objects' ``apiVersion``)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def name(self) -> str:
        """``group/version/resource`` with ``core`` for the core group: a stable id (metrics, etcd)."""
        return f"{self.group or 'core'}/{self.version}/{self.resource}"

    @property
    def api_prefix(self) -> str:
        """URL prefix of the group version: ``/api/v1`` or ``/apis/<group>/<version>``."""
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """API path of the collection (all namespaces, or one) or of one object."""
        base = self.api_prefix
        if namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.resource}"
        return f"{base}/{name}" if name else base


NODES: Final = ApiResource("", "v1", "nodes", "Node")
CONFIGMAPS: Final = ApiResource("", "v1", "configmaps", "ConfigMap")
PODS: Final = ApiResource("", "v1", "pods", "Pod")
LEASES: Final = ApiResource("coordination.k8s.io", "v1", "leases", "Lease")
CERTIFICATE_SIGNING_REQUESTS: Final = ApiResource("certificates.k8s.io", "v1", "certificatesigningrequests",
                                                  "CertificateSigningRequest")

"""The Kubernetes API documents the node-local pool cache serves besides objects: discovery
(``/api``, ``/apis``, ``/api/v1``, ``/apis/<group>/<version>``) and ``Status`` errors.

What it is for
    kubectl and client-go discover resources before they list them. The pool cache answers
    discovery for its own resources only, in the legacy (unaggregated) JSON format: a client that
    asks for aggregated discovery (``Accept: application/json;g=apidiscovery.k8s.io;v=v2;...``)
    gets ``Content-Type: application/json`` and falls back to the legacy documents, as it does
    with any apiserver that lacks aggregated discovery. It never merges the cloud apiserver's
    discovery: that would make the answer depend on the uplink and slow every discovery by the
    upstream timeout while cut off.

Limits
    Pure: builds dicts, no I/O. Resources are namespaced and read-only (verbs get, list, watch).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from edgewatch.poolcache.resources import PoolResource

__all__ = ["SHORT_NAMES", "api_group_list", "api_resource_list", "api_versions", "status"]

SHORT_NAMES: Final[dict[tuple[str, str], list[str]]] = {
    ("", "services"): ["svc"],
    ("", "endpoints"): ["ep"],
}
"""kubectl short names of the known resources, as kube-apiserver lists them."""


def api_versions(resources: Iterable[PoolResource], *, server_address: str) -> dict[str, Any]:
    """The ``/api`` document (``APIVersions``): the core versions among ``resources``."""
    versions = sorted({r.version for r in resources if not r.group})
    return {"kind": "APIVersions", "versions": versions,
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]}


def api_group_list(resources: Iterable[PoolResource]) -> dict[str, Any]:
    """The ``/apis`` document (``APIGroupList``): the named groups among ``resources``; the first
    version named for a group is its preferred version."""
    groups: dict[str, list[str]] = {}
    for r in resources:
        if r.group and r.version not in groups.setdefault(r.group, []):
            groups[r.group].append(r.version)
    out = []
    for group, versions in sorted(groups.items()):
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        out.append({"name": group, "versions": entries, "preferredVersion": entries[0]})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": out}


def api_resource_list(resources: Iterable[PoolResource], *, group: str, version: str) -> dict[str, Any] | None:
    """The ``APIResourceList`` of one group version, or None when no resource is in it."""
    mine = sorted((r for r in resources if r.group == group and r.version == version), key=lambda r: r.resource)
    if not mine:
        return None
    return {
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}" if group else version,
        "resources": [{"name": r.resource, "singularName": r.kind.lower(), "namespaced": True, "kind": r.kind,
                       "verbs": ["get", "list", "watch"], "shortNames": SHORT_NAMES.get((r.group, r.resource), [])}
                      for r in mine],
    }


def status(*, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A failure ``Status`` object as kube-apiserver sends it (``reason`` e.g. ``Expired``,
    ``NotFound``, ``BadRequest``, ``ServiceUnavailable``, ``MethodNotAllowed``, ``Timeout``)."""
    out: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                           "message": message, "reason": reason, "code": code}
    if details:
        out["details"] = details
    return out

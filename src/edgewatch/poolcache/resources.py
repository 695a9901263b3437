"""Which Kubernetes resources the pool cache holds, and how they are named on the API and in etcd.

What it is for
    The pool coordinator's second job (OpenYurt's Yurt-Coordinator, docs/pool-cache.md): the pool leader
    watches *pool-scope* resources (those every node's kube-proxy and CoreDNS read: EndpointSlices,
    Services) once for the pool and every node reads them from the pool. This module names those
    resources (:class:`PoolResource`) and parses the ``poolScopeResources`` key of ``edgewatch-config``
    (:func:`parse_pool_resources`).

Configuration (``edgewatch-config``, key ``poolScopeResources``)
    A YAML list; each entry either ``group/version/resource`` (core group: ``v1/services``) or a
    mapping ``{group, version, resource, kind}``. The kind may be left out for the resources of
    :data:`KNOWN_KINDS`. Empty or missing key: :data:`DEFAULT_RESOURCES`. ``[]`` (or ``off``)
    turns the cache off. Example::

        poolScopeResources: |
          - discovery.k8s.io/v1/endpointslices
          - v1/services
          - v1/endpoints

Limits
    Pure: no I/O. Only namespaced resources (all pool-scope resources are; a cluster-scoped one is
    refused). At most :data:`MAX_RESOURCES` entries.
"""

from __future__ import annotations

import re
from typing import Final

import yaml

from edgewatch.kube.resources import ApiResource

__all__ = [
    "DEFAULT_RESOURCES",
    "ENDPOINTS",
    "ENDPOINTSLICES",
    "KNOWN_KINDS",
    "MAX_RESOURCES",
    "PoolResource",
    "PoolResourcesError",
    "SERVICES",
    "parse_pool_resources",
    "selectable_field_names",
    "selectable_fields",
]

MAX_RESOURCES: Final = 16
"""Most resources one pool caches (each is one cloud watch held by the leader)."""

_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
_VERSION = re.compile(r"v[1-9][0-9]*((alpha|beta)[1-9][0-9]*)?")
_KIND = re.compile(r"[A-Z][A-Za-z0-9]{0,62}")


class PoolResourcesError(ValueError):
    """``poolScopeResources`` is not a valid list of resources."""


PoolResource = ApiResource
"""One namespaced Kubernetes resource the pool cache holds (the cloud door's
:class:`~edgewatch.kube.resources.ApiResource`)."""


ENDPOINTSLICES: Final = PoolResource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice")
SERVICES: Final = PoolResource("", "v1", "services", "Service")
ENDPOINTS: Final = PoolResource("", "v1", "endpoints", "Endpoints")

DEFAULT_RESOURCES: Final[tuple[PoolResource, ...]] = (ENDPOINTSLICES, SERVICES)
"""What kube-proxy and CoreDNS read: the cache's default (OpenYurt's Yurt-Coordinator names Services and Endpoints)."""

KNOWN_KINDS: Final[dict[tuple[str, str, str], str]] = {
    (r.group, r.version, r.resource): r.kind for r in (ENDPOINTSLICES, SERVICES, ENDPOINTS)
}
"""Kinds filled in when an entry names only group/version/resource."""


_SERVICE_FIELDS: Final = {"spec.clusterIP": ("spec", "clusterIP"), "spec.type": ("spec", "type")}


def selectable_fields(resource: PoolResource, obj: dict[str, object]) -> dict[str, str]:
    """The field-selector values of ``obj`` (kube-apiserver's per-resource SelectableFields):
    ``metadata.name`` and ``metadata.namespace`` for all, plus ``spec.clusterIP`` and ``spec.type``
    for Services (kube-proxy lists Services with ``spec.clusterIP!=None``)."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    out = {"metadata.name": str(meta.get("name", "")), "metadata.namespace": str(meta.get("namespace", ""))}
    if (resource.group, resource.resource) == ("", "services"):
        for label, (outer, inner) in _SERVICE_FIELDS.items():
            part = obj.get(outer)
            value = part.get(inner) if isinstance(part, dict) else None
            out[label] = value if isinstance(value, str) else ""
    return out


def selectable_field_names(resource: PoolResource) -> tuple[str, ...]:
    """The field labels :func:`selectable_fields` gives for ``resource`` (others are refused with 400,
    as the apiserver does)."""
    base = ("metadata.name", "metadata.namespace")
    return base + tuple(_SERVICE_FIELDS) if (resource.group, resource.resource) == ("", "services") else base


def _entry(raw: object) -> PoolResource:
    if isinstance(raw, str):
        parts = raw.strip().split("/")
        if len(parts) == 2:
            group, version, resource = "", parts[0], parts[1]
        elif len(parts) == 3:
            group, version, resource = parts
            group = "" if group == "core" else group
        else:
            raise PoolResourcesError(f"{raw!r}: expected group/version/resource or v1/resource")
        kind = None
    elif isinstance(raw, dict):
        unknown = set(raw) - {"group", "version", "resource", "kind"}
        if unknown:
            raise PoolResourcesError(f"{raw!r}: unknown fields {sorted(unknown)}")
        group, version, resource, kind = (raw.get("group", ""), raw.get("version"), raw.get("resource"),
                                          raw.get("kind"))
        if not all(isinstance(v, str) for v in (group, version, resource)) or (
                kind is not None and not isinstance(kind, str)):
            raise PoolResourcesError(f"{raw!r}: group, version, resource and kind must be strings")
        group = "" if group == "core" else group
    else:
        raise PoolResourcesError(f"{raw!r}: expected a string or a mapping")
    assert isinstance(group, str) and isinstance(version, str) and isinstance(resource, str)
    if group and (len(group) > 253 or not _NAME.fullmatch(group)):
        raise PoolResourcesError(f"{group!r} is not an API group name")
    if not _VERSION.fullmatch(version):
        raise PoolResourcesError(f"{version!r} is not an API version")
    if len(resource) > 63 or not _NAME.fullmatch(resource) or "." in resource:
        raise PoolResourcesError(f"{resource!r} is not a resource name")
    kind = kind or KNOWN_KINDS.get((group, version, resource))
    if kind is None:
        raise PoolResourcesError(f"{group}/{version}/{resource}: give its kind (not one of the known resources)")
    if not _KIND.fullmatch(kind):
        raise PoolResourcesError(f"{kind!r} is not a kind")
    return PoolResource(group, version, resource, kind)


def parse_pool_resources(value: str | None) -> tuple[PoolResource, ...]:
    """The resources named by a ``poolScopeResources`` value.

    Args:
        value: the ConfigMap value (YAML) or None when the key is missing.

    Returns:
        The resources in the given order, duplicates removed; :data:`DEFAULT_RESOURCES` for a
        missing or blank value; ``()`` for ``[]`` or ``off`` (cache off).

    Raises:
        PoolResourcesError: not YAML, not a list, more than :data:`MAX_RESOURCES` entries, or an
            entry that is not a valid namespaced resource (the whole value is refused: a cache
            missing one resource would serve clients a partial world).
    """
    if value is None or not value.strip():
        return DEFAULT_RESOURCES
    if value.strip() in ("off", '"off"', "'off'"):
        return ()
    try:
        data = yaml.safe_load(value)
    except yaml.YAMLError as exc:
        raise PoolResourcesError(f"not YAML: {exc}") from None
    if data is None:
        return DEFAULT_RESOURCES
    if data is False:  # YAML 1.1 reads a bare off as false
        return ()
    if not isinstance(data, list):
        raise PoolResourcesError(f"expected a list, got {type(data).__name__}")
    if len(data) > MAX_RESOURCES:
        raise PoolResourcesError(f"{len(data)} entries; at most {MAX_RESOURCES}")
    out: list[PoolResource] = []
    for raw in data:
        r = _entry(raw)
        if r not in out:
            out.append(r)
    return tuple(out)

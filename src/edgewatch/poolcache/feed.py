"""What a source of pool-scope objects emits: a full state, a change, or a bookmark.

What it is for
    The pool cache has three readers of the same shape: the leader's cloud informer (cloud ->
    coordinator etcd), a node's coordinator feed (etcd -> the node's cache) and a node's cloud feed
    (cloud -> the node's cache, while the coordinator is not Ready). Each turns its source into a
    sequence of :data:`~edgewatch.kube.events.FeedEvent` (the informer's events) for one :class:`~edgewatch.poolcache.resources.PoolResource`,
    and a *sink* (an async callable) consumes them. Resource versions are always the cloud
    apiserver's, whichever source carried them (the leader stores each object with its own
    ``metadata.resourceVersion``), so a client may move between sources without confusion.

Also here: the checks every source applies to an object before passing it on
(:func:`check_object`), since every byte from the network or etcd is untrusted.

Limits
    Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, Final

from edgewatch.core.types import is_decimal, is_dns1123_label, is_dns1123_subdomain
from edgewatch.kube.events import Bookmark, Change, FeedEvent, Reset, Sink
from edgewatch.kube.informer import InvalidObject
from edgewatch.poolcache.resources import PoolResource

__all__ = [
    "Bookmark",
    "Change",
    "FeedEvent",
    "MAX_OBJECT_BYTES",
    "ObjectRejected",
    "Reset",
    "Sink",
    "check_object",
    "resource_version_of",
    "strip_object",
]

MAX_OBJECT_BYTES: Final = 1_048_576
"""Largest object accepted from any source, bytes (1 MiB): far above any pool-scope object (an
EndpointSlice holds at most 1,000 endpoints, about 250 KB) and below etcd's default request limit
(1.5 MiB), so the leader can always store what it accepted."""




class ObjectRejected(InvalidObject):
    """An object failed :func:`check_object`; ``reason`` is a short metric label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(reason, f"{reason}: {detail}")


def resource_version_of(obj: dict[str, Any]) -> int:
    """The object's ``metadata.resourceVersion`` as an integer.

    Raises:
        ObjectRejected: (``resource_version``) missing or not a decimal integer (the cloud's are
            etcd revisions; a cache must compare them to order events).
    """
    meta = obj.get("metadata")
    rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
    if not is_decimal(rv):
        raise ObjectRejected("resource_version", f"resourceVersion {str(rv)[:40]!r} is not a decimal integer")
    return int(rv)


def check_object(obj: object, resource: PoolResource) -> dict[str, Any]:
    """Validate one object of ``resource`` from an untrusted source; returns it typed.

    Checks: a JSON object whose ``apiVersion``/``kind`` are the resource's (a List's items may lack
    them: the caller fills them in first), ``metadata.name`` a DNS-1123 subdomain,
    ``metadata.namespace`` a DNS-1123 label, ``metadata.resourceVersion`` a decimal integer.

    Raises:
        ObjectRejected: with reason ``shape``, ``kind``, ``name`` or ``resource_version``.
    """
    if not isinstance(obj, dict):
        raise ObjectRejected("shape", f"expected an object, got {type(obj).__name__}")
    if obj.get("apiVersion") != resource.api_version or obj.get("kind") != resource.kind:
        raise ObjectRejected("kind", f"{str(obj.get('apiVersion'))[:60]}/{str(obj.get('kind'))[:60]} is not "
                                     f"{resource.api_version}/{resource.kind}")
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise ObjectRejected("shape", "no metadata")
    if not is_dns1123_subdomain(meta.get("name")) or not is_dns1123_label(meta.get("namespace")):
        raise ObjectRejected("name", f"bad name or namespace {str(meta.get('namespace'))[:70]}/"
                                     f"{str(meta.get('name'))[:260]}")
    resource_version_of(obj)
    return obj


def strip_object(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without ``metadata.managedFields`` (server-side-apply bookkeeping no reader of
    the cache needs; often half an EndpointSlice's bytes). Returns a shallow copy; ``obj`` is not
    changed."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return obj

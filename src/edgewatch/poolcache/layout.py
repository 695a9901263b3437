"""Where the pool cache lives in the pool coordinator's etcd, and how values are encoded.

Keys, under the writing leader's own area ``/edgewatch/pools/<pool>/nodes/<leader>/``
(``edgewatch.poolkeys``: only that node may write there; readers follow the current leader's)::

    cache/<group|core>/<version>/<resource>/rv             newest resourceVersion written (list,
                                                           event or bookmark), decimal
    cache/<group|core>/<version>/<resource>/epoch          changed when a re-list found deletions:
                                                           nodes read the whole resource again
    cache/<group|core>/<version>/<resource>/o/<ns>/<name>  one object (JSON as the cloud served it,
                                                           without managedFields), or a tombstone
    ../../leader/sync/<leader>                             leader-informer-sync: written by the leader after its initial
                                                           sync, under its leader lease; renewed
                                                           every 10 s while its informers are synced

A re-list that finds objects gone (they were deleted while no leader watched) tombstones them all
at the list's resourceVersion; several deletions at one resourceVersion cannot be replayed as
watch events, so the leader also changes ``epoch`` and nodes take the resource whole again (their
clients re-list once).

A **tombstone** ``{"tombstone": {"resourceVersion": "<rv>"}}`` records a deletion (its
resourceVersion is the cloud's delete event's, or the list's when a re-list found the object gone),
so a node's coordinator feed can emit a DELETED event at the right resourceVersion. Tombstones are
attached to a short etcd lease (minutes) and vanish by themselves; a node that missed one re-lists
(its watch from an old etcd revision fails as compacted, or it starts over).

All values are untrusted on read (anyone with write access to the pool's etcd): :func:`decode_value`
checks size and shape, and the object's own checks follow
(:func:`edgewatch.poolcache.feed.check_object`).

Limits: pure, no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from edgewatch.core.types import is_decimal
from edgewatch.poolcache.feed import MAX_OBJECT_BYTES, ObjectRejected, check_object, resource_version_of
from edgewatch.poolcache.resources import PoolResource

__all__ = ["CacheKeys", "Tombstone", "decode_value", "encode_object", "encode_tombstone"]


@dataclass(frozen=True)
class Tombstone:
    """A deletion recorded in etcd: the object ``namespace/name`` was deleted at ``resource_version``."""

    namespace: str
    name: str
    resource_version: str


@dataclass(frozen=True)
class CacheKeys:
    """The etcd keys of one resource in one leader's area of a pool (``prefix`` ends with ``/``)."""

    prefix: str
    resource: PoolResource

    @property
    def base(self) -> bytes:
        """Prefix of everything of this resource (one watch covers it)."""
        return f"{self.prefix}cache/{self.resource.name}/".encode()

    @property
    def rv(self) -> bytes:
        """The resource's newest resourceVersion key."""
        return self.base + b"rv"

    @property
    def epoch(self) -> bytes:
        """The resource's re-read marker key."""
        return self.base + b"epoch"

    @property
    def objects(self) -> bytes:
        """Prefix of the object keys."""
        return self.base + b"o/"

    def object_key(self, namespace: str, name: str) -> bytes:
        """Key of one object."""
        return self.objects + f"{namespace}/{name}".encode()

    def key_of(self, obj: dict[str, Any]) -> bytes:
        """Key of an object (checked by ``check_object`` before)."""
        meta = obj["metadata"]
        return self.object_key(meta["namespace"], meta["name"])

    def parse_key(self, key: bytes) -> tuple[str, str]:
        """``(namespace, name)`` of an object key.

        Raises:
            ObjectRejected: (``key``) not an object key of this resource.
        """
        if not key.startswith(self.objects):
            raise ObjectRejected("key", f"{key[:200]!r} is not under {self.objects!r}")
        parts = key[len(self.objects):].decode(errors="replace").split("/")
        if len(parts) != 2 or not all(parts):
            raise ObjectRejected("key", f"{key[:200]!r} is not <namespace>/<name>")
        return parts[0], parts[1]


def encode_object(obj: dict[str, Any]) -> bytes:
    """An object's etcd value (compact JSON)."""
    return json.dumps(obj, separators=(",", ":")).encode()


def encode_tombstone(resource_version: str) -> bytes:
    """A tombstone's etcd value."""
    return json.dumps({"tombstone": {"resourceVersion": resource_version}}, separators=(",", ":")).encode()


def decode_value(keys: CacheKeys, key: bytes, value: bytes) -> dict[str, Any] | Tombstone:
    """Decode one object key's value from etcd: the object, or a :class:`Tombstone`.

    The size is checked before parsing; the object must match the key (namespace, name) and the
    resource (``check_object``).

    Raises:
        ObjectRejected: reasons ``key``, ``oversized``, ``malformed``, ``mismatch`` and those of
            ``check_object``.
    """
    namespace, name = keys.parse_key(key)
    if len(value) > MAX_OBJECT_BYTES:
        raise ObjectRejected("oversized", f"{len(value)} bytes > {MAX_OBJECT_BYTES}")
    try:
        data = json.loads(value)
    except ValueError as exc:
        raise ObjectRejected("malformed", f"not JSON: {str(exc)[:100]}") from None
    if isinstance(data, dict) and set(data) == {"tombstone"}:
        body = data["tombstone"]
        rv = body.get("resourceVersion") if isinstance(body, dict) else None
        if not is_decimal(rv):
            raise ObjectRejected("malformed", "tombstone without a decimal resourceVersion")
        return Tombstone(namespace, name, rv)
    obj = check_object(data, keys.resource)
    meta = obj["metadata"]
    if (meta["namespace"], meta["name"]) != (namespace, name):
        raise ObjectRejected("mismatch", f"key names {namespace}/{name}, the object {meta['namespace']}/{meta['name']}")
    resource_version_of(obj)
    return obj

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

Every value (objects, tombstones, ``rv``, ``epoch``) is **sealed** by the leader's node key for
the key it is stored under (:mod:`edgewatch.core.seal`), and untrusted on read (the host of
the coordinator can write anything): :func:`decode_value` and :func:`decode_marker` check the size,
then the seal against the area's owner (:attr:`CacheKeys.writer`), and only then parse; the
object's own checks follow (:func:`edgewatch.poolcache.feed.check_object`).

Limits: pure, no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, NamedTuple

from edgewatch.core.seal import SealRejected, seal, unseal
from edgewatch.core.signing import Signer, Verifier
from edgewatch.core.types import is_decimal
from edgewatch.poolcache.feed import MAX_OBJECT_BYTES, ObjectRejected, check_object, resource_version_of
from edgewatch.poolcache.resources import PoolResource

__all__ = ["CacheArea", "CacheKeys", "Tombstone", "decode_marker", "decode_value", "encode_marker", "encode_object",
           "encode_tombstone"]

_MAX_MARKER_BYTES = 512
"""Bound of an ``rv`` or ``epoch`` value, seal included (bytes)."""


class CacheArea(NamedTuple):
    """A leader's area of the pool's etcd: the node that writes it and its key prefix."""

    writer: str
    prefix: str


@dataclass(frozen=True)
class Tombstone:
    """A deletion recorded in etcd: the object ``namespace/name`` was deleted at ``resource_version``."""

    namespace: str
    name: str
    resource_version: str


@dataclass(frozen=True)
class CacheKeys:
    """The etcd keys of one resource in one leader's area of a pool (``prefix`` ends with ``/``),
    and whose area it is (``writer``: the only node whose seal is accepted there)."""

    prefix: str
    resource: PoolResource
    writer: str

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


def encode_object(obj: dict[str, Any], *, keys: CacheKeys, signer: Signer) -> bytes:
    """An object's etcd value: compact JSON, sealed by ``signer`` for the object's key."""
    return seal(json.dumps(obj, separators=(",", ":")).encode(), key=keys.key_of(obj), signer=signer)


def encode_tombstone(resource_version: str, *, key: bytes, signer: Signer) -> bytes:
    """A tombstone's etcd value for the object key ``key``, sealed by ``signer``."""
    body = json.dumps({"tombstone": {"resourceVersion": resource_version}}, separators=(",", ":")).encode()
    return seal(body, key=key, signer=signer)


def encode_marker(text: str, *, key: bytes, signer: Signer) -> bytes:
    """An ``rv`` or ``epoch`` value (``text``), sealed by ``signer`` for ``key``."""
    return seal(text.encode(), key=key, signer=signer)


def _unseal(keys: CacheKeys, key: bytes, value: bytes, verifier: Verifier, *, max_bytes: int) -> bytes:
    try:
        return unseal(value, key=key, writer=keys.writer, verifier=verifier, max_bytes=max_bytes)
    except SealRejected as exc:  # the cache's metric calls a value over its bound "oversized"
        raise ObjectRejected("oversized" if exc.reason == "too_large" else exc.reason, str(exc)) from None


def decode_marker(keys: CacheKeys, key: bytes, value: bytes, *, verifier: Verifier) -> str:
    """The text of an ``rv`` or ``epoch`` value, once its seal is the area owner's for ``key``.

    Raises:
        ObjectRejected: ``oversized``, the reasons of :func:`~edgewatch.core.seal.unseal`,
            ``resource_version`` (an ``rv`` that is not decimal), ``malformed`` (not UTF-8).
    """
    try:
        text = _unseal(keys, key, value, verifier, max_bytes=_MAX_MARKER_BYTES).decode()
    except UnicodeDecodeError:
        raise ObjectRejected("malformed", "a marker that is not UTF-8") from None
    if key == keys.rv and not is_decimal(text):
        raise ObjectRejected("resource_version", f"rv {text[:40]!r} is not decimal")
    return text


def decode_value(keys: CacheKeys, key: bytes, value: bytes, *, verifier: Verifier) -> dict[str, Any] | Tombstone:
    """Decode one object key's value from etcd: the object, or a :class:`Tombstone`.

    The size is checked first, then the seal (the area owner's, for this key), then the JSON; the
    object must match the key (namespace, name) and the resource (``check_object``).

    Raises:
        ObjectRejected: reasons ``key``, ``oversized``, those of
            :func:`~edgewatch.core.seal.unseal` (``unsigned``, ``unknown_key``,
            ``not_writer``, ``bad_signature``), ``malformed``, ``mismatch`` and those of
            ``check_object``.
    """
    namespace, name = keys.parse_key(key)
    payload = _unseal(keys, key, value, verifier, max_bytes=MAX_OBJECT_BYTES)
    try:
        data = json.loads(payload)
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

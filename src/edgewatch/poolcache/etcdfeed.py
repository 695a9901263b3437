"""A node's feed of pool-scope objects from the pool coordinator's etcd (what the leader wrote).

What it is for
    While the pool coordinator is Ready, every agent fills its node's cache from the coordinator,
    not from the cloud: one read of the pool's etcd per resource, then one watch. This module turns
    the etcd layout (:mod:`edgewatch.poolcache.layout`) back into feed events for one resource.

How
    :func:`run_coordinator_feed` reads the resource's prefix (objects, tombstones and the ``rv``
    key) in one range: a :class:`~edgewatch.poolcache.feed.Reset` with the live objects and, as its
    resourceVersion, the newest of ``rv`` and every object's and tombstone's. It then watches the
    prefix from the range's etcd revision + 1: an object put is ADDED or MODIFIED (by whether the
    feed has seen the key), a tombstone put is DELETED (with the tombstone's resourceVersion; the
    receiver fills in the object's last state), an ``rv`` put is a bookmark, and an etcd delete
    (a tombstone's lease expired) is nothing. An ``epoch`` put (the leader re-listed and found
    deletions) reads the whole resource again (a new Reset); the reconcile's own puts before it
    that are not newer than what was fed are skipped. Every value is checked (:func:`decode_value`,
    :func:`decode_marker`: the seal of the area's owner, the leader, before any parsing); a bad one
    is dropped, logged and counted — never a crash, never a partial state: the rest of the
    resource goes on.

Errors
    etcd errors (unreachable, timeouts: every call is bounded by ``rpc_timeout_s``; a watch that
    breaks or is compacted) raise out of :func:`run_coordinator_feed`; the caller
    (``edgewatch.poolcache.sources``) decides whether to retry or to switch source.

Limits
    The feed remembers only which keys exist (not the objects); a resource's prefix is read in one
    gRPC message (the coordinator client allows 256 MiB).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import aetcd
from aetcd import utils as etcd_utils

from edgewatch.core.signing import Verifier
from edgewatch.core.types import is_decimal
from edgewatch.poolcache.feed import Bookmark, Change, ObjectRejected, Reset, Sink
from edgewatch.poolcache.layout import CacheKeys, Tombstone, decode_marker, decode_value
from edgewatch.waits import bounded

_T = TypeVar("_T")

log = logging.getLogger(__name__)

__all__ = ["run_coordinator_feed"]


class FeedEnded(ConnectionError):
    """The coordinator's watch ended (coordinator gone or the watch was cancelled)."""


def _newest(*versions: str) -> str:
    return str(max((int(v) for v in versions if is_decimal(v)), default=0))


async def run_coordinator_feed(*, etcd: aetcd.Client, keys: CacheKeys, sink: Sink, rpc_timeout_s: float,
                               verifier: Verifier, on_rejected: Callable[[str], None] = lambda _r: None) -> None:
    """Feed ``sink`` with ``keys.resource`` from the coordinator until cancelled or an etcd error.

    Args:
        etcd: a client of the pool's coordinator (the caller closes it).
        keys: the resource's keys in the leader's area (``keys.writer``: the leader).
        sink: receives one Reset, then Change and Bookmark events.
        rpc_timeout_s: bound of the range read and of opening the watch, seconds.
        verifier: every node's published keys; a value counts only sealed by ``keys.writer``.
        on_rejected: called with a reason for every value dropped as malformed (metrics).

    Raises:
        aetcd.ClientError, TimeoutError, FeedEnded: the coordinator failed; nothing more was fed.
    """
    name = keys.resource.name
    while True:
        revision, present, last_rv = await _read_whole(etcd=etcd, keys=keys, sink=sink, rpc_timeout_s=rpc_timeout_s,
                                                       verifier=verifier, on_rejected=on_rejected)
        async with asyncio.timeout(rpc_timeout_s):
            watch = await etcd.watch(keys.base, range_end=etcd_utils.prefix_range_end(keys.base),
                                     start_revision=revision + 1)
        try:
            async for event in watch:
                kv = event.kv
                if kv.key == keys.epoch:
                    epoch = None if event.kind == "DELETE" else _checked(
                        decode_marker, keys, kv.key, kv.value, verifier, on_rejected)
                    if epoch is not None:
                        log.info("pool cache: the leader re-listed %s and found deletions; reading it again", name,
                                 extra={"resource": name})
                        break
                    continue
                if kv.key == keys.rv:
                    if event.kind != "DELETE":
                        rv = _checked(decode_marker, keys, kv.key, kv.value, verifier, on_rejected)
                        if rv is not None:
                            last_rv = max(last_rv, int(rv))
                            await sink(Bookmark(rv))
                    continue
                if event.kind == "DELETE":
                    continue  # a tombstone expired (its DELETED went out when it was put)
                decoded = _checked(decode_value, keys, kv.key, kv.value, verifier, on_rejected)
                if decoded is None:
                    continue
                rv = int(decoded.resource_version if isinstance(decoded, Tombstone)
                         else decoded["metadata"]["resourceVersion"])
                if rv <= last_rv:
                    continue  # part of a re-list's reconcile: superseded by the epoch's re-read
                last_rv = rv
                if isinstance(decoded, Tombstone):
                    if kv.key in present:
                        present.discard(kv.key)
                        await sink(Change("DELETED", {
                            "apiVersion": keys.resource.api_version, "kind": keys.resource.kind,
                            "metadata": {"namespace": decoded.namespace, "name": decoded.name,
                                         "resourceVersion": decoded.resource_version}}))
                    continue
                kind = "MODIFIED" if kv.key in present else "ADDED"
                present.add(kv.key)
                await sink(Change(kind, decoded))
            else:
                raise FeedEnded(f"the coordinator's watch of {name} ended")
        finally:
            with contextlib.suppress(Exception):
                await bounded(watch.cancel(), 1.0)  # aetcd's cancel can swallow a cancellation


async def _read_whole(*, etcd: aetcd.Client, keys: CacheKeys, sink: Sink, rpc_timeout_s: float, verifier: Verifier,
                      on_rejected: Callable[[str], None]) -> tuple[int, set[bytes], int]:
    """Read the resource's prefix and hand a Reset to ``sink``; returns (etcd revision, live
    object keys, the Reset's resourceVersion)."""
    async with asyncio.timeout(rpc_timeout_s):
        listing = await etcd.get_prefix(keys.base)
    present: set[bytes] = set()
    objects: list[dict[str, Any]] = []
    versions = ["0"]
    for kv in listing:
        if kv.key == keys.rv:
            rv = _checked(decode_marker, keys, kv.key, kv.value, verifier, on_rejected)
            if rv is not None:
                versions.append(rv)
            continue
        if kv.key == keys.epoch:
            continue
        decoded = _checked(decode_value, keys, kv.key, kv.value, verifier, on_rejected)
        if decoded is None:
            continue
        if isinstance(decoded, Tombstone):
            versions.append(decoded.resource_version)
        else:
            present.add(kv.key)
            objects.append(decoded)
            versions.append(decoded["metadata"]["resourceVersion"])
    rv = _newest(*versions)
    await sink(Reset(objects, rv))
    log.info("pool cache: %s read from the coordinator", keys.resource.name,
             extra={"resource": keys.resource.name, "objects": len(objects)})
    return listing.header.revision, present, int(rv)


def _checked(decode: Callable[..., _T], keys: CacheKeys, key: bytes, value: bytes, verifier: Verifier,
             on_rejected: Callable[[str], None]) -> _T | None:
    """``decode(keys, key, value, verifier=...)`` (``decode_marker`` or ``decode_value``), or None
    with the refusal counted and logged."""
    try:
        return decode(keys, key, value, verifier=verifier)
    except ObjectRejected as exc:
        _refused(keys, key, value, exc, on_rejected)
        return None


def _refused(keys: CacheKeys, key: bytes, value: bytes, exc: ObjectRejected,
             on_rejected: Callable[[str], None]) -> None:
    on_rejected(exc.reason)
    log.warning("pool cache: refused a value in the coordinator: %s", exc,
                extra={"resource": keys.resource.name, "key": key[:200].decode(errors="replace"),
                       "reason": exc.reason, "bytes": len(value)})

"""The node-local cache of one pool-scope resource: the state a node's clients list and watch.

What it is for
    Each edge agent serves EndpointSlices, Services, ... (a :class:`PoolResource`) to its node's
    kube-proxy, CoreDNS and kubectl (:mod:`edgewatch.poolcache.apiserver`). Feeds (the pool
    coordinator's etcd, or the cloud apiserver) fill a :class:`ResourceCache` with
    :meth:`~ResourceCache.replace` (a full relist), :meth:`~ResourceCache.apply` (one watch event)
    and :meth:`~ResourceCache.bookmark`; the server answers from it with the semantics of
    kube-apiserver's watch cache:

    * ``list``: resourceVersion unset, ``""`` or ``"0"`` → the current state; ``N`` (or
      ``resourceVersionMatch=NotOlderThan``) with ``N`` ≤ current → the current state, ``N`` >
      current → :class:`TooLargeResourceVersion` (kube-apiserver answers 504 "Too large resource
      version" after waiting up to 3 s; client-go's reflector then re-lists with resourceVersion
      ``""``, which we serve at once); ``resourceVersionMatch=Exact`` with any RV other than the
      current one → :class:`Gone` for older (no snapshots are kept) or
      :class:`TooLargeResourceVersion` for newer. The result's RV is the cache's current RV,
      items are sorted by namespace/name. ``limit`` is ignored: everything comes in one page
      with no continue token, which the API allows ("the server may return more than limit").
    * ``watch``: resourceVersion unset, ``""`` or ``"0"`` → a synthetic ADDED for every
      matching object, then live events; ``N`` → every event newer than ``N`` from the history,
      then live events. ``N`` older than the history floor (the last ``replace`` or the oldest
      event still in the ring) → :class:`Gone`. ``N`` newer than the newest known RV → :class:`Gone`
      too: after a switch of feeds the new one may lag the old one, and the client must re-list
      rather than wait for a resourceVersion that may never come from this feed.
      ``sendInitialEvents=true`` (client-go's WatchList, default on since 1.35) sends the current
      state as ADDED events, then a BOOKMARK annotated ``k8s.io/initial-events-end: "true"``.
    * A MODIFIED event that makes an object start / stop matching a watcher's selectors reaches
      that watcher as ADDED / DELETED (the DELETED carries the previous object state with the
      event's RV), as the apiserver's cacher does; DELETED events carry the last known object
      state with the deleting event's RV.
    * :meth:`ResourceCache.replace` ends every open watch with :class:`Gone` (the server sends an
      ERROR event with a 410 Status, clients re-list): the new state came without events.

Limits
    No I/O; all methods must be called from the event loop thread (no locks). Resource versions
    are the cloud apiserver's (decimal integers from its etcd) whichever feed delivered them;
    events must come in increasing RV order (a watch of one etcd), an event not newer than the
    cache's RV is refused as stale. Memory is bounded: ``history`` events in a ring, objects
    counted by their compact JSON size (over ``max_object_bytes`` or a total over ``max_bytes`` →
    refused), each watcher's queue holds at most ``watch_queue`` live events beyond its initial
    ones (a watcher that falls further behind is ended; its client re-watches from its last RV).
    Stored objects are shared with callers and watchers: nobody may mutate them. Bookmarks go out
    only when a feed calls :meth:`ResourceCache.bookmark` (no timer here).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from edgewatch.poolcache.resources import PoolResource, selectable_field_names, selectable_fields
from edgewatch.poolcache.selectors import FieldSelector, LabelSelector, parse_field_selector, parse_label_selector

__all__ = [
    "BadRequest",
    "CacheFull",
    "CacheStats",
    "Gone",
    "INITIAL_EVENTS_END",
    "NotSynced",
    "REFUSE_REASONS",
    "ResourceCache",
    "TooLargeResourceVersion",
    "Watch",
]

log = logging.getLogger(__name__)

INITIAL_EVENTS_END: Final = "k8s.io/initial-events-end"
"""Annotation of the BOOKMARK that ends the initial events of a ``sendInitialEvents`` watch."""

REFUSE_REASONS: Final = ("malformed", "object_too_large", "cache_full", "stale")
"""Why :meth:`ResourceCache.apply` refuses an input (the ``reason`` label of the metric)."""


class Gone(Exception):
    """The requested resourceVersion is too old or unknown: answer 410 Expired like the apiserver."""


class NotSynced(Exception):
    """The cache has never been filled: answer 503 (never an empty list)."""


class BadRequest(ValueError):
    """Invalid list/watch parameters (selector, resourceVersion, ...): answer 400 BadRequest."""


class TooLargeResourceVersion(Exception):
    """A list asked for a resourceVersion newer than the cache's: answer 504 "Too large resource
    version" with cause ResourceVersionTooLarge, as kube-apiserver does (client-go re-lists)."""


class CacheFull(Exception):
    """:meth:`ResourceCache.replace` got a state over ``max_bytes``; the cache kept its old state."""


@dataclass
class CacheStats:
    """What the cache holds now (for metrics and logs).

    Attributes:
        objects: number of stored objects.
        bytes: sum of their compact JSON sizes.
        watchers: open watches.
        history: events in the history ring.
        refused: inputs refused since start, by reason (:data:`REFUSE_REASONS`).
    """

    objects: int
    bytes: int
    watchers: int
    history: int
    refused: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Event:
    type: str           # ADDED / MODIFIED / DELETED
    obj: dict[str, Any]
    prev: dict[str, Any] | None  # the state before a MODIFIED / DELETED
    rv: int


def _size(obj: dict[str, Any]) -> int:
    return len(json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode())


def _parse_rv(value: object) -> int | None:
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 20:
        return int(value)
    return None


def _with_rv(obj: dict[str, Any], rv: int) -> dict[str, Any]:
    """A shallow copy of ``obj`` whose metadata.resourceVersion is ``rv``."""
    out = dict(obj)
    out["metadata"] = {**obj["metadata"], "resourceVersion": str(rv)}
    return out


class Watch:
    """One client's watch: an async iterator of ``(type, object)`` pairs.

    ``type`` is ADDED, MODIFIED, DELETED or BOOKMARK. Iteration ends when the watch is closed
    (:meth:`close`, :meth:`ResourceCache.close_watches`) or falls more than the cache's
    ``watch_queue`` events behind (``overflowed`` is then True); it raises :class:`Gone` when a
    :meth:`ResourceCache.replace` ended it (the server turns that into an ERROR event).
    Created by :meth:`ResourceCache.watch` only.
    """

    def __init__(self, cache: ResourceCache, *, namespace: str | None, labels: LabelSelector,
                 fields: FieldSelector, allow_bookmarks: bool, limit: int) -> None:
        self._cache = cache
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.allow_bookmarks = allow_bookmarks
        self._queue: deque[tuple[str, dict[str, Any]]] = deque()
        self._limit = limit
        self._wakeup = asyncio.Event()
        self._ended = False
        self._gone = False
        self.overflowed = False

    def matches(self, obj: dict[str, Any]) -> bool:
        """Whether ``obj`` passes this watch's namespace and selectors."""
        return self._cache._matches(obj, self.namespace, self.labels, self.fields)

    def _push(self, item: tuple[str, dict[str, Any]]) -> None:
        if self._ended:
            return
        self._queue.append(item)
        if len(self._queue) > self._limit:
            self.overflowed = True
            log.warning("pool cache watcher fell behind; closing it", extra={
                "resource": self._cache.resource.name, "queued": len(self._queue)})
            self._end(gone=False)
            return
        self._wakeup.set()

    def _end(self, *, gone: bool) -> None:
        if self._ended:
            return
        self._ended = True
        self._gone = gone
        if gone or self.overflowed:
            self._queue.clear()
        self._wakeup.set()
        self._cache._watchers.discard(self)

    def close(self) -> None:
        """End this watch (the client went away, or its timeout passed). Idempotent."""
        self._end(gone=False)

    @property
    def closed(self) -> bool:
        """True once the watch has ended (events still queued may be read after a plain close)."""
        return self._ended

    async def next(self, *, timeout_s: float | None = None) -> tuple[str, dict[str, Any]] | None:
        """The next event, or None when none came within ``timeout_s`` seconds.

        Raises:
            StopAsyncIteration: the watch has ended and its queue is drained.
            Gone: the watch was ended by :meth:`ResourceCache.replace`.
        """
        while True:
            if self._gone:
                raise Gone("the cache was re-listed from its feed; re-list")
            if self._queue:
                return self._queue.popleft()
            if self._ended:
                raise StopAsyncIteration
            self._wakeup.clear()
            if timeout_s is None:
                await self._wakeup.wait()
            else:
                try:  # asyncio.timeout, not wait_for: 3.11's wait_for can drop a cancellation
                    async with asyncio.timeout(timeout_s):
                        await self._wakeup.wait()
                except TimeoutError:
                    return None

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> tuple[str, dict[str, Any]]:
        event = await self.next()
        assert event is not None
        return event


class ResourceCache:
    """The objects of one :class:`PoolResource`, their recent events, and the watches on them.

    Args:
        resource: what this cache holds; objects of another kind/apiVersion are refused.
        history: events kept for watches that resume from a resourceVersion (a ring).
        max_bytes: most bytes (compact JSON) of all objects together.
        watch_queue: most live events queued per watcher before it is ended.
        max_object_bytes: largest object accepted, in bytes (default 1.5 MiB, etcd's request limit).

    Attributes:
        synced: :meth:`replace` was called at least once.
        source: name of the feed that last called :meth:`replace` (``""`` before).
        resource_version: newest RV known (from the list, events and bookmarks; ``""`` before).
    """

    def __init__(self, resource: PoolResource, *, history: int = 4096, max_bytes: int = 64 * 2**20,
                 watch_queue: int = 1024, max_object_bytes: int = 1536 * 1024) -> None:
        if history < 1 or watch_queue < 1 or max_bytes < 1 or max_object_bytes < 1:
            raise ValueError("history, watch_queue, max_bytes and max_object_bytes must be positive")
        self.resource = resource
        self._history_size = history
        self._max_bytes = max_bytes
        self._watch_queue = watch_queue
        self._max_object_bytes = max_object_bytes
        self._objects: dict[tuple[str, str], tuple[dict[str, Any], int]] = {}  # key -> (obj, size)
        self._bytes = 0
        self._history: deque[_Event] = deque()
        self._floor = 0     # every event newer than this is in the history
        self._rv = 0
        self._watchers: set[Watch] = set()
        self._refused = dict.fromkeys(REFUSE_REASONS, 0)
        self.synced = False
        self.source = ""

    # --- reading -------------------------------------------------------------------------

    @property
    def resource_version(self) -> str:
        """The newest resourceVersion known (``""`` before the first :meth:`replace`)."""
        return str(self._rv) if self.synced else ""

    @property
    def stats(self) -> CacheStats:
        """Counts for metrics: objects, bytes, watchers, history length, refusals by reason."""
        return CacheStats(objects=len(self._objects), bytes=self._bytes, watchers=len(self._watchers),
                          history=len(self._history), refused=dict(self._refused))

    def get(self, *, namespace: str, name: str) -> dict[str, Any] | None:
        """The stored object ``namespace/name`` or None.

        Raises:
            NotSynced: the cache was never filled.
        """
        self._require_synced()
        entry = self._objects.get((namespace, name))
        return entry[0] if entry else None

    def list(self, *, namespace: str | None, label_selector: str | None, field_selector: str | None,
             resource_version: str | None, resource_version_match: str | None,
             limit: int | None = None) -> tuple[list[dict[str, Any]], str]:
        """The matching objects sorted by namespace/name, and the list's resourceVersion.

        Semantics of ``resource_version`` / ``resource_version_match``: module docstring.
        ``limit`` is ignored (one page, no continue token).

        Raises:
            NotSynced: the cache was never filled.
            BadRequest: a bad selector or resourceVersion / resourceVersionMatch combination.
            Gone: ``Exact`` with a resourceVersion older than the current one.
            TooLargeResourceVersion: a resourceVersion newer than the cache's.
        """
        del limit
        labels, fields = _selectors(label_selector, field_selector, self.resource)
        self._require_synced()
        rv = _request_rv(resource_version)
        if resource_version_match not in (None, "", "NotOlderThan", "Exact"):
            raise BadRequest(f"unknown resourceVersionMatch {resource_version_match!r}: "
                             "expected NotOlderThan or Exact")
        if resource_version_match and rv is None:
            raise BadRequest("resourceVersionMatch is forbidden unless resourceVersion is provided")
        if resource_version_match == "Exact" and rv == 0:
            raise BadRequest('resourceVersionMatch "Exact" is forbidden for resourceVersion "0"')
        if rv is not None and rv > self._rv:
            raise TooLargeResourceVersion(f"Too large resource version: {rv}, current: {self._rv}")
        if resource_version_match == "Exact" and rv != self._rv:
            raise Gone(f"too old resource version: {rv} ({self._rv}); this cache keeps no snapshots")
        items = [obj for (obj, _) in self._objects.values() if self._matches(obj, namespace, labels, fields)]
        items.sort(key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"]))
        return items, str(self._rv)

    def watch(self, *, namespace: str | None, label_selector: str | None, field_selector: str | None,
              resource_version: str | None, allow_bookmarks: bool,
              send_initial_events: bool | None = None) -> Watch:
        """Open a watch (semantics: module docstring).

        Args:
            send_initial_events: the ``sendInitialEvents`` parameter (None: not given). True needs
                ``allow_bookmarks`` (the end of the initial events is a bookmark), as in the
                apiserver; the caller checks ``resourceVersionMatch=NotOlderThan``.

        Raises:
            NotSynced: the cache was never filled.
            BadRequest: a bad selector or resourceVersion.
            Gone: the resourceVersion is older than the history floor or newer than the cache.
        """
        labels, fields = _selectors(label_selector, field_selector, self.resource)
        self._require_synced()
        rv = _request_rv(resource_version)
        if send_initial_events and not allow_bookmarks:
            raise BadRequest("sendInitialEvents requires allowWatchBookmarks=true")
        initial: list[tuple[str, dict[str, Any]]] = []
        w = Watch(self, namespace=namespace, labels=labels, fields=fields, allow_bookmarks=allow_bookmarks,
                  limit=self._watch_queue)
        if send_initial_events or (send_initial_events is None and not rv):
            # the current state (for sendInitialEvents with rv = N: a state not older than N)
            if rv and rv > self._rv:
                raise Gone(f"too large resource version: {rv} (newest known {self._rv}); re-list")
            objs = sorted(self._objects.items())
            initial = [("ADDED", obj) for _, (obj, _s) in objs if w.matches(obj)]
            if send_initial_events:
                initial.append(("BOOKMARK", self._bookmark_object(self._rv, initial_end=True)))
        elif rv:
            if rv < self._floor:
                raise Gone(f"too old resource version: {rv} ({self._floor})")
            if rv > self._rv:
                raise Gone(f"too large resource version: {rv} (newest known {self._rv}); re-list")
            for event in self._history:
                if event.rv > rv:
                    item = self._filtered(w, event)
                    if item is not None:
                        initial.append(item)
        w._limit = len(initial) + self._watch_queue
        w._queue.extend(initial)
        self._watchers.add(w)
        return w

    def close_watches(self) -> None:
        """End every open watch normally (shutdown); their clients re-watch from their last RV."""
        for w in list(self._watchers):
            w._end(gone=False)

    # --- writing (the feeds) -------------------------------------------------------------

    def replace(self, objects: Iterable[dict[str, Any]], resource_version: str, *, source: str) -> None:
        """Install the full state of a (re)list of a feed.

        Malformed or oversized objects are skipped (counted, logged). Every open watch ends with
        :class:`Gone`; the history is emptied and its floor set to ``resource_version``, so only
        watches from exactly that RV (or from newer events applied later) are served.

        Raises:
            BadRequest: ``resource_version`` is not a decimal integer (the cache is unchanged).
            CacheFull: the objects exceed ``max_bytes`` together (the cache is unchanged).
        """
        rv = _parse_rv(resource_version)
        if rv is None:
            raise BadRequest(f"list resourceVersion {resource_version!r} is not a decimal integer")
        new: dict[tuple[str, str], tuple[dict[str, Any], int]] = {}
        total = 0
        for raw in objects:
            checked = self._check(raw, source=source)
            if checked is None:
                continue
            obj, key, _obj_rv, size = checked
            if key in new:
                total -= new[key][1]
            new[key] = (obj, size)
            total += size
        if total > self._max_bytes:
            self._refuse("cache_full", source=source, detail=f"relist of {total} bytes over {self._max_bytes}")
            raise CacheFull(f"{self.resource.name}: {total} bytes over the limit of {self._max_bytes}")
        for w in list(self._watchers):
            w._end(gone=True)
        self._objects, self._bytes = new, total
        self._history.clear()
        self._floor = self._rv = rv
        self.synced, self.source = True, source
        log.info("pool cache replaced", extra={"resource": self.resource.name, "source": source,
                                               "objects": len(new), "bytes": total, "resource_version": rv})

    def apply(self, event_type: str, obj: dict[str, Any], *, source: str = "") -> bool:
        """Apply one watch event of a feed.

        Args:
            event_type: ADDED, MODIFIED or DELETED (ADDED and MODIFIED both upsert).
            obj: the object, with metadata.namespace, name and resourceVersion; kind and
                apiVersion may be missing (list items lack them) but must match if given. For
                DELETED only the metadata is needed (the last stored state is sent).
            source: the feed's name, for logs.

        Returns:
            True when applied (a DELETED of an unknown object is applied as a no-op). False when
            refused, counted by reason and logged: ``malformed`` (bad type, kind, apiVersion,
            name, namespace or RV; or events before the first :meth:`replace`),
            ``object_too_large``, ``cache_full`` (the total would exceed ``max_bytes``), ``stale``
            (RV not newer than the cache's: a duplicate or out-of-order event). Never raises.
        """
        if event_type not in ("ADDED", "MODIFIED", "DELETED") or not self.synced:
            self._refuse("malformed", source=source,
                         detail=f"event type {event_type!r}" if self.synced else "event before the first relist")
            return False
        checked = self._check(obj, source=source, need_body=event_type != "DELETED")
        if checked is None:
            return False
        obj, key, rv, size = checked
        if rv <= self._rv:
            self._refuse("stale", source=source, detail=f"{key[0]}/{key[1]} at {rv}, cache at {self._rv}")
            return False
        old = self._objects.get(key)
        if event_type == "DELETED":
            self._rv = rv
            if old is None:
                return True
            del self._objects[key]
            self._bytes -= old[1]
            event = _Event("DELETED", _with_rv(old[0], rv), old[0], rv)
        else:
            if self._bytes - (old[1] if old else 0) + size > self._max_bytes:
                self._refuse("cache_full", source=source, detail=f"{key[0]}/{key[1]}: cache at {self._bytes} bytes")
                return False
            self._objects[key] = (obj, size)
            self._bytes += size - (old[1] if old else 0)
            self._rv = rv
            event = _Event("MODIFIED" if old else "ADDED", obj, old[0] if old else None, rv)
        self._record(event)
        return True

    def bookmark(self, resource_version: str) -> None:
        """The feed has seen everything up to ``resource_version``: advance the cache's RV and
        send a BOOKMARK to the watchers that allow them. An older RV or a non-integer is ignored
        (logged)."""
        rv = _parse_rv(resource_version)
        if rv is None or not self.synced or rv < self._rv:
            log.debug("pool cache ignored a bookmark", extra={"resource": self.resource.name,
                                                              "resource_version": resource_version})
            return
        self._rv = rv
        obj = self._bookmark_object(rv, initial_end=False)
        for w in list(self._watchers):
            if w.allow_bookmarks:
                w._push(("BOOKMARK", obj))

    # --- internals -----------------------------------------------------------------------

    def _require_synced(self) -> None:
        if not self.synced:
            raise NotSynced(f"the {self.resource.resource} cache has not been filled yet")

    def _bookmark_object(self, rv: int, *, initial_end: bool) -> dict[str, Any]:
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {INITIAL_EVENTS_END: "true"}
        return {"kind": self.resource.kind, "apiVersion": self.resource.api_version, "metadata": meta}

    def _record(self, event: _Event) -> None:
        if len(self._history) >= self._history_size:
            self._floor = self._history.popleft().rv
        self._history.append(event)
        for w in list(self._watchers):
            item = self._filtered(w, event)
            if item is not None:
                w._push(item)

    @staticmethod
    def _filtered(w: Watch, event: _Event) -> tuple[str, dict[str, Any]] | None:
        """What watcher ``w`` sees of ``event`` (None: nothing), turning selector transitions
        into ADDED / DELETED as the apiserver's cacher does."""
        now = event.type != "DELETED" and w.matches(event.obj)
        before = event.prev is not None and w.matches(event.prev)
        if event.type == "DELETED":
            return ("DELETED", event.obj) if before else None
        if now and before:
            return ("MODIFIED", event.obj)
        if now:
            return ("ADDED", event.obj)
        if before:
            assert event.prev is not None
            return ("DELETED", _with_rv(event.prev, event.rv))
        return None

    def _matches(self, obj: dict[str, Any], namespace: str | None, labels: LabelSelector,
                 fields: FieldSelector) -> bool:
        meta = obj["metadata"]
        if namespace and meta["namespace"] != namespace:
            return False
        if not labels.empty and not labels.matches(meta.get("labels")):
            return False
        return fields.empty or fields.matches(selectable_fields(self.resource, obj))

    def _check(self, raw: object, *, source: str, need_body: bool = True
               ) -> tuple[dict[str, Any], tuple[str, str], int, int] | None:
        """Validate one input object: (object with kind/apiVersion, key, rv, size) or None (refused)."""
        problem = None
        meta = raw.get("metadata") if isinstance(raw, dict) else None
        if not isinstance(raw, dict) or not isinstance(meta, dict):
            problem = "not an object with metadata"
        elif raw.get("kind", self.resource.kind) != self.resource.kind or \
                raw.get("apiVersion", self.resource.api_version) != self.resource.api_version:
            problem = f"kind {raw.get('kind')!r} / apiVersion {raw.get('apiVersion')!r}"
        elif not all(isinstance(meta.get(k), str) and meta.get(k) for k in ("name", "namespace")):
            problem = "metadata.name and metadata.namespace must be non-empty strings"
        elif _parse_rv(meta.get("resourceVersion")) is None:
            problem = f"metadata.resourceVersion {meta.get('resourceVersion')!r} is not a decimal integer"
        elif not isinstance(meta.get("labels", {}), dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in meta.get("labels", {}).items()):
            problem = "metadata.labels must map strings to strings"
        if problem is not None:
            self._refuse("malformed", source=source, detail=problem)
            return None
        assert isinstance(raw, dict) and isinstance(meta, dict)
        key = (meta["namespace"], meta["name"])
        rv = _parse_rv(meta["resourceVersion"])
        assert rv is not None
        if not need_body:
            return raw, key, rv, 0
        obj = raw if "kind" in raw and "apiVersion" in raw else {
            "kind": self.resource.kind, "apiVersion": self.resource.api_version, **raw}
        try:
            size = _size(obj)
        except (TypeError, ValueError) as exc:  # not JSON-serialisable
            self._refuse("malformed", source=source, detail=f"{key[0]}/{key[1]}: {exc}")
            return None
        if size > self._max_object_bytes:
            self._refuse("object_too_large", source=source,
                         detail=f"{key[0]}/{key[1]}: {size} bytes over {self._max_object_bytes}")
            return None
        return obj, key, rv, size

    def _refuse(self, reason: str, *, source: str, detail: str) -> None:
        self._refused[reason] += 1
        count = self._refused[reason]
        if count & (count - 1) == 0:  # log the 1st, 2nd, 4th, 8th, ... refusal of each reason
            log.warning("pool cache refused an input", extra={
                "resource": self.resource.name, "reason": reason, "source": source, "detail": detail,
                "count": count})


def _selectors(label_selector: str | None, field_selector: str | None,
               resource: PoolResource) -> tuple[LabelSelector, FieldSelector]:
    try:
        return (parse_label_selector(label_selector),
                parse_field_selector(field_selector, fields=selectable_field_names(resource)))
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


def _request_rv(value: str | None) -> int | None:
    """A client's resourceVersion: None for unset/"", else its integer value."""
    if value is None or value == "":
        return None
    rv = _parse_rv(value)
    if rv is None:
        raise BadRequest(f"resourceVersion {value!r} is not a valid resource version (a decimal integer)")
    return rv

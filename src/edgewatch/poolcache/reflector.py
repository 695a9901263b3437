"""List and watch one pool-scope resource on the cloud apiserver (a client-go reflector, small).

What it is for
    The pool leader's informer (cloud -> coordinator etcd) and a node's cloud feed (cloud -> its
    own cache, while the coordinator is not Ready) both need the same loop: list, then watch from
    the list's resourceVersion with bookmarks, re-list on 410 Gone, back off with jitter on errors.
    :class:`CloudReflector` does it and hands :mod:`edgewatch.poolcache.feed` events to a sink.

Behaviour (as client-go's reflector, see k8s.io/client-go/tools/cache/reflector.go)
    * **List** in pages of ``page_size`` (``limit`` + ``continue``), each page bounded by
      ``request_timeout_s``; the result is one :class:`~edgewatch.poolcache.feed.Reset`. A
      ``continue`` token that expired (410) restarts the list.
    * **Watch** from the last resourceVersion seen, ``allowWatchBookmarks=true``, with a server
      timeout drawn from [``watch_timeout_s``, 2 x ``watch_timeout_s``) (spreads re-watches out);
      the stream is read with a read timeout of that plus ``request_timeout_s``, so a dead
      connection is noticed. A watch that ends normally is re-opened from the last resourceVersion
      without a list. ``410 Gone`` (as the HTTP status or as an ERROR event) re-lists.
    * **Errors** (network, timeouts, 5xx, 429, malformed events) back off exponentially from
      ``backoff_initial_s`` to ``backoff_max_s`` with full jitter, then re-watch (or re-list if no
      list succeeded yet). Every error is logged and counted via ``on_error(reason)``.
    * **Bodies** are read whole up to a limit (a list page: ``max_list_bytes``; one watch event
      line: :data:`~edgewatch.poolcache.feed.MAX_OBJECT_BYTES` + 64 KiB) — never a partial read —
      and every object is checked (:func:`~edgewatch.poolcache.feed.check_object`); a bad object
      is dropped, logged and counted, the rest goes on.

Limits
    JSON only (no protobuf); one resource per reflector; objects are passed on without
    ``managedFields``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx2 as httpx

from edgewatch.core.types import is_decimal
from edgewatch.poolcache.feed import (MAX_OBJECT_BYTES, Bookmark, Change, ObjectRejected, Reset, Sink, check_object,
                                      strip_object)
from edgewatch.poolcache.resources import PoolResource

log = logging.getLogger(__name__)

__all__ = ["CloudReflector", "ReflectorConfig", "Gone", "backoff_delay"]


class Gone(Exception):
    """The resourceVersion we watched from is too old (410): list again."""


class _BadResponse(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass(frozen=True, kw_only=True)
class ReflectorConfig:
    """Timings and limits of a reflector.

    Attributes:
        request_timeout_s: bound of one list page or of opening a watch, seconds (default 10 s:
            a list of a few thousand EndpointSlices over a thin uplink).
        watch_timeout_s: server-side watch timeout, seconds (default 300 s, drawn up to twice
            that, as client-go's 5-10 min; each re-watch costs one request, no list).
        backoff_initial_s / backoff_max_s: retry delays after an error, seconds (default 0.8 s to
            30 s, full jitter: client-go's reflector backs off 800 ms .. 30 s).
        page_size: objects per list page (default 500, client-go's pager default).
        max_list_bytes: largest list page accepted, bytes (default 64 MiB).
    """

    request_timeout_s: float = 10.0
    watch_timeout_s: float = 300.0
    backoff_initial_s: float = 0.8
    backoff_max_s: float = 30.0
    page_size: int = 500
    max_list_bytes: int = 64 * 2**20

    def __post_init__(self) -> None:
        if min(self.request_timeout_s, self.watch_timeout_s, self.backoff_initial_s) <= 0:
            raise ValueError("reflector timeouts must be > 0 seconds")
        if self.backoff_max_s < self.backoff_initial_s or self.page_size < 1:
            raise ValueError("backoff_max_s must be >= backoff_initial_s and page_size >= 1")


def backoff_delay(attempt: int, *, initial: float, cap: float, rng: random.Random | None = None) -> float:
    """Seconds to wait before retry ``attempt`` (1, 2, ...): full jitter over
    ``min(cap, initial * 2**(attempt-1))`` (AWS "exponential backoff and jitter"). Pure given ``rng``."""
    ceiling = min(cap, initial * 2 ** max(0, min(attempt - 1, 30)))
    return (rng or random).uniform(ceiling / 2, ceiling)


class CloudReflector:
    """Lists and watches ``resource`` on the cloud and feeds ``sink`` (see the module docstring).

    Args (keyword-only):
        resource: what to list and watch (all namespaces).
        http: the cloud API's HTTP client (base URL, TLS and credentials set; lightkube's).
        sink: receives Reset / Change / Bookmark events in order.
        config: timings and limits.
        on_error: called with a short reason for every error (metrics); must not raise.
        on_rejected: called with a reason for every object dropped as malformed.
        name: who runs it, for logs ("leader", "node").

    ``run()`` works until cancelled; it never raises for API or network errors. ``synced`` is True
    from the first Reset handed to the sink until an error interrupts the watch; ``last_rv`` is
    the newest resourceVersion handed on.
    """

    def __init__(self, *, resource: PoolResource, http: httpx.AsyncClient, sink: Sink,
                 config: ReflectorConfig | None = None, on_error: Callable[[str], None] = lambda _r: None,
                 on_rejected: Callable[[str], None] = lambda _r: None, name: str = "") -> None:
        self.resource = resource
        self.http = http
        self.sink = sink
        self.config = config or ReflectorConfig()
        self._on_error = on_error
        self._on_rejected = on_rejected
        self.name = name
        self.last_rv: str | None = None
        self.synced = False
        self.lists = 0
        self.watches = 0

    async def run(self) -> None:
        """List and watch until cancelled."""
        attempt = 0
        while True:
            try:
                if self.last_rv is None:
                    await self._list()
                    self.lists += 1
                await self._watch()
                attempt = 0
            except Gone:
                log.info("watch of %s expired (410): listing again", self.resource.name,
                         extra={"resource": self.resource.name, "by": self.name})
                self.last_rv = None
                self.synced = False
            except (httpx.HTTPError, OSError, TimeoutError, _BadResponse) as exc:
                reason = exc.reason if isinstance(exc, _BadResponse) else (
                    "timeout" if isinstance(exc, (TimeoutError, httpx.TimeoutException)) else "network")
                self._on_error(reason)
                self.synced = False
                attempt += 1
                delay = backoff_delay(attempt, initial=self.config.backoff_initial_s, cap=self.config.backoff_max_s)
                log.warning("%s %s from the cloud failed (%s): %s; retrying in %.1f s",
                            "watch" if self.last_rv else "list", self.resource.name, reason,
                            str(exc)[:300] or type(exc).__name__, delay,
                            extra={"resource": self.resource.name, "by": self.name, "reason": reason})
                await asyncio.sleep(delay)

    # -- list ----------------------------------------------------------------------------------------

    async def _list(self) -> None:
        objects: list[dict[str, Any]] = []
        token: str | None = None
        rv = ""
        while True:
            params: dict[str, str] = {"limit": str(self.config.page_size)}
            if token:
                params["continue"] = token
            async with asyncio.timeout(self.config.request_timeout_s):
                async with self.http.stream("GET", self.resource.path(), params=params,
                                            timeout=self.config.request_timeout_s) as resp:
                    if resp.status_code == 410:
                        token = None  # the continue token expired: start over
                        objects.clear()
                        continue
                    await _check_status(resp)
                    body = await _read_limited(resp, self.config.max_list_bytes)
            page = _parse_json(body)
            items = page.get("items")
            meta = page.get("metadata")
            if not isinstance(items, list) or not isinstance(meta, dict):
                raise _BadResponse("malformed", f"list of {self.resource.name} has no items or metadata")
            for item in items:
                if isinstance(item, dict):
                    item = {"apiVersion": self.resource.api_version, "kind": self.resource.kind, **item}
                kept = self._checked(item)
                if kept is not None:
                    objects.append(kept)
            rv = str(meta.get("resourceVersion") or "")
            token = meta.get("continue") or None
            if not token:
                break
        if not is_decimal(rv):
            raise _BadResponse("malformed", f"list of {self.resource.name} has resourceVersion {rv[:40]!r}")
        self.last_rv = rv
        await self.sink(Reset(objects, rv))
        self.synced = True

    def _checked(self, obj: object) -> dict[str, Any] | None:
        try:
            return strip_object(check_object(obj, self.resource))
        except ObjectRejected as exc:
            self._on_rejected(exc.reason)
            log.warning("dropped an object of %s from the cloud: %s", self.resource.name, exc,
                        extra={"resource": self.resource.name, "by": self.name, "reason": exc.reason})
            return None

    # -- watch ---------------------------------------------------------------------------------------

    async def _watch(self) -> None:
        assert self.last_rv is not None
        server_timeout = int(random.uniform(self.config.watch_timeout_s, 2 * self.config.watch_timeout_s))
        params = {"watch": "true", "allowWatchBookmarks": "true", "resourceVersion": self.last_rv,
                  "timeoutSeconds": str(server_timeout)}
        timeout = httpx.Timeout(self.config.request_timeout_s, read=server_timeout + self.config.request_timeout_s)
        async with asyncio.timeout(self.config.request_timeout_s) as opening:
            async with self.http.stream("GET", self.resource.path(), params=params, timeout=timeout) as resp:
                opening.reschedule(None)  # open: from here the read timeout bounds each wait
                if resp.status_code == 410:
                    raise Gone()
                await _check_status(resp)
                self.watches += 1
                self.synced = True
                async for line in _lines(resp, MAX_OBJECT_BYTES + 65536):
                    await self._event(line)

    async def _event(self, line: bytes) -> None:
        event = _parse_json(line)
        kind, obj = event.get("type"), event.get("object")
        if kind == "ERROR":
            code = obj.get("code") if isinstance(obj, dict) else None
            if code == 410:
                raise Gone()
            raise _BadResponse("watch_error", f"watch ERROR event: {str(obj)[:300]}")
        if kind == "BOOKMARK":
            meta = obj.get("metadata") if isinstance(obj, dict) else None
            rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
            if is_decimal(rv):
                self.last_rv = rv
                await self.sink(Bookmark(rv))
            return
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            self._on_rejected("event_type")
            log.warning("dropped a watch event of unknown type %r", str(kind)[:40],
                        extra={"resource": self.resource.name, "by": self.name})
            return
        kept = self._checked(obj)
        if kept is None:
            return
        self.last_rv = kept["metadata"]["resourceVersion"]
        await self.sink(Change(kind, kept))


# -- HTTP helpers --------------------------------------------------------------------------------------


async def _check_status(resp: httpx.Response) -> None:
    if resp.status_code == 200:
        return
    body = await _read_limited(resp, 65536, truncate=True)
    reason = "throttled" if resp.status_code == 429 else ("server" if resp.status_code >= 500 else "refused")
    raise _BadResponse(reason, f"HTTP {resp.status_code}: {body[:300].decode(errors='replace')}")


async def _read_limited(resp: httpx.Response, limit: int, *, truncate: bool = False) -> bytes:
    """The whole body, up to ``limit`` bytes (over: error, or cut if ``truncate``)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.aiter_bytes():
        size += len(chunk)
        if size > limit:
            if truncate:
                chunks.append(chunk[: max(0, limit - (size - len(chunk)))])
                break
            raise _BadResponse("oversized", f"response over {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def _lines(resp: httpx.Response, limit: int) -> AsyncIterator[bytes]:
    """Newline-delimited lines of a watch stream, each whole and at most ``limit`` bytes."""
    buf = bytearray()
    async for chunk in resp.aiter_bytes():
        buf += chunk
        while True:
            end = buf.find(b"\n")
            if end < 0:
                break
            line = bytes(buf[:end])
            del buf[: end + 1]
            if line.strip():
                yield line
        if len(buf) > limit:
            raise _BadResponse("oversized", f"watch event over {limit} bytes")
    if buf.strip():
        yield bytes(buf)


def _parse_json(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body)
    except ValueError as exc:
        raise _BadResponse("malformed", f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise _BadResponse("malformed", "not a JSON object")
    return value

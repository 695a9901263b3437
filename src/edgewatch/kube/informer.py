"""List and watch one API resource and hand its events on: the one informer loop of edgewatch
(a client-go reflector, small). Every list-then-watch against the cloud uses it: the agent's
membership, identity and beacon watches, the controller's Node, Lease and evidence watches, the
pool cache's cloud feeds.

Behaviour (as client-go's reflector, k8s.io/client-go/tools/cache/reflector.go)
    * **List** in pages of ``page_size`` (``limit`` + ``continue``), each page bounded by
      ``request_timeout_s``; the result is one :class:`~edgewatch.kube.events.Reset`. A
      ``continue`` token that expired (410) restarts the list.
    * **Watch** from the last resourceVersion seen, ``allowWatchBookmarks=true``, with a server
      timeout drawn from [``watch_timeout_s``, 2 x ``watch_timeout_s``) (spreads re-watches out).
      Opening it is bounded by ``request_timeout_s``. A watch that ends normally is re-opened from
      the last resourceVersion without a list. ``410 Gone`` (as the HTTP status or as an ERROR
      event) re-lists.
    * **Dead watches**: the apiserver sends a bookmark about once a minute on a quiet watch, so a
      watch that delivers no byte for ``idle_timeout_s`` (default 120 s) is taken as dead (a cut
      link drops packets without a reset; the connection would hang for ever): it is closed and
      re-opened from the last resourceVersion, without a list.
    * **Errors** (network, timeouts, 5xx, 429, refusals, malformed bodies) back off exponentially
      from ``backoff_initial_s`` to ``backoff_max_s`` with full jitter
      (:func:`edgewatch.kube.backoff.backoff_delay`), then re-watch (or re-list if no list
      succeeded yet). Every error is logged and counted via ``on_error(reason)``.
    * **Bodies** are read whole up to a limit, never a partial read
      (:mod:`edgewatch.kube.listwatch`), and every object is checked (``check``, then
      ``decode``); an object that fails either is dropped, logged and counted
      (``on_rejected(reason)``), the rest goes on.

Limits
    JSON only (no protobuf); one resource, one namespace (or all) and one pair of selectors per
    informer; the sink runs inline (a slow sink slows this informer only, and back-pressures it).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from edgewatch.core.types import is_decimal
from edgewatch.kube.backoff import backoff_delay
from edgewatch.kube.events import Bookmark, Change, Reset
from edgewatch.kube.listwatch import ApiUnavailable, Gone, ListerWatcher, WatchIdle

log = logging.getLogger(__name__)

__all__ = ["Gone", "Informer", "InformerConfig", "InvalidObject", "check_metadata"]

T = TypeVar("T")


class InvalidObject(ValueError):
    """An object from the API failed a check; ``reason`` is a short label for metrics."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass(frozen=True, kw_only=True)
class InformerConfig:
    """Timings and limits of an informer.

    Attributes:
        request_timeout_s: bound of one list page or of opening a watch, seconds (default 10 s:
            a page of a few thousand objects over a thin uplink).
        watch_timeout_s: server-side watch timeout, seconds (default 300 s, drawn up to twice
            that, as client-go's 5-10 min; each re-watch costs one request, no list).
        idle_timeout_s: a watch silent this long is dead, seconds (default 120 s: twice the
            apiserver's bookmark period of about 60 s, so a live quiet watch never trips it).
        backoff_initial_s / backoff_max_s: retry delays after an error, seconds (default 0.8 s to
            30 s, full jitter: client-go's reflector backs off 800 ms .. 30 s).
        page_size: objects per list page (default 500, client-go's pager default).
    """

    request_timeout_s: float = 10.0
    watch_timeout_s: float = 300.0
    idle_timeout_s: float = 120.0
    backoff_initial_s: float = 0.8
    backoff_max_s: float = 30.0
    page_size: int = 500

    def __post_init__(self) -> None:
        if min(self.request_timeout_s, self.watch_timeout_s, self.idle_timeout_s, self.backoff_initial_s) <= 0:
            raise ValueError("informer timeouts must be > 0 seconds")
        if self.backoff_max_s < self.backoff_initial_s or self.page_size < 1:
            raise ValueError("backoff_max_s must be >= backoff_initial_s and page_size >= 1")


def check_metadata(obj: object) -> dict[str, Any]:
    """The least every object must have: a JSON object with ``metadata.name`` (a non-empty
    string) and ``metadata.resourceVersion`` (decimal digits). Returns ``obj``.

    Raises:
        InvalidObject: reason ``malformed``.
    """
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        raise InvalidObject("malformed", "object without metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidObject("malformed", "object without metadata.name")
    if not is_decimal(meta.get("resourceVersion")):
        raise InvalidObject("malformed", f"object {name[:64]!r} without a decimal metadata.resourceVersion")
    assert isinstance(obj, dict)
    return obj


def _ignore(_reason: str) -> None:
    return None


class Informer(Generic[T]):
    """Lists and watches through ``source`` and feeds ``sink`` (see the module docstring).

    Args (keyword-only):
        source: the resource, namespace and selectors, and how to reach them:
            :func:`edgewatch.kube.listwatch.lister_watcher`.
        sink: receives :class:`Reset`, :class:`Change` and :class:`Bookmark` events in order,
            objects as ``decode`` returns them (an :class:`edgewatch.kube.store.Store` turns them
            into per-object handler calls); an exception from it propagates out of :meth:`run`
            (the feed ends; its owner decides whether to restart it).
        decode: turns a checked JSON object into what the sink gets (e.g. a lightkube model's
            ``from_dict``); may raise ``InvalidObject``, ``TypeError``, ``ValueError`` or
            ``KeyError`` to drop the object. Default: the JSON object itself.
        check: checks (and may trim) every JSON object before ``decode``; raises
            :class:`InvalidObject`. Default :func:`check_metadata`.
        config: timings and limits.
        on_error: called with a short reason for every error (metrics); must not raise.
        on_rejected: called with a reason for every object dropped; must not raise.
        name: who runs it, for logs (e.g. ``"roster"``).

    ``run()`` works until cancelled; it never raises for API or network errors. ``synced`` is
    True from the first Reset handed to the sink until an error interrupts the watch;
    ``last_rv`` is the newest resourceVersion handed on; ``lists`` and ``watches`` count the
    lists and watches opened.
    """

    def __init__(self, *, source: ListerWatcher, sink: Callable[[Any], Awaitable[None]],
                 decode: Callable[[dict[str, Any]], T] | None = None,
                 check: Callable[[object], dict[str, Any]] = check_metadata,
                 config: InformerConfig | None = None, on_error: Callable[[str], None] = _ignore,
                 on_rejected: Callable[[str], None] = _ignore, name: str = "") -> None:
        self.source = source
        self.resource = source.resource
        self.sink = sink
        self.config = config or InformerConfig()
        self._decode = decode
        self._check = check
        self._on_error = on_error
        self._on_rejected = on_rejected
        self.name = name
        self.last_rv: str | None = None
        self.synced = False
        self.lists = 0
        self.watches = 0

    @property
    def _what(self) -> str:
        return self.resource.name + (f" ({self.name})" if self.name else "")

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
                log.info("watch of %s expired (410): listing again", self._what,
                         extra={"resource": self.resource.name, "by": self.name})
                self.last_rv = None
                self.synced = False
            except WatchIdle:
                # Silent for idle_timeout_s: the connection is dead (or the apiserver sent no
                # bookmark); re-open from where we were, no list.
                self._on_error("idle")
                log.info("watch of %s silent for %.0f s: re-opening it", self._what, self.config.idle_timeout_s,
                         extra={"resource": self.resource.name, "by": self.name})
            except (ApiUnavailable, TimeoutError) as exc:
                reason = exc.reason if isinstance(exc, ApiUnavailable) else "timeout"
                self._on_error(reason)
                self.synced = False
                attempt += 1
                delay = backoff_delay(attempt, initial=self.config.backoff_initial_s, cap=self.config.backoff_max_s)
                # The first failure of a run of them is a warning; the retries while it lasts
                # (a cut link: every few seconds) are info, so a long cut does not flood the log.
                log.log(logging.WARNING if attempt == 1 else logging.INFO, "%s %s failed (%s): %s; retrying in %.1f s",
                            "watch" if self.last_rv else "list", self._what, reason,
                            str(exc)[:300] or type(exc).__name__, delay,
                            extra={"resource": self.resource.name, "by": self.name, "reason": reason})
                await asyncio.sleep(delay)

    # -- list ----------------------------------------------------------------------------------------

    async def _list(self) -> None:
        objects: list[Any] = []
        token: str | None = None
        rv = ""
        while True:
            try:
                page = await self.source.list_page(limit=self.config.page_size, continue_token=token,
                                                   timeout_s=self.config.request_timeout_s)
            except Gone:
                if token is None:
                    raise
                token = None  # the continue token expired: start over
                objects.clear()
                continue
            items = page.get("items")
            meta = page.get("metadata")
            if not isinstance(items, list) or not isinstance(meta, dict):
                raise ApiUnavailable("malformed", f"list of {self.resource.name} has no items or metadata")
            for item in items:
                if isinstance(item, dict):
                    item = {"apiVersion": self.resource.api_version, "kind": self.resource.kind, **item}
                kept = self._accepted(item)
                if kept is not None:
                    objects.append(kept[1])
            rv = str(meta.get("resourceVersion") or "")
            token = meta.get("continue") or None
            if not token:
                break
        if not is_decimal(rv):
            raise ApiUnavailable("malformed", f"list of {self.resource.name} has resourceVersion {rv[:40]!r}")
        self.last_rv = rv
        await self.sink(Reset(objects, rv))
        self.synced = True

    def _accepted(self, obj: object) -> tuple[str, Any] | None:
        """(resourceVersion, decoded object), or None if it was dropped."""
        try:
            checked = self._check(obj)
            rv = checked["metadata"]["resourceVersion"]
            return rv, (checked if self._decode is None else self._decode(checked))
        except (InvalidObject, TypeError, ValueError, KeyError, AttributeError) as exc:
            reason = exc.reason if isinstance(exc, InvalidObject) else "decode"
            self._on_rejected(reason)
            log.warning("dropped an object of %s: %s", self._what, str(exc)[:300] or type(exc).__name__,
                        extra={"resource": self.resource.name, "by": self.name, "reason": reason})
            return None

    # -- watch ---------------------------------------------------------------------------------------

    async def _watch(self) -> None:
        assert self.last_rv is not None
        server_timeout = int(random.uniform(self.config.watch_timeout_s, 2 * self.config.watch_timeout_s))
        async with self.source.watch(resource_version=self.last_rv, server_timeout_s=server_timeout,
                                     open_timeout_s=self.config.request_timeout_s,
                                     idle_timeout_s=self.config.idle_timeout_s) as events:
            self.watches += 1
            self.synced = True
            async for event in events:
                await self._event(event)

    async def _event(self, event: dict[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object")
        if kind == "ERROR":
            code = obj.get("code") if isinstance(obj, dict) else None
            if code == 410:
                raise Gone()
            raise ApiUnavailable("watch_error", f"watch ERROR event: {str(obj)[:300]}")
        if kind == "BOOKMARK":
            meta = obj.get("metadata") if isinstance(obj, dict) else None
            rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
            if is_decimal(rv):
                self.last_rv = rv
                await self.sink(Bookmark(rv))
            return
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            self._on_rejected("event_type")
            log.warning("dropped a watch event of unknown type %r from %s", str(kind)[:40], self._what,
                        extra={"resource": self.resource.name, "by": self.name})
            return
        kept = self._accepted(obj)
        if kept is None:
            return
        self.last_rv = kept[0]
        await self.sink(Change(kind, kept[1]))

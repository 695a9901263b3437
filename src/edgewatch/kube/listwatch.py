"""How an informer reaches the API: list one page, open one watch (client-go's ListerWatcher).

:class:`HttpListerWatcher` speaks the Kubernetes API over the cloud client's HTTP handle, reading
every body whole up to a limit (a list page: ``max_list_bytes``; a watch event:
``max_event_bytes``), never a partial read. :func:`lister_watcher` picks it for a lightkube client,
or asks a test's in-memory client for its own (the seam that lets the controller's and agent's
plumbing be unit-tested without an apiserver; the integration suite runs the HTTP one).

Errors, the same from every implementation: :class:`Gone` (410: the resourceVersion or the
``continue`` token is too old), :class:`ApiUnavailable` (network, 5xx, 429, refusals, malformed
bodies; ``reason`` is a metric label), :class:`WatchIdle` (an open watch delivered nothing for its
idle timeout), ``TimeoutError``.

Limits
    JSON only (no protobuf).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any, Protocol

import httpx2 as httpx

from edgewatch.kube.http import http_client_of
from edgewatch.kube.resources import ApiResource

__all__ = ["ApiUnavailable", "Gone", "HttpListerWatcher", "ListerWatcher", "WatchIdle", "lister_watcher"]


class Gone(Exception):
    """The resourceVersion (or list ``continue`` token) is too old (410): list again."""


class WatchIdle(Exception):
    """An open watch delivered nothing for its idle timeout: the connection is taken as dead."""


class ApiUnavailable(Exception):
    """A list or watch failed; ``reason`` is a short metric label (``network``, ``timeout``,
    ``server``, ``throttled``, ``refused``, ``malformed``, ``oversized``, ``watch_error``)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class ListerWatcher(Protocol):
    """One resource (in one namespace or all, with fixed selectors), listed and watched."""

    resource: ApiResource

    async def list_page(self, *, limit: int, continue_token: str | None, timeout_s: float) -> dict[str, Any]:
        """One list page as the API returns it (``items``, ``metadata.resourceVersion``,
        ``metadata.continue``), bounded by ``timeout_s`` seconds. Raises as the module says."""
        ...

    def watch(self, *, resource_version: str, server_timeout_s: int, open_timeout_s: float,
              idle_timeout_s: float) -> contextlib.AbstractAsyncContextManager[AsyncIterator[dict[str, Any]]]:
        """A watch from ``resource_version`` with bookmarks: a context whose value yields each
        event (``{"type", "object"}``) parsed. Opening is bounded by ``open_timeout_s``; a wait
        longer than ``idle_timeout_s`` raises :class:`WatchIdle`. Raises as the module says."""
        ...


def lister_watcher(client: object, resource: ApiResource, *, namespace: str | None = None,
                   label_selector: str | None = None, field_selector: str | None = None,
                   max_list_bytes: int = 64 * 2**20, max_event_bytes: int = 2**20 + 2**16) -> ListerWatcher:
    """The lister-watcher for ``resource`` through ``client``: HTTP for a lightkube client; a
    test's in-memory client must offer ``lister_watcher(resource, namespace=, label_selector=,
    field_selector=)`` itself.

    Raises:
        TypeError: ``client`` is neither.
    """
    http = http_client_of(client)
    if http is not None:
        return HttpListerWatcher(http=http, resource=resource, namespace=namespace, label_selector=label_selector,
                                 field_selector=field_selector, max_list_bytes=max_list_bytes,
                                 max_event_bytes=max_event_bytes)
    make = getattr(client, "lister_watcher", None)
    if make is None:
        raise TypeError(f"{type(client).__name__} is not a lightkube AsyncClient and offers no lister_watcher")
    lw: ListerWatcher = make(resource, namespace=namespace, label_selector=label_selector,
                             field_selector=field_selector)
    return lw


class HttpListerWatcher:
    """Lists and watches over the API's HTTP (see the module docstring).

    Args (keyword-only):
        http: the cloud API's HTTP client (base URL, TLS and credentials set).
        resource / namespace: what to list and watch (namespace None: all, or cluster-scoped).
        label_selector / field_selector: as in the API (``"a=b,c"``), or None.
        max_list_bytes / max_event_bytes: body limits, bytes.
    """

    def __init__(self, *, http: httpx.AsyncClient, resource: ApiResource, namespace: str | None = None,
                 label_selector: str | None = None, field_selector: str | None = None,
                 max_list_bytes: int = 64 * 2**20, max_event_bytes: int = 2**20 + 2**16) -> None:
        self.http = http
        self.resource = resource
        self.path = resource.path(namespace)
        self.selectors = {k: v for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector))
                          if v}
        self.max_list_bytes = max_list_bytes
        self.max_event_bytes = max_event_bytes

    async def list_page(self, *, limit: int, continue_token: str | None, timeout_s: float) -> dict[str, Any]:
        """One list page (see :class:`ListerWatcher`)."""
        params: dict[str, str] = {"limit": str(limit), **self.selectors}
        if continue_token:
            params["continue"] = continue_token
        try:
            async with contextlib.AsyncExitStack() as stack:
                await stack.enter_async_context(asyncio.timeout(timeout_s))
                resp = await stack.enter_async_context(self.http.stream("GET", self.path, params=params,
                                                                        timeout=timeout_s))
                if resp.status_code == 410:
                    raise Gone()
                await _check_status(resp)
                body = await _read_limited(resp, self.max_list_bytes)
        except httpx.TimeoutException as exc:
            raise ApiUnavailable("timeout", str(exc) or type(exc).__name__) from None
        except (httpx.HTTPError, OSError) as exc:
            raise ApiUnavailable("network", str(exc) or type(exc).__name__) from None
        return _parse_json(body)

    @contextlib.asynccontextmanager
    async def watch(self, *, resource_version: str, server_timeout_s: int, open_timeout_s: float,
                    idle_timeout_s: float) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """A watch (see :class:`ListerWatcher`)."""
        params = {"watch": "true", "allowWatchBookmarks": "true", "resourceVersion": resource_version,
                  "timeoutSeconds": str(server_timeout_s), **self.selectors}
        timeout = httpx.Timeout(open_timeout_s, read=idle_timeout_s)
        try:
            async with contextlib.AsyncExitStack() as stack:
                opening = await stack.enter_async_context(asyncio.timeout(open_timeout_s))
                resp = await stack.enter_async_context(self.http.stream("GET", self.path, params=params,
                                                                        timeout=timeout))
                opening.reschedule(None)  # open: from here the read timeout bounds each wait
                if resp.status_code == 410:
                    raise Gone()
                await _check_status(resp)
                yield _events(resp, self.max_event_bytes)
        except httpx.ReadTimeout:
            raise WatchIdle() from None
        except httpx.TimeoutException as exc:
            raise ApiUnavailable("timeout", str(exc) or type(exc).__name__) from None
        except (httpx.HTTPError, OSError) as exc:
            raise ApiUnavailable("network", str(exc) or type(exc).__name__) from None


async def _events(resp: httpx.Response, limit: int) -> AsyncIterator[dict[str, Any]]:
    async for line in _lines(resp, limit):
        yield _parse_json(line)


async def _check_status(resp: httpx.Response) -> None:
    if resp.status_code == 200:
        return
    body = await _read_limited(resp, 65536, truncate=True)
    reason = "throttled" if resp.status_code == 429 else ("server" if resp.status_code >= 500 else "refused")
    raise ApiUnavailable(reason, f"HTTP {resp.status_code}: {body[:300].decode(errors='replace')}")


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
            raise ApiUnavailable("oversized", f"response over {limit} bytes")
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
            if len(line) > limit:
                raise ApiUnavailable("oversized", f"watch event over {limit} bytes")
            if line.strip():
                yield line
        if len(buf) > limit:
            raise ApiUnavailable("oversized", f"watch event over {limit} bytes")
    if buf.strip():
        yield bytes(buf)


def _parse_json(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body)
    except ValueError as exc:
        raise ApiUnavailable("malformed", f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ApiUnavailable("malformed", "not a JSON object")
    return value

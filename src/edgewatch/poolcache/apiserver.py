"""The node-local, read-only, Kubernetes-API-compatible HTTPS endpoint of the pool cache.

What it is for
    Each edge agent serves the pool-scope resources of its :class:`ResourceCache` objects
    (EndpointSlices, Services, ...) to its own node's kube-proxy, CoreDNS and kubectl, also while
    the node is cut off from the cloud. :func:`make_app` builds the aiohttp application; the
    caller runs it on loopback with the context of :func:`self_signed_tls` and gives the clients
    the kubeconfig of :func:`client_kubeconfig`.

What it serves
    * GET list, watch (``watch=1``/``true``) and get-one of the cached resources on the usual
      paths (``/api/v1[/namespaces/<ns>]/<resource>[/<name>]``, ``/apis/<g>/<v>/...``), with
      ``resourceVersion``, ``resourceVersionMatch``, ``allowWatchBookmarks``,
      ``sendInitialEvents``, ``timeoutSeconds``, ``labelSelector``, ``fieldSelector`` and
      ``limit`` (ignored: one page) as kube-apiserver's watch cache answers them (see
      :mod:`edgewatch.poolcache.store`). JSON only, whatever the Accept header asks (clients that
      ask for protobuf or a Table also accept JSON; kubectl's default table output then shows
      only NAME and AGE, as for any server without table support). Watches stream one JSON event per line; a
      watch lasts ``timeoutSeconds``, at most and by default ``max_request_timeout_s`` (the
      apiserver picks a random 30-60 min; a node has a handful of watchers, so no spreading is
      needed). A watch ended by a relist of the cache gets an ERROR event with a 410 Status.
    * Discovery of the cached resources only (:mod:`edgewatch.poolcache.discovery`).
    * Everything else is forwarded to the cloud apiserver (:class:`Upstream`) with the client's own
      ``Authorization`` header, unchanged, and no credential of ours: a local client never gets
      the agent's rights. Responses, watches included, are streamed back. No upstream, or
      unreachable → 503.

Security
    Loopback is no boundary: every host process and hostNetwork pod of the node reaches the
    endpoint. So cached objects and discovery are served only to a client whose bearer token the
    *cloud* authenticated (TokenReview) and, for objects, authorized for the verb on the resource
    (SubjectAccessReview) — :class:`~edgewatch.poolcache.authn.AccessControl`, which caches those
    decisions for a bounded time and keeps honouring them while the node is cut off. Refusals: 401
    (no or unauthenticated token), 403 (not authorized), 503 (a token never seen before while the
    cloud cannot be asked), each a ``Status`` as kube-apiserver sends. Forwarded requests are not
    checked here: the cloud checks the client's own token itself. Writes to cached resources get
    405 (after authentication); their request bodies are never read. Forwarded bodies are
    limited to :data:`MAX_BODY_BYTES` (413 beyond). Upgrade requests (exec, attach, port-forward)
    are refused (400). The :class:`Upstream` SSL context must not carry a client certificate.

Limits
    Errors are ``Status`` objects with kube-apiserver's codes and reasons: 400 BadRequest, 401
    Unauthorized, 403 Forbidden, 404 NotFound, 405 MethodNotAllowed, 410 Expired, 413
    RequestEntityTooLarge, 503 ServiceUnavailable (not synced / no upstream / token not
    checkable while cut off), 504 Timeout (too large resource version).
"""

from __future__ import annotations

import json
import logging
import math
import ssl
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from yarl import URL

from edgewatch.core.types import is_decimal
from edgewatch.poolcache import discovery
from edgewatch.poolcache.authn import AccessControl, Attributes, Refusal
from edgewatch.poolcache.resources import PoolResource
from edgewatch.poolcache.store import BadRequest, Gone, NotSynced, ResourceCache, TooLargeResourceVersion, Watch
from edgewatch.poolcache.tls import client_kubeconfig, self_signed_tls

__all__ = ["MAX_BODY_BYTES", "Upstream", "client_kubeconfig", "make_app", "self_signed_tls"]

log = logging.getLogger(__name__)

MAX_BODY_BYTES: Final = 3 * 2**20
"""Largest forwarded request body, bytes (kube-apiserver's default request size limit)."""

DEFAULT_FORWARD_TIMEOUT_S: Final = 60.0
"""Timeout of a forwarded non-watch request without timeoutSeconds (kube-apiserver's --request-timeout)."""

_ALIVE_CHECK_S: Final = 5.0  # how often an idle watch checks that its client is still there
_FORWARDED_REQUEST_HEADERS: Final = ("authorization", "accept", "accept-encoding", "content-type", "user-agent")
_DROPPED_RESPONSE_HEADERS: Final = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length",
                                              "upgrade", "proxy-authenticate", "proxy-connection", "te", "trailer"})
_TRUE, _FALSE = ("1", "t", "T", "true", "TRUE", "True"), ("0", "f", "F", "false", "FALSE", "False")


@dataclass(frozen=True)
class Upstream:
    """The cloud apiserver that requests for anything but the cached resources go to.

    Attributes:
        url: base URL, e.g. ``https://10.0.0.1:6443``.
        tls: context that verifies the apiserver (no client certificate!), or None for the
            system's default verification.
        timeout_s: connect timeout, seconds.
    """

    url: str
    tls: ssl.SSLContext | None = None
    timeout_s: float = 10.0


class _Metrics:
    def __init__(self, registry: CollectorRegistry, caches: Mapping[PoolResource, ResourceCache]) -> None:
        self.requests = Counter("edgewatch_poolcache_requests", "Requests served from the cache.",
                                ["resource", "verb", "code"], registry=registry)
        self.watches = Gauge("edgewatch_poolcache_watches", "Open watches served from the cache.", ["resource"],
                             registry=registry)
        self.forwarded = Counter("edgewatch_poolcache_forwarded_requests", "Requests forwarded to the cloud.",
                                 ["code"], registry=registry)
        registry.register(_CacheCollector(caches))


class _CacheCollector(Collector):
    """Objects, bytes and refused inputs of each cache, read at scrape time."""

    def __init__(self, caches: Mapping[PoolResource, ResourceCache]) -> None:
        self._caches = caches

    def collect(self) -> Iterator[Any]:
        objects = GaugeMetricFamily("edgewatch_poolcache_objects", "Objects in the cache.", labels=["resource"])
        size = GaugeMetricFamily("edgewatch_poolcache_bytes", "Bytes of objects in the cache (compact JSON).",
                                 labels=["resource"])
        synced = GaugeMetricFamily("edgewatch_poolcache_synced", "1 once the cache has been filled.",
                                   labels=["resource"])
        refused = CounterMetricFamily("edgewatch_poolcache_refused_inputs", "Feed inputs refused by the cache.",
                                      labels=["resource", "reason"])
        for resource, cache in self._caches.items():
            stats = cache.stats
            objects.add_metric([resource.name], stats.objects)
            size.add_metric([resource.name], stats.bytes)
            synced.add_metric([resource.name], 1.0 if cache.synced else 0.0)
            for reason, count in stats.refused.items():
                refused.add_metric([resource.name, reason], count)
        yield from (objects, size, synced, refused)

    def describe(self) -> Iterator[Any]:
        return iter(())


def _json(data: Any, *, status: int = 200) -> web.Response:
    return web.Response(body=json.dumps(data, separators=(",", ":")).encode(), status=status,
                        content_type="application/json")


def _error(code: int, reason: str, message: str, **details: Any) -> web.Response:
    return _json(discovery.status(code=code, reason=reason, message=message, details=details or None), status=code)


class _Server:
    def __init__(self, *, caches: Mapping[PoolResource, ResourceCache], upstream: Upstream | None,
                 metrics: _Metrics, access: AccessControl, max_request_timeout_s: int) -> None:
        self.caches = dict(caches)
        self.access = access
        self.by_path = {(r.group, r.version, r.resource): r for r in caches}
        self.upstream = upstream
        self.metrics = metrics
        self.max_timeout_s = max_request_timeout_s
        self.session: aiohttp.ClientSession | None = None

    async def start(self, _app: web.Application) -> None:
        self.session = aiohttp.ClientSession(auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar())

    async def stop(self, _app: web.Application) -> None:
        for cache in self.caches.values():
            cache.close_watches()
        if self.session is not None:
            await self.session.close()

    # --- dispatch ------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        segs = [s for s in request.path.split("/") if s]
        if request.method == "GET":
            doc = self._discovery(segs, request)
            if doc is not None:
                refused = await self._refused(request, None)  # discovery: any authenticated client
                return refused if refused is not None else _json(doc)
        target = self._cached_target(segs)
        if target is None:
            return await self._forward(request)  # the cloud checks the client's own token
        resource, namespace, name = target
        if request.method != "GET":
            refused = await self._refused(request, None)
            if refused is not None:
                self.metrics.requests.labels(resource.name, request.method.lower(), str(refused.status)).inc()
                return refused
            self.metrics.requests.labels(resource.name, request.method.lower(), "405").inc()
            return _error(405, "MethodNotAllowed", f"{request.method} is not allowed: this node-local cache of "
                          f"{resource.resource} is read-only; write to the cloud apiserver")
        verb = "watch" if request.query.get("watch") in _TRUE else ("get" if name is not None else "list")
        refused = await self._refused(request, Attributes(
            verb=verb, group=resource.group, version=resource.version, resource=resource.resource,
            namespace=namespace or "", name=name or ""))
        if refused is not None:
            self.metrics.requests.labels(resource.name, verb, str(refused.status)).inc()
            return refused
        try:
            return await self._serve(request, resource, namespace, name)
        except BadRequest as exc:
            return self._count(resource, request, _error(400, "BadRequest", str(exc)))
        except NotSynced as exc:
            return self._count(resource, request, _error(
                503, "ServiceUnavailable", f"{exc}: the node-local pool cache is waiting for its first sync"))
        except Gone as exc:
            return self._count(resource, request, _error(410, "Expired", str(exc)))
        except TooLargeResourceVersion as exc:  # as kube-apiserver: client-go re-lists with resourceVersion ""
            return self._count(resource, request, _error(
                504, "Timeout", f"Timeout: {exc}", causes=[{"reason": "ResourceVersionTooLarge",
                                                            "message": "Too large resource version"}],
                retryAfterSeconds=1))
        except Exception:  # a bug must not take the endpoint down: 500 for this request, logged
            log.exception("pool cache request failed unexpectedly", extra={"path": request.path})
            return self._count(resource, request, _error(500, "InternalError", "internal error in the node-local "
                                                         "pool cache; see the agent's log"))

    async def _refused(self, request: web.Request, attributes: Attributes | None) -> web.Response | None:
        """None if the cloud's decisions let this request go on, else the refusal to send."""
        verdict = await self.access.check(authorization=request.headers.get("Authorization"), attributes=attributes,
                                          origin=request.remote or "",
                                          path=request.path)
        if not isinstance(verdict, Refusal):
            return None
        response = _error(verdict.code, verdict.status_reason, verdict.message, **(verdict.details or {}))
        if verdict.retry_after_s is not None:
            response.headers["Retry-After"] = str(verdict.retry_after_s)
        return response

    def _count(self, resource: PoolResource, request: web.Request, response: web.Response) -> web.Response:
        verb = "watch" if request.query.get("watch") in _TRUE else "list"
        self.metrics.requests.labels(resource.name, verb, str(response.status)).inc()
        log.info("pool cache request failed", extra={"resource": resource.name, "path": request.path,
                                                     "code": response.status, "reason": response.reason})
        return response

    def _discovery(self, segs: list[str], request: web.Request) -> dict[str, Any] | None:
        if segs == ["api"]:
            return discovery.api_versions(self.caches, server_address=request.host)
        if segs == ["apis"]:
            return discovery.api_group_list(self.caches)
        if len(segs) == 2 and segs[0] == "api":
            return discovery.api_resource_list(self.caches, group="", version=segs[1])
        if len(segs) == 3 and segs[0] == "apis":
            return discovery.api_resource_list(self.caches, group=segs[1], version=segs[2])
        return None

    def _cached_target(self, segs: list[str]) -> tuple[PoolResource, str | None, str | None] | None:
        """(resource, namespace, name) when the path names a cached collection or object."""
        if len(segs) >= 2 and segs[0] == "api":
            group, version, rest = "", segs[1], segs[2:]
        elif len(segs) >= 3 and segs[0] == "apis":
            group, version, rest = segs[1], segs[2], segs[3:]
        else:
            return None
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if len(rest) not in (1, 2):  # subresources, /namespaces/<ns> itself, ...: not ours
            return None
        resource = self.by_path.get((group, version, rest[0]))
        if resource is None:
            return None
        return resource, namespace, rest[1] if len(rest) == 2 else None

    # --- cached resources ----------------------------------------------------------------

    async def _serve(self, request: web.Request, resource: PoolResource, namespace: str | None,
                     name: str | None) -> web.StreamResponse:
        q = request.query
        cache = self.caches[resource]
        watch = _flag(q, "watch")
        field_selector = q.get("fieldSelector")
        if name is not None:
            if not watch:
                obj = cache.get(namespace=namespace or "", name=name)  # raises NotSynced
                if namespace is None:  # the resources are namespaced: nothing at cluster scope
                    obj = None
                if obj is None:
                    self.metrics.requests.labels(resource.name, "get", "404").inc()
                    qualified = f"{resource.resource}.{resource.group}" if resource.group else resource.resource
                    return _error(404, "NotFound", f'{qualified} "{name}" not found', name=name, group=resource.group,
                                  kind=resource.resource)
                self.metrics.requests.labels(resource.name, "get", "200").inc()
                return _json(obj)
            # the deprecated watch of one object: a watch with a name field selector
            field_selector = ",".join(filter(None, [field_selector, f"metadata.name={name}"]))
        _int_param(q, "limit")
        if not watch:
            items, rv = cache.list(namespace=namespace, label_selector=q.get("labelSelector"),
                                   field_selector=field_selector, resource_version=q.get("resourceVersion"),
                                   resource_version_match=q.get("resourceVersionMatch"))
            self.metrics.requests.labels(resource.name, "list", "200").inc()
            return _json({"kind": f"{resource.kind}List", "apiVersion": resource.api_version,
                          "metadata": {"resourceVersion": rv}, "items": items})
        send_initial = _flag(q, "sendInitialEvents") if "sendInitialEvents" in q else None
        match = q.get("resourceVersionMatch")
        if send_initial is not None and match != "NotOlderThan":
            raise BadRequest('sendInitialEvents requires resourceVersionMatch "NotOlderThan"')
        if send_initial is None and match:
            raise BadRequest("resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided")
        timeout = _int_param(q, "timeoutSeconds")
        timeout_s = float(self.max_timeout_s if timeout is None or timeout <= 0 else min(timeout, self.max_timeout_s))
        w = cache.watch(namespace=namespace, label_selector=q.get("labelSelector"), field_selector=field_selector,
                        resource_version=q.get("resourceVersion"), allow_bookmarks=_flag(q, "allowWatchBookmarks"),
                        send_initial_events=send_initial)
        return await self._stream_watch(request, resource, w, timeout_s)

    async def _stream_watch(self, request: web.Request, resource: PoolResource, w: Watch,
                            timeout_s: float) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        gauge = self.metrics.watches.labels(resource.name)
        gauge.inc()
        self.metrics.requests.labels(resource.name, "watch", "200").inc()
        deadline = time.monotonic() + timeout_s
        ended = "timeout"
        try:
            await response.prepare(request)
            while (left := deadline - time.monotonic()) > 0:
                try:
                    event = await w.next(timeout_s=min(left, _ALIVE_CHECK_S))
                except StopAsyncIteration:
                    ended = "overflow" if w.overflowed else "closed"
                    break
                except Gone as exc:
                    ended = "gone"
                    status = discovery.status(code=410, reason="Expired", message=str(exc))
                    await response.write(_line({"type": "ERROR", "object": status}))
                    break
                if event is None:
                    if request.transport is None or request.transport.is_closing():
                        ended = "client_gone"
                        break
                    continue
                await response.write(_line({"type": event[0], "object": event[1]}))
        except ConnectionResetError:
            ended = "client_gone"
            return response
        finally:
            w.close()
            gauge.dec()
            log.debug("pool cache watch ended", extra={"resource": resource.name, "why": ended})
        try:
            await response.write_eof()
        except ConnectionResetError:
            pass
        return response

    # --- forwarding ----------------------------------------------------------------------

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        if self.upstream is None or self.session is None:
            self.metrics.forwarded.labels("503").inc()
            return _error(503, "ServiceUnavailable", f"{request.path} is not served by this node-local pool cache "
                          f"(it serves {', '.join(sorted(r.resource for r in self.caches))}) and no cloud "
                          "apiserver is configured to forward to")
        if "upgrade" in request.headers.get("Connection", "").lower() or "Upgrade" in request.headers:
            self.metrics.forwarded.labels("400").inc()
            return _error(400, "BadRequest", "upgrade requests (exec, attach, port-forward) are not forwarded by "
                          "the node-local pool cache; use the cloud apiserver")
        body = None
        if request.body_exists:
            if (request.content_length or 0) > MAX_BODY_BYTES:
                self.metrics.forwarded.labels("413").inc()
                return _error(413, "RequestEntityTooLarge", f"request body over {MAX_BODY_BYTES} bytes")
            chunks, size = [], 0
            async for chunk in request.content.iter_chunked(65536):
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    self.metrics.forwarded.labels("413").inc()
                    return _error(413, "RequestEntityTooLarge", f"request body over {MAX_BODY_BYTES} bytes")
                chunks.append(chunk)
            body = b"".join(chunks)
        headers = {h: request.headers[h] for h in _FORWARDED_REQUEST_HEADERS if h in request.headers}
        headers.update({h: v for h, v in request.headers.items() if h.lower().startswith("impersonate-")})
        url = URL(self.upstream.url.rstrip("/") + request.rel_url.raw_path_qs, encoded=True)
        requested = request.query.get("timeoutSeconds", "")
        if is_decimal(requested) and 0 < int(requested):  # anything else: the apiserver judges it
            total = float(min(int(requested), self.max_timeout_s)) + self.upstream.timeout_s
        elif request.query.get("watch") in _TRUE:
            total = float(self.max_timeout_s) + self.upstream.timeout_s
        else:
            total = DEFAULT_FORWARD_TIMEOUT_S + self.upstream.timeout_s
        timeout = aiohttp.ClientTimeout(total=total, connect=self.upstream.timeout_s,
                                        sock_connect=self.upstream.timeout_s)
        try:
            upstream_response = await self.session.request(
                request.method, url, headers=headers, data=body, timeout=timeout, allow_redirects=False,
                ssl=self.upstream.tls if self.upstream.tls is not None else True,
                skip_auto_headers=("Accept", "Accept-Encoding", "User-Agent", "Content-Type"))
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            self.metrics.forwarded.labels("503").inc()
            log.warning("forwarding to the cloud apiserver failed", extra={
                "path": request.path, "upstream": self.upstream.url, "error": repr(exc)})
            return _error(503, "ServiceUnavailable", f"the cloud apiserver {self.upstream.url} is unreachable "
                          f"({type(exc).__name__}: {exc}); this node-local endpoint serves only "
                          f"{', '.join(sorted(r.resource for r in self.caches))} while cut off")
        self.metrics.forwarded.labels(str(upstream_response.status)).inc()
        async with upstream_response:
            response = web.StreamResponse(status=upstream_response.status, reason=upstream_response.reason)
            for h, v in upstream_response.headers.items():
                if h.lower() not in _DROPPED_RESPONSE_HEADERS:
                    response.headers.add(h, v)
            response.enable_chunked_encoding()
            await response.prepare(request)
            try:
                async for chunk in upstream_response.content.iter_any():
                    await response.write(chunk)
            except (aiohttp.ClientError, TimeoutError) as exc:  # cut mid-stream: end the client's stream too
                log.info("forwarded stream ended early", extra={"path": request.path, "error": repr(exc)})
                return response
            await response.write_eof()
        return response


def _line(event: dict[str, Any]) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode() + b"\n"


def _flag(q: Mapping[str, str], key: str) -> bool:
    value = q.get(key)
    if value is None or value == "":
        return False
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise BadRequest(f"{key}={value!r} is not a boolean")


def _int_param(q: Mapping[str, str], key: str) -> int | None:
    value = q.get(key)
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except ValueError:
        raise BadRequest(f"{key}={value!r} is not an integer") from None
    if number < 0 or number > 2**31:
        raise BadRequest(f"{key}={value!r} is out of range")
    return number


def make_app(*, caches: Mapping[PoolResource, ResourceCache], upstream: Upstream | None,
             registry: CollectorRegistry, access: AccessControl, max_request_timeout_s: int = 1800) -> web.Application:
    """The aiohttp application of the node-local endpoint (what it serves: module docstring).

    Args:
        caches: the cache of each served resource (the agent fills them through its feeds).
        upstream: the cloud apiserver for everything else, or None (then 503 for everything else).
        access: who may read the cached objects and discovery (the cloud's reviews, cached); its
            metrics (``edgewatch_poolcache_refused_requests``, ``_reviews``, ``_review_cache``,
            ``_review_cache_entries``) are registered on ``registry`` too.
        registry: where the metrics go: ``edgewatch_poolcache_requests`` (resource, verb, code),
            ``edgewatch_poolcache_watches`` (resource), ``edgewatch_poolcache_objects``/``_bytes``/
            ``_synced`` (resource), ``edgewatch_poolcache_refused_inputs`` (resource, reason),
            ``edgewatch_poolcache_forwarded_requests`` (code).
        max_request_timeout_s: longest (and default) watch, seconds.

    Raises:
        ValueError: a metric of that name is already on ``registry``, or the timeout is not positive.
    """
    if max_request_timeout_s <= 0 or not math.isfinite(max_request_timeout_s):
        raise ValueError("max_request_timeout_s must be positive")
    server = _Server(caches=caches, upstream=upstream, metrics=_Metrics(registry, caches), access=access,
                     max_request_timeout_s=max_request_timeout_s)
    registry.register(access.collector)
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.on_startup.append(server.start)
    app.on_shutdown.append(server.stop)
    app.router.add_route("*", "/{tail:.*}", server.handle)
    return app

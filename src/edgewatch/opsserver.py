"""Ops endpoints for a process without an HTTP framework of its own: ``/healthz`` (the process
serves), ``/readyz`` (the caller's readiness) and ``/metrics`` (Prometheus text), on a
standard-library HTTP server in a thread. Shared by the controller (``edgewatch.controller.ops``)
and the pool coordinator (``edgewatch.poolcoordinator``).

Why not aiohttp (the agent's server): these processes then import no HTTP server framework at all;
``wsgiref`` from the standard library plus prometheus-client's own WSGI app and threading server are
enough for three GET endpoints scraped every few seconds.

``/metrics`` is served only to a scraper the cloud allows to ``get /edgewatch/metrics`` when a guard is
given (:mod:`edgewatch.metricsauth`; the check runs on the caller's event loop, the server's
thread waits for it at most :data:`CHECK_TIMEOUT_S`); ``/healthz`` and ``/readyz`` are open (the
kubelet's probes carry no token).

Bounds: at most :data:`MAX_CONNECTIONS` connections served at once (a thread each, and a timer
for its deadline; more are closed at once), each shut if its request line and headers are not
whole within :data:`READ_TIMEOUT_S` of its accept.

Limits: HTTP only (no TLS); bind it to the pod or host address, not a public one. ``readiness``
runs in the server's threads: it must only read state (no I/O, no event-loop call). A flood of
connections from the LAN can still keep the kubelet's probe out (it is closed like the rest).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import ThreadingWSGIServer, make_wsgi_app

from edgewatch.metricsauth import MetricsGuard

__all__ = ["CHECK_TIMEOUT_S", "MAX_CONNECTIONS", "READ_TIMEOUT_S", "serve_ops"]

CHECK_TIMEOUT_S = 10.0
"""Longest wait of a ``/metrics`` request for its token's check, seconds (a review, or the wait
for a free review slot, takes at most 5 s, :class:`edgewatch.poolcache.reviews.ReviewPolicy`; a
review that times out stops further ones for 30 s, so a cut-off process answers from its cached
decisions after one timeout)."""


MAX_CONNECTIONS = 16
"""Connections served at once; one more is closed at once (a probe, a scrape or two at a time is
what these ports see; a flood of idle connections must not take a thread each)."""

READ_TIMEOUT_S = 5.0
"""A connection whose request line and headers are not whole within this many seconds of its
accept is shut (a deadline for the whole request, however slowly its bytes drip)."""


class _QuietHandler(WSGIRequestHandler):
    """No access log; the connection is shut once :data:`READ_TIMEOUT_S` pass before its request
    line and headers are read (a deadline for the whole request, not per read: a client dripping a
    byte a second is cut too)."""

    timeout = READ_TIMEOUT_S  # socketserver.StreamRequestHandler: each read's timeout as well

    def setup(self) -> None:
        super().setup()
        self._deadline = threading.Timer(READ_TIMEOUT_S, self._cut)
        self._deadline.daemon = True
        self._deadline.start()

    def _cut(self) -> None:
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def parse_request(self) -> bool:
        try:
            return bool(super().parse_request())  # reads the headers
        finally:
            self._deadline.cancel()

    def finish(self) -> None:
        self._deadline.cancel()
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        """No access log."""


class _BoundedServer(ThreadingWSGIServer):
    """prometheus-client's threading WSGI server with at most :data:`MAX_CONNECTIONS` threads (each
    connection beyond is closed unanswered) and a deeper accept backlog than ``socketserver``'s 5."""

    request_queue_size = 128

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.refused = 0
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.refused += 1
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def _app(*, registry: CollectorRegistry, readiness: Callable[[], str | None],
         guard: tuple[MetricsGuard, asyncio.AbstractEventLoop] | None) -> Callable[..., Iterable[bytes]]:
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            if guard is not None:
                refusal = guard[0].check_from_thread(environ.get("HTTP_AUTHORIZATION"), loop=guard[1],
                                                     timeout_s=CHECK_TIMEOUT_S,
                                                     origin=str(environ.get("REMOTE_ADDR", "")))
                if refusal is not None:
                    headers = [("Content-Type", "text/plain")]
                    if refusal.retry_after_s:
                        headers.append(("Retry-After", str(refusal.retry_after_s)))
                    start_response(f"{refusal.code} {refusal.status_reason}", headers)
                    return [refusal.message.encode() + b"\n"]
            return metrics(environ, start_response)
        if path == "/healthz":
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"ok\n"]
        if path == "/readyz":
            reason = readiness()
            if reason is None:
                start_response("200 OK", [("Content-Type", "text/plain")])
                return [b"ok\n"]
            start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
            return [f"not ready: {reason}\n".encode()]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found\n"]

    return app


@contextlib.contextmanager
def serve_ops(*, address: str, port: int, registry: CollectorRegistry,
              readiness: Callable[[], str | None] = lambda: None, guard: MetricsGuard | None = None) -> Iterator[int]:
    """Serve the ops endpoints on ``address:port`` (port 0: any free port) while the context is open;
    yields the port. ``readiness()`` returns None when ready, else why not (the 503's text).
    ``guard``: who may read ``/metrics`` (None: anyone); given, this must be entered from a
    coroutine, whose event loop runs the checks.

    Raises:
        OSError: the address cannot be bound.
        RuntimeError: a guard without a running event loop.
    """
    guarded = (guard, asyncio.get_running_loop()) if guard is not None else None
    family = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)[0][0]
    server_class = type("OpsServer", (_BoundedServer,), {"address_family": family})
    server = make_server(address, port, _app(registry=registry, readiness=readiness, guard=guarded),
                         server_class=server_class,
                         handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="ops-http", daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

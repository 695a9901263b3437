"""Ops endpoints for a process without an HTTP framework of its own: ``/healthz`` (the process
serves), ``/readyz`` (the caller's readiness) and ``/metrics`` (Prometheus text), on a
standard-library HTTP server in a thread. Shared by the controller (``edgewatch.controller.ops``)
and the pool coordinator (``edgewatch.poolcoordinator``).

Why not aiohttp (the agent's server): these processes then import no HTTP server framework at all;
``wsgiref`` from the standard library plus prometheus-client's own WSGI app and threading server are
enough for three GET endpoints scraped every few seconds.

Limits: HTTP only (no TLS, no auth), like kube-controller-manager's insecure metrics port of old;
bind it to the pod or host address, not a public one. ``readiness`` runs in the server's threads:
it must only read state (no I/O, no event-loop call).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import ThreadingWSGIServer, make_wsgi_app

__all__ = ["serve_ops"]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        """No access log."""


def _app(*, registry: CollectorRegistry, readiness: Callable[[], str | None]) -> Callable[..., Iterable[bytes]]:
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
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
              readiness: Callable[[], str | None] = lambda: None) -> Iterator[int]:
    """Serve the ops endpoints on ``address:port`` (port 0: any free port) while the context is open;
    yields the port. ``readiness()`` returns None when ready, else why not (the 503's text).

    Raises:
        OSError: the address cannot be bound.
    """
    family = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)[0][0]
    server_class = type("OpsServer", (ThreadingWSGIServer,), {"address_family": family})
    server = make_server(address, port, _app(registry=registry, readiness=readiness), server_class=server_class,
                         handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="ops-http", daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

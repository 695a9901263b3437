"""The controller's ops endpoints: ``/healthz`` (the process serves), ``/readyz`` (it reaches the
apiserver) and ``/metrics`` (Prometheus text), on the standard-library HTTP server of
:mod:`edgewatch.opsserver` (shared with the pool coordinator; it says why no HTTP framework).

Limits: HTTP only (no TLS, no auth), like kube-controller-manager's insecure metrics port of old;
bind it to the pod or host address, not a public one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry

from edgewatch import opsserver

__all__ = ["serve_ops"]


@contextlib.contextmanager
def serve_ops(*, address: str, port: int, registry: CollectorRegistry,
              ready: Callable[[], bool] = lambda: True) -> Iterator[int]:
    """Serve the ops endpoints on ``address:port`` (port 0: any free port) while the context is open;
    yields the port. Raises OSError if the address cannot be bound."""
    def readiness() -> str | None:
        return None if ready() else "the apiserver is not reachable"

    with opsserver.serve_ops(address=address, port=port, registry=registry, readiness=readiness) as bound:
        yield bound

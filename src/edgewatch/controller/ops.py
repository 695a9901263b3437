"""The controller's ops endpoints: ``/healthz`` (the process serves), ``/readyz`` (it reaches the
apiserver) and ``/metrics`` (Prometheus text), on the standard-library HTTP server of
:mod:`edgewatch.opsserver` (shared with the pool coordinator; it says why no HTTP framework).

``/metrics`` only to a scraper the cloud allows to ``get /edgewatch/metrics`` (:mod:`edgewatch.metricsauth`).

Limits: HTTP only (no TLS); bind it to the pod or host address, not a public one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry

from edgewatch import opsserver
from edgewatch.metricsauth import MetricsGuard

__all__ = ["serve_ops"]


@contextlib.contextmanager
def serve_ops(*, address: str, port: int, registry: CollectorRegistry,
              ready: Callable[[], bool] = lambda: True, guard: MetricsGuard | None = None) -> Iterator[int]:
    """Serve the ops endpoints on ``address:port`` (port 0: any free port) while the context is open;
    yields the port; ``guard``: who may read ``/metrics`` (None: anyone). Raises OSError if the
    address cannot be bound."""
    def readiness() -> str | None:
        return None if ready() else "the apiserver is not reachable"

    with opsserver.serve_ops(address=address, port=port, registry=registry, readiness=readiness,
                             guard=guard) as bound:
        yield bound

"""The HTTP client underneath a lightkube ``AsyncClient``: the one place that knows where lightkube
keeps it.

edgewatch sends a few requests lightkube has no call for (``/readyz``, the pool cache's raw list
and watch, its User-Agent header) over the same connection pool, TLS and credentials. lightkube
has no public accessor, so this reads ``AsyncClient._client._client`` (lightkube 1.0: AsyncClient ->
GenericAsyncClient -> httpx.AsyncClient). A lightkube that moves it makes :func:`http_client_of`
raise at start-up instead of silently turning those features off; ``tests/unit/test_kube_http.py``
pins it to the installed version.
"""

from __future__ import annotations

import httpx2 as httpx
from lightkube import AsyncClient

__all__ = ["http_client_of"]


def http_client_of(client: object) -> httpx.AsyncClient | None:
    """The httpx client of a lightkube ``AsyncClient``; None for anything else (a test's fake).

    Raises:
        TypeError: ``client`` is a lightkube AsyncClient whose layout is not the one known here.
    """
    if not isinstance(client, AsyncClient):
        return None
    http = getattr(getattr(client, "_client", None), "_client", None)
    if not isinstance(http, httpx.AsyncClient):
        raise TypeError("this lightkube AsyncClient keeps no httpx.AsyncClient at ._client._client: "
                        "edgewatch.kube.http must learn its new layout")
    return http

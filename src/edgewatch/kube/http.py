"""The raw HTTP handle of an API client: for the requests lightkube has no call for (``/readyz``,
the informers' and the pool cache's raw lists and watches, TokenReviews).

It is :attr:`edgewatch.kube.client.CloudApi.http`, built beside the lightkube client on the same
transport (:func:`edgewatch.kube.client.api_client`); nothing here reads a library's private
attribute.
"""

from __future__ import annotations

import httpx2 as httpx

from edgewatch.kube.client import CloudApi

__all__ = ["http_client_of"]


def http_client_of(client: object) -> httpx.AsyncClient | None:
    """The raw httpx client of ``client`` when it is a :class:`~edgewatch.kube.client.CloudApi`;
    None for anything else (a test's in-memory fake, a bare lightkube client): the callers then
    fall back to what needs no raw request, or turn that feature off and say so."""
    return client.http if isinstance(client, CloudApi) else None

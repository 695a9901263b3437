"""Where lightkube keeps its HTTP client (edgewatch.kube.http): found on a real AsyncClient, None for
a fake, a loud error for a layout it does not know."""

from __future__ import annotations

import httpx2 as httpx
import pytest
from lightkube import AsyncClient
from lightkube.config.kubeconfig import KubeConfig

from edgewatch.kube.http import http_client_of


def _client() -> AsyncClient:
    return AsyncClient(KubeConfig.from_dict({
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x"}))


async def test_the_installed_lightkube_keeps_an_httpx_client_where_we_look() -> None:
    client = _client()
    http = http_client_of(client)
    assert isinstance(http, httpx.AsyncClient)
    await client.close()


async def test_a_fake_has_none_and_a_moved_client_is_a_loud_error() -> None:
    assert http_client_of(object()) is None
    client = _client()
    real = client._client._client  # type: ignore[attr-defined]
    client._client._client = None  # type: ignore[attr-defined]  # as if lightkube renamed it
    with pytest.raises(TypeError, match="must learn its new layout"):
        http_client_of(client)
    client._client._client = real  # type: ignore[attr-defined]
    await client.close()

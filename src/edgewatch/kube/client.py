"""The Kubernetes API client of an edgewatch process, and its raw HTTP handle, built in one place.

edgewatch sends a few requests lightkube has no call for (``/readyz``, the informers' and the pool
cache's raw lists and watches, TokenReviews): they go through :attr:`CloudApi.http`, an httpx client
on the **same transport** as the lightkube client (one connection pool, one TLS context with the
kubeconfig's CA and client certificate) with the kubeconfig's credentials. Both are built here from
public lightkube API only (``AsyncClient(transport=...)``, ``ConnectionParams.httpx_params``); no
private attribute of any library is read, so a lightkube release cannot silently move it.

Every request carries ``User-Agent: edgewatch-<component>/<version>`` (set by the transport, so the
apiserver's audit log names the component for lightkube's calls and the raw ones alike).

Limits: the transport is shared, so closing the lightkube client (``CloudApi.close``) closes the
raw handle too; proxies from the environment (``HTTPS_PROXY``) are not used (the cloud is reached
directly, as before). Watches are exempt from ``timeout_s`` by lightkube's design; edgewatch's
informers bound them with their own idle timeout.
"""

from __future__ import annotations

import base64
import os
import ssl

import httpx2 as httpx
from lightkube import AsyncClient, KubeConfig
from lightkube.config.client_adapter import ConnectionParams

__all__ = ["CloudApi", "api_client", "cloud_endpoint", "user_agent"]


def user_agent(component: str) -> str:
    """The User-Agent edgewatch sends as ``component`` (``agent``, ``controller``, ...):
    ``edgewatch-<component>/<version>``, so the apiserver's audit log tells whose request it was."""
    from edgewatch import __version__

    return f"edgewatch-{component}/{__version__}"


class _UserAgent(httpx.AsyncBaseTransport):
    """A transport that sets one User-Agent on every request, then hands it to ``inner``."""

    def __init__(self, inner: httpx.AsyncBaseTransport, agent: str) -> None:
        self._inner = inner
        self._agent = agent

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request.headers["User-Agent"] = self._agent
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


class CloudApi(AsyncClient):
    """lightkube's ``AsyncClient`` plus :attr:`http`, the raw httpx client on the same transport
    (base URL, TLS and credentials of the same kubeconfig). Build it with :func:`api_client`."""

    def __init__(self, config: KubeConfig, *, timeout: httpx.Timeout, transport: httpx.AsyncBaseTransport,
                 http: httpx.AsyncClient) -> None:
        super().__init__(config, timeout=timeout, transport=transport, trust_env=False)
        self.http = http

    async def close(self) -> None:
        """Close the lightkube client and the raw handle (they share one transport)."""
        try:
            await super().close()
        finally:
            await self.http.aclose()


def api_client(kubeconfig: str | None, *, timeout_s: float = 5.0, component: str | None = None) -> CloudApi:
    """The API client from a kubeconfig file, or in-cluster (None: the pod's ServiceAccount token,
    re-read as the kubelet rotates it). Every request has ``timeout_s`` seconds; with ``component``
    every request carries ``user_agent(component)``.

    Raises:
        lightkube.core.exceptions.ConfigError: no usable kubeconfig / not in a cluster.
        OSError, ValueError: an unreadable or malformed certificate or key.
    """
    config = KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_service_account()
    timeout = httpx.Timeout(timeout_s)
    params = ConnectionParams(timeout=timeout, trust_env=False).httpx_params(config.get())
    transport: httpx.AsyncBaseTransport = httpx.AsyncHTTPTransport(verify=params["verify"], trust_env=False)
    if component:
        transport = _UserAgent(transport, user_agent(component))
    http = httpx.AsyncClient(base_url=params["base_url"], auth=params["auth"], timeout=timeout,
                             transport=transport, trust_env=False)
    return CloudApi(config, timeout=timeout, transport=transport, http=http)


def cloud_endpoint(kubeconfig: str | None) -> tuple[str, ssl.SSLContext | None]:
    """The cloud apiserver's URL and a TLS context that verifies it *without any client
    credential*, from a kubeconfig file or in-cluster (None). For proxies that forward a local
    client's own credentials (the pool cache endpoint).

    Raises:
        lightkube.core.exceptions.ConfigError, OSError, ValueError: as :func:`api_client`.
    """
    config = KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_service_account()
    single = config.get()
    cluster = single.cluster
    if not cluster.server.startswith("https://"):
        return cluster.server, None
    ctx = ssl.create_default_context()
    if cluster.insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif cluster.certificate_auth_data:
        ctx = ssl.create_default_context(cadata=base64.b64decode(cluster.certificate_auth_data).decode())
    elif cluster.certificate_auth:
        path = cluster.certificate_auth
        if single.fname is not None and not os.path.isabs(path):
            path = os.path.join(os.path.dirname(single.fname), path)
        ctx = ssl.create_default_context(cafile=path)
    return cluster.server, ctx

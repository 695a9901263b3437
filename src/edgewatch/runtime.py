"""What every edgewatch process shares at start and stop: an API client with a timeout on every
request, and running a main coroutine until SIGTERM/SIGINT (cancelled, awaited, no traceback).

Limits: POSIX signals only (add_signal_handler); watches are long-lived and exempt from the
request timeout by lightkube's design.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import ssl
from collections.abc import Coroutine
from typing import Any

import httpx2 as httpx
from lightkube import AsyncClient, KubeConfig
from edgewatch.kube.http import http_client_of


def user_agent(component: str) -> str:
    """The User-Agent edgewatch sends as ``component`` (``agent``, ``controller``, ...):
    ``edgewatch-<component>/<version>``, so the apiserver's audit log tells whose request it was."""
    from edgewatch import __version__

    return f"edgewatch-{component}/{__version__}"


def api_client(kubeconfig: str | None, *, timeout_s: float = 5.0, component: str | None = None) -> AsyncClient:
    """An AsyncClient from a kubeconfig file, or in-cluster (None: the pod's ServiceAccount token,
    re-read as the kubelet rotates it); every request has ``timeout_s`` seconds; with ``component``
    its requests carry ``user_agent(component)`` (lightkube has no option for it, so the header is
    set on its HTTP client)."""
    config = KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_service_account()
    client = AsyncClient(config, timeout=httpx.Timeout(timeout_s))
    http = http_client_of(client)
    if component and http is not None:
        http.headers["User-Agent"] = user_agent(component)
    return client


async def run_until_signalled(main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` until it returns or SIGTERM/SIGINT arrives; then cancel it and wait for it."""
    task = asyncio.create_task(main)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task


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

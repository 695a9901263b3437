"""What every edgewatch process shares at start and stop: an API client with a timeout on every
request, and running a main coroutine until SIGTERM/SIGINT (cancelled, awaited, no traceback).

Limits: POSIX signals only (add_signal_handler); watches are long-lived and exempt from the
request timeout by lightkube's design.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Coroutine
from typing import Any

import httpx2 as httpx
from lightkube import AsyncClient, KubeConfig


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
    http = getattr(getattr(client, "_client", None), "_client", None)
    if component and http is not None and hasattr(http, "headers"):
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

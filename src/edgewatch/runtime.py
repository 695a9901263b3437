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


def api_client(kubeconfig: str | None, *, timeout_s: float = 5.0) -> AsyncClient:
    """An AsyncClient from a kubeconfig file, or in-cluster (None); every request has ``timeout_s``
    seconds."""
    config = KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_service_account()
    return AsyncClient(config, timeout=httpx.Timeout(timeout_s))


async def run_until_signalled(main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` until it returns or SIGTERM/SIGINT arrives; then cancel it and wait for it."""
    task = asyncio.create_task(main)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task

"""Running an edgewatch process's main coroutine until SIGTERM/SIGINT: cancelled, awaited, no
traceback. (The API client is built by :mod:`edgewatch.kube.client`.)

Limits: POSIX signals only (``loop.add_signal_handler``).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Coroutine
from typing import Any

__all__ = ["run_until_signalled"]


async def run_until_signalled(main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` until it returns or SIGTERM/SIGINT arrives; then cancel it and wait for it."""
    task = asyncio.create_task(main)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task

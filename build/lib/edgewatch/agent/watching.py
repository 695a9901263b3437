"""Watch helpers the agent's informers share: end a watch that stays silent (a cut link drops
packets without a reset, so the connection would hang for ever), and read a finished list's
resourceVersion to watch from.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = ["bounded_events", "list_version"]


async def bounded_events(watch: AsyncIterator[T], *, idle_timeout_s: float) -> AsyncIterator[T]:
    """Yield a watch's events; end when nothing arrives for ``idle_timeout_s`` seconds (the
    watch is then closed within 2 s, and the caller re-lists)."""
    iterator = aiter(watch)
    try:
        while True:
            try:
                event = await asyncio.wait_for(anext(iterator), idle_timeout_s)
            except StopAsyncIteration:
                return
            except TimeoutError:
                log.info("watch silent for %.0f s: re-establishing it", idle_timeout_s)
                return
            yield event
    finally:
        closer = getattr(iterator, "aclose", None)
        if closer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(closer(), 2.0)


def list_version(listing: object) -> str | None:
    """The resourceVersion of a finished lightkube list (None if it has none)."""
    try:
        version = getattr(listing, "resourceVersion", None)
    except Exception:  # noqa: BLE001 - lightkube raises NotReadyError when there is none
        return None
    return version if isinstance(version, str) and version else None

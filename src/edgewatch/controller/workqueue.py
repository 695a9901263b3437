"""A de-duplicating work queue served by a bounded pool of workers, with the semantics of client-go's
``workqueue`` (and kopf's per-object handling): a key waits at most once however often it is added,
one key is handled by at most one worker at a time, and a key added while it is being handled is
handled again once its worker is done. So one slow object (a node whose evictions hang) holds one
worker, never the others, and two workers never act on the same node at once.

Delayed adds (``add_after``) keep the earliest deadline, as client-go's ``AddAfter`` does;
``reschedule`` moves a key's deadline where it belongs now (a heartbeat deadline that moved on).

Limits: in memory, one event loop; no rate limiting (the reconciler's requeue delays pace retries);
with ``workers`` keys all stuck at once, others wait — every API call the workers make has a timeout,
which bounds that.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

__all__ = ["WorkQueue", "sooner"]

log = logging.getLogger(__name__)


def sooner(a: float | None, b: float | None) -> float | None:
    """The smaller of two optional delays, seconds (None = no deadline)."""
    if a is None:
        return b
    return a if b is None else min(a, b)


class WorkQueue:
    """Keys waiting to be handled; see the module docstring. Create and use inside one event loop."""

    def __init__(self) -> None:
        self._ready: asyncio.Queue[str] = asyncio.Queue()
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._timers: dict[str, tuple[float, asyncio.TimerHandle]] = {}

    def __len__(self) -> int:
        """Keys waiting (not counting those being handled or only scheduled for later)."""
        return len(self._dirty)

    @property
    def processing(self) -> frozenset[str]:
        """Keys being handled right now."""
        return frozenset(self._processing)

    def add(self, key: str) -> None:
        """Make ``key`` wait to be handled (once, however often it is added)."""
        if key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._ready.put_nowait(key)

    def add_after(self, key: str, delay_s: float) -> None:
        """:meth:`add` ``key`` in ``delay_s`` seconds, unless it is already due sooner."""
        loop = asyncio.get_running_loop()
        when = loop.time() + max(0.0, delay_s)
        current = self._timers.get(key)
        if current is not None:
            if current[0] <= when:
                return
            current[1].cancel()
        self._timers[key] = (when, loop.call_at(when, self._fire, key))

    def reschedule(self, key: str, delay_s: float) -> bool:
        """Move ``key``'s delayed add to ``delay_s`` seconds from now, later or sooner, when it is
        neither waiting nor being handled; returns False (and changes nothing) when it is, since it
        will be handled anyway. For a deadline that moved (a node's heartbeat renewed)."""
        if key in self._dirty or key in self._processing:
            return False
        current = self._timers.pop(key, None)
        if current is not None:
            current[1].cancel()
        self.add_after(key, delay_s)
        return True

    def _fire(self, key: str) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def forget(self, key: str) -> None:
        """Cancel a delayed add of ``key`` (its object is gone)."""
        current = self._timers.pop(key, None)
        if current is not None:
            current[1].cancel()

    async def get(self) -> str:
        """The next key to handle; the caller must call :meth:`done` with it afterwards."""
        key = await self._ready.get()
        self._dirty.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: str) -> None:
        """``key`` has been handled; if it was added meanwhile, it waits again."""
        self._processing.discard(key)
        if key in self._dirty:
            self._ready.put_nowait(key)

    def close(self) -> None:
        """Cancel every delayed add."""
        for _when, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()

    async def serve(self, *, workers: int, handle: Callable[[str], Awaitable[None]]) -> None:
        """Run ``workers`` workers calling ``handle(key)`` until cancelled. ``handle`` should not raise;
        if it does, the error is logged and the key is not retried (the caller owns retries)."""
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")

        async def worker() -> None:
            while True:
                key = await self.get()
                try:
                    await handle(key)
                except Exception:  # noqa: BLE001 - one key's bug must not stop a worker
                    log.exception("handling %s failed", key)
                finally:
                    self.done(key)

        try:
            async with asyncio.TaskGroup() as tg:
                for _ in range(workers):
                    tg.create_task(worker())
        finally:
            self.close()

"""Waits that a cancellation always ends, each bounded: ``wait_event``, ``bounded``, ``apart`` and
``stop_task``, for loops that must end when cancelled (the coordinator session, the pool cache feeds, the agent's shutdown).

Why not ``asyncio.wait_for``
    On Python 3.11 ``asyncio.wait_for`` returns the result -- and drops the caller's cancellation
    -- when what it waits for completes in the loop iteration the cancel arrives in (an Event set
    by a health probe, a watch event or a link flip just as the session is closed). The loop around
    it then goes on for ever, and so do the TaskGroup above it, the session and ``close()``.
    Python 3.12 rewrote it on ``asyncio.timeout``; edgewatch supports 3.11.

Why not ``except*`` around a TaskGroup while we may be cancelled
    On 3.11 a TaskGroup whose parent is cancelled while a child fails raises the child's error and
    drops the cancellation ("errors have priority"); a handler for that error (``except*
    _StepDown``, ``except Exception``) then eats the cancellation. :func:`apart` runs such a block
    in a task of its own, so the caller's cancellation surfaces at an ``asyncio.wait``, which never
    drops one.

Why ``stop_task`` cancels again
    A task that dropped a cancellation anyway (a library that catches ``CancelledError``, as
    aetcd's watcher shutdown does) would make an ``await task`` wait for ever; ``stop_task`` says
    which task and where it is, cancels it again, and gives up after a bound.
"""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Awaitable, Coroutine
from typing import Any, TypeVar

__all__ = ["STOP_GIVE_UP_S", "STOP_RECANCEL_S", "apart", "bounded", "stop_task", "wait_event"]

log = logging.getLogger(__name__)

T = TypeVar("T")

STOP_RECANCEL_S = 5.0
"""A cancelled task still running after this many seconds dropped the cancellation: it is cancelled
again (every coordinator task ends within ``rpc_timeout_s`` of a cancel: its cleanup is bounded)."""

STOP_GIVE_UP_S = 20.0
"""``stop_task`` stops waiting after this many seconds (the task is left cancelled)."""


async def wait_event(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait until ``event`` is set, at most ``timeout_s`` seconds; True if it was set. A
    cancellation is never dropped (unlike ``asyncio.wait_for`` on 3.11: see the module docstring)."""
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        return False
    return True


async def bounded(aw: Awaitable[T], timeout_s: float) -> T:
    """``aw`` in a task of its own, for at most ``timeout_s`` seconds: its result (or exception).

    Raises:
        TimeoutError: not done in time; the task is cancelled and left to end on its own (never
            waited for: a callee that drops the cancellation cannot stretch the bound).
        asyncio.CancelledError: the caller was cancelled (always; the task is cancelled too).
    """
    task = asyncio.ensure_future(aw)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
    except asyncio.CancelledError:
        _abandon(task)
        raise
    if not done:
        _abandon(task)
        raise TimeoutError(f"not done within {timeout_s} s")
    return task.result()


async def apart(coro: Coroutine[Any, Any, T], *, name: str, recancel_s: float = STOP_RECANCEL_S,
                give_up_s: float = STOP_GIVE_UP_S) -> T:
    """Run ``coro`` in a task of its own and return its result (or raise its exception). The
    caller's cancellation always propagates: the task is then stopped (:func:`stop_task`) and the
    ``CancelledError`` re-raised, whatever the task raised meanwhile."""
    task = asyncio.create_task(coro, name=name)
    try:
        await asyncio.wait({task})
    except asyncio.CancelledError:
        await stop_task(task, recancel_s=recancel_s, give_up_s=give_up_s)
        raise
    return task.result()


async def stop_task(task: asyncio.Task[Any], *, recancel_s: float = STOP_RECANCEL_S,
                    give_up_s: float = STOP_GIVE_UP_S, cancel: bool = True) -> bool:
    """Cancel ``task`` (unless ``cancel`` is False: someone else just did) and wait until it ends;
    cancel it again every ``recancel_s`` seconds while it does not (a warning names it and shows
    where it is), and give up after ``give_up_s`` (an error; ``math.inf``: never). True if it
    ended. Its outcome is not raised; the caller's cancellation is."""
    if task.done():
        return True
    if cancel:
        task.cancel()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + give_up_s
    while True:
        done, _ = await asyncio.wait({task}, timeout=max(0.0, min(recancel_s, deadline - loop.time())))
        if done:
            _retrieve(task)
            return True
        if loop.time() >= deadline:
            log.error("task %s did not end within %.0f s of its cancellation; no longer waiting for it:\n%s",
                      task.get_name(), give_up_s, _stack(task), extra={"task": task.get_name()})
            _abandon(task)
            return False
        log.warning("task %s did not end on cancellation; cancelling it again:\n%s", task.get_name(), _stack(task),
                    extra={"task": task.get_name()})
        task.cancel()


def _stack(task: asyncio.Task[Any]) -> str:
    out = io.StringIO()
    task.print_stack(limit=20, file=out)
    return out.getvalue()


def _abandon(task: asyncio.Future[Any]) -> None:
    task.cancel()
    task.add_done_callback(_retrieve)


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Mark the outcome as seen (no "exception was never retrieved" for a task let go)."""
    if not task.cancelled():
        task.exception()

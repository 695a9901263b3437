"""edgewatch.waits: a cancellation is never dropped, even where Python 3.11's own primitives drop
it (a TaskGroup whose child fails as the parent is cancelled; wait_for whose awaitable completes as
the cancel lands)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from edgewatch.waits import apart, bounded, stop_task, wait_event


class _Boom(Exception):
    """What the child raises instead of ending cancelled."""


async def _group_whose_child_fails_on_cancel() -> None:
    async def child() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise _Boom("failed while being cancelled") from None

    async with asyncio.TaskGroup() as tg:
        tg.create_task(child())


async def _retry_loop(*, use_apart: bool) -> str:
    """The shape of the pool cache's feed loop: an ``except Exception`` around a TaskGroup. Returns
    "eaten" when the handler caught the group's error instead of the cancellation."""
    try:
        if use_apart:
            await apart(_group_whose_child_fails_on_cancel(), name="feeds")
        else:
            await _group_whose_child_fails_on_cancel()
    except Exception:  # noqa: BLE001 - the loop under test retries after anything
        return "eaten"
    return "ended"


async def test_a_handler_around_apart_never_eats_the_cancellation() -> None:
    task = asyncio.create_task(_retry_loop(use_apart=True))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_without_apart_python_3_11_lets_the_handler_eat_it() -> None:
    """Why apart exists: on 3.11 the TaskGroup raises the child's error and drops the
    cancellation; 3.12 keeps it."""
    task = asyncio.create_task(_retry_loop(use_apart=False))
    await asyncio.sleep(0.01)
    task.cancel()
    if sys.version_info < (3, 12):
        assert await task == "eaten"
    else:
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_wait_event_and_bounded() -> None:
    event = asyncio.Event()
    assert await wait_event(event, 0.01) is False
    event.set()
    assert await wait_event(event, 0.01) is True
    assert await bounded(asyncio.sleep(0, result=7), 1.0) == 7
    with pytest.raises(TimeoutError):
        await bounded(asyncio.sleep(3600), 0.01)


async def test_stop_task_recancels_a_task_that_swallows_one_cancellation() -> None:
    swallowed: list[bool] = []

    async def stubborn() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            swallowed.append(True)  # drops the first cancellation, as aetcd's watcher can
        await asyncio.sleep(3600)

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    assert await stop_task(task, recancel_s=0.05, give_up_s=5.0) is True
    assert swallowed == [True] and task.cancelled()

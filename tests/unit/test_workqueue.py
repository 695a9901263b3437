"""The controller's work queue: de-duplication, one worker per key at a time, re-handling a key
added while it is handled, a stuck key never blocking the others, delayed adds."""

from __future__ import annotations

import asyncio

import pytest

from edgewatch.controller.workqueue import WorkQueue

pytestmark = pytest.mark.timeout(30)


async def test_a_key_waits_once_however_often_it_is_added() -> None:
    q = WorkQueue()
    for key in ("a", "b", "a", "a", "b"):
        q.add(key)
    assert len(q) == 2
    assert [await q.get(), await q.get()] == ["a", "b"]
    assert len(q) == 0


async def test_a_key_added_while_handled_is_handled_again_after_not_in_parallel() -> None:
    q = WorkQueue()
    q.add("a")
    key = await q.get()
    q.add("a")  # changed again while a worker handles it
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(q.get(), 0.1)  # not handed to a second worker meanwhile
    q.done(key)
    assert await asyncio.wait_for(q.get(), 1) == "a"


async def test_a_stuck_key_holds_one_worker_and_the_others_go_on() -> None:
    q = WorkQueue()
    handled: list[str] = []
    stuck = asyncio.Event()

    async def handle(key: str) -> None:
        if key == "slow":
            stuck.set()
            await asyncio.sleep(3600)
        handled.append(key)

    server = asyncio.create_task(q.serve(workers=2, handle=handle))
    try:
        q.add("slow")
        await stuck.wait()
        for key in ("a", "b", "c", "slow"):
            q.add(key)
        async with asyncio.timeout(2):
            while set(handled) != {"a", "b", "c"}:
                await asyncio.sleep(0.01)
        assert "slow" in q.processing and len(q) == 1  # slow waits again, for its own worker
    finally:
        server.cancel()
        await asyncio.gather(server, return_exceptions=True)


async def test_a_failing_handler_does_not_stop_its_worker() -> None:
    q = WorkQueue()
    handled: list[str] = []

    async def handle(key: str) -> None:
        if key == "bad":
            raise RuntimeError("bug")
        handled.append(key)

    server = asyncio.create_task(q.serve(workers=1, handle=handle))
    try:
        q.add("bad")
        q.add("good")
        async with asyncio.timeout(2):
            while handled != ["good"]:
                await asyncio.sleep(0.01)
    finally:
        server.cancel()
        await asyncio.gather(server, return_exceptions=True)


async def test_add_after_keeps_the_earliest_deadline_and_forget_cancels() -> None:
    q = WorkQueue()
    q.add_after("a", 0.2)
    q.add_after("a", 5.0)  # later: ignored
    assert await asyncio.wait_for(q.get(), 1) == "a"
    q.done("a")
    q.add_after("b", 5.0)
    q.add_after("b", 0.05)  # sooner: replaces
    assert await asyncio.wait_for(q.get(), 1) == "b"
    q.add_after("c", 0.05)
    q.forget("c")
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(q.get(), 0.2)
    q.close()


async def test_workers_must_be_positive() -> None:
    with pytest.raises(ValueError):
        await WorkQueue().serve(workers=0, handle=lambda key: asyncio.sleep(0))

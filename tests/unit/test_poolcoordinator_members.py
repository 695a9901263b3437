"""The pool coordinator's access control loop (edgewatch.poolcoordinator.members) over an in-memory
API and a fake reconcile: the selector, the debounce, retries with backoff, resync, readiness state."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from edgewatch.kube.informer import InformerConfig
from edgewatch.pooletcd.acl import Suspensions
from edgewatch.pooletcd.provisioner import AclError, AclResult
from edgewatch.poolcoordinator.members import MembersLoop, pool_selector

from _fakekube import FakeKube, FakeListerWatcher


class PoolKube(FakeKube):
    """FakeKube whose Nodes are all in the pool (the fake has no label selectors); records the selector."""

    def __init__(self) -> None:
        super().__init__()
        self.selectors: list[str | None] = []

    def lister_watcher(self, resource: Any, *, namespace: str | None = None, label_selector: str | None = None,
                       field_selector: str | None = None) -> FakeListerWatcher:
        self.selectors.append(label_selector)
        return FakeListerWatcher(self, resource, namespace=namespace, fields=None)


class FakeReconcile:
    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.suspended: list[Suspensions] = []
        self.failures: list[str] = []  # reasons of the next calls to fail

    async def __call__(self, *, target: str, credentials: Any, pool: str, members: Any, timeout_s: float,
                       suspended: Suspensions) -> AclResult:
        assert target == "127.0.0.1:12379" and pool == "factory-1" and credentials == "creds" and timeout_s == 3
        self.calls.append(tuple(members))
        self.suspended.append(suspended)
        if self.failures:
            raise AclError(self.failures.pop(0), "etcd said no")
        return AclResult(steps=(), enabled_auth=False)


def _node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"edgewatch.io/pool": "factory-1"}}}


def _loop(kube: PoolKube, reconcile: FakeReconcile, results: list[str], **kw: Any) -> MembersLoop:
    args: dict[str, Any] = dict(client=kube, pool="factory-1", target="127.0.0.1:12379", credentials=lambda: "creds",
                                timeout_s=3, debounce_s=0.1, backoff_initial_s=0.05, backoff_cap_s=0.1,
                                informer_config=InformerConfig(backoff_initial_s=0.05, backoff_max_s=0.1),
                                on_result=results.append, reconcile=reconcile)
    args.update(kw)
    return MembersLoop(**args)


async def _until(predicate: Any, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_a_suspension_is_reconciled_when_kicked_for_members_only() -> None:
    kube, reconcile, results = PoolKube(), FakeReconcile(), []
    for n in ("edge-1", "edge-2"):
        kube.put("Node", _node(n))
    suspended = {"now": Suspensions()}
    loop = _loop(kube, reconcile, results, suspended=lambda: suspended["now"])
    task = asyncio.create_task(loop.run())
    try:
        await _until(loop.current)
        assert reconcile.suspended == [Suspensions()]
        suspended["now"] = Suspensions(read_only=frozenset({"edge-2", "gone"}))  # a former member is not passed on
        loop.kick()
        await _until(lambda: len(reconcile.calls) == 2)
        assert reconcile.suspended[-1] == Suspensions(read_only=frozenset({"edge-2"}))
        assert reconcile.calls[-1] == ("edge-1", "edge-2")
        suspended["now"] = Suspensions()
        loop.kick()
        await _until(lambda: len(reconcile.calls) == 3)
        assert reconcile.suspended[-1] == Suspensions()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_a_flapping_label_does_not_hold_the_reconcile_back() -> None:
    kube, reconcile, results = PoolKube(), FakeReconcile(), []
    kube.put("Node", _node("edge-1"))
    loop = _loop(kube, reconcile, results, max_debounce_s=0.5)
    task = asyncio.create_task(loop.run())
    try:
        await _until(loop.current)
        stop = asyncio.get_running_loop().time() + 1.5
        while asyncio.get_running_loop().time() < stop:  # a change every 50 ms, under the 100 ms debounce
            kube.put("Node", _node("edge-2"))
            await asyncio.sleep(0.05)
            await kube.delete(type("Node", (), {}), "edge-2")
            await asyncio.sleep(0.05)
        assert len(reconcile.calls) >= 3, reconcile.calls  # about one per max_debounce_s
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def test_the_selector_is_the_pool_label() -> None:
    assert pool_selector("factory-1") == "edgewatch.io/pool=factory-1"


async def test_members_are_reconciled_after_a_quiet_debounce_and_follow_changes() -> None:
    kube, reconcile, results = PoolKube(), FakeReconcile(), []
    for n in ("edge-1", "edge-2"):
        kube.put("Node", _node(n))
    loop = _loop(kube, reconcile, results)
    assert not loop.current()
    task = asyncio.create_task(loop.run())
    try:
        await _until(loop.current)
        assert kube.selectors == ["edgewatch.io/pool=factory-1"]
        assert reconcile.calls == [("edge-1", "edge-2")] and results == ["ok"]
        # A burst of changes: one reconcile once it is quiet.
        kube.put("Node", _node("edge-3"))
        await asyncio.sleep(0.05)
        kube.put("Node", _node("edge-4"))
        await _until(lambda: len(reconcile.calls) == 2 and loop.current())
        assert reconcile.calls[-1] == ("edge-1", "edge-2", "edge-3", "edge-4")
        # A status update of a member changes nothing.
        kube.put("Node", {**_node("edge-1"), "status": {"phase": "x"}})
        await asyncio.sleep(0.3)
        assert len(reconcile.calls) == 2
        await kube.delete(type("Node", (), {}), "edge-2")
        await _until(lambda: len(reconcile.calls) == 3 and loop.current())
        assert reconcile.calls[-1] == ("edge-1", "edge-3", "edge-4") and loop.members == {"edge-1", "edge-3", "edge-4"}
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_a_failed_reconcile_is_retried_and_not_current_meanwhile() -> None:
    kube, reconcile, results = PoolKube(), FakeReconcile(), []
    kube.put("Node", _node("edge-1"))
    reconcile.failures = ["unreachable", "timeout"]
    loop = _loop(kube, reconcile, results)
    task = asyncio.create_task(loop.run())
    try:
        await _until(lambda: len(reconcile.calls) >= 1)
        assert not loop.current()
        await _until(loop.current)
        assert results == ["unreachable", "timeout", "ok"] and len(reconcile.calls) == 3
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_an_unreadable_root_certificate_counts_and_retries() -> None:
    kube, reconcile, results = PoolKube(), FakeReconcile(), []
    kube.put("Node", _node("edge-1"))
    calls = {"n": 0}

    def credentials() -> str:
        calls["n"] += 1
        if calls["n"] == 1:
            raise FileNotFoundError("root.crt")
        return "creds"

    loop = _loop(kube, reconcile, results, credentials=credentials)
    task = asyncio.create_task(loop.run())
    try:
        await _until(loop.current)
        assert results == ["unreadable", "ok"]
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_it_resyncs_without_a_change() -> None:
    kube, reconcile, results = PoolKube(), FakeReconcile(), []
    kube.put("Node", _node("edge-1"))
    loop = _loop(kube, reconcile, results, resync_s=0.2)
    task = asyncio.create_task(loop.run())
    try:
        await _until(lambda: len(reconcile.calls) >= 3)
        assert set(reconcile.calls) == {("edge-1",)}
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_an_empty_pool_is_reconciled_too() -> None:
    kube, reconcile, results = PoolKube(), FakeReconcile(), []
    loop = _loop(kube, reconcile, results)
    task = asyncio.create_task(loop.run())
    try:
        await _until(loop.current)
        assert reconcile.calls == [()]
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

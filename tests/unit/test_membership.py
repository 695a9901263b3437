"""The agent's node list and ConfigMap cache: an unwritable state folder never turns into a Node
LIST every few seconds (issue #9), a silent watch is re-established, and ``poolCoordinators`` is
parsed on its own (a bad entry never refuses the grouping switches).

The apiserver is a small fake: ``list`` yields the nodes it holds, ``watch`` yields what the test
puts into its queue (and can be made to stay silent).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from lightkube.models.core_v1 import NodeAddress, NodeStatus
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Node

from edgewatch.agent.membership import Membership


def node(name: str, address: str, **labels: str) -> Node:
    return Node(metadata=ObjectMeta(name=name, labels=labels),
                status=NodeStatus(addresses=[NodeAddress(type="InternalIP", address=address)]))


class _Listing:
    """What lightkube's ``list`` returns: an async iterable with ``resourceVersion`` afterwards."""

    def __init__(self, items: list[Any], version: str) -> None:
        self._items = items
        self.resourceVersion = version

    def __aiter__(self) -> Any:
        return self._gen()

    async def _gen(self) -> Any:
        for item in self._items:
            yield item


class FakeKube:
    def __init__(self, nodes: list[Node], config: dict[str, str] | None = None) -> None:
        self.nodes = nodes
        self.config = config
        self.lists: list[str] = []
        self.watches: list[tuple[str, str | None]] = []
        self.node_events: asyncio.Queue[tuple[str, Node]] = asyncio.Queue()

    def list(self, res: Any, **kw: Any) -> _Listing:
        self.lists.append(res.__name__)
        if res is Node:
            return _Listing(list(self.nodes), "100")
        items = [] if self.config is None else [ConfigMap(metadata=ObjectMeta(name="edgewatch-config"),
                                                          data=self.config)]
        return _Listing(items, "7")

    async def watch(self, res: Any, **kw: Any) -> Any:
        self.watches.append((res.__name__, kw.get("resource_version")))
        if res is Node:
            while True:
                yield await self.node_events.get()
        else:
            await asyncio.sleep(3600)
            yield ("MODIFIED", None)  # pragma: no cover


async def _run(membership: Membership, seconds: float) -> None:
    task = asyncio.create_task(membership.run())
    await asyncio.sleep(seconds)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_unwritable_state_dir_keeps_watching_logs_once_and_counts(tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    # A folder that cannot be created, even by root: its parent is a regular file.
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    state = blocker / "edgewatch"
    kube = FakeKube([node("a-1", "10.0.0.1"), node("a-2", "10.0.0.2")])
    failures: list[str] = []
    membership = Membership(client=kube, namespace="edgewatch", state_dir=state, retry_s=0.01,  # type: ignore[arg-type]
                            on_save_error=failures.append)
    for i in range(3, 8):
        kube.node_events.put_nowait(("ADDED", node(f"a-{i}", f"10.0.0.{i}")))
    with caplog.at_level(logging.INFO, logger="edgewatch.agent.membership"):
        await _run(membership, 0.5)
    assert kube.lists.count("Node") == 1, "a failed save must not end the watch (and re-LIST)"
    assert kube.watches[0] == ("Node", "100")  # the watch starts where the list ended
    assert sorted(membership.nodes) == [f"a-{i}" for i in range(1, 8)]
    assert membership.synced.is_set() and membership.node_lists == 1
    assert len(failures) == 6 and set(failures) == {"NotADirectoryError"}  # every failure counted
    errors = [r for r in caplog.records if "cannot save the node list" in r.getMessage()]
    assert len(errors) == 1, "logged once per distinct error"
    assert "memory only" in errors[0].getMessage()


async def test_state_dir_is_created_and_used_after_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "deep" / "state"
    kube = FakeKube([node("a-1", "10.0.0.1", pool="a")])
    await _run(Membership(client=kube, namespace="edgewatch", state_dir=state, retry_s=0.01), 0.2)  # type: ignore[arg-type]
    assert (state / "nodes.json").exists()
    restarted = Membership(client=FakeKube([]), namespace="edgewatch", state_dir=state)  # type: ignore[arg-type]
    assert restarted.address_of("a-1") == "10.0.0.1" and restarted.nodes["a-1"].labels == {"pool": "a"}


async def test_save_recovers_and_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("x")  # a file where the folder should be
    membership = Membership(client=FakeKube([]), namespace="edgewatch", state_dir=blocker)  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="edgewatch.agent.membership"):
        membership._save()
        membership._save()
        blocker.unlink()
        membership._save()
    messages = [r.getMessage() for r in caplog.records]
    assert sum("cannot save" in m for m in messages) == 1
    assert sum("saved to" in m and "again" in m for m in messages) == 1
    assert (blocker / "nodes.json").exists()


async def test_status_updates_do_not_rewrite_the_state_file(tmp_path: Path) -> None:
    kube = FakeKube([node("a-1", "10.0.0.1")])
    saves: list[int] = []
    membership = Membership(client=kube, namespace="edgewatch", state_dir=tmp_path, retry_s=0.01)  # type: ignore[arg-type]
    original = membership._save
    membership._save = lambda: (saves.append(1), original())[1]  # type: ignore[method-assign]
    for _ in range(5):  # the kubelet's status updates: same address, same labels
        kube.node_events.put_nowait(("MODIFIED", node("a-1", "10.0.0.1")))
    kube.node_events.put_nowait(("MODIFIED", node("a-1", "10.0.0.1", zone="z")))  # a relabel
    await _run(membership, 0.3)
    assert len(saves) == 2  # after the list, and after the relabel


async def test_a_silent_watch_is_re_established(tmp_path: Path) -> None:
    kube = FakeKube([node("a-1", "10.0.0.1")])
    membership = Membership(client=kube, namespace="edgewatch", retry_s=0.01, idle_timeout_s=0.1)  # type: ignore[arg-type]
    await _run(membership, 0.55)
    # a dropped connection (no reset) would hang for ever: instead, list and watch again
    assert kube.lists.count("Node") >= 3


async def test_config_is_read_before_it_is_watched_and_pool_coordinators_are_parsed() -> None:
    kube = FakeKube([], config={"grouping": "off", "poolCoordinators": "a: http://198.18.0.10:2379\n"})
    membership = Membership(client=kube, namespace="edgewatch", retry_s=0.01)  # type: ignore[arg-type]
    await _run(membership, 0.1)
    assert membership.config_synced.is_set()
    assert membership.pool_coordinators.url_for("a") == "http://198.18.0.10:2379"
    assert ("ConfigMap", "7") in kube.watches


async def test_a_missing_config_map_is_known_to_be_missing() -> None:
    kube = FakeKube([], config=None)
    membership = Membership(client=kube, namespace="edgewatch", retry_s=0.01)  # type: ignore[arg-type]
    await _run(membership, 0.1)
    assert membership.config_synced.is_set() and membership.pool_coordinators.urls == {}


def test_pool_coordinators_are_judged_apart_from_grouping(caplog: pytest.LogCaptureFixture) -> None:
    rejects: list[str] = []
    m = Membership(client=FakeKube([]), namespace="edgewatch", on_reject=rejects.append)  # type: ignore[arg-type]
    assert m.apply_config({"grouping": "on", "poolCoordinators": "a: http://10.0.0.1:2379\nb: ftp://x\n"})
    assert m.grouping.enabled and dict(m.pool_coordinators.urls) == {"a": "http://10.0.0.1:2379"}
    assert rejects == ["invalid_pool_coordinator"]
    assert any("pool b" in r.getMessage() and "scheme" in r.getMessage() for r in caplog.records)
    # Not a mapping at all: refused as a whole, the previous mapping stays, grouping still applies.
    assert m.apply_config({"grouping": "off", "poolCoordinators": "- a\n- b\n"})
    assert not m.grouping.enabled and dict(m.pool_coordinators.urls) == {"a": "http://10.0.0.1:2379"}
    assert rejects[-1] == "invalid_pool_coordinators"
    # A bad URL for a pool that had a good one: the previous one stays; a new pool's bad URL is dropped.
    assert m.apply_config({"poolCoordinators": "a: http:/oops\nd: http://10.0.0.4:2379\ne: nope"})
    assert dict(m.pool_coordinators.urls) == {"a": "http://10.0.0.1:2379", "d": "http://10.0.0.4:2379"}
    assert any("pool a keeps its previous coordinator" in r.getMessage() for r in caplog.records)
    # Bad grouping, good pool mapping: grouping refused, the mapping adopted.
    assert not m.apply_config({"grouping": "maybe", "poolCoordinators": "c: https://[fd00::1]:2379"})
    assert dict(m.pool_coordinators.urls) == {"c": "https://[fd00::1]:2379"} and rejects[-1] == "invalid_config"
    # Deleted ConfigMap: no coordinators.
    assert m.apply_config(None) and m.pool_coordinators.urls == {}

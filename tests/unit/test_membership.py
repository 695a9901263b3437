"""The agent's membership cache: its own Node, its group's roster and the ConfigMap, on the
in-memory apiserver (tests/unit/_fakekube.py).

What is checked: the agent watches only its own Node (other Nodes' updates never reach it: no
O(n²) fan-out), its group is the roster's members, a relabel or a ConfigMap edit switches rosters
live, a malformed roster is refused and the previous copy kept, the state survives a restart during
a cloud cut, an unwritable state folder never turns into a LIST every few seconds, a
silent watch is re-established, deletions (seen live or at a re-list) are handled, a failing API is
retried, and ``poolCoordinators`` is parsed on its own.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from lightkube.resources.core_v1 import ConfigMap, Node

from edgewatch.agent.membership import CONFIGMAP_NAME, Membership
from edgewatch.agent.watching import AGENT_BACKOFF_MAX_S, informer_config
from edgewatch.core.grouping import GroupingConfig
from edgewatch.core.roster import ROSTER_PREFIX, Roster, encode_roster, roster_name
from edgewatch.core.types import NodeName

from _events import Recorded
from _fakekube import FakeKube, api_error

ME = NodeName("a-1")
ZONE = "edgewatch.io/topology-zone"


def put_node(kube: FakeKube, name: str, address: str, **labels: str) -> None:
    kube.put("Node", {"metadata": {"name": name, "labels": labels},
                      "status": {"addresses": [{"type": "InternalIP", "address": address}]}})


def put_roster(kube: FakeKube, name: str, members: dict[str, str | None], group: str = "") -> None:
    kube.put("ConfigMap", {"metadata": {"name": name, "namespace": "edgewatch", "labels": {"edgewatch.io/roster": "true"}},
                           "data": encode_roster(Roster(group=group, members=members))})  # type: ignore[arg-type]


def put_config(kube: FakeKube, data: dict[str, str]) -> None:
    kube.put("ConfigMap", {"metadata": {"name": "edgewatch-config", "namespace": "edgewatch"}, "data": data})


async def wait(predicate: Any, timeout_s: float = 3.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.01)


class Running:
    """``async with Running(m)``: the membership's watches run inside the block."""

    def __init__(self, membership: Membership) -> None:
        self.membership = membership
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Membership:
        self.task = asyncio.create_task(self.membership.run())
        return self.membership

    async def __aexit__(self, *_: object) -> None:
        assert self.task is not None
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task


def pool_of_five(kube: FakeKube) -> None:
    for i in range(1, 6):
        put_node(kube, f"a-{i}", f"10.0.0.{i}")
    put_roster(kube, ROSTER_PREFIX, {f"a-{i}": f"10.0.0.{i}" for i in range(1, 6)})


async def test_group_is_the_roster_and_other_nodes_updates_never_reach_the_agent() -> None:
    kube = FakeKube()
    pool_of_five(kube)
    recorded = Recorded()
    events = recorded.watch_events
    async with Running(Membership(client=kube, node=ME, namespace="edgewatch", retry_s=0.01,  # type: ignore[arg-type]
                                  events=recorded)) as m:
        await wait(m.synced.is_set)
        assert m.group_of(ME) == {f"a-{i}" for i in range(1, 6)}
        assert m.address_of(NodeName("a-3")) == "10.0.0.3" and m.node_by_address("10.0.0.4") == "a-4"
        assert m.node_by_address("10.9.9.9") is None
        before = len(events)
        for _ in range(20):  # the other kubelets' status reports
            put_node(kube, "a-2", "10.0.0.2")
        await asyncio.sleep(0.1)
        assert len(events) == before, "another Node's update reached this agent"
        put_node(kube, ME, "10.0.0.1", pool="p")  # its own: one event
        await wait(lambda: m.own is not None and m.own.labels == {"pool": "p"})
        assert events[before:] == ["node"]
        assert m.node_lists == 1


async def test_a_relabel_switches_to_the_new_groups_roster() -> None:
    kube = FakeKube()
    put_config(kube, {"grouping": "on"})
    config = GroupingConfig(enabled=True)
    name_a, name_b = roster_name(config, {ZONE: "a"}), roster_name(config, {ZONE: "b"})
    assert name_a and name_b
    put_node(kube, ME, "10.0.0.1", **{ZONE: "a"})
    put_roster(kube, name_a, {"a-1": "10.0.0.1", "a-2": "10.0.0.2"}, group="a")
    put_roster(kube, name_b, {"a-1": "10.0.0.1", "b-1": "10.0.1.1", "b-2": "10.0.1.2"}, group="b")
    async with Running(Membership(client=kube, node=ME, namespace="edgewatch", retry_s=0.01)) as m:  # type: ignore[arg-type]
        await wait(lambda: m.group_of(ME) == {"a-1", "a-2"})
        put_node(kube, ME, "10.0.0.1", **{ZONE: "b"})
        await wait(lambda: m.group_of(ME) == {"a-1", "b-1", "b-2"})
        assert m.roster_name == name_b
        put_node(kube, ME, "10.0.0.1")  # no label: a group of one, no roster
        await wait(lambda: m.group_of(ME) == {ME})
        put_config(kube, {"grouping": "off"})  # grouping off: the one group
        put_roster(kube, ROSTER_PREFIX, {"a-1": "10.0.0.1", "z-1": "10.0.3.1"})
        await wait(lambda: m.group_of(ME) == {"a-1", "z-1"})


async def test_an_uncovered_node_is_a_group_of_one_and_ready_without_a_roster() -> None:
    kube = FakeKube()
    put_config(kube, {"coverLabel": "edgewatch.io/pool"})
    put_node(kube, ME, "10.0.0.1")
    async with Running(Membership(client=kube, node=ME, namespace="edgewatch", retry_s=0.01)) as m:  # type: ignore[arg-type]
        await wait(m.synced.is_set)
        assert m.group_of(ME) == {ME} and m.target() is None


async def test_not_ready_until_the_roster_is_published() -> None:
    kube = FakeKube()
    put_node(kube, ME, "10.0.0.1")
    async with Running(Membership(client=kube, node=ME, namespace="edgewatch", retry_s=0.01)) as m:  # type: ignore[arg-type]
        await asyncio.sleep(0.1)
        assert not m.synced.is_set() and m.group_of(ME) == {ME}
        put_roster(kube, ROSTER_PREFIX, {"a-1": "10.0.0.1", "a-2": "10.0.0.2"})
        await wait(m.synced.is_set)
        assert m.group_of(ME) == {"a-1", "a-2"}


async def test_a_malformed_roster_is_refused_and_the_previous_copy_stays(caplog: pytest.LogCaptureFixture) -> None:
    kube = FakeKube()
    pool_of_five(kube)
    recorded = Recorded()
    rejects = recorded.config_refusals
    async with Running(Membership(client=kube, node=ME, namespace="edgewatch", retry_s=0.01,  # type: ignore[arg-type]
                                  events=recorded)) as m:
        await wait(m.synced.is_set)
        for bad in ('{"a-1": 7}', "[]", '{"Not A Name": ""}', "{" * 10):
            kube.put("ConfigMap", {"metadata": {"name": ROSTER_PREFIX, "namespace": "edgewatch"},
                                   "data": {"members": bad}})
        await wait(lambda: len(rejects) == 4)
        assert rejects == ["invalid_roster"] * 4 and len(m.group_of(ME)) == 5
        assert any("refusing roster" in r.getMessage() for r in caplog.records)


async def test_state_survives_a_restart_during_a_cloud_cut(tmp_path: Path) -> None:
    kube = FakeKube()
    pool_of_five(kube)
    put_node(kube, ME, "10.0.0.1", pool="a")
    async with Running(Membership(client=kube, node=ME, namespace="edgewatch", state_dir=tmp_path / "deep",  # type: ignore[arg-type]
                                  retry_s=0.01)) as m:
        await wait(m.synced.is_set)
    restarted = Membership(client=FakeKube(), node=ME, namespace="edgewatch", state_dir=tmp_path / "deep")  # type: ignore[arg-type]
    assert restarted.group_of(ME) == {f"a-{i}" for i in range(1, 6)}
    assert restarted.address_of(NodeName("a-5")) == "10.0.0.5" and restarted.own is not None
    assert restarted.own.labels == {"pool": "a"}
    other = Membership(client=FakeKube(), node=NodeName("a-2"), namespace="edgewatch", state_dir=tmp_path / "deep")  # type: ignore[arg-type]
    assert other.own is None and other.roster is None  # another node's file is not adopted


async def test_unwritable_state_dir_keeps_watching_logs_once_and_counts(tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "not-a-dir"  # a folder that cannot be created, even by root
    blocker.write_text("x")
    kube = FakeKube()
    pool_of_five(kube)
    recorded = Recorded()
    failures = recorded.save_failures
    with caplog.at_level(logging.INFO, logger="edgewatch.agent.membership"):
        async with Running(Membership(client=kube, node=ME, namespace="edgewatch",  # type: ignore[arg-type]
                                      state_dir=blocker / "edgewatch", retry_s=0.01,
                                      events=recorded)) as m:
            await wait(m.synced.is_set)
            for i in range(6, 9):
                put_roster(kube, ROSTER_PREFIX, {f"a-{j}": f"10.0.0.{j}" for j in range(1, i)})
            await wait(lambda: len(m.group_of(ME)) == 7)
            put_node(kube, ME, "10.0.0.1", zone="z")
            await asyncio.sleep(0.1)
    assert [c for c in kube.calls if c[:2] == ("list", "Node")] == [("list", "Node")], \
        "a failed save must not end the watch (and re-LIST)"
    assert len(failures) >= 4 and set(failures) == {"NotADirectoryError"}  # every failure counted
    errors = [r for r in caplog.records if "cannot save the group roster" in r.getMessage()]
    assert len(errors) == 1, "logged once per distinct error"
    assert "memory only" in errors[0].getMessage()


async def test_save_recovers_and_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("x")  # a file where the folder should be
    membership = Membership(client=FakeKube(), node=ME, namespace="edgewatch", state_dir=blocker)  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="edgewatch.agent.membership"):
        membership._save()
        membership._save()
        blocker.unlink()
        membership._save()
    messages = [r.getMessage() for r in caplog.records]
    assert sum("cannot save" in m for m in messages) == 1
    assert sum("saved to" in m and "again" in m for m in messages) == 1
    assert json.loads((blocker / "membership.json").read_text())["node"] == ME


async def test_status_updates_do_not_rewrite_the_state_file(tmp_path: Path) -> None:
    kube = FakeKube()
    pool_of_five(kube)
    saves: list[int] = []
    membership = Membership(client=kube, node=ME, namespace="edgewatch", state_dir=tmp_path, retry_s=0.01)  # type: ignore[arg-type]
    original = membership._save
    membership._save = lambda: (saves.append(1), original())[1]  # type: ignore[method-assign]
    async with Running(membership) as m:
        await wait(m.synced.is_set)
        settled = len(saves)
        for _ in range(5):  # the kubelet's status updates: same address, same labels
            put_node(kube, ME, "10.0.0.1")
        await asyncio.sleep(0.1)
        assert len(saves) == settled
        put_node(kube, ME, "10.0.0.1", zone="z")  # a relabel
        await wait(lambda: len(saves) == settled + 1)


def calls(kube: FakeKube, op: str, kind: str) -> int:
    return sum(1 for c in kube.calls if c[:2] == (op, kind))


async def test_a_silent_watch_is_re_established() -> None:
    kube = FakeKube()
    pool_of_five(kube)
    async with Running(Membership(client=kube, node=ME, namespace="edgewatch", retry_s=0.01,  # type: ignore[arg-type]
                                  idle_timeout_s=0.1)) as m:
        await asyncio.sleep(0.55)
        # a dropped connection (no reset) would hang for ever: instead, watch again from where it was
        assert calls(kube, "watch", "Node") >= 3
        assert calls(kube, "watch", "ConfigMap") >= 6  # the config and the roster
        assert calls(kube, "list", "Node") == 1 and m.node_lists == 1  # no list needed for that
        put_node(kube, ME, "10.0.0.1", pool="p")  # and what happens next still arrives
        await wait(lambda: m.own is not None and m.own.labels == {"pool": "p"})


async def test_a_deleted_own_node_keeps_its_copy_and_a_deleted_config_map_means_the_defaults() -> None:
    kube = FakeKube()
    pool_of_five(kube)
    put_config(kube, {"poolCoordinators": "a: http://198.18.0.10:2379\n"})
    recorded = Recorded()
    async with Running(Membership(client=kube, node=ME, namespace="edgewatch", retry_s=0.01,  # type: ignore[arg-type]
                                  events=recorded)) as m:
        await wait(lambda: m.synced.is_set() and m.pool_coordinators.url_for("a") is not None)
        before = len(recorded.watch_events)
        await kube.delete(Node, ME)  # being re-registered: the agent keeps what it knew
        await kube.delete(ConfigMap, CONFIGMAP_NAME, namespace="edgewatch")
        await wait(lambda: m.pool_coordinators.urls == {})
        assert m.own is not None and m.own.address == "10.0.0.1" and m.group_of(ME) == {f"a-{i}" for i in range(1, 6)}
        assert recorded.watch_events[before:] == ["node", "config"]


async def test_a_config_map_deleted_while_the_watch_was_down_is_seen_at_the_re_list() -> None:
    kube = FakeKube()
    pool_of_five(kube)
    put_config(kube, {"poolCoordinators": "a: http://198.18.0.10:2379\n"})
    back = asyncio.Event()

    async def expired(_kind: str) -> None:  # the link is down, and when it is back the watch is too old
        await back.wait()
        raise api_error(410, "too old resource version")

    async with Running(Membership(client=kube, node=ME, namespace="edgewatch", retry_s=0.01,  # type: ignore[arg-type]
                                  idle_timeout_s=0.1)) as m:
        await wait(lambda: m.synced.is_set() and m.pool_coordinators.url_for("a") is not None)
        lists = calls(kube, "list", "ConfigMap")
        kube.hooks["watch"] = expired
        opened = calls(kube, "watch", "ConfigMap")
        await wait(lambda: calls(kube, "watch", "ConfigMap") >= opened + 2)  # both ConfigMap watches are down
        await kube.delete(ConfigMap, CONFIGMAP_NAME, namespace="edgewatch")
        del kube.hooks["watch"]
        back.set()
        await wait(lambda: m.pool_coordinators.urls == {})
        assert calls(kube, "list", "ConfigMap") >= lists + 2  # learnt from the re-lists, not from a watch
        assert m.group_of(ME) == {f"a-{i}" for i in range(1, 6)}


async def test_a_failing_api_is_retried() -> None:
    kube = FakeKube()
    pool_of_five(kube)
    failures = {"list": 3, "watch": 2}

    def failing(op: str) -> Any:
        async def hook(kind: str) -> None:
            if kind == "Node" and failures[op] > 0:
                failures[op] -= 1
                raise api_error(503, "the apiserver is restarting")
        return hook

    kube.hooks["list"], kube.hooks["watch"] = failing("list"), failing("watch")
    async with Running(Membership(client=kube, node=ME, namespace="edgewatch", retry_s=0.01)) as m:  # type: ignore[arg-type]
        await wait(m.synced.is_set)
        await wait(lambda: failures["watch"] == 0)
        put_node(kube, ME, "10.0.0.1", pool="p")
        await wait(lambda: m.own is not None and m.own.labels == {"pool": "p"})
    assert calls(kube, "list", "Node") == 4 and m.node_lists == 1


def test_the_agents_watches_come_back_within_seconds() -> None:
    config = informer_config(request_timeout_s=10.0, idle_timeout_s=150.0, retry_s=2.0)
    assert config.backoff_initial_s == 2.0 and config.backoff_max_s == AGENT_BACKOFF_MAX_S <= 5.0
    assert config.idle_timeout_s == 150.0 and config.request_timeout_s == 10.0
    assert informer_config(request_timeout_s=1.0, idle_timeout_s=1.0, retry_s=9.0).backoff_max_s == 9.0


async def test_config_is_read_and_pool_coordinators_are_parsed() -> None:
    kube = FakeKube()
    put_config(kube, {"grouping": "off", "poolCoordinators": "a: http://198.18.0.10:2379\n"})
    async with Running(Membership(client=kube, node=ME, namespace="edgewatch", retry_s=0.01)) as m:  # type: ignore[arg-type]
        await wait(m.config_synced.is_set)
        assert m.pool_coordinators.url_for("a") == "http://198.18.0.10:2379"


async def test_a_missing_config_map_is_known_to_be_missing() -> None:
    async with Running(Membership(client=FakeKube(), node=ME, namespace="edgewatch", retry_s=0.01)) as m:  # type: ignore[arg-type]
        await wait(m.config_synced.is_set)
        assert m.pool_coordinators.urls == {}


def test_pool_coordinators_are_judged_apart_from_grouping(caplog: pytest.LogCaptureFixture) -> None:
    recorded = Recorded()
    rejects = recorded.config_refusals
    m = Membership(client=FakeKube(), node=ME, namespace="edgewatch", events=recorded)  # type: ignore[arg-type]
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


async def test_auto_pools_learn_where_their_coordinator_runs_from_the_controller() -> None:
    from edgewatch.names import POOL_COORDINATORS_CONFIGMAP

    kube = FakeKube()
    pool_of_five(kube)
    put_config(kube, {"poolCoordinators": "a: auto\n"})
    recorded = Recorded()
    async with Running(Membership(client=kube, node=ME, namespace="edgewatch", retry_s=0.01,  # type: ignore[arg-type]
                                  events=recorded)) as m:
        await wait(lambda: m.config_synced.is_set() and m.pool_coordinators.auto == {"a"})
        assert m.discovered_coordinators == {} and m.pool_coordinators.url_for("a") is None
        kube.put("ConfigMap", {"metadata": {"name": POOL_COORDINATORS_CONFIGMAP, "namespace": "edgewatch"},
                               "data": {"a": "https://198.18.0.9:12379", "b": "http://198.18.0.8:12379",
                                        "Bad_Pool": "https://198.18.0.7:12379", "c": "not a url"}})
        await wait(lambda: m.discovered_coordinators == {"a": "https://198.18.0.9:12379"})
        assert recorded.config_refusals.count("invalid_discovered_coordinator") == 3  # no downgrade to http, no junk
        await kube.delete(ConfigMap, POOL_COORDINATORS_CONFIGMAP, namespace="edgewatch")
        await wait(lambda: m.discovered_coordinators == {})

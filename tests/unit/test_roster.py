"""Group rosters (edgewatch.core.roster) and the controller's publisher (edgewatch.controller.roster).

The pure part is property-tested: a roster holds exactly the group ``GroupingConfig.group_of``
computes, names are valid and never shared by two groups, encoding is deterministic and decodes
back, and any bytes decode to a roster or a ``RosterError``, never another exception. The publisher
runs against the in-memory apiserver (tests/unit/_fakekube.py), fed by the controller's shared Node
informer (edgewatch.controller.nodeinformer): it writes on membership change only, never from half
a list, retries a conflict, and deletes a gone group's roster.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lightkube.resources.core_v1 import ConfigMap

from edgewatch.controller.nodeinformer import SharedNodeInformer
from edgewatch.controller.roster import RosterPublisher
from edgewatch.core.grouping import GroupingConfig
from edgewatch.core.roster import (GROUP_INDEX_NAME, MAX_ROSTER_BYTES, ROSTER_PREFIX, Roster, RosterError, build_rosters,
                                   decode_roster, encode_group_index, encode_roster, roster_name)
from edgewatch.core.types import NodeName, is_dns1123_subdomain
from edgewatch.kube.informer import InformerConfig

from _fakekube import FakeKube, api_error

ZONE = "edgewatch.io/topology-zone"
POOL = "edgewatch.io/pool"

zones = st.one_of(st.none(), st.just(""), st.sampled_from(["a", "A", "b", "zone.1", "x_y", "Z-9"]),
                  st.text(alphabet="abcXYZ019-_.", min_size=1, max_size=63))
configs = st.builds(GroupingConfig, enabled=st.booleans(), cover_label=st.sampled_from(["", POOL]))


@st.composite
def clusters(draw: Any) -> dict[NodeName, dict[str, str]]:
    n = draw(st.integers(min_value=0, max_value=30))
    out: dict[NodeName, dict[str, str]] = {}
    for i in range(n):
        labels: dict[str, str] = {}
        zone = draw(zones)
        if zone is not None:
            labels[ZONE] = zone
        if draw(st.booleans()):
            labels[POOL] = "p"
        out[NodeName(f"n-{i}")] = labels
    return out


@settings(max_examples=300, deadline=None)
@given(config=configs, cluster=clusters())
def test_a_roster_holds_exactly_the_group(config: GroupingConfig, cluster: dict[NodeName, dict[str, str]]) -> None:
    addresses = {n: f"10.0.0.{i + 1}" for i, n in enumerate(cluster)}
    rosters = build_rosters(config, node_labels=cluster, addresses=addresses)
    for node, labels in cluster.items():
        group = config.group_of(node, node_labels=cluster)
        name = roster_name(config, labels)
        if name is None:
            assert group == {node}  # a group of one has no roster
            continue
        assert set(rosters[name].members) == group
        assert all(rosters[name].members[m] == addresses[m] for m in group)
    named = [n for n in cluster if roster_name(config, cluster[n]) is not None]
    assert sum(len(r.members) for r in rosters.values()) == len(named)  # every member in exactly one roster


@given(a=st.text(min_size=1, max_size=63), b=st.text(min_size=1, max_size=63))
def test_names_are_valid_and_two_groups_never_share_one(a: str, b: str) -> None:
    config = GroupingConfig(enabled=True)
    name_a, name_b = roster_name(config, {ZONE: a}), roster_name(config, {ZONE: b})
    assert name_a is not None and is_dns1123_subdomain(name_a) and len(name_a) <= 63
    assert (name_a == name_b) == (a == b)


def test_names_follow_the_grouping_rules() -> None:
    assert roster_name(GroupingConfig(), {}) == ROSTER_PREFIX  # grouping off: one group
    assert roster_name(GroupingConfig(enabled=True), {}) is None  # no label: a group of one
    assert roster_name(GroupingConfig(enabled=True), {ZONE: ""}) is None
    assert roster_name(GroupingConfig(cover_label=POOL), {ZONE: "a"}) is None  # not covered
    assert roster_name(GroupingConfig(enabled=True), {ZONE: "Site_7"}).startswith("edgewatch-roster-site-7-")


@given(members=st.dictionaries(st.from_regex(r"[a-z]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True),
                               st.one_of(st.none(), st.ip_addresses().map(str)), max_size=40),
       group=st.text(max_size=20))
def test_encoding_is_deterministic_and_decodes_back(members: dict[str, str | None], group: str) -> None:
    roster = Roster(group=group, members={NodeName(k): v for k, v in members.items()})
    data = encode_roster(roster)
    assert data == encode_roster(Roster(group=group, members=dict(reversed(list(roster.members.items())))))
    assert decode_roster(data) == roster


@given(data=st.one_of(st.none(), st.dictionaries(st.sampled_from(["members", "group", "x"]),
                                                st.one_of(st.text(max_size=200), st.from_regex(
                                                    r'\{"[a-z.-]{1,12}":"[0-9a-f.:x]{0,20}"\}', fullmatch=True)))))
def test_any_input_decodes_or_raises_roster_error(data: dict[str, str] | None) -> None:
    try:
        roster = decode_roster(data)
    except RosterError:
        return
    assert all(is_dns1123_subdomain(n) for n in roster.members)


@pytest.mark.parametrize("members", [
    "[]", '{"a": 1}', '{"Bad_Name": ""}', '{"a": "not-an-ip"}', "{", '"x"', "x" * (MAX_ROSTER_BYTES + 1)])
def test_malformed_rosters_are_refused(members: str) -> None:
    with pytest.raises(RosterError):
        decode_roster({"members": members})


@settings(max_examples=200, deadline=None)
@given(config=configs, cluster=clusters())
def test_the_group_index_names_each_members_roster(config: GroupingConfig,
                                                   cluster: dict[NodeName, dict[str, str]]) -> None:
    rosters = build_rosters(config, node_labels=cluster, addresses={})
    index = encode_group_index(rosters)
    for node, labels in cluster.items():
        assert index.get(node) == roster_name(config, labels)  # None: a group of one, not in the index
    assert list(index) == sorted(index) and GROUP_INDEX_NAME not in {roster_name(config, l) for l in cluster.values()}


def test_a_roster_too_big_for_a_config_map_is_refused_not_truncated() -> None:
    big = Roster(group="", members={NodeName(f"node-{i:06d}-{'x' * 40}"): "10.0.0.1" for i in range(20_000)})
    with pytest.raises(RosterError, match="over the"):
        encode_roster(big)


# -- the publisher ---------------------------------------------------------------------------------


def _node(kube: FakeKube, name: str, address: str, **labels: str) -> None:
    kube.put("Node", {"metadata": {"name": name, "labels": labels},
                      "status": {"addresses": [{"type": "InternalIP", "address": address}]}})


def _members(kube: FakeKube, name: str) -> dict[str, str]:
    return json.loads(kube.obj("ConfigMap", name, "edgewatch")["data"]["members"])


async def _wait(predicate: Any, timeout_s: float = 3.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.01)


def _publishing(kube: FakeKube, pub: RosterPublisher) -> asyncio.Task[None]:
    """The publisher with the shared Node informer feeding it (as the reconciler runs them)."""
    nodes = SharedNodeInformer(client=kube, subscribers={"roster": pub},
                               config=InformerConfig(backoff_initial_s=0.01, backoff_max_s=0.05))

    async def both() -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(nodes.run())
            tg.create_task(pub.run())

    return asyncio.create_task(both())


def _writes(kube: FakeKube) -> list[tuple[str, ...]]:
    return [c for c in kube.calls if c[0] in ("create", "replace", "delete") and c[1] == "ConfigMap"]


async def test_publisher_writes_on_membership_change_only() -> None:
    kube = FakeKube()
    for i in range(1, 4):
        _node(kube, f"a-{i}", f"10.0.0.{i}", **{ZONE: "a"})
    _node(kube, "b-1", "10.0.1.1", **{ZONE: "b"})
    _node(kube, "lone", "10.0.2.1")
    config = GroupingConfig(enabled=True)
    results: list[str] = []
    pub = RosterPublisher(client=kube, namespace="edgewatch", grouping=lambda: config,  # type: ignore[arg-type]
                          settle_s=0.01, retry_s=0.01, on_write=results.append)
    task = _publishing(kube, pub)
    try:
        name_a, name_b = roster_name(config, {ZONE: "a"}), roster_name(config, {ZONE: "b"})
        assert name_a and name_b
        await _wait(lambda: results.count("created") == 3)  # two rosters and the group index
        assert _members(kube, name_a) == {"a-1": "10.0.0.1", "a-2": "10.0.0.2", "a-3": "10.0.0.3"}
        assert kube.obj("ConfigMap", GROUP_INDEX_NAME, "edgewatch")["data"] == {
            "a-1": name_a, "a-2": name_a, "a-3": name_a, "b-1": name_b}
        assert _members(kube, name_b) == {"b-1": "10.0.1.1"}
        assert kube.obj("ConfigMap", name_a, "edgewatch")["metadata"]["labels"] == {"edgewatch.io/roster": "true"}
        # the kubelet's status reports and a taint change nothing a roster holds: no write
        before = len(_writes(kube))
        for _ in range(5):
            obj = kube.obj("Node", "a-1")
            obj.setdefault("spec", {})["taints"] = [{"key": "x", "effect": "NoSchedule"}]
            kube.put("Node", obj)
        await asyncio.sleep(0.2)
        assert len(_writes(kube)) == before
        # nor does a label that moves no node to another group (kube-controller-manager adds
        # beta.kubernetes.io/os to every new Node): not even a publication (a LIST and a rebuild)
        published = pub.published
        obj = kube.obj("Node", "a-2")
        obj["metadata"]["labels"]["beta.kubernetes.io/os"] = "linux"
        kube.put("Node", obj)
        await asyncio.sleep(0.2)
        assert pub.published == published and len(_writes(kube)) == before
        # a join, a new address, a departure: one write each, to that group's roster only; the
        # group index keeps the carry deadline the controller annotated it with
        index = kube.obj("ConfigMap", GROUP_INDEX_NAME, "edgewatch")
        index["metadata"]["annotations"] = {"edgewatch.io/carry-until": "2026-11-28T10:05:00.000000Z"}
        kube.put("ConfigMap", index)
        _node(kube, "a-4", "10.0.0.4", **{ZONE: "a"})
        await _wait(lambda: "a-4" in _members(kube, name_a))
        await _wait(lambda: "a-4" in kube.obj("ConfigMap", GROUP_INDEX_NAME, "edgewatch")["data"])
        assert kube.obj("ConfigMap", GROUP_INDEX_NAME, "edgewatch")["metadata"]["annotations"] == {
            "edgewatch.io/carry-until": "2026-11-28T10:05:00.000000Z"}
        _node(kube, "a-1", "10.0.0.9", **{ZONE: "a"})
        await _wait(lambda: _members(kube, name_a)["a-1"] == "10.0.0.9")
        _node(kube, "b-1", "10.0.1.1", **{ZONE: "a"})  # relabelled: group b is gone
        await _wait(lambda: ("ConfigMap", "edgewatch", name_b) not in kube.objects)
        assert "b-1" in _members(kube, name_a)
        await _wait(lambda: kube.obj("ConfigMap", GROUP_INDEX_NAME, "edgewatch")["data"]["b-1"] == name_a)
        assert results.count("deleted") == 1 and "error" not in results
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_publisher_retries_a_conflict_and_follows_the_grouping() -> None:
    kube = FakeKube()
    for i in range(1, 4):
        _node(kube, f"a-{i}", f"10.0.0.{i}", **{ZONE: "a"})
    config = [GroupingConfig(enabled=False)]
    conflicts = [1]

    async def conflict_once(kind: str, name: str) -> None:
        if kind == "ConfigMap" and conflicts:
            conflicts.pop()
            raise api_error(409, "the object has been modified")

    kube.hooks["create"] = conflict_once
    results: list[str] = []
    pub = RosterPublisher(client=kube, namespace="edgewatch", grouping=lambda: config[0],  # type: ignore[arg-type]
                          settle_s=0.01, retry_s=0.01, on_write=results.append)
    task = _publishing(kube, pub)
    try:
        await _wait(lambda: ("ConfigMap", "edgewatch", ROSTER_PREFIX) in kube.objects)
        await _wait(lambda: results.count("created") == 2)
        assert results[0] == "conflict" and results.count("conflict") == 1
        assert set(_members(kube, ROSTER_PREFIX)) == {"a-1", "a-2", "a-3"}
        config[0] = GroupingConfig(enabled=True)  # grouping switched on: one roster per label value
        pub.touch()
        zone_a = roster_name(config[0], {ZONE: "a"})
        await _wait(lambda: ("ConfigMap", "edgewatch", ROSTER_PREFIX) not in kube.objects)
        assert set(_members(kube, zone_a or "")) == {"a-1", "a-2", "a-3"}
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_publisher_waits_for_a_complete_node_list() -> None:
    kube = FakeKube()
    _node(kube, "a-1", "10.0.0.1")
    listed = asyncio.Event()

    async def failing_list(kind: str) -> None:
        if kind == "Node" and not listed.is_set():
            raise api_error(500, "etcd timeout")

    kube.hooks["list"] = failing_list
    pub = RosterPublisher(client=kube, namespace="edgewatch", grouping=GroupingConfig,  # type: ignore[arg-type]
                          settle_s=0.01, retry_s=0.01)
    task = _publishing(kube, pub)
    try:
        await asyncio.sleep(0.1)
        assert not pub.synced.is_set() and not [k for k in kube.objects if k[0] == "ConfigMap"]
        listed.set()
        await _wait(lambda: ("ConfigMap", "edgewatch", ROSTER_PREFIX) in kube.objects, timeout_s=5)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def test_config_map_model_round_trips_a_roster() -> None:
    data = encode_roster(Roster(group="a", members={NodeName("a-1"): "10.0.0.1", NodeName("a-2"): None}))
    cm = ConfigMap.from_dict({"metadata": {"name": "x"}, "data": data})
    assert decode_roster(cm.data).members == {"a-1": "10.0.0.1", "a-2": None}

"""Tests of edgewatch.core.grouping: TKE Edge's grouping rules as a table, strict
ConfigMap parsing, and hypothesis properties (partition, symmetry)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgewatch.core.grouping import (
    DEFAULT_LABEL_KEY,
    GroupingConfig,
    group_of,
    groups,
    is_label_key,
    parse_grouping_config,
)
from edgewatch.core.types import NodeName

Z = DEFAULT_LABEL_KEY


def N(*xs: str) -> frozenset[NodeName]:
    return frozenset(NodeName(x) for x in xs)


CLUSTER: dict[NodeName, dict[str, str]] = {
    NodeName("plant-1"): {Z: "plant", "other": "x"},
    NodeName("plant-2"): {Z: "plant"},
    NodeName("plant-3"): {Z: "plant"},
    NodeName("store-1"): {Z: "warehouse"},
    NodeName("store-2"): {Z: "warehouse"},
    NodeName("lonely"): {"other": "plant"},
    NodeName("blank"): {Z: ""},
}


@pytest.mark.parametrize(
    ("node", "enabled", "expected"),
    [
        ("plant-1", True, N("plant-1", "plant-2", "plant-3")),
        ("store-2", True, N("store-1", "store-2")),
        ("lonely", True, N("lonely")),  # no label: checks only itself
        ("blank", True, N("blank")),  # empty value counts as no label
        ("plant-1", False, frozenset(CLUSTER)),  # off: everyone, labels ignored
        ("lonely", False, frozenset(CLUSTER)),
    ],
)
def test_seed_003_rules(node: str, enabled: bool, expected: frozenset[NodeName]) -> None:
    assert group_of(NodeName(node), node_labels=CLUSTER, enabled=enabled) == expected
    assert groups(node_labels=CLUSTER, enabled=enabled)[NodeName(node)] == expected
    cfg = GroupingConfig(enabled=enabled)
    assert cfg.group_of(NodeName(node), node_labels=CLUSTER) == expected
    assert cfg.groups(node_labels=CLUSTER)[NodeName(node)] == expected


def test_custom_label_key() -> None:
    got = groups(node_labels=CLUSTER, enabled=True, label_key="other")
    assert got[NodeName("plant-1")] == N("plant-1")
    assert got[NodeName("lonely")] == N("lonely")
    assert got[NodeName("plant-2")] == N("plant-2")


def test_label_values_are_case_sensitive() -> None:
    got = groups(node_labels={NodeName("a"): {Z: "Zone"}, NodeName("b"): {Z: "zone"}}, enabled=True)
    assert got[NodeName("a")] == N("a")


def test_members_of_one_group_share_one_object() -> None:
    got = groups(node_labels=CLUSTER, enabled=True)
    assert got[NodeName("plant-1")] is got[NodeName("plant-3")]


def test_unknown_node_has_no_group() -> None:
    with pytest.raises(ValueError):
        group_of(NodeName("ghost"), node_labels=CLUSTER, enabled=True)
    with pytest.raises(ValueError):
        group_of(NodeName("ghost"), node_labels=CLUSTER, enabled=False)


def test_empty_node_list() -> None:
    assert groups(node_labels={}, enabled=True) == {}
    assert groups(node_labels={}, enabled=False) == {}


@pytest.mark.parametrize("kwargs", [{"enabled": "on"}, {"enabled": 1}, {"enabled": True, "label_key": ""}, {"enabled": True, "label_key": "a b"}])
def test_bad_arguments(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        groups(node_labels=CLUSTER, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        group_of(NodeName("plant-1"), node_labels=CLUSTER, **kwargs)  # type: ignore[arg-type]


def test_non_string_label_value_is_refused() -> None:
    with pytest.raises(ValueError):
        groups(node_labels={NodeName("a"): {Z: 3}}, enabled=True)  # type: ignore[dict-item]


# --------------------------------------------------------------------------- label keys


@pytest.mark.parametrize(
    ("key", "ok"),
    [
        ("edgewatch.io/topology-zone", True),
        ("zone", True),
        ("topology.kubernetes.io/zone", True),
        ("a", True),
        ("A_b.c-D", True),
        ("x" * 63, True),
        ("x" * 64, False),
        ("", False),
        ("/zone", False),
        ("Edgewatch.io/zone", False),  # prefix must be lower case
        ("a/b/c", False),
        ("-zone", False),
        ("zone-", False),
        ("zo ne", False),
        ("zöne", False),
        ("edgewatch.io/", False),
        (("a" * 254) + "/zone", False),
        (None, False),
        (3, False),
    ],
)
def test_label_key_validation(key: object, ok: bool) -> None:
    assert is_label_key(key) is ok
    if not ok:
        with pytest.raises(ValueError):
            GroupingConfig(enabled=True, label_key=key)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- ConfigMap


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({}, GroupingConfig()),
        ({"grouping": "on"}, GroupingConfig(enabled=True)),
        ({"grouping": "true"}, GroupingConfig(enabled=True)),
        ({"grouping": " ON\n"}, GroupingConfig(enabled=True)),
        ({"grouping": "False"}, GroupingConfig(enabled=False)),
        ({"grouping": "off"}, GroupingConfig(enabled=False)),
        ({"grouping": "on", "groupLabel": "site"}, GroupingConfig(enabled=True, label_key="site")),
        ({"groupLabel": "example.com/site"}, GroupingConfig(label_key="example.com/site")),
    ],
)
def test_parse_grouping_config(data: dict[str, str], expected: GroupingConfig) -> None:
    assert parse_grouping_config(data) == expected


def test_defaults() -> None:
    cfg = GroupingConfig()
    assert cfg.enabled is False
    assert cfg.label_key == "edgewatch.io/topology-zone"


@pytest.mark.parametrize(
    ("data", "named"),
    [
        ({"grouping": "yes"}, "grouping"),
        ({"grouping": "1"}, "grouping"),
        ({"grouping": ""}, "grouping"),
        ({"grouping": True}, "grouping"),
        ({"groupLabel": ""}, "groupLabel"),
        ({"groupLabel": "not a key"}, "groupLabel"),
        ({"groupLabel": 5}, "groupLabel"),
        ({"groupLable": "zone"}, "groupLable"),  # typo: never silently ignored
        ({"Grouping": "on"}, "Grouping"),
        ({"grouping": "on", "enableGrouping": "true"}, "enableGrouping"),
    ],
)
def test_bad_config_is_refused_naming_the_key(data: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        parse_grouping_config(data)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- properties

node_names = st.from_regex(r"[a-z][a-z0-9]{0,5}", fullmatch=True).map(NodeName)
label_maps = st.dictionaries(
    node_names,
    st.one_of(
        st.just({}),
        st.builds(lambda v: {Z: v}, st.sampled_from(["", "a", "b", "c", "zone-1"])),
        st.builds(lambda v: {"other": v}, st.sampled_from(["a", "b"])),
    ),
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(label_maps, st.booleans())
def test_groups_partition_and_are_symmetric(node_labels: dict[NodeName, dict[str, str]], enabled: bool) -> None:
    got = groups(node_labels=node_labels, enabled=enabled)
    assert set(got) == set(node_labels)
    distinct = {g for g in got.values()}
    covered: set[NodeName] = set()
    for g in distinct:
        assert not (covered & g), "groups overlap"
        covered |= g
    assert covered == set(node_labels)
    for a, ga in got.items():
        assert a in ga
        for b in ga:
            assert a in got[b]  # symmetric
            assert got[b] == ga  # transitive: one group
        assert group_of(a, node_labels=node_labels, enabled=enabled) == ga


@settings(max_examples=100, deadline=None)
@given(label_maps)
def test_grouping_off_is_one_group_and_on_refines_it(node_labels: dict[NodeName, dict[str, str]]) -> None:
    off = groups(node_labels=node_labels, enabled=False)
    on = groups(node_labels=node_labels, enabled=True)
    for n in node_labels:
        assert off[n] == frozenset(node_labels)
        assert on[n] <= off[n]
        zone = node_labels[n].get(Z)
        if not zone:
            assert on[n] == {n}
        else:
            assert on[n] == {m for m, labels in node_labels.items() if labels.get(Z) == zone}


@settings(max_examples=100, deadline=None)
@given(label_maps, st.data())
def test_relabelling_one_node_only_touches_its_old_and_new_groups(
    node_labels: dict[NodeName, dict[str, str]], data: st.DataObject
) -> None:
    if not node_labels:
        return
    node = data.draw(st.sampled_from(sorted(node_labels)))
    new_value = data.draw(st.sampled_from(["", "a", "b", "new"]))
    before = groups(node_labels=node_labels, enabled=True)
    changed = {**node_labels, node: {**node_labels[node], Z: new_value}}
    after = groups(node_labels=changed, enabled=True)
    for m in node_labels:
        if m != node and node not in before[m] and node not in after[m]:
            assert before[m] == after[m]


# --------------------------------------------------------------------------- coverLabel


def test_cover_label_keeps_uncovered_nodes_out_of_every_group() -> None:
    labels = {NodeName("a-1"): {"edgewatch.io/pool": "a"}, NodeName("a-2"): {"edgewatch.io/pool": "a"},
              NodeName("cloud-1"): {"node-role.kubernetes.io/control-plane": ""}}
    covered = parse_grouping_config({"coverLabel": "edgewatch.io/pool"})
    assert covered.group_of(NodeName("a-1"), node_labels=labels) == {"a-1", "a-2"}
    assert set(covered.groups(node_labels=labels)) == {"a-1", "a-2"}
    # An uncovered node asking for its own group is alone in it.
    assert covered.group_of(NodeName("cloud-1"), node_labels=labels) == {"cloud-1"}
    everyone = parse_grouping_config({})
    assert everyone.group_of(NodeName("a-1"), node_labels=labels) == {"a-1", "a-2", "cloud-1"}


@pytest.mark.parametrize("bad", ["not a label!", "/x", "a" * 300])
def test_cover_label_must_be_a_label_key(bad: str) -> None:
    with pytest.raises(ValueError, match="coverLabel"):
        parse_grouping_config({"coverLabel": bad})


def test_monitoring_rings_key() -> None:
    from edgewatch.core.grouping import MAX_RINGS

    assert parse_grouping_config({}).rings == 3
    assert parse_grouping_config({"monitoringRings": " 5 "}).rings == 5
    for bad in ("0", str(MAX_RINGS + 1), "three", "-1", "2.5", ""):
        with pytest.raises(ValueError, match="monitoringRings"):
            parse_grouping_config({"monitoringRings": bad})
    with pytest.raises(ValueError):
        GroupingConfig(rings=True)  # type: ignore[arg-type]

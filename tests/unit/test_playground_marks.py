"""The lab's own definition of what edgewatch leaves on a cluster (edgewatch_lab.playground.marks):
the marks on a Node and its Lease, and the objects left in edgewatch's namespaces, cluster-wide and
as CertificateSigningRequests after an uninstall."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgewatch_lab.playground.marks import (
    DOMAIN,
    KUBELET_CONDITIONS,
    OPERATOR_ANNOTATIONS,
    OUT_OF_SERVICE_TAINT,
    edgewatch_csrs,
    lease_marks,
    left_cluster_wide,
    left_in_namespace,
    node_marks,
)

OOS = "node.kubernetes.io/out-of-service"


def marks(taints: list[tuple[str, str]] | None = None, annotations: dict[str, str] | None = None,
          conditions: list[str] | None = None) -> list[str]:
    return node_marks(taints=taints or [], annotations=annotations or {}, conditions=conditions or [])


def test_the_constants_are_the_documented_ones():
    assert DOMAIN == "edgewatch.io/"
    assert OUT_OF_SERVICE_TAINT == OOS
    assert OPERATOR_ANNOTATIONS == {"edgewatch.io/out-of-service", "edgewatch.io/autonomy-duration"}
    assert KUBELET_CONDITIONS == {"Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable"}


# --------------------------------------------------------------------------------------------------
# node_marks: one rule per row


@pytest.mark.parametrize(("taints", "annotations", "conditions", "expected"), [
    # a clean node
    ([], {}, [], []),
    # taints: anything under the domain is a mark, whatever its value
    ([("edgewatch.io/unreachable", "")], {}, [], ["taint edgewatch.io/unreachable"]),
    ([("edgewatch.io/held", "x")], {}, [], ["taint edgewatch.io/held"]),
    # taints: the stock ones and a look-alike domain are not
    ([("node.kubernetes.io/unreachable", ""), ("node.kubernetes.io/not-ready", "")], {}, [], []),
    ([("edgewatch.io.evil/x", ""), ("edgewatch.iox", ""), ("foo/edgewatch.io/x", "")], {}, [], []),
    ([("EDGEWATCH.IO/x", "")], {}, [], []),
    # the out-of-service taint: a mark only with the value edgewatch
    ([(OOS, "edgewatch")], {}, [], [f"taint {OOS}"]),
    ([(OOS, "")], {}, [], []),
    ([(OOS, "operator")], {}, [], []),
    ([(OOS, "Edgewatch")], {}, [], []),
    ([(OOS, "nodeshutdown"), (OOS, "edgewatch")], {}, [], [f"taint {OOS}"]),
    # annotations: under the domain, but not the operator's settings
    ([], {"edgewatch.io/state": "held"}, [], ["annotation edgewatch.io/state"]),
    ([], {"edgewatch.io/out-of-service": "true"}, [], []),
    ([], {"edgewatch.io/autonomy-duration": "300s"}, [], []),
    ([], {"node.alpha.kubernetes.io/ttl": "0", "kubeadm.alpha.kubernetes.io/cri-socket": "x"}, [], []),
    ([], {"edgewatch.io.other/x": "1"}, [], []),
    # an annotation with the out-of-service taint's key is not the taint
    ([], {OOS: "edgewatch"}, [], []),
    # conditions: the kubelet's (and the CNI's NetworkUnavailable) are not marks, any other is
    ([], {}, ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable"], []),
    ([], {}, ["EdgewatchHeld"], ["condition EdgewatchHeld"]),
    ([], {}, ["Ready", "PeerReachable"], ["condition PeerReachable"]),
    ([], {}, ["ready"], ["condition ready"]),
    # a taint key under the domain on a condition-less node with operator annotations: only the taint
    ([("edgewatch.io/x", "")], {"edgewatch.io/out-of-service": "true"}, ["Ready"], ["taint edgewatch.io/x"]),
])
def test_node_marks_rules(taints: list[tuple[str, str]], annotations: dict[str, str], conditions: list[str],
                          expected: list[str]):
    assert marks(taints, annotations, conditions) == expected


def test_node_marks_are_sorted_deduplicated_and_prefixed_by_kind():
    got = marks(
        taints=[("edgewatch.io/z", ""), ("edgewatch.io/a", "NoSchedule"), ("edgewatch.io/a", "NoExecute"),
                (OOS, "edgewatch")],
        annotations={"edgewatch.io/state": "held", "edgewatch.io/autonomy-duration": "1h", "other": "x"},
        conditions=["Zeta", "Ready", "Alpha", "Zeta"],
    )
    assert got == [
        "annotation edgewatch.io/state",
        "condition Alpha",
        "condition Zeta",
        "taint edgewatch.io/a",
        "taint edgewatch.io/z",
        f"taint {OOS}",
    ]


def test_the_same_key_is_told_apart_by_kind():
    key = "edgewatch.io/state"
    assert marks([(key, "")], {key: "x"}, [key]) == [f"annotation {key}", f"condition {key}", f"taint {key}"]


def test_operator_annotations_are_settings_only_as_node_annotations():
    # as a taint key or a condition type they are not exempt
    assert marks(taints=[("edgewatch.io/out-of-service", "")]) == ["taint edgewatch.io/out-of-service"]
    assert lease_marks({"edgewatch.io/autonomy-duration": "1"}) == ["lease edgewatch.io/autonomy-duration"]


# --------------------------------------------------------------------------------------------------
# lease_marks


@pytest.mark.parametrize(("annotations", "expected"), [
    ({}, []),
    ({"edgewatch.io/carried-by": "a-2"}, ["lease edgewatch.io/carried-by"]),
    ({"edgewatch.io/b": "1", "edgewatch.io/a": "2", "control-plane.alpha.kubernetes.io/leader": "x"},
     ["lease edgewatch.io/a", "lease edgewatch.io/b"]),
    ({"edgewatch.iox/a": "1", "x.edgewatch.io/a": "1"}, []),
    # every domain key on a Lease is a mark: the operator exemption is for Node annotations
    ({"edgewatch.io/out-of-service": "true"}, ["lease edgewatch.io/out-of-service"]),
])
def test_lease_marks(annotations: dict[str, str], expected: list[str]):
    assert lease_marks(annotations) == expected


# --------------------------------------------------------------------------------------------------
# leftovers


@pytest.mark.parametrize(("kind", "names", "expected"), [
    ("ConfigMap", [], []),
    ("ConfigMap", ["kube-root-ca.crt"], []),
    ("ServiceAccount", ["default"], []),
    ("ConfigMap", ["roster", "kube-root-ca.crt", "agent-config"], ["ConfigMap/agent-config", "ConfigMap/roster"]),
    ("ServiceAccount", ["edgewatch-agent", "default"], ["ServiceAccount/edgewatch-agent"]),
    # the defaults are per kind: a Secret named default or a ServiceAccount named kube-root-ca.crt is left over
    ("Secret", ["default", "kube-root-ca.crt"], ["Secret/default", "Secret/kube-root-ca.crt"]),
    ("ServiceAccount", ["kube-root-ca.crt"], ["ServiceAccount/kube-root-ca.crt"]),
    ("ConfigMap", ["default"], ["ConfigMap/default"]),
    ("Lease", ["b", "a"], ["Lease/a", "Lease/b"]),
])
def test_left_in_namespace(kind: str, names: list[str], expected: list[str]):
    assert left_in_namespace(kind, names) == expected


@pytest.mark.parametrize(("kind", "names", "expected"), [
    ("ClusterRole", [], []),
    ("ClusterRole", ["system:node", "admin", "cluster-admin"], []),
    ("ClusterRole", ["edgewatch-controller", "admin", "edgewatch-agent"],
     ["ClusterRole/edgewatch-agent", "ClusterRole/edgewatch-controller"]),
    ("ClusterRoleBinding", ["edgewatch"], ["ClusterRoleBinding/edgewatch"]),
    ("ValidatingWebhookConfiguration", ["my-edgewatch", "Edgewatch-x"], []),
])
def test_left_cluster_wide(kind: str, names: list[str], expected: list[str]):
    assert left_cluster_wide(kind, names) == expected


@pytest.mark.parametrize(("signers", "expected"), [
    ({}, []),
    ({"csr-1": "kubernetes.io/kube-apiserver-client-kubelet", "csr-2": "kubernetes.io/kubelet-serving"}, []),
    ({"csr-b": "edgewatch.io/agent", "csr-a": "edgewatch.io/coordinator", "csr-c": "kubernetes.io/kubelet-serving"},
     ["CertificateSigningRequest/csr-a", "CertificateSigningRequest/csr-b"]),
    # the name does not matter, the signer does
    ({"edgewatch-agent-a-1": "example.com/signer"}, []),
    ({"x": "edgewatch.iox/agent"}, []),
])
def test_edgewatch_csrs(signers: dict[str, str], expected: list[str]):
    assert edgewatch_csrs(signers) == expected


# --------------------------------------------------------------------------------------------------
# properties

_SEGMENT = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-.", min_size=1, max_size=12)
_KEY = st.one_of(
    st.builds(lambda s: DOMAIN + s, _SEGMENT),
    st.sampled_from(sorted(OPERATOR_ANNOTATIONS) + [OOS, "node.kubernetes.io/unreachable", "edgewatch.iox/y"]),
    _SEGMENT,
    st.builds(lambda a, b: f"{a}/{b}", _SEGMENT, _SEGMENT),
)
_VALUE = st.one_of(st.sampled_from(["", "edgewatch", "operator", "Edgewatch"]), st.text(max_size=8))
_CONDITION = st.one_of(st.sampled_from(sorted(KUBELET_CONDITIONS)), st.text(min_size=1, max_size=12))

_TAINTS = st.lists(st.tuples(_KEY, _VALUE), max_size=8)
_ANNOTATIONS = st.dictionaries(_KEY, _VALUE, max_size=8)
_CONDITIONS = st.lists(_CONDITION, max_size=8)


def _is_edgewatch(key: str) -> bool:
    return key.startswith(DOMAIN)


def _justified(mark: str, taints: list[tuple[str, str]], annotations: dict[str, str], conditions: list[str]) -> bool:
    kind, _, key = mark.partition(" ")
    if kind == "taint":
        return any(k == key and (_is_edgewatch(k) or (k == OOS and v == "edgewatch")) for k, v in taints)
    if kind == "annotation":
        return key in annotations and _is_edgewatch(key) and key not in OPERATOR_ANNOTATIONS
    if kind == "condition":
        return key in conditions and key not in KUBELET_CONDITIONS
    return False


@given(taints=_TAINTS, annotations=_ANNOTATIONS, conditions=_CONDITIONS)
def test_node_marks_are_sorted_unique_and_each_names_an_edgewatch_input(
        taints: list[tuple[str, str]], annotations: dict[str, str], conditions: list[str]):
    got = node_marks(taints=taints, annotations=annotations, conditions=conditions)
    assert got == sorted(got)
    assert len(got) == len(set(got))
    for mark in got:
        assert _justified(mark, taints, annotations, conditions), mark
    # and every such input is found (nothing of edgewatch's is missed)
    expected = ({f"taint {k}" for k, v in taints if _is_edgewatch(k) or (k == OOS and v == "edgewatch")}
                | {f"annotation {k}" for k in annotations if _is_edgewatch(k) and k not in OPERATOR_ANNOTATIONS}
                | {f"condition {c}" for c in conditions if c not in KUBELET_CONDITIONS})
    assert set(got) == expected


_FOREIGN_KEY = _KEY.filter(lambda k: not _is_edgewatch(k))
_FOREIGN_TAINT = st.tuples(_FOREIGN_KEY, _VALUE).filter(lambda kv: not (kv[0] == OOS and kv[1] == "edgewatch"))


@given(taints=_TAINTS, annotations=_ANNOTATIONS, conditions=_CONDITIONS,
       more_taints=st.lists(_FOREIGN_TAINT, max_size=5),
       more_annotations=st.dictionaries(_FOREIGN_KEY, _VALUE, max_size=5),
       more_conditions=st.lists(st.sampled_from(sorted(KUBELET_CONDITIONS)), max_size=5),
       data=st.data())
def test_adding_keys_not_edgewatchs_never_changes_the_marks(
        taints: list[tuple[str, str]], annotations: dict[str, str], conditions: list[str],
        more_taints: list[tuple[str, str]], more_annotations: dict[str, str], more_conditions: list[str],
        data: Any):
    before = node_marks(taints=taints, annotations=annotations, conditions=conditions)
    # interleave the new taints anywhere; new annotations never overwrite an existing key
    mixed = list(taints)
    for t in more_taints:
        mixed.insert(data.draw(st.integers(min_value=0, max_value=len(mixed))), t)
    extra = {k: v for k, v in more_annotations.items() if k not in annotations}
    after = node_marks(taints=mixed, annotations={**annotations, **extra},
                       conditions=[*more_conditions, *conditions])
    assert after == before


@given(annotations=_ANNOTATIONS, more=st.dictionaries(_FOREIGN_KEY, _VALUE, max_size=5))
def test_lease_marks_are_the_sorted_domain_keys_and_ignore_foreign_ones(annotations: dict[str, str],
                                                                         more: dict[str, str]):
    got = lease_marks(annotations)
    assert got == sorted({f"lease {k}" for k in annotations if _is_edgewatch(k)})
    extra = {k: v for k, v in more.items() if k not in annotations}
    assert lease_marks({**annotations, **extra}) == got

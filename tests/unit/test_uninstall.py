"""edgewatch.uninstall's pure plan: which marks and objects are edgewatch's, which stay, and that every
write it plans is guarded (resourceVersion) and removes nothing else (docs/uninstall.md)."""

from __future__ import annotations

import ast
import copy
import io
import itertools
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgewatch.controller.model import STATE_ANNOTATION, UNREACHABLE_SINCE_ANNOTATION
from edgewatch.names import (
    AUTONOMY_DURATION_ANNOTATION,
    CLOUD_UNREACHABLE_TAINT_KEY,
    COORDINATOR_CLIENT_SIGNER,
    DEFAULT_GROUP_LABEL,
    DELEGATE_HEARTBEAT_ANNOTATION,
    DELEGATED_BY_ANNOTATION,
    DELEGATED_RENEW_TIME_ANNOTATION,
    DELEGATED_VIA_ANNOTATION,
    EDGE_CONDITION_TYPE,
    EVIDENCE_ANNOTATION,
    FAILED_TAINT_KEY,
    IDENTITY_NAMESPACE,
    OUT_OF_SERVICE_ANNOTATION,
    OUT_OF_SERVICE_TAINT_KEY,
    POOL_LABEL,
    ROLE_CONDITION_TYPE,
    pool_ca_name,
)
from _fakekube import api_error
from edgewatch.uninstall import (
    Deletion,
    Patch,
    is_edgewatch_taint,
    plan_deletions,
    plan_node,
    plan_node_lease,
    uninstall,
)

OURS_TAINTS = [
    {"key": CLOUD_UNREACHABLE_TAINT_KEY, "effect": "NoSchedule"},
    {"key": FAILED_TAINT_KEY, "effect": "NoExecute", "timeAdded": "2026-11-26T00:00:00Z"},
    {"key": OUT_OF_SERVICE_TAINT_KEY, "value": "edgewatch", "effect": "NoExecute"},
]
THEIRS_TAINTS = [
    {"key": OUT_OF_SERVICE_TAINT_KEY, "value": "nodeshutdown", "effect": "NoExecute"},
    {"key": OUT_OF_SERVICE_TAINT_KEY, "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
    {"key": "example.com/dedicated", "value": "edge", "effect": "NoSchedule"},
]
OURS_ANNOTATIONS = {STATE_ANNOTATION: "failed", UNREACHABLE_SINCE_ANNOTATION: "2026-11-26T00:00:00Z"}
THEIRS_ANNOTATIONS = {OUT_OF_SERVICE_ANNOTATION: "enabled", AUTONOMY_DURATION_ANNOTATION: "10m",
                      "example.com/owner": "ops"}
LABELS = {POOL_LABEL: "p", DEFAULT_GROUP_LABEL: "z", "team": "edge"}
OURS_CONDITIONS = [{"type": EDGE_CONDITION_TYPE, "status": "True"},
                   {"type": ROLE_CONDITION_TYPE, "status": "True", "reason": "Leader"}]
THEIRS_CONDITIONS = [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-11-26T00:00:00Z"},
                     {"type": "OperatorCheck", "status": "False"}]
MARK = {DELEGATE_HEARTBEAT_ANNOTATION: "true", DELEGATED_BY_ANNOTATION: "n2",
        DELEGATED_RENEW_TIME_ANNOTATION: "2026-11-26T00:00:00.000000Z", DELEGATED_VIA_ANNOTATION: "peer"}


def _node(*, taints=(), annotations=None, conditions=(), labels=None, rv="7"):  # type: ignore[no-untyped-def]
    return {"metadata": {"name": "n1", "resourceVersion": rv, "annotations": dict(annotations or {}),
                         "labels": dict(labels or {})},
            "spec": {"taints": list(taints)}, "status": {"conditions": list(conditions)}}


def _apply(node: dict, patch: Patch) -> dict:  # type: ignore[type-arg]
    """What a JSON merge patch (RFC 7386) does to ``node``, for the body the plan made."""
    def merge(target, body):  # type: ignore[no-untyped-def]
        if not isinstance(body, dict):
            return body
        out = dict(target) if isinstance(target, dict) else {}
        for k, v in body.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = merge(out.get(k), v)
        return out
    return merge(copy.deepcopy(node), copy.deepcopy(dict(patch.body)))


@pytest.mark.parametrize("taint", OURS_TAINTS)
def test_edgewatch_taints_are_recognised(taint: dict) -> None:  # type: ignore[type-arg]
    assert is_edgewatch_taint(taint)


@pytest.mark.parametrize("taint", THEIRS_TAINTS)
def test_other_taints_including_an_operators_out_of_service_are_not_ours(taint: dict) -> None:  # type: ignore[type-arg]
    assert not is_edgewatch_taint(taint)


def test_a_clean_node_needs_no_patch() -> None:
    assert plan_node(_node(taints=THEIRS_TAINTS, annotations=THEIRS_ANNOTATIONS, conditions=THEIRS_CONDITIONS,
                           labels=LABELS)) == []
    assert plan_node({"metadata": {"name": "n", "resourceVersion": "1"}}) == []


def _subsets(items: list) -> list:  # type: ignore[type-arg]
    return [list(c) for r in range(len(items) + 1) for c in itertools.combinations(items, r)]


@pytest.mark.parametrize("ours_taints", _subsets(OURS_TAINTS))
@pytest.mark.parametrize("ours_annotations", _subsets(list(OURS_ANNOTATIONS)))
@pytest.mark.parametrize("ours_conditions", _subsets(OURS_CONDITIONS))
def test_every_combination_of_marks_is_removed_and_nothing_else(ours_taints, ours_annotations,  # type: ignore[no-untyped-def]
                                                                 ours_conditions) -> None:
    taints = THEIRS_TAINTS[:2] + ours_taints + THEIRS_TAINTS[2:]
    annotations = {**THEIRS_ANNOTATIONS, **{k: OURS_ANNOTATIONS[k] for k in ours_annotations}}
    conditions = [THEIRS_CONDITIONS[0], *ours_conditions, THEIRS_CONDITIONS[1]]
    node = _node(taints=taints, annotations=annotations, conditions=conditions, labels=LABELS)
    patches = plan_node(node)
    meta_patches = [p for p in patches if p.subresource == ""]
    status_patches = [p for p in patches if p.subresource == "status"]
    assert len(meta_patches) == (1 if ours_taints or ours_annotations else 0)
    assert len(status_patches) == (1 if ours_conditions else 0)
    after = node
    for patch in patches:
        assert patch.kind == "Node" and patch.name == "n1" and patch.namespace is None
        assert patch.body["metadata"]["resourceVersion"] == "7"  # every write guarded
        assert "labels" not in patch.body["metadata"]             # labels are never written
        if patch.subresource == "status":
            assert set(patch.body) == {"metadata", "status"}
        else:
            assert "status" not in patch.body
        after = _apply(after, patch)
    assert after["spec"]["taints"] == THEIRS_TAINTS
    assert after["metadata"]["annotations"] == THEIRS_ANNOTATIONS
    assert after["metadata"]["labels"] == LABELS
    assert after["status"]["conditions"] == THEIRS_CONDITIONS
    assert plan_node({**after, "metadata": {**after["metadata"], "resourceVersion": "8"}}) == []
    removed = sorted(r for p in patches for r in p.removes)
    assert len(removed) == len(ours_taints) + len(ours_annotations) + len(ours_conditions)


def test_the_last_taint_removed_leaves_no_taint_list() -> None:
    (patch,) = plan_node(_node(taints=[OURS_TAINTS[1]]))
    assert patch.body["spec"] == {"taints": None}
    assert patch.removes == (f"taint {FAILED_TAINT_KEY}:NoExecute",)
    assert "remove taint edgewatch.io/failed:NoExecute" in patch.describe()


def test_an_annotation_only_node_patches_no_taints() -> None:
    (patch,) = plan_node(_node(taints=THEIRS_TAINTS, annotations={STATE_ANNOTATION: "disconnected"}))
    assert "spec" not in patch.body
    assert patch.body["metadata"]["annotations"] == {STATE_ANNOTATION: None}


@pytest.mark.parametrize("meta", [{}, {"name": "n"}, {"resourceVersion": "1"}])
def test_a_node_not_read_from_the_api_is_refused(meta: dict) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError):
        plan_node({"metadata": meta})
    with pytest.raises(ValueError):
        plan_node_lease({"metadata": meta})


@given(st.lists(st.sampled_from(OURS_TAINTS + THEIRS_TAINTS), max_size=8),
       st.dictionaries(st.sampled_from(list(OURS_ANNOTATIONS) + list(THEIRS_ANNOTATIONS)), st.text(max_size=5)),
       st.lists(st.sampled_from(OURS_CONDITIONS + THEIRS_CONDITIONS), max_size=6))
def test_plan_then_apply_is_clean_and_keeps_order(taints, annotations, conditions) -> None:  # type: ignore[no-untyped-def]
    node = _node(taints=taints, annotations=annotations, conditions=conditions, labels=LABELS)
    after = node
    for patch in plan_node(node):
        after = _apply(after, patch)
    assert (after["spec"].get("taints") or []) == [t for t in taints if t not in OURS_TAINTS]
    assert after["metadata"]["annotations"] == {k: v for k, v in annotations.items() if k not in OURS_ANNOTATIONS}
    assert after["status"]["conditions"] == [c for c in conditions if c not in OURS_CONDITIONS]
    assert plan_node(after) == []


@pytest.mark.parametrize("mark", _subsets(list(MARK)))
def test_lease_marks_are_removed_key_by_key(mark: list) -> None:  # type: ignore[type-arg]
    lease = {"metadata": {"name": "n1", "namespace": "kube-node-lease", "resourceVersion": "3",
                          "annotations": {"example.com/x": "y", **{k: MARK[k] for k in mark}}},
             "spec": {"holderIdentity": "n1", "renewTime": "2026-11-26T00:00:00.000000Z"}}
    patch = plan_node_lease(lease)
    if not mark:
        assert patch is None
        return
    assert patch is not None
    assert patch.kind == "Lease" and patch.namespace == "kube-node-lease"
    assert patch.body == {"metadata": {"resourceVersion": "3", "annotations": {k: None for k in mark}}}
    after = _apply(lease, patch)
    assert after["metadata"]["annotations"] == {"example.com/x": "y"}
    assert after["spec"] == lease["spec"]


def _obj(name: str, **extra: object) -> dict:  # type: ignore[type-arg]
    meta = {"name": name, "uid": f"uid-{name}", "resourceVersion": "5", **extra.pop("meta", {})}  # type: ignore[dict-item]
    return {"metadata": meta, **extra}


def test_data_objects_are_deleted_the_install_and_others_kept() -> None:
    ns = "edgewatch"
    plan = plan_deletions(
        namespace=ns,
        configmaps=[_obj("edgewatch-roster"), _obj("edgewatch-roster-a-0123456789"),
                    _obj("grp", meta={"labels": {"edgewatch.io/roster": "true"}}),
                    _obj(pool_ca_name("p")), _obj("edgewatch-config"), _obj("kube-root-ca.crt"),
                    _obj("edgewatch-rostered"), _obj("mine", meta={"labels": {"edgewatch.io/roster": "false"}})],
        secrets=[_obj("edgewatch-pool-cas"), _obj("edgewatch-beacon-key"), _obj("mine")],
        leases=[_obj("edgewatch-beacon"), _obj("edgewatch-controller"), _obj("other")],
        node_configmaps=[_obj("n1", data={"keys": "k1 AAAA"}), _obj("kube-root-ca.crt", data={"ca.crt": "x"}),
                         _obj("nokeys", data={"x": "y"})],
        node_leases=[_obj("n1", meta={"annotations": {EVIDENCE_ANNOTATION: "[]"}}), _obj("n2")],
        csrs=[_obj("c1", spec={"signerName": COORDINATOR_CLIENT_SIGNER}),
              _obj("c2", spec={"signerName": "kubernetes.io/kube-apiserver-client"}), _obj("c3")])
    got = {(d.kind, d.namespace, d.name) for d in plan}
    assert got == {
        ("ConfigMap", ns, "edgewatch-roster"), ("ConfigMap", ns, "edgewatch-roster-a-0123456789"),
        ("ConfigMap", ns, "grp"), ("ConfigMap", ns, pool_ca_name("p")),
        ("Secret", ns, "edgewatch-pool-cas"), ("Secret", ns, "edgewatch-beacon-key"),
        ("Lease", ns, "edgewatch-beacon"), ("Lease", ns, "edgewatch-controller"),
        ("ConfigMap", IDENTITY_NAMESPACE, "n1"), ("Lease", IDENTITY_NAMESPACE, "n1"),
        ("Lease", IDENTITY_NAMESPACE, "n2"), ("CertificateSigningRequest", None, "c1"),
    }
    for d in plan:  # every delete guarded by what was read
        assert isinstance(d, Deletion)
        assert d.uid == f"uid-{d.name}" and d.resource_version == "5"
        assert d.describe().endswith(f"delete ({d.why})")


def test_nothing_listed_nothing_planned() -> None:
    assert plan_deletions(namespace="edgewatch") == []


def test_the_module_imports_no_kubernetes_client_library() -> None:
    """Only edgewatch.kube imports lightkube or httpx2 (the cloud door contract)."""
    import edgewatch.uninstall as module

    tree = ast.parse(Path(module.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert imported, "the parse found the module's imports"
    assert not {m for m in imported if m.split(".")[0] in ("lightkube", "httpx2", "httpx")}
    assert len(Path(module.__file__).read_text().splitlines()) <= 600


# ------------------------------------------------------------------ the apply half, on a fake client


class _Obj:
    def __init__(self, d: dict) -> None:  # type: ignore[type-arg]
        self._d = d

    def to_dict(self) -> dict:  # type: ignore[type-arg]
        return copy.deepcopy(self._d)


class _Response:
    def __init__(self, code: int) -> None:
        self.status_code = code
        self.text = f"HTTP {code}"


class _Http:
    def __init__(self, codes: list[int]) -> None:
        self.codes = codes
        self.calls: list[tuple[str, dict]] = []  # type: ignore[type-arg]

    async def request(self, method: str, path: str, *, json: dict, timeout: float) -> _Response:  # type: ignore[type-arg]
        assert method == "DELETE" and timeout > 0
        self.calls.append((path, json))
        return _Response(self.codes.pop(0) if self.codes else 200)


class _FakeClient:
    """Lists what it was given; patches fail as told (an exception per call, None = success)."""

    def __init__(self, objects: dict[tuple[str, str | None], list[dict]],  # type: ignore[type-arg]
                 patch_results: list[BaseException | None], delete_codes: list[int]) -> None:
        self.objects = objects
        self.patch_results = patch_results
        self.patches: list[tuple[str, str, dict]] = []  # type: ignore[type-arg]
        self.http = _Http(delete_codes)

    async def _gen(self, key):  # type: ignore[no-untyped-def]
        for d in self.objects.get(key, []):
            yield _Obj(d)

    def list(self, res, *, namespace=None):  # type: ignore[no-untyped-def]
        return self._gen((res.__name__, namespace))

    async def get(self, res, name, *, namespace=None):  # type: ignore[no-untyped-def]
        for d in self.objects.get((res.__name__, namespace), []):
            if d["metadata"]["name"] == name:
                return _Obj(d)
        raise api_error(404)

    async def patch(self, res, name, body, *, namespace=None, patch_type=None):  # type: ignore[no-untyped-def]
        self.patches.append((res.__name__, name, body))
        result = self.patch_results.pop(0) if self.patch_results else None
        if result is not None:
            raise result


def _world() -> dict:  # type: ignore[type-arg]
    node = _node(taints=[OURS_TAINTS[0], THEIRS_TAINTS[0]], annotations={STATE_ANNOTATION: "x"},
                 conditions=[OURS_CONDITIONS[0]])
    return {("Node", None): [node],
            ("ConfigMap", "edgewatch"): [_obj("edgewatch-roster"), _obj("edgewatch-config")]}


async def test_dry_run_prints_the_plan_and_writes_nothing() -> None:
    client = _FakeClient(_world(), [], [])
    out = io.StringIO()
    report = await uninstall(client=client, namespace="edgewatch", dry_run=True, out=out)  # type: ignore[arg-type]
    assert client.patches == [] and client.http.calls == []
    lines = out.getvalue().splitlines()
    assert len(lines) == len(report.planned) == 3 and all(line.startswith("would ") for line in lines)
    assert report.ok and report.done == []


async def test_a_step_that_fails_is_reported_and_the_others_still_run() -> None:
    client = _FakeClient(_world(), [OSError("connection refused"), None], [200])
    out = io.StringIO()
    report = await uninstall(client=client, namespace="edgewatch", out=out)  # type: ignore[arg-type]
    assert not report.ok and len(report.failed) == 1 and "connection refused" in report.failed[0]
    assert len(report.done) == 2
    path, body = client.http.calls[0]
    assert path == "/api/v1/namespaces/edgewatch/configmaps/edgewatch-roster"
    assert body["preconditions"] == {"uid": "uid-edgewatch-roster", "resourceVersion": "5"}
    assert "FAILED Node n1" in out.getvalue() and "2 done, 1 failed" in out.getvalue()


async def test_a_conflict_re_reads_and_re_plans() -> None:
    world = _world()
    client = _FakeClient(world, [api_error(409), None, None], [409, 200])
    report = await uninstall(client=client, namespace="edgewatch", out=io.StringIO())  # type: ignore[arg-type]
    assert report.ok, report.failed
    assert [p[0] for p in client.patches] == ["Node", "Node", "NodeStatus"]
    assert len(client.http.calls) == 2  # the delete retried with the version re-read


async def test_an_object_already_gone_counts_as_removed() -> None:
    client = _FakeClient(_world(), [api_error(404), api_error(404)], [404])
    report = await uninstall(client=client, namespace="edgewatch", out=io.StringIO())  # type: ignore[arg-type]
    assert report.ok and [d.rsplit(": ", 1)[1] for d in report.done] == ["gone", "gone", "gone"]


@pytest.mark.parametrize(("patch_results", "code"), [([], 0), ([OSError("refused")], 1)])
def test_the_command_exits_nonzero_when_something_could_not_be_removed(monkeypatch, capsys,  # type: ignore[no-untyped-def]
                                                                        patch_results, code) -> None:
    import edgewatch.uninstall as module

    client = _FakeClient(_world(), list(patch_results), [])

    async def close() -> None:
        return None

    client.close = close  # type: ignore[attr-defined]
    monkeypatch.setattr(module, "api_client", lambda kubeconfig, **kw: client)

    def run() -> int:
        return module.run_uninstall(kubeconfig="k", namespace="edgewatch")

    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # asyncio.run needs a thread without a loop
        assert pool.submit(run).result(timeout=60) == code
    assert ("FAILED" in capsys.readouterr().out) is (code == 1)


def test_the_pool_coordinators_the_controller_made_are_removed_and_others_kept() -> None:
    from edgewatch.names import COORDINATOR_SERVING_SIGNER, POOL_COORDINATORS_CONFIGMAP

    ours = {"metadata": {"name": "edgewatch-coordinator-a-1234567890", "namespace": "edgewatch", "uid": "u1",
                         "resourceVersion": "5", "labels": {"app.kubernetes.io/managed-by": "edgewatch-controller"}}}
    theirs = {"metadata": {"name": "my-etcd", "namespace": "edgewatch", "uid": "u2", "resourceVersion": "6",
                           "labels": {"app.kubernetes.io/managed-by": "Helm"}}}
    urls = {"metadata": {"name": POOL_COORDINATORS_CONFIGMAP, "namespace": "edgewatch", "uid": "u3",
                         "resourceVersion": "7"}, "data": {"a": "https://10.0.0.1:12379"}}
    serving = {"metadata": {"name": "coord-x", "uid": "u4", "resourceVersion": "8"},
               "spec": {"signerName": COORDINATOR_SERVING_SIGNER}}
    got = plan_deletions(namespace="edgewatch", deployments=[ours, theirs], configmaps=[urls], csrs=[serving])
    assert sorted((d.kind, d.name) for d in got) == [("CertificateSigningRequest", "coord-x"),
                                                     ("ConfigMap", POOL_COORDINATORS_CONFIGMAP),
                                                     ("Deployment", "edgewatch-coordinator-a-1234567890")]

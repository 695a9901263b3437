"""The Helm chart (charts/edgewatch) and the kustomize base (deploy/) are one install: with the
default values the chart renders exactly deploy/'s objects, compared object by object (keyed by
apiVersion, kind, namespace, name) and field by field. deploy/ is the source of truth; a change
there that the chart does not follow fails here, naming the object and the field.

What the comparison ignores: nothing of the objects. The chart adds no label or annotation of its
own (no helm.sh/chart, app.kubernetes.io/managed-by, ...). Both sides go through the same YAML
serializer, kustomize's: deploy/ as `kubectl kustomize deploy/`, the chart as `helm template`
followed by `kubectl kustomize` of a kustomization listing only that output (no transformer). That
is needed because kustomize re-serializes deploy/'s folded CEL strings (`>-`) with an extra line
break before each more-indented line (whitespace only, which CEL ignores), while helm sends them as
written; comments and key order are not objects and do not count.

Needs helm (`hack/binaries/build.sh helm`) and kubectl (`hack/binaries/build.sh`), both built by
`make binaries`; a missing or failing one fails these tests (no skip). No apiserver.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from edgewatch_lab.testing.binaries import Binaries

import _tools as tools
from _tools import helm  # noqa: F401 - a fixture

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CHART = ROOT / "charts" / "edgewatch"
NAMESPACE = "edgewatch"  # deploy/00-namespace.yaml's; the chart's default namespace.name

Key = tuple[str, str, str, str]  # apiVersion, kind, namespace ("" cluster-wide), name


@pytest.fixture(scope="module")
def kubectl(binaries: Binaries) -> Path:
    return binaries.kubectl


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return tools.run(*args, timeout_s=120)


def check(*args: str | Path) -> str:
    proc = run(*args)
    assert proc.returncode == 0, f"{' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stderr}"
    return proc.stdout


def objects(text: str) -> dict[Key, dict[str, Any]]:
    """The objects of a multi-document YAML stream, by key; a duplicate key is an error."""
    out: dict[Key, dict[str, Any]] = {}
    for doc in yaml.safe_load_all(text):
        if not doc:
            continue
        meta = doc["metadata"]
        key = (doc["apiVersion"], doc["kind"], meta.get("namespace", ""), meta["name"])
        assert key not in out, f"{describe(key)} appears twice"
        out[key] = doc
    return out


def describe(key: Key) -> str:
    api, kind, ns, name = key
    return f"{kind} {ns + '/' if ns else ''}{name} ({api})"


def kustomize_objects(kubectl: Path, folder: Path) -> dict[Key, dict[str, Any]]:
    return objects(check(kubectl, "kustomize", folder))


def chart_objects(helm: Path, kubectl: Path, chart: Path, tmp: Path, *values: str) -> dict[Key, dict[str, Any]]:
    """`helm template` of the chart, through kustomize's serializer (see the module docstring)."""
    rendered = check(helm, "template", "edgewatch", chart, "--namespace", NAMESPACE, *values)
    folder = tmp / "rendered"
    folder.mkdir(exist_ok=True)
    (folder / "chart.yaml").write_text(rendered)
    (folder / "kustomization.yaml").write_text("resources: [chart.yaml]\n")
    return kustomize_objects(kubectl, folder)


def field_differences(path: str, want: Any, got: Any) -> list[str]:
    """Where got differs from want, one line per field path (want = deploy/, got = the chart)."""
    def show(v: Any) -> str:
        s = repr(v)
        return s if len(s) <= 120 else s[:117] + "..."
    if isinstance(want, dict) and isinstance(got, dict):
        out: list[str] = []
        for k in sorted(set(want) | set(got), key=str):
            sub = f"{path}.{k}" if path else str(k)
            if k not in got:
                out.append(f"{sub}: only in deploy/ ({show(want[k])})")
            elif k not in want:
                out.append(f"{sub}: only in the chart ({show(got[k])})")
            else:
                out += field_differences(sub, want[k], got[k])
        return out
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return [d for i, (w, g) in enumerate(zip(want, got)) for d in field_differences(f"{path}[{i}]", w, g)]
    if want != got or type(want) is not type(got):
        return [f"{path}: deploy/ has {show(want)}, the chart has {show(got)}"]
    return []


def compare(deploy: dict[Key, dict[str, Any]], chart: dict[Key, dict[str, Any]]) -> list[str]:
    """Every difference, one line each, naming the object and the field."""
    out = [f"{describe(k)}: only in deploy/" for k in sorted(set(deploy) - set(chart))]
    out += [f"{describe(k)}: only in the chart" for k in sorted(set(chart) - set(deploy))]
    for key in sorted(set(deploy) & set(chart)):
        out += [f"{describe(key)}: {d}" for d in field_differences("", deploy[key], chart[key])]
    return out


def test_chart_with_default_values_renders_exactly_deploy(helm: Path, kubectl: Path, tmp_path: Path) -> None:
    deploy = kustomize_objects(kubectl, DEPLOY)
    chart = chart_objects(helm, kubectl, CHART, tmp_path)
    assert len(deploy) >= 30
    differences = compare(deploy, chart)
    assert not differences, (
        "charts/edgewatch no longer renders deploy/'s objects with its default values; make the chart "
        "follow deploy/:\n  " + "\n  ".join(differences))


def test_a_modified_chart_is_reported_with_object_and_field(helm: Path, kubectl: Path, tmp_path: Path) -> None:
    chart = tmp_path / "edgewatch"
    shutil.copytree(CHART, chart)
    values = chart / "values.yaml"
    assert "  replicas: 2\n" in values.read_text()
    values.write_text(values.read_text().replace("  replicas: 2\n", "  replicas: 3\n"))
    (chart / "templates" / "config.yaml").unlink()  # and an object gone
    differences = compare(kustomize_objects(kubectl, DEPLOY), chart_objects(helm, kubectl, chart, tmp_path))
    assert differences == [
        "ConfigMap edgewatch/edgewatch-config (v1): only in deploy/",
        "Deployment edgewatch/edgewatch-controller (apps/v1): spec.replicas: deploy/ has 2, the chart has 3",
    ]


def test_chart_app_version_is_the_image_tag_of_deploy() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    images = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["images"]
    assert [i["newTag"] for i in images if i["name"] == "ghcr.io/edgewatch/edgewatch"] == [chart["appVersion"]]


def test_helm_lint_strict_passes(helm: Path) -> None:
    out = check(helm, "lint", "--strict", CHART)
    assert "0 chart(s) failed" in out


@pytest.mark.parametrize(("setting", "field"), [
    ("controller.replicas=abc", "replicas"),
    ("config.monitoringRings=three", "monitoringRings"),
    ("agent.nodeSelector=edge", "nodeSelector"),
    ("namespace.create=maybe", "create"),
    ("image.pullPolicy=Sometimes", "pullPolicy"),
    ("controller.replica=3", "replica"),  # a misspelt key is refused, not ignored
])
def test_values_schema_rejects_a_wrong_value(helm: Path, setting: str, field: str) -> None:
    proc = run(helm, "template", "edgewatch", CHART, "--namespace", NAMESPACE, "--set", setting)
    assert proc.returncode != 0, f"--set {setting} was accepted"
    assert "values don't meet the specifications of the schema" in proc.stderr and field in proc.stderr, proc.stderr


def test_values_schema_describes_every_value() -> None:
    import json
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(path: str, value: Any, node: dict[str, Any]) -> None:
        assert "type" in node and node.get("description"), f"{path}: untyped or undescribed"
        if "properties" not in node:  # a value: its description says its default and why
            assert node["description"].startswith("Default "), f"{path}: the description names no default"
        if isinstance(value, dict) and "properties" in node:
            assert set(value) == set(node["properties"]), f"{path}: values.yaml and the schema differ"
            for k, v in value.items():
                walk(f"{path}.{k}" if path else k, v, node["properties"][k])

    for k, v in values.items():
        walk(k, v, schema["properties"][k])


def test_values_change_what_they_name(helm: Path, kubectl: Path, tmp_path: Path) -> None:
    chart = chart_objects(
        helm, kubectl, CHART, tmp_path,
        "--set", "namespace.name=ops", "--set", "controller.replicas=1", "--set", "image.tag=0.2.0",
        "--set", "image.pullPolicy=Always", "--set", "config.grouping=on", "--set", "config.monitoringRings=4",
        "--set", "agent.nodeSelector.site=north", "--set", "controller.extraArgs={--unknown-policy=keep}")
    by_name = {(k[1], k[3]): v for k, v in chart.items()}
    assert ("Namespace", "ops") in by_name and ("Namespace", "edgewatch-nodes") in by_name
    assert ("Namespace", "edgewatch") not in by_name
    # kube-system: the two Roles that read kube-controller-manager's leader Lease (the carry clock)
    assert {k[2] for k in chart} == {"", "ops", "edgewatch-nodes", "kube-node-lease", "kube-system"}
    assert "system:serviceaccount:edgewatch:" not in yaml.safe_dump_all(list(chart.values()))
    ctl = by_name[("Deployment", "edgewatch-controller")]
    assert ctl["spec"]["replicas"] == 1
    container = ctl["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "ghcr.io/edgewatch/edgewatch:0.2.0" and container["imagePullPolicy"] == "Always"
    assert container["args"][1] == "--namespace=ops" and container["args"][-1] == "--unknown-policy=keep"
    agent = by_name[("DaemonSet", "edgewatch-agent")]["spec"]["template"]["spec"]
    assert agent["nodeSelector"] == {"site": "north"}
    assert "--namespace=ops" in agent["containers"][0]["args"]
    assert by_name[("ConfigMap", "edgewatch-config")]["data"]["monitoringRings"] == "4"
    assert by_name[("ConfigMap", "edgewatch-config")]["data"]["grouping"] == "on"
    binding = by_name[("ValidatingAdmissionPolicyBinding", "edgewatch-agent-carry")]
    assert binding["spec"]["paramRef"]["namespace"] == "ops"  # the group index
    clock = by_name[("ValidatingAdmissionPolicyBinding", "edgewatch-agent-carry-clock")]
    assert clock["spec"]["paramRef"] == {"name": "kube-controller-manager", "namespace": "kube-system",
                                         "parameterNotFoundAction": "Allow"}
    reader = by_name[("RoleBinding", "edgewatch-agent-clock")]
    assert reader["metadata"]["namespace"] == "kube-system" and reader["subjects"][0]["namespace"] == "ops"
    no_ns = chart_objects(helm, kubectl, CHART, tmp_path, "--set", "namespace.create=false")
    assert [k[3] for k in no_ns if k[1] == "Namespace"] == ["edgewatch-nodes"]


def test_notes_tell_the_next_step(helm: Path, tmp_path: Path) -> None:
    # `helm install --dry-run=client` still wants a cluster (helm 3.22), so render NOTES.txt through
    # `helm template` of a copy of the chart with one extra ConfigMap holding it.
    chart = tmp_path / "edgewatch"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "notes-check.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\n"
        'data:\n  notes: {{ include "edgewatch/templates/NOTES.txt" . | quote }}\n')
    notes = yaml.safe_load(check(helm, "template", "edgewatch", chart, "--namespace", NAMESPACE,
                                 "--show-only", "templates/notes-check.yaml"))["data"]["notes"]
    assert "kubectl label node <edge-node> edgewatch.io/pool=<pool>" in notes
    assert "\n  edgewatch status " in notes


@pytest.mark.controlplane
def test_helm_install_creates_every_object_and_uninstall_removes_them(helm: Path, kubectl: Path, binaries: Binaries,
                                                                      tmp_path: Path) -> None:
    """`helm install` as the README says, on a control plane of its own (the session's may hold
    edgewatch namespaces made by other tests, which Helm would refuse to adopt)."""
    from edgewatch_lab.testing.controlplane import ControlPlane

    want = chart_objects(helm, kubectl, CHART, tmp_path)
    with ControlPlane(binaries=binaries) as cp:
        def run_helm(*args: str) -> str:
            return check(helm, f"--kubeconfig={cp.kubeconfig}", *args)

        out = run_helm("install", "edgewatch", str(CHART), "--namespace", "default")
        assert "edgewatch.io/pool=<pool>" in out  # the notes
        for api, kind, ns, name in want:
            got = cp.kubectl("get", f"{kind.lower()}.{api.split('/')[0] if '/' in api else ''}".rstrip("."), name,
                             "-o", "name", *([f"--namespace={ns}"] if ns else []))
            assert got.strip(), f"{kind} {name} missing after helm install"
        run_helm("uninstall", "edgewatch", "--namespace", "default", "--wait", "--timeout=2m")
        left = cp.kubectl("get", "namespaces,clusterroles,validatingadmissionpolicies", "-o", "name")
        assert "edgewatch" not in left, left

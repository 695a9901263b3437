"""The playground's two ways to install edgewatch (edgewatch_lab.playground.install): the same
settings as a kustomize overlay and as chart values; the values are exact and fit the chart's
values.schema.json (checked with jsonschema, as helm does; the e2e run of node-failure installs them
with helm itself).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from edgewatch.names import POOL_LABEL
from edgewatch_lab.cli import playground
from edgewatch_lab.playground import install
from edgewatch_lab.playground.scenario import load_scenario

SCHEMA = json.loads((install.chart_dir() / "values.schema.json").read_text())
VALIDATOR = jsonschema.Draft7Validator(SCHEMA)


def schema_errors(value: Any) -> list[str]:
    """Where ``value`` breaks values.schema.json, as "path: why" (path like ``.config.grouping``)."""
    return [f"{''.join(f'[{p}]' if isinstance(p, int) else f'.{p}' for p in e.absolute_path)}: {e.message}"
            for e in VALIDATOR.iter_errors(value)]


def settings(name: str) -> dict[str, Any]:
    """The settings PlaygroundCluster.install derives from a scenario (no coordinator running)."""
    sc = load_scenario(name)
    return {"config": install.edgewatch_config(grouping=sc.topology.grouping, coordinators={},
                                               out_of_service_pools=sc.out_of_service_pools()),
            "controller_args": [f"--autonomy={sc.timings.autonomy_s:g}",
                                f"--node-monitor-grace={sc.timings.node_monitor_grace_s:g}"],
            "controller_replicas": min(2, sc.topology.cloud_nodes)}


def test_node_failure_settings_become_exact_values() -> None:
    s = settings("node-failure")
    autonomy, grace = s["controller_args"]
    assert install.values(**s) == {
        "config": {"grouping": s["config"]["grouping"], "groupLabel": "edgewatch.io/pool",
                   "coverLabel": "edgewatch.io/pool", "poolCoordinators": ""},
        "controller": {"replicas": 1, "extraArgs": [autonomy, grace]},
    }
    assert autonomy.startswith("--autonomy=") and grace == "--node-monitor-grace=20"


def test_values_with_coordinators_and_rings_are_exact() -> None:
    coordinators = yaml.safe_dump({"edge": "http://10.200.1.9:2379"})
    got = install.values(config={"grouping": "on", "groupLabel": POOL_LABEL, "coverLabel": POOL_LABEL,
                                 "poolCoordinators": coordinators, "monitoringRings": "2"},
                         controller_args=["--autonomy=45", "--unknown-policy=keep"], controller_replicas=2)
    assert got == {"config": {"grouping": "on", "groupLabel": POOL_LABEL, "coverLabel": POOL_LABEL,
                              "poolCoordinators": "edge: http://10.200.1.9:2379\n", "monitoringRings": 2},
                   "controller": {"replicas": 2, "extraArgs": ["--autonomy=45", "--unknown-policy=keep"]}}
    assert schema_errors(got) == []


@pytest.mark.parametrize("name", ["node-failure", "mixed-cluster", "cloud-partition", "pool-split-25", "cut-and-kill"])
def test_every_scenario_values_fit_the_chart_schema(name: str) -> None:
    assert schema_errors(install.values(**settings(name))) == []


def test_the_schema_check_can_fail() -> None:
    bad = {"config": {"grouping": "maybe", "monitoringRings": "3", "nope": ""},
           "controller": {"replicas": 0, "extraArgs": [1]}}
    errors = schema_errors(bad)
    assert {e.split(":")[0] for e in errors} == {".config", ".config.grouping", ".config.monitoringRings",
                                                 ".controller.replicas", ".controller.extraArgs[0]"}, errors
    assert any("'nope' was unexpected" in e for e in errors), errors


def test_overlay_and_values_carry_the_same_settings() -> None:
    s = settings("cloud-partition")
    patches = install.overlay(**s)["patches"]
    config_patch = yaml.safe_load(patches[0]["patch"])
    deployment_patch = yaml.safe_load(patches[1]["patch"])
    vals = install.values(**s)
    assert config_patch["data"] == vals["config"]
    assert deployment_patch[0]["value"] == vals["controller"]["replicas"]
    assert [p["value"] for p in deployment_patch[1:]] == vals["controller"]["extraArgs"]


def test_kustomize_install_renders_and_applies_without_helm(tmp_path: Path) -> None:
    calls: list[tuple[str, ...]] = []

    def kubectl(*args: str, **kw: Any) -> str:
        calls.append(args)
        return "rendered" if args[0] == "kustomize" else ""

    def helm() -> Path:
        raise AssertionError("helm is not needed for kustomize")

    done = install.install("kustomize", workdir=tmp_path, kubectl=kubectl, helm=helm,
                           kubeconfig=tmp_path / "kc", **settings("node-failure"))
    assert done == {"method": "kustomize", "release": "this checkout"}
    assert [c[0] for c in calls] == ["kustomize", "apply"]
    assert (tmp_path / "install" / "rendered.yaml").read_text() == "rendered"


def test_an_unknown_method_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="kustomize, helm"):
        install.install("ansible", workdir=tmp_path, kubectl=lambda *a, **k: "", helm=lambda: Path("helm"),
                        kubeconfig=tmp_path / "kc", **settings("node-failure"))


def test_run_and_compare_offer_every_method() -> None:
    for command in ("run", "compare"):
        option = next(p for p in playground.commands[command].params if p.name == "install_method")
        assert tuple(option.type.choices) == install.METHODS and option.default == "kustomize"
    help_text = CliRunner().invoke(playground, ["run", "--help"]).output
    assert "--install [kustomize|helm]" in help_text


def test_another_release_renders_its_own_base_with_its_code_image(tmp_path: Path) -> None:
    """The previous release (0.1.0, fae0b3b): its deploy/ with the image tag that runs its code."""
    calls: list[tuple[str, ...]] = []

    def kubectl(*args: str, **kw: Any) -> str:
        calls.append(args)
        return "rendered"

    install.render(workdir=tmp_path, kubectl=kubectl, config={"grouping": "off"}, controller_args=[],
                   controller_replicas=1, release="fae0b3b")
    base = tmp_path / "install" / "base"
    assert "edgewatch-agent-carry-mark" not in (base / "15-policy-agent.yaml").read_text()  # 0.1.0's own
    kustomization = yaml.safe_load((tmp_path / "install" / "kustomization.yaml").read_text())
    assert kustomization["images"] == [{"name": install.IMAGE, "newTag": "git-fae0b3b"}]
    assert install.overlay(config={}, controller_args=[], controller_replicas=1).get("images") is None


def test_another_release_installs_only_with_kustomize(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="kustomize"):
        install.install("helm", workdir=tmp_path, kubectl=lambda *a, **k: "", helm=lambda: tmp_path,
                        kubeconfig=tmp_path / "kc", config={}, controller_args=[], controller_replicas=1,
                        release="fae0b3b")


@pytest.mark.parametrize(("system", "edgewatch", "superedge"), [("edgewatch", True, False), ("stock", False, False)])
def test_a_cluster_installs_exactly_its_system(system: str, edgewatch: bool, superedge: bool) -> None:
    """One field says what judges the nodes, so edgewatch and SuperEdge can never share a lab (both
    use the host port 51005); nothing starts before ``__enter__``."""
    from edgewatch_lab.playground.cluster import PlaygroundCluster

    cluster = PlaygroundCluster(scenario=load_scenario("node-failure"), system=system)
    assert (cluster.edgewatch, cluster.superedge, cluster.superedge_bin) == (edgewatch, superedge, None)
    assert cluster.lab is None and cluster.cp is None


def test_a_cluster_refuses_an_unknown_system() -> None:
    from edgewatch_lab.playground.cluster import PlaygroundCluster

    with pytest.raises(ValueError, match="system must be one of edgewatch, superedge, stock"):
        PlaygroundCluster(scenario=load_scenario("node-failure"), system="openyurt")

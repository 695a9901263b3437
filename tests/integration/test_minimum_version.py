"""The smoke run of ``make compat`` (the oldest supported Kubernetes, measured): what that target
needs cannot silently break while only the current version runs in ``make test``.

- The wrapper module ``hack/binaries/kube-minimum`` resolves: its whole module graph is found with
  ``-mod=readonly`` (go.mod complete, go.sum holding every module's go.mod hash; only the go.mod
  files are fetched, a few MB on a fresh machine), and every staging module is pinned to the
  release's own v0.<minor>.<patch>. Building the commands (their source, about 5 minutes) is
  ``make compat``'s, not this test's.
- The minimum it builds is the one the README states and the Helm chart enforces (``kubeVersion``).
- Every scenario ``make compat`` runs is a built-in one.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from edgewatch_lab.playground.scenario import builtin_scenarios

ROOT = Path(__file__).resolve().parents[2]
WRAPPER = ROOT / "hack" / "binaries" / "kube-minimum"
COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kube-proxy", "kubelet")


def _minimum() -> tuple[int, int, int]:
    match = re.search(r"^require k8s\.io/kubernetes v1\.(\d+)\.(\d+)$", (WRAPPER / "go.mod").read_text(), re.M)
    assert match, "hack/binaries/kube-minimum/go.mod requires no k8s.io/kubernetes v1.x.y"
    return 1, int(match.group(1)), int(match.group(2))


def test_the_minimum_wrapper_module_resolves() -> None:
    env = dict(os.environ, GOFLAGS="-mod=readonly")
    done = subprocess.run(["go", "list", "-m", "all"], cwd=WRAPPER, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    modules = dict(line.split()[:2] for line in done.stdout.splitlines() if len(line.split()) >= 2)
    _, minor, patch = _minimum()
    assert modules.get("k8s.io/kubernetes") == f"v1.{minor}.{patch}", modules.get("k8s.io/kubernetes")
    assert len(modules) > 100, f"only {len(modules)} modules: not Kubernetes' module graph"
    tools = (WRAPPER / "tools.go").read_text()
    assert all(f'"k8s.io/kubernetes/cmd/{c}"' in tools for c in COMMANDS), "tools.go does not pin every command"
    # every staging module at the release's own v0.<minor>.<patch> (a mismatch builds a hybrid)
    staged = re.findall(r"^\s*(k8s\.io/[\w-]+) => k8s\.io/[\w-]+ (v\S+)$", (WRAPPER / "go.mod").read_text(), re.M)
    assert staged and {v for _m, v in staged} == {f"v0.{minor}.{patch}"}, staged


def test_the_readme_and_the_chart_state_the_minimum_that_is_built() -> None:
    _, minor, _patch = _minimum()
    chart = (ROOT / "charts" / "edgewatch" / "Chart.yaml").read_text()
    assert f'kubeVersion: ">=1.{minor}.0-0"' in chart
    readme = (ROOT / "README.md").read_text()
    assert f"| Kubernetes | **1.{minor} or newer**" in readme
    assert "make compat" in readme


def test_every_compat_scenario_is_a_builtin_one() -> None:
    makefile = (ROOT / "Makefile").read_text()
    match = re.search(r"^COMPAT_SCENARIOS \?= (.+)$", makefile, re.M)
    assert match, "no COMPAT_SCENARIOS in the Makefile"
    names = match.group(1).split()
    assert names and set(names) <= set(builtin_scenarios()), names

"""Install edgewatch into a playground cluster exactly as an operator does: render the shipped
kustomize base (``deploy/``) with a small overlay and apply it with kubectl. Nothing else: there
is no shared key to create (every agent makes and publishes its own, ``edgewatch.core.identity``).

The overlay changes only what an operator's own overlay would: the ConfigMap keys (grouping, the
pool coordinators' URLs), the controller's timing flags, and its replica count (the controller
uses the host network and port 51006, so one replica fits per cloud node). Everything else — RBAC,
security contexts, probes, volumes, the DaemonSet's node affinity — is the base as shipped.

Limits: needs the repository's ``deploy/`` folder (the playground is a developer tool run from a
checkout); kustomize is kubectl's built-in one.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable

import yaml

import edgewatch

NAMESPACE = "edgewatch"


def deploy_dir() -> Path:
    """The shipped kustomize base: ``<repository>/deploy``.

    Raises:
        FileNotFoundError: edgewatch is not running from a checkout that has it.
    """
    path = Path(edgewatch.__file__).resolve().parents[2] / "deploy"
    if not (path / "kustomization.yaml").is_file():
        raise FileNotFoundError(f"no kustomize base at {path} (run the playground from a checkout)")
    return path


def overlay(*, config: dict[str, str], controller_args: list[str], controller_replicas: int) -> dict[str, Any]:
    """The playground's kustomization (pure): the base plus ConfigMap keys, controller flags and
    replicas."""
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["base"],
        "patches": [
            {"target": {"kind": "ConfigMap", "name": "edgewatch-config"},
             "patch": yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                                      "metadata": {"name": "edgewatch-config", "namespace": NAMESPACE},
                                      "data": dict(config)})},
            {"target": {"kind": "Deployment", "name": "edgewatch-controller"},
             "patch": yaml.safe_dump(
                 [{"op": "replace", "path": "/spec/replicas", "value": controller_replicas}]
                 + [{"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": a}
                    for a in controller_args])},
        ],
    }


def render(*, workdir: Path, kubectl: Callable[..., str], config: dict[str, str], controller_args: list[str],
           controller_replicas: int) -> str:
    """Copy the base into ``workdir/install/base``, write the overlay beside it, and return
    ``kubectl kustomize`` of it (the manifests as applied, also saved as ``rendered.yaml``)."""
    root = workdir / "install"
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(deploy_dir(), root / "base", ignore=shutil.ignore_patterns("*.sh"))
    (root / "kustomization.yaml").write_text(yaml.safe_dump(overlay(
        config=config, controller_args=controller_args, controller_replicas=controller_replicas)))
    rendered = kubectl("kustomize", str(root))
    (root / "rendered.yaml").write_text(rendered)
    return rendered



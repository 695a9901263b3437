"""Install edgewatch into a playground cluster exactly as an operator does, one of two ways
(``METHODS``): render the shipped kustomize base (``deploy/``) with a small overlay and apply it
with kubectl (``kustomize``, the default), or ``helm install`` the shipped chart
(``charts/edgewatch``) with the same customizations as values (``helm``). Nothing else: there is
no shared key to create (every agent makes and publishes its own, ``edgewatch.core.identity``).

The overlay changes only what an operator's own overlay would: the ConfigMap keys (grouping, the
pool coordinators' URLs, the pools opted into the out-of-service taint; ``edgewatch_config``), the
controller's timing flags, and its replica count (the controller
uses the host network and port 51006, so one replica fits per cloud node). Everything else — RBAC,
security contexts, probes, volumes, the DaemonSet's node affinity — is the base as shipped.

The chart gets the same three changes as values (``values``): ``config.*``, ``controller.replicas``
and ``controller.extraArgs``; the image is left as shipped either way (the overlay does not touch
it; the chart's default tag is its appVersion, the tag deploy/ sets). Like ``deploy/``, the chart
creates its namespaces itself, so the release record lives in ``default``
(``sh.helm.release.v1.edgewatch.v1``). ``remove`` undoes an install the same way an operator
does (docs/uninstall.md, step 1: ``kubectl delete -k`` or ``helm uninstall``), for the scenario
step ``uninstall``; otherwise the whole control plane goes at the end of a run.

Limits: needs the repository's ``deploy/`` (or ``charts/edgewatch``) folder (the playground is a
developer tool run from a checkout); kustomize is kubectl's built-in one; helm is
``hack/binaries/build.sh helm``'s (``edgewatch_lab.testing.binaries.ensure_helm``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Callable

import yaml

import edgewatch
from edgewatch.core.grouping import CONFIG_KEY_OUT_OF_SERVICE_POOLS
from edgewatch.names import POOL_LABEL
from edgewatch_lab.testing.revisions import image_tag as revision_image_tag, revision_tree

NAMESPACE = "edgewatch"
#: edgewatch's image as deploy/ names it (an overlay may set its tag).
IMAGE = "ghcr.io/edgewatch/edgewatch"
#: The two ways to install: the kustomize base with an overlay, or the Helm chart with values.
METHODS = ("kustomize", "helm")
#: The Helm release's name and the namespace of its record (the chart creates its own namespaces).
RELEASE = "edgewatch"
RELEASE_NAMESPACE = "default"
#: ConfigMap keys the chart types as integers (values.schema.json); the others are strings.
_INTEGER_KEYS = frozenset({"monitoringRings"})


def deploy_dir() -> Path:
    """The shipped kustomize base: ``<repository>/deploy``.

    Raises:
        FileNotFoundError: edgewatch is not running from a checkout that has it.
    """
    path = Path(edgewatch.__file__).resolve().parents[2] / "deploy"
    if not (path / "kustomization.yaml").is_file():
        raise FileNotFoundError(f"no kustomize base at {path} (run the playground from a checkout)")
    return path


def chart_dir() -> Path:
    """The shipped Helm chart: ``<repository>/charts/edgewatch``.

    Raises:
        FileNotFoundError: edgewatch is not running from a checkout that has it.
    """
    path = Path(edgewatch.__file__).resolve().parents[2] / "charts" / "edgewatch"
    if not (path / "Chart.yaml").is_file():
        raise FileNotFoundError(f"no Helm chart at {path} (run the playground from a checkout)")
    return path


def edgewatch_config(*, grouping: bool, coordinators: dict[str, str],
                     out_of_service_pools: list[str]) -> dict[str, str]:
    """The ``edgewatch-config`` keys the playground sets (pure): grouping by the pool label, the pool
    label as the cover label, ``poolCoordinators`` (pool -> URL or ``auto``; "" for none) and, when
    some pool opted in, ``outOfServicePools`` (comma-separated, docs/out-of-service.md; left as
    shipped, off, otherwise)."""
    config = {"grouping": "on" if grouping else "off", "groupLabel": POOL_LABEL, "coverLabel": POOL_LABEL,
              "poolCoordinators": yaml.safe_dump(coordinators) if coordinators else ""}
    if out_of_service_pools:
        config[CONFIG_KEY_OUT_OF_SERVICE_POOLS] = ",".join(out_of_service_pools)
    return config


def overlay(*, config: dict[str, str], controller_args: list[str], controller_replicas: int,
            image_tag: str | None = None) -> dict[str, Any]:
    """The playground's kustomization (pure): the base plus ConfigMap keys, controller flags and
    replicas; with ``image_tag``, edgewatch's image gets that tag (another release's code,
    ``git-<revision>``: ``edgewatch_lab.testing.revisions``)."""
    images = [{"name": IMAGE, "newTag": image_tag}] if image_tag else []
    return {**({"images": images} if images else {}),
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


def release_base(release: str | None) -> tuple[Path, str | None]:
    """The kustomize base and image tag of ``release`` (a git revision: its ``deploy/`` and
    ``git-<revision>``), or this checkout's (``deploy_dir()``, None: the base's own tag).

    Raises:
        edgewatch_lab.testing.revisions.RevisionError: the revision cannot be unpacked.
        FileNotFoundError: the revision has no ``deploy/``.
    """
    if release is None:
        return deploy_dir(), None
    base = revision_tree(release) / "deploy"
    if not (base / "kustomization.yaml").is_file():
        raise FileNotFoundError(f"release {release} has no kustomize base (deploy/)")
    return base, revision_image_tag(release)


def render(*, workdir: Path, kubectl: Callable[..., str], config: dict[str, str], controller_args: list[str],
           controller_replicas: int, release: str | None = None) -> str:
    """Copy the base (``release``'s, see ``release_base``) into ``workdir/install/base``, write the
    overlay beside it, and return ``kubectl kustomize`` of it (the manifests as applied, also saved
    as ``rendered.yaml``)."""
    base, tag = release_base(release)
    root = workdir / "install"
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(base, root / "base", ignore=shutil.ignore_patterns("*.sh"))
    (root / "kustomization.yaml").write_text(yaml.safe_dump(overlay(
        config=config, controller_args=controller_args, controller_replicas=controller_replicas, image_tag=tag)))
    rendered = kubectl("kustomize", str(root))
    (root / "rendered.yaml").write_text(rendered)
    return rendered




def values(*, config: dict[str, str], controller_args: list[str], controller_replicas: int) -> dict[str, Any]:
    """The playground's chart values (pure): the same ConfigMap keys, controller flags and replicas
    as ``overlay``, as ``config.*``, ``controller.extraArgs`` and ``controller.replicas``."""
    chart_config: dict[str, Any] = {k: int(v) if k in _INTEGER_KEYS else v for k, v in config.items()}
    return {"config": chart_config,
            "controller": {"replicas": controller_replicas, "extraArgs": list(controller_args)}}


def _helm_env(root: Path) -> dict[str, str]:
    """helm's environment: its cache, config and data folders under ``root/helm`` (the install's own,
    so ``remove`` finds the release ``helm_install`` made)."""
    return dict(os.environ, HELM_CACHE_HOME=str(root / "helm" / "cache"),
                HELM_CONFIG_HOME=str(root / "helm" / "config"), HELM_DATA_HOME=str(root / "helm" / "data"))


def helm_install(*, workdir: Path, helm: Path, kubeconfig: Path, config: dict[str, str],
                 controller_args: list[str], controller_replicas: int) -> dict[str, Any]:
    """``helm install`` the chart with ``values`` (saved as ``workdir/install/values.yaml``; helm's
    own folders under ``workdir/install/helm``), without waiting (the playground waits for the pods
    itself). Returns the release as ``helm status`` and ``helm list`` show it: method, release,
    namespace, revision, status, chart (``edgewatch-<version>``).

    Raises:
        subprocess.CalledProcessError: helm failed (stderr attached).
    """
    root = workdir / "install"
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    values_file = root / "values.yaml"
    values_file.write_text(yaml.safe_dump(values(
        config=config, controller_args=controller_args, controller_replicas=controller_replicas)))
    env = _helm_env(root)

    def run(*args: str) -> str:
        done = subprocess.run([str(helm), *args, f"--kubeconfig={kubeconfig}", f"--namespace={RELEASE_NAMESPACE}"],
                              capture_output=True, text=True, timeout=120, check=True, env=env)
        return done.stdout

    run("install", RELEASE, str(chart_dir()), "--values", str(values_file), "--wait=false")
    (root / "rendered.yaml").write_text(run("get", "manifest", RELEASE))
    status = json.loads(run("status", RELEASE, "--output", "json"))
    listed = json.loads(run("list", "--filter", f"^{RELEASE}$", "--output", "json"))  # the chart name-version
    return {"method": "helm", "release": status["name"], "namespace": status["namespace"],
            "revision": status["version"], "status": status["info"]["status"],
            "chart": listed[0]["chart"] if listed else ""}


def install(method: str, *, workdir: Path, kubectl: Callable[..., str], helm: Callable[[], Path],
            kubeconfig: Path, config: dict[str, str], controller_args: list[str],
            controller_replicas: int, release: str | None = None) -> dict[str, Any]:
    """Install edgewatch the ``method`` way (``METHODS``) and return what was installed
    (``{"method": "kustomize", "release": ...}``, or ``helm_install``'s release plus ``secret``,
    its record's ``secret/sh.helm.release.v1.edgewatch.v1``). ``helm`` finds the helm binary
    (called only for ``helm``). ``release``: a git revision to install instead of this checkout
    (kustomize only). Applying again over an install is an upgrade (or a rollback): ``kubectl
    apply`` changes what differs, and the DaemonSet and Deployment roll.

    Raises:
        ValueError: an unknown method, or ``release`` with helm.
    """
    if method == "kustomize":
        rendered = render(workdir=workdir, kubectl=kubectl, config=config, controller_args=controller_args,
                          controller_replicas=controller_replicas, release=release)
        kubectl("apply", "-f", "-", input_text=rendered, timeout_s=60)
        return {"method": "kustomize", "release": release or "this checkout"}
    if release is not None:
        raise ValueError("another release installs only with the kustomize base (method kustomize)")
    if method == "helm":
        release = helm_install(workdir=workdir, helm=helm(), kubeconfig=kubeconfig, config=config,
                               controller_args=controller_args, controller_replicas=controller_replicas)
        # The release record as the apiserver holds it (helm's Secret storage driver).
        release["secret"] = kubectl("get", "secret", f"sh.helm.release.v1.{RELEASE}.v{release['revision']}",
                                    f"--namespace={release['namespace']}", "--output=name").strip()
        return release
    raise ValueError(f"unknown install method {method!r} (one of {', '.join(METHODS)})")


def remove(method: str, *, workdir: Path, kubectl: Callable[..., str], helm: Callable[[], Path],
           kubeconfig: Path, timeout_s: float = 120.0) -> str:
    """Step 1 of docs/uninstall.md: delete the install the way it was made — ``kubectl delete -k``
    of the overlay ``render`` wrote (``--wait=false``: the namespaces stay Terminating while an agent
    pod on a cut-off or dead node waits for its kubelet, and the command would wait with them), or
    ``helm uninstall`` (``--wait=false`` likewise). Returns the command's output (one line per object).

    Raises:
        subprocess.CalledProcessError: kubectl or helm failed. ValueError: an unknown method.
    """
    root = workdir / "install"
    if method == "kustomize":
        return kubectl("delete", "-k", str(root), "--wait=false", "--ignore-not-found", timeout_s=timeout_s)
    if method == "helm":
        done = subprocess.run([str(helm()), "uninstall", RELEASE, "--wait=false", f"--kubeconfig={kubeconfig}",
                               f"--namespace={RELEASE_NAMESPACE}"],
                              capture_output=True, text=True, timeout=timeout_s, check=True, env=_helm_env(root))
        return done.stdout
    raise ValueError(f"unknown install method {method!r} (one of {', '.join(METHODS)})")

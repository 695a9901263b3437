"""Find (or build) the Kubernetes binaries: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kubectl, and kube-proxy (for the node-side lab, see ``edgewatch_lab.testing.kubeproxy``).

Resolution order, following the envtest convention users of controller-runtime know:

1. ``TEST_ASSET_ETCD``, ``TEST_ASSET_KUBE_APISERVER``, ``TEST_ASSET_KUBE_CONTROLLER_MANAGER``,
   ``TEST_ASSET_KUBE_SCHEDULER``, ``TEST_ASSET_KUBECTL``, ``TEST_ASSET_KUBE_PROXY``: one binary each;
2. ``KUBEBUILDER_ASSETS``: a folder holding them (kube-proxy may be absent there: envtest ships
   none; ``Binaries.kube_proxy`` is then None and ``Binaries.require_kube_proxy()`` says why);
3. otherwise ``hack/binaries/build.sh`` builds them from the Go module proxy into
   ``~/.cache/edgewatch/bin/<version-stamp>/`` (outside the repo, so only the first build pays;
   that build prints its progress to stderr).

Limits: building needs the repository checkout (the wrapper Go modules live in ``hack/binaries``)
and Go; an installed wheel without the checkout must use the environment variables.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

BINARY_NAMES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
# Built by hack/binaries/build.sh too, but optional when the binaries come from the environment.
OPTIONAL_BINARY_NAMES = ("kube-proxy", "kubelet")


class BinariesError(RuntimeError):
    """The control-plane binaries could neither be found nor built."""


@dataclass(frozen=True)
class Binaries:
    """Absolute paths of the five control-plane binaries, and of kube-proxy and the kubelet when
    there are."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    kube_proxy: Path | None = None
    kubelet: Path | None = None

    def require_kube_proxy(self) -> Path:
        """The kube-proxy binary.

        Raises:
            BinariesError: there is none (binaries from an environment folder without it).
        """
        if self.kube_proxy is None:
            raise BinariesError(
                "no kube-proxy binary: set TEST_ASSET_KUBE_PROXY, put kube-proxy in KUBEBUILDER_ASSETS, "
                "or unset both to build it with hack/binaries/build.sh"
            )
        return self.kube_proxy

    def require_kubelet(self) -> Path:
        """The kubelet binary (real lab nodes, ``edgewatch_lab.testing.realnode``).

        Raises:
            BinariesError: there is none (binaries from an environment folder without it).
        """
        if self.kubelet is None:
            raise BinariesError(
                "no kubelet binary: set TEST_ASSET_KUBELET, put kubelet in KUBEBUILDER_ASSETS, "
                "or unset both to build it with hack/binaries/build.sh"
            )
        return self.kubelet

    @classmethod
    def from_folder(cls, folder: Path) -> "Binaries":
        """Binaries named as upstream names them inside ``folder``.

        kube-proxy is optional (None when the folder has no executable kube-proxy).

        Raises:
            BinariesError: one of the five control-plane binaries is missing or not executable.
        """
        paths: dict[str, Path | None] = {}
        for name in BINARY_NAMES:
            path = (folder / name).resolve()
            if not os.access(path, os.X_OK):
                raise BinariesError(f"{path} is missing or not executable")
            paths[name.replace("-", "_")] = path
        for name in OPTIONAL_BINARY_NAMES:
            path = (folder / name).resolve()
            paths[name.replace("-", "_")] = path if os.access(path, os.X_OK) else None
        return cls(**paths)  # type: ignore[arg-type]


def repo_root() -> Path | None:
    """The source checkout this module was loaded from, or None for an installed package."""
    root = Path(__file__).resolve().parents[4]  # lab/src/edgewatch_lab/testing/x.py -> the checkout
    return root if (root / "hack" / "binaries" / "build.sh").is_file() else None


def _from_env(env: os._Environ[str] | dict[str, str]) -> Binaries | None:
    singles = {name: env.get("TEST_ASSET_" + name.upper().replace("-", "_")) for name in BINARY_NAMES}
    folder = env.get("KUBEBUILDER_ASSETS")
    if not folder and not any(singles.values()):
        return None
    paths: dict[str, Path | None] = {}
    for name, single in singles.items():
        if single:
            path = Path(single)
        elif folder:
            path = Path(folder) / name
        else:
            raise BinariesError(
                f"TEST_ASSET_{name.upper().replace('-', '_')} is unset and KUBEBUILDER_ASSETS is unset"
            )
        if not os.access(path, os.X_OK):
            raise BinariesError(f"{path} (from the environment) is missing or not executable")
        paths[name.replace("-", "_")] = path.resolve()
    for name in OPTIONAL_BINARY_NAMES:
        single = env.get("TEST_ASSET_" + name.upper().replace("-", "_"))
        path = Path(single) if single else Path(folder) / name if folder else None
        if single and not os.access(Path(single), os.X_OK):
            raise BinariesError(f"{single} (from the environment) is missing or not executable")
        ok = path is not None and os.access(path, os.X_OK)
        paths[name.replace("-", "_")] = path.resolve() if ok and path is not None else None
    return Binaries(**paths)  # type: ignore[arg-type]


def ensure_binaries(*, env: dict[str, str] | None = None, build_timeout_s: float = 3600.0,
                    on_progress: Callable[[str], None] | None = None) -> Binaries:
    """Return the Kubernetes binaries, building them on first use (kube-proxy included when built
    here; an older cache folder without kube-proxy gets only kube-proxy built).

    Args:
        env: environment to read the envtest variables from (default: ``os.environ``).
        build_timeout_s: upper bound for a cold build, in seconds (about 5-10 min on 2 cores).
        on_progress: called with each progress line of the build (``[edgewatch build] ...``,
            including "N/M packages compiled"); default: the lines go to stderr.

    Raises:
        BinariesError: an environment variable names a missing binary, there is no checkout to
            build from, or the build failed (its output went to stderr).
    """
    env = dict(os.environ if env is None else env)
    found = _from_env(env)
    if found is not None:
        return found
    root = repo_root()
    if root is None:
        raise BinariesError(
            "no control-plane binaries: set KUBEBUILDER_ASSETS (or TEST_ASSET_*) or run from a checkout"
        )
    code, folder = _run_build(root / "hack" / "binaries" / "build.sh", timeout_s=build_timeout_s,
                              on_progress=on_progress)
    if code != 0 or not folder:
        raise BinariesError(f"building the control-plane binaries failed (exit {code}); see the lines above")
    return Binaries.from_folder(Path(folder[-1]))


def _run_build(script: Path, *, timeout_s: float, on_progress: Callable[[str], None] | None,
               args: tuple[str, ...] = ()) -> tuple[int, list[str]]:
    """Run a build script (with ``args``): its stderr lines go to ``on_progress`` (default stderr)
    as they come, it is killed after ``timeout_s`` seconds. Returns (exit code, its stdout lines)."""
    report = on_progress or (lambda line: print(line, file=sys.stderr, flush=True))
    with tempfile.TemporaryFile(mode="w+") as out:
        proc = subprocess.Popen(["bash", str(script), *args], stdout=out, stderr=subprocess.PIPE, text=True)
        watchdog = threading.Timer(timeout_s, proc.kill)
        watchdog.start()
        try:
            assert proc.stderr is not None
            for line in proc.stderr:
                report(line.rstrip())
            code = proc.wait()
        finally:
            watchdog.cancel()
        out.seek(0)
        return code, out.read().strip().splitlines()


#: What ``hack/binaries/build-node.sh`` builds (a real lab node's runtime besides the kubelet).
NODE_BINARY_NAMES = ("containerd", "containerd-shim-runc-v2", "ctr", "runc", "bridge", "loopback", "host-local",
                     "portmap", "pause")


def _build_folder(script: str, *, what: str, env: str, hint: str = "", timeout_s: float,
                  on_progress: Callable[[str], None] | None, args: tuple[str, ...] = ()) -> Path:
    """Run ``hack/binaries/<script>`` of this checkout; the folder it printed last (where it put
    ``what``). Raises BinariesError when there is no checkout (then ``env`` must name the binaries)
    or the build failed (``hint`` is appended to the message)."""
    root = repo_root()
    if root is None:
        raise BinariesError(f"no {what}: set {env} or run from a checkout")
    code, lines = _run_build(root / "hack" / "binaries" / script, timeout_s=timeout_s, on_progress=on_progress,
                             args=args)
    if code != 0 or not lines:
        raise BinariesError(f"building {what} failed (exit {code}); see the lines above{hint}")
    return Path(lines[-1])


def ensure_node_binaries(*, build_timeout_s: float = 3600.0, on_progress: Callable[[str], None] | None = None) -> Path:
    """The folder holding a real lab node's runtime (``NODE_BINARY_NAMES``: containerd, runc, the
    CNI plugins, pause), built from the Go module proxy on first use by
    ``hack/binaries/build-node.sh`` (about 1 minute warm, 5 cold; needs gcc and libseccomp-dev,
    which ``make node-binaries`` installs) into ``~/.cache/edgewatch/bin/node-<stamp>/``.

    ``EDGEWATCH_NODE_BINARIES`` names a ready folder instead.

    Raises:
        BinariesError: no checkout to build from, the build failed, or a binary is missing.
    """
    folder_env = os.environ.get("EDGEWATCH_NODE_BINARIES")
    if folder_env:
        folder = Path(folder_env)
    else:
        folder = _build_folder("build-node.sh", what="the node binaries", env="EDGEWATCH_NODE_BINARIES",
                               hint=" (gcc and libseccomp-dev: `make node-binaries` installs them)",
                               timeout_s=build_timeout_s, on_progress=on_progress)
    for name in NODE_BINARY_NAMES:
        if not os.access(folder / name, os.X_OK):
            raise BinariesError(f"{folder / name} is missing or not executable")
    return folder.resolve()


def _ensure_tool(name: str, *, env: str, script: str, args: tuple[str, ...], build_timeout_s: float,
                 on_progress: Callable[[str], None] | None) -> Path:
    """The executable ``name``: the file ``$env`` names, else ``<folder>/name`` of the folder
    ``hack/binaries/<script> <args>`` builds (or finds cached) and prints.

    Raises:
        BinariesError: no checkout to build from, the build failed, or the binary is missing.
    """
    single = os.environ.get(env)
    if single:
        path = Path(single)
    else:
        path = _build_folder(script, what=name, env=env, timeout_s=build_timeout_s, on_progress=on_progress,
                             args=args) / name
    if not os.access(path, os.X_OK):
        raise BinariesError(f"{path} is missing or not executable")
    return path.resolve()


def ensure_coredns(*, build_timeout_s: float = 3600.0, on_progress: Callable[[str], None] | None = None) -> Path:
    """The CoreDNS binary (v1.15.0 with the kubernetes plugin; ``edgewatch_lab.testing.coredns``),
    built from the Go module proxy on first use by ``hack/binaries/build-coredns.sh`` (about 2
    minutes cold on 2 cores) into ``~/.cache/edgewatch/bin/coredns-<version>-<stamp>/``.
    ``TEST_ASSET_COREDNS`` names a ready binary instead.

    Raises:
        BinariesError: no checkout to build from, the build failed, or the binary is missing.
    """
    return _ensure_tool("coredns", env="TEST_ASSET_COREDNS", script="build-coredns.sh", args=(),
                        build_timeout_s=build_timeout_s, on_progress=on_progress)


def ensure_helm(*, build_timeout_s: float = 3600.0, on_progress: Callable[[str], None] | None = None) -> Path:
    """The helm binary (the playground's ``--install helm``, the chart's tests), built from the Go
    module proxy on first use by ``hack/binaries/build.sh helm`` (about 2-4 minutes cold) into
    ``~/.cache/edgewatch/bin/helm-<version>-<stamp>/``; warm, a no-op. ``TEST_ASSET_HELM`` names a
    ready binary instead.

    Raises:
        BinariesError: no checkout to build from, the build failed, or the binary is missing.
    """
    return _ensure_tool("helm", env="TEST_ASSET_HELM", script="build.sh", args=("helm",),
                        build_timeout_s=build_timeout_s, on_progress=on_progress)


def ensure_promtool(*, build_timeout_s: float = 3600.0, on_progress: Callable[[str], None] | None = None) -> Path:
    """The promtool binary (the alert rules' tests), built with the Prometheus server
    (``ensure_prometheus``) from the Go module proxy on first use by
    ``hack/binaries/build.sh promtool`` (about 5-8 minutes cold) into
    ``~/.cache/edgewatch/bin/promtool-<version>-<stamp>/``; warm, a no-op. ``TEST_ASSET_PROMTOOL``
    names a ready binary instead.

    Raises:
        BinariesError: no checkout to build from, the build failed, or the binary is missing.
    """
    return _ensure_tool("promtool", env="TEST_ASSET_PROMTOOL", script="build.sh", args=("promtool",),
                        build_timeout_s=build_timeout_s, on_progress=on_progress)


def ensure_prometheus(*, build_timeout_s: float = 3600.0, on_progress: Callable[[str], None] | None = None) -> Path:
    """The Prometheus server binary (the playground's ``--prometheus``,
    ``edgewatch_lab.playground.prometheus``), built with promtool, into the same folder, from the
    Go module proxy on first use by ``hack/binaries/build.sh promtool`` (about 5-8 minutes cold;
    no web UI: only the HTTP API) into ``~/.cache/edgewatch/bin/promtool-<version>-<stamp>/``;
    warm, a no-op. ``TEST_ASSET_PROMETHEUS`` names a ready binary instead.

    Raises:
        BinariesError: no checkout to build from, the build failed, or the binary is missing.
    """
    single = os.environ.get("TEST_ASSET_PROMETHEUS")
    if single:
        path = Path(single)
    else:
        path = _build_folder("build.sh", what="prometheus", env="TEST_ASSET_PROMETHEUS", timeout_s=build_timeout_s,
                             on_progress=on_progress, args=("promtool",)) / "prometheus"
    if not os.access(path, os.X_OK):
        raise BinariesError(f"{path} is missing or not executable")
    return path.resolve()


#: What ``hack/binaries/build.sh superedge`` builds: SuperEdge v0.9.0's agent and its webhook (the
#: peer system of the comparison in docs/peers.md).
SUPEREDGE_BINARY_NAMES = ("edge-health", "edge-health-admission")


def ensure_superedge(*, build_timeout_s: float = 3600.0, on_progress: Callable[[str], None] | None = None) -> Path:
    """The folder holding SuperEdge's ``edge-health`` and ``edge-health-admission``
    (``SUPEREDGE_BINARY_NAMES``, module github.com/superedge/superedge v0.9.0 with reflect2 v1.0.2
    and json-iterator v1.1.12), built from the Go module proxy on first use by
    ``hack/binaries/build.sh superedge`` (``make peers``; a few minutes cold on 2 cores) into
    ``~/.cache/edgewatch/bin/superedge-<version>-<stamp>/``; warm, a no-op.
    ``EDGEWATCH_SUPEREDGE_BINARIES`` names a ready folder instead.

    Raises:
        BinariesError: no checkout to build from, the build failed, or a binary is missing.
    """
    folder_env = os.environ.get("EDGEWATCH_SUPEREDGE_BINARIES")
    if folder_env:
        folder = Path(folder_env)
    else:
        folder = _build_folder("build.sh", what="the SuperEdge binaries", env="EDGEWATCH_SUPEREDGE_BINARIES",
                               timeout_s=build_timeout_s, on_progress=on_progress, args=("superedge",))
    for name in SUPEREDGE_BINARY_NAMES:
        if not os.access(folder / name, os.X_OK):
            raise BinariesError(f"{folder / name} is missing or not executable")
    return folder.resolve()

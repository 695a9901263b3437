"""Find (or build) the control-plane binaries: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kubectl.

Resolution order, following the envtest convention users of controller-runtime know:

1. ``TEST_ASSET_ETCD``, ``TEST_ASSET_KUBE_APISERVER``, ``TEST_ASSET_KUBE_CONTROLLER_MANAGER``,
   ``TEST_ASSET_KUBE_SCHEDULER``, ``TEST_ASSET_KUBECTL``: one binary each;
2. ``KUBEBUILDER_ASSETS``: a folder holding them;
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


class BinariesError(RuntimeError):
    """The control-plane binaries could neither be found nor built."""


@dataclass(frozen=True)
class Binaries:
    """Absolute paths of the five control-plane binaries."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path

    @classmethod
    def from_folder(cls, folder: Path) -> "Binaries":
        """Binaries named as upstream names them inside ``folder``.

        Raises:
            BinariesError: one of them is missing or not executable.
        """
        paths = {}
        for name in BINARY_NAMES:
            path = (folder / name).resolve()
            if not os.access(path, os.X_OK):
                raise BinariesError(f"{path} is missing or not executable")
            paths[name.replace("-", "_")] = path
        return cls(**paths)


def repo_root() -> Path | None:
    """The source checkout this module was loaded from, or None for an installed package."""
    root = Path(__file__).resolve().parents[3]
    return root if (root / "hack" / "binaries" / "build.sh").is_file() else None


def _from_env(env: os._Environ[str] | dict[str, str]) -> Binaries | None:
    singles = {name: env.get("TEST_ASSET_" + name.upper().replace("-", "_")) for name in BINARY_NAMES}
    folder = env.get("KUBEBUILDER_ASSETS")
    if not folder and not any(singles.values()):
        return None
    paths = {}
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
    return Binaries(**paths)


def ensure_binaries(*, env: dict[str, str] | None = None, build_timeout_s: float = 3600.0,
                    on_progress: Callable[[str], None] | None = None) -> Binaries:
    """Return the control-plane binaries, building them on first use.

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
    report = on_progress or (lambda line: print(line, file=sys.stderr, flush=True))
    with tempfile.TemporaryFile(mode="w+") as out:
        proc = subprocess.Popen(["bash", str(root / "hack" / "binaries" / "build.sh")], stdout=out,
                                stderr=subprocess.PIPE, text=True)
        watchdog = threading.Timer(build_timeout_s, proc.kill)
        watchdog.start()
        try:
            assert proc.stderr is not None
            for line in proc.stderr:
                report(line.rstrip())
            code = proc.wait()
        finally:
            watchdog.cancel()
        out.seek(0)
        folder = out.read().strip().splitlines()
    if code != 0 or not folder:
        raise BinariesError(f"building the control-plane binaries failed (exit {code}); see the lines above")
    return Binaries.from_folder(Path(folder[-1]))

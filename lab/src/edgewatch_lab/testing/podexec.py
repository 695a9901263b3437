"""Start one container of a lab pod as a local process, with what a container runtime gives it.

The kubelet simulator (``edgewatch_lab.testing.podrunner``) runs the containers of edgewatch's own
image as processes in the node's network namespace. This launcher is the "runtime" part: it runs
as root, makes a private mount namespace, mounts the pod's volumes at their container paths
(``/var/run/secrets/kubernetes.io/serviceaccount``, ``/etc/edgewatch/keys``, hostPath dirs ...),
drops to the container's user and groups (``runAsUser``, ``runAsGroup``, ``fsGroup``,
``supplementalGroups``) and execs the command. The process therefore meets the same file modes
and ownership as in a real container: a key file the container's user cannot read fails here too.

How paths appear without touching the host: a mount target whose parent does not exist gets an
overlay (lower = the deepest existing ancestor, upper = a folder of the pod's own) so the folder is
created inside the namespace only. The "image" (the Python installation and edgewatch's code) is
the host's; where it sits under a folder other users cannot enter (``/root`` is 0700), that folder
is covered by a tmpfs into which only the image's own folders are bind-mounted, so the container's
user reaches the interpreter and nothing else of it.

Usage (the kubelet simulator calls it): ``python -m edgewatch_lab.testing.podexec SPEC.json`` where
SPEC holds ``argv``, ``env``, ``mounts`` ([{source, target, read_only}]), ``uid``, ``gid``,
``groups``, ``image_paths``, ``overlay_dir``, ``workdir``.

Limits: Linux, root only; no cgroups, no seccomp, no readOnlyRootFilesystem (the host's root is
the image's); the process dies with its kubelet (PR_SET_PDEATHSIG), a lab choice so a crashed run
leaves nothing behind (a real container outlives its kubelet).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import signal
import stat
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

CLONE_NEWNS = 0x00020000
MS_RDONLY = 0x1
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(source.encode() if source else None, target.encode(),
                       fstype.encode() if fstype else None, ctypes.c_ulong(flags),
                       data.encode() if data else None), f"mount {source} on {target}")


def blocked_ancestors(path: str) -> list[str]:
    """The ancestors of ``path`` (not ``path`` itself) that other users cannot enter (no o+x),
    outermost first. Pure apart from ``os.stat``."""
    out = []
    parts = Path(path).parts
    for i in range(1, len(parts)):
        anc = str(Path(*parts[:i]))
        try:
            if not os.stat(anc).st_mode & stat.S_IXOTH:
                out.append(anc)
        except FileNotFoundError:
            break
    return out


def outermost(paths: Iterable[str]) -> list[str]:
    """The paths not inside another of them (sorted, duplicates dropped). Pure."""
    out: list[str] = []
    for p in sorted(set(paths)):
        if not any(p == o or p.startswith(o.rstrip("/") + "/") for o in out):
            out.append(p)
    return out


def deepest_existing(path: str) -> str:
    """The deepest existing ancestor of ``path`` (itself if it exists), symlinks resolved."""
    p = Path(path)
    while not p.exists():
        p = p.parent
    return os.path.realpath(p)


def _expose_image(image_paths: Sequence[str], staging_dir: str) -> None:
    """Cover every folder the container user cannot enter with a tmpfs holding only the image's
    folders, bind-mounted back from a view of the folder kept (in this namespace only) under
    ``staging_dir`` before covering it."""
    covers: dict[str, list[str]] = {}
    for real in outermost(os.path.realpath(p) for p in image_paths):
        blocked = blocked_ancestors(real)
        if blocked:
            covers.setdefault(blocked[0], []).append(real)
    for n, (top, inside) in enumerate(covers.items()):
        staging = os.path.join(staging_dir, f"image{n}")
        os.makedirs(staging, mode=0o700, exist_ok=True)
        _mount(top, staging, None, MS_BIND | MS_REC)
        _mount("tmpfs", top, "tmpfs", 0, "mode=0755")
        for real in inside:
            rel = os.path.relpath(real, top)
            target = os.path.join(top, rel)
            if os.path.isdir(real := os.path.join(staging, rel)):
                os.makedirs(target, mode=0o755, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
                Path(target).touch()
            _mount(real, target, None, MS_BIND | MS_REC)


def _mount_volumes(mounts: Sequence[dict[str, Any]], overlay_dir: str) -> None:
    """Bind every volume at its container path; missing parents come from per-pod overlays."""
    overlays: set[str] = set()
    for i, m in enumerate(mounts):
        target = m["target"]
        if not os.path.exists(target):
            base = deepest_existing(target)
            if base not in overlays:
                layer = Path(overlay_dir) / f"layer{len(overlays)}"
                (layer / "upper").mkdir(parents=True, exist_ok=True)
                (layer / "work").mkdir(parents=True, exist_ok=True)
                _mount("overlay", base, "overlay", 0,
                       f"lowerdir={base},upperdir={layer / 'upper'},workdir={layer / 'work'}")
                overlays.add(base)
            if os.path.isdir(m["source"]):
                os.makedirs(target, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                Path(target).touch()
        _mount(m["source"], target, None, MS_BIND | MS_REC)
        if m.get("read_only"):
            _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY)


def launch(spec: dict[str, Any]) -> None:
    """Set up the namespace and exec the container command; never returns.

    Raises:
        OSError: a mount, credential change or exec failed (the process exits non-zero and the
            kubelet simulator reports the container as failed).
    """
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _expose_image(spec.get("image_paths", []), spec["overlay_dir"])
    _mount_volumes(spec.get("mounts", []), spec["overlay_dir"])
    uid, gid = spec.get("uid"), spec.get("gid")
    os.setgroups([int(g) for g in spec.get("groups", [])])
    if gid is not None:
        os.setgid(int(gid))
    if uid is not None:
        os.setuid(int(uid))
    # After the credential change (which clears it) and kept across exec: die with the kubelet.
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    os.chdir(spec.get("workdir") or "/")
    argv = list(spec["argv"])
    os.execvpe(argv[0], argv, dict(spec.get("env", {})))


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m edgewatch_lab.testing.podexec SPEC.json``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        sys.exit("usage: python -m edgewatch_lab.testing.podexec SPEC.json")
    spec = json.loads(Path(args[0]).read_text())
    try:
        launch(spec)
    except OSError as exc:
        print(f"podexec: {exc}", file=sys.stderr)
        sys.exit(128)


if __name__ == "__main__":
    main()

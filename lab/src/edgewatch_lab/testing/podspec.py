"""The kubelet's rules that the lab's pod runner (``edgewatch_lab.testing.podrunner``) follows, as
pure functions: which pods run here (edgewatch's image), ``$(VAR)`` expansion, downward API field
values, the mode of a volume file under an ``fsGroup``, the restart back-off (CrashLoopBackOff);
and the node's clock-offset file (``<clock_dir>/faketime``) that the runner's containers and the
playground share.

Limits: only what the runner needs: ``fieldRef`` paths of ``metadata`` (name, namespace, uid,
labels, annotations), ``spec.nodeName``, ``spec.serviceAccountName``, ``status.hostIP``/``podIP``;
no ``resourceFieldRef``. The clock-offset helpers are the only ones touching files.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

BACKOFF_START_S = 10.0
BACKOFF_MAX_S = 300.0
_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def read_clock_offset(clock_dir: Path | None) -> float:
    """The node's clock offset in seconds from ``<clock_dir>/faketime`` (libfaketime's relative
    form, ``+N``/``-N`` seconds); 0 when there is no file or it does not parse."""
    if clock_dir is None:
        return 0.0
    try:
        return float((clock_dir / "faketime").read_text().strip() or 0)
    except (OSError, ValueError):
        return 0.0


def write_clock_offset(clock_dir: Path, seconds: float) -> None:
    """Set the node's clock offset (seconds; 0 ends the skew) atomically, world-readable: the
    kubelet simulator and the node's containers (libfaketime, re-read every second) follow it."""
    clock_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(clock_dir, 0o755)
    tmp = clock_dir / ".faketime.tmp"
    tmp.write_text(f"{seconds:+.0f}\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, clock_dir / "faketime")


def restart_delay(restarts: int, *, ran_s: float) -> float:
    """Seconds before restarting a container that has exited ``restarts`` times (1 = the first
    exit) after running ``ran_s`` seconds: at once the first time, then 10 s doubling to 300 s
    (the kubelet's CrashLoopBackOff); a container that ran 10 minutes starts over."""
    if restarts <= 1 or ran_s > 600:
        return 0.0
    return min(BACKOFF_MAX_S, BACKOFF_START_S * 2 ** (restarts - 2))


class PodSetupError(RuntimeError):
    """A volume, env var or container of a pod could not be prepared (reported in its status)."""


def runs_here(pod: dict[str, Any], *, image_prefix: str | tuple[str, ...]) -> bool:
    """True if ``pod`` (a Pod as a dict) has a container of an image the lab runs: one whose name
    starts with ``image_prefix`` (or with one of them)."""
    spec = pod.get("spec") or {}
    return any((c.get("image") or "").startswith(image_prefix)
               for c in (spec.get("containers") or []) + (spec.get("initContainers") or []))


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: known names are replaced, unknown ones left as they are,
    ``$$`` escapes a dollar."""
    def one(m: re.Match[str]) -> str:
        return "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0))

    return _VAR_REF.sub(one, text)


def field_value(pod: dict[str, Any], path: str, *, host_ip: str) -> str:
    """The downward API value of ``path`` (``metadata.name``, ``spec.nodeName``, ``status.hostIP``,
    ``metadata.labels['k']`` ...).

    Raises:
        PodSetupError: an unsupported field path.
    """
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    simple = {"metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace"),
              "metadata.uid": meta.get("uid"), "spec.nodeName": spec.get("nodeName"),
              "spec.serviceAccountName": spec.get("serviceAccountName"), "status.hostIP": host_ip,
              "status.podIP": host_ip}
    if path in simple:
        return str(simple[path] or "")
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    raise PodSetupError(f"unsupported fieldRef {path!r}")


def file_mode(mode: int, *, fs_group: int | None) -> int:
    """A read-only volume file's mode after kubelet's SetVolumeOwnership: with an fsGroup the group
    gets read (``mode | 0o440``); without, the mode as given."""
    return mode | 0o440 if fs_group is not None else mode

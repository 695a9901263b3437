"""What the lab's processes cost, read from ``/proc``: CPU seconds and resident memory per process,
per process tree, and per pod of a simulated node.

Why per pod: a simulated node is one kubelet-simulator process whose children are its pods'
containers (``edgewatch_lab.testing.podrunner``). Comparing systems needs the cost of the system's
own agent pod alone, measured the same way for every system, not the node's total (which holds the
simulator and the workload too).

How a pod's processes are found: when the runner starts a container it records, in the pod's
folder under the node's root (``var/lib/kubelet/pods/<uid>/``), the pod's ``namespace/name`` in
``pod`` and the container's pid in ``<container>.pid`` (:func:`record_container`). A recorded pid
counts only while it is still a child of that node's simulator, so a reused pid is never charged
to the pod.

Limits: Linux ``/proc`` only; CPU is ``utime + stime`` of live processes (a process that exits
takes its seconds with it, so callers diff snapshots of the same pids, :func:`cpu_delta_s`); RSS
double-counts pages shared between processes (VmRSS), as ``ps`` does.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

#: File in a pod's folder naming the pod, ``namespace/name``.
POD_IDENTITY_FILE: Final = "pod"
#: Suffix of the file holding a container's pid (``<container>.pid``).
PID_SUFFIX: Final = ".pid"
#: Where a simulated node keeps its pods' folders, under the node's root.
PODS_DIR: Final = Path("var/lib/kubelet/pods")


def parse_stat(text: str) -> tuple[int, int]:
    """``(ppid, utime + stime in clock ticks)`` from the text of ``/proc/<pid>/stat``.

    The command name (field 2) may hold spaces and parentheses, so fields are counted after its
    last ``)`` (proc(5)).

    Raises:
        ValueError: not a stat line.
    """
    try:
        fields = text.rsplit(")", 1)[1].split()
        return int(fields[1]), int(fields[11]) + int(fields[12])
    except (IndexError, ValueError) as exc:
        raise ValueError(f"not a /proc/<pid>/stat line: {text[:80]!r}") from exc


def _stat(pid: int) -> tuple[int, int] | None:
    try:
        return parse_stat(Path(f"/proc/{pid}/stat").read_text())
    except (OSError, ValueError):
        return None


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) ``pid`` has used, in seconds; 0 when it is gone."""
    stat = _stat(pid)
    return stat[1] / os.sysconf("SC_CLK_TCK") if stat is not None else 0.0


def rss_bytes(pid: int) -> int:
    """A process's resident set (VmRSS) in bytes; 0 when it is gone."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def process_table() -> dict[int, tuple[int, int]]:
    """``{pid: (ppid, utime + stime in clock ticks)}`` of every live process (one scan of ``/proc``)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            out[int(entry.name)] = stat
    return out


def children(pid: int, table: Mapping[int, tuple[int, int]] | None = None) -> list[int]:
    """The live processes whose parent is ``pid`` (from ``table``, else one scan of ``/proc``)."""
    table = process_table() if table is None else table
    return [p for p, (ppid, _ticks) in table.items() if ppid == pid]


def descendants(pid: int, table: Mapping[int, tuple[int, int]] | None = None) -> list[int]:
    """Every live process below ``pid`` (children, their children, ...), ``pid`` excluded; one scan
    of ``/proc`` unless ``table`` (:func:`process_table`) is given."""
    table = process_table() if table is None else table
    by_parent: dict[int, list[int]] = {}
    for p, (ppid, _ticks) in table.items():
        by_parent.setdefault(ppid, []).append(p)
    out: list[int] = []
    todo = [pid]
    while todo:
        found = by_parent.get(todo.pop(), [])
        out += found
        todo += found
    return out


def record_container(pod_dir: Path, *, pod: str, container: str, pid: int) -> None:
    """Note that ``pid`` runs ``container`` of ``pod`` (``namespace/name``) in its folder ``pod_dir``.

    Raises:
        OSError: the folder cannot be written.
    """
    (pod_dir / POD_IDENTITY_FILE).write_text(pod + "\n")
    (pod_dir / f"{container}{PID_SUFFIX}").write_text(f"{pid}\n")


def pod_processes(node_root: Path, *, simulator_pid: int,
                  table: Mapping[int, tuple[int, int]] | None = None) -> dict[str, list[int]]:
    """``{namespace/name: [pid, ...]}``: each pod's live container processes and their descendants
    on the simulated node rooted at ``node_root``; a recorded pid counts only while its parent is
    ``simulator_pid``. Pods with no live process are left out. One scan of ``/proc`` unless
    ``table`` (:func:`process_table`) is given."""
    table = process_table() if table is None else table
    out: dict[str, list[int]] = {}
    for pod_dir in sorted((node_root / PODS_DIR).glob("*")):
        with contextlib.suppress(OSError):
            pod = (pod_dir / POD_IDENTITY_FILE).read_text().strip()
            for pid_file in sorted(pod_dir.glob(f"*{PID_SUFFIX}")):
                with contextlib.suppress(OSError, ValueError):
                    pid = int(pid_file.read_text())
                    if pid in table and table[pid][0] == simulator_pid:
                        out.setdefault(pod, []).extend([pid, *descendants(pid, table)])
    return out


def cpu_snapshot(pids: Iterable[int], table: Mapping[int, tuple[int, int]]) -> dict[int, float]:
    """``{pid: CPU seconds}`` of ``pids`` in ``table`` (:func:`process_table`; gone ones left out)."""
    tick = os.sysconf("SC_CLK_TCK")
    return {pid: table[pid][1] / tick for pid in pids if pid in table}


def cpu_delta_s(before: Mapping[int, float], after: Mapping[int, float]) -> float:
    """CPU seconds the processes of ``after`` used since ``before``: a pid seen in both is charged
    its growth, a pid new in ``after`` all of its time (it started in between). Pure; never
    negative per pid (a reused pid with less time is charged its own time)."""
    total = 0.0
    for pid, now in after.items():
        then = before.get(pid, 0.0)
        total += now - then if now >= then else now
    return total

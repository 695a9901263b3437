"""What the network-lab tests share: a lab that must leave nothing behind, and the probes that
find its leftovers (namespaces, links in the root namespace, the registry file)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from typing import Any

from edgewatch_lab.testing.netlab import REGISTRY_DIR, NetLab


def root_links() -> set[str]:
    """Names of the links in the root network namespace."""
    out = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True, timeout=10, check=True)
    return {entry["ifname"] for entry in json.loads(out.stdout)}


def netns_names() -> set[str]:
    """Names of the named network namespaces (``/run/netns``)."""
    try:
        return set(os.listdir("/run/netns"))
    except FileNotFoundError:
        return set()


def lab_leftovers(lab_id: str) -> list[str]:
    """What lab ``lab_id`` left: its namespaces, its root links and its registry file."""
    found = [name for name in netns_names() if name.startswith(f"{lab_id}-")]
    found += [name for name in root_links() if name.startswith(lab_id)]
    if (REGISTRY_DIR / f"{lab_id}.json").exists():
        found.append(f"{lab_id}.json")
    return sorted(found)


@contextlib.contextmanager
def checked_lab() -> Iterator[NetLab]:
    """A new NetLab, closed on exit; raises AssertionError if closing left anything behind."""
    lab = NetLab.create()
    lab_id = lab.lab_id
    try:
        yield lab
    finally:
        lab.close()
        assert lab_leftovers(lab_id) == []


def reap(proc: subprocess.Popen[Any]) -> None:
    """Kill ``proc`` if it still runs, wait for it (10 s at most) and close its stdout pipe."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)
    if proc.stdout is not None:
        proc.stdout.close()

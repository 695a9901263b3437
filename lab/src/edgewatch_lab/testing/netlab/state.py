"""The machine-wide record of network labs: registry files, subnet and lab-id reservation, and
the removal of what crashed labs left behind.

Before creating anything a lab writes ``/run/edgewatch-netlab/<labid>.json`` (owner pid and its
start time, subnet index, names of every namespace and link it is about to create), under a
``flock`` on ``/run/edgewatch-netlab/.lock`` that serialises every lab of the machine.
:func:`cleanup_stale_locked` removes every lab whose owner process is gone, plus namespaces and
links that match the lab naming pattern (``ew????-*``, ``ew????br``, ``ew????v<n>``) but have no
registry file; :func:`remove_lab_resources` is also how a live lab tears itself down.

Limits: crash cleanup relies on every lab user sharing the same pid namespace and the same
``/run``; a lab created from another pid namespace looks dead.  At most 250 concurrent labs
(subnets ``198.18.1.0/24`` .. ``198.18.250.0/24``).  The registry lock is not re-entrant.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import logging
import os
import re
import secrets
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final

from edgewatch_lab.testing.netlab.commands import (
    DEFAULT_COMMAND_TIMEOUT,
    KILL_TIMEOUT,
    NetLabError,
    kill_netns_processes,
    list_links,
    list_netns,
    proc_stat,
    run_cmd,
)
from edgewatch_lab.testing.netlab.faults import NFT_TABLE

_log = logging.getLogger(__package__)  # the package's logger, shared by every part of the lab

#: Directory holding one ``<labid>.json`` registry file per live lab.
REGISTRY_DIR: Final = Path("/run/edgewatch-netlab")
MIN_SUBNET_INDEX: Final = 1
MAX_SUBNET_INDEX: Final = 250
_REGISTRY_VERSION: Final = 1

_LAB_ID_RE: Final = re.compile(r"ew[0-9a-f]{4}")
_NETNS_NAME_RE: Final = re.compile(r"^(ew[0-9a-f]{4})-")
_LINK_NAME_RE: Final = re.compile(r"^(ew[0-9a-f]{4})(?:br|v[0-9]+)$")


def _owner_alive(pid: object, start_ticks: object) -> bool:
    """Whether the process recorded as a lab owner still runs.

    A zombie counts as dead, and so does a process whose start time differs
    from the recorded one (the pid was reused).
    """
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    stat = proc_stat(pid)
    if stat is None:
        return False
    state, ticks = stat
    if state in ("Z", "X", "x"):
        return False
    return not (isinstance(start_ticks, int) and start_ticks != ticks)


def subnet(index: int) -> ipaddress.IPv4Network:
    """The lab subnet ``198.18.<index>.0/24``."""
    return ipaddress.IPv4Network(f"198.18.{index}.0/24")


def _root_ns_networks(*, timeout: float) -> list[ipaddress.IPv4Network]:
    """Every IPv4 route destination and address prefix of the root namespace."""
    nets: list[ipaddress.IPv4Network] = []
    routes = run_cmd(["ip", "-j", "-4", "route", "show", "table", "all"], timeout=timeout)
    addrs = run_cmd(["ip", "-j", "-4", "addr", "show"], timeout=timeout)
    try:
        for route in json.loads(routes.stdout or "[]"):
            dst = route.get("dst", "")
            if dst and dst != "default":
                nets.append(ipaddress.IPv4Network(dst, strict=False))
        for link in json.loads(addrs.stdout or "[]"):
            for info in link.get("addr_info", []):
                nets.append(ipaddress.IPv4Network(f"{info['local']}/{info['prefixlen']}", strict=False))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise NetLabError(f"cannot parse the root namespace routes/addresses: {exc}") from exc
    return nets


@contextlib.contextmanager
def registry_lock() -> Iterator[None]:
    """Exclusive, cross-process lock over the registry directory.

    Not re-entrant: never nest it (flock locks are per open file).
    """
    REGISTRY_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(REGISTRY_DIR / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the flock


def registry_path(lab_id: str) -> Path:
    """The registry file of lab ``lab_id``."""
    return REGISTRY_DIR / f"{lab_id}.json"


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=2, sort_keys=True)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _read_registry(path: Path) -> dict[str, Any] | None:
    """Parse a registry file; None if it is unreadable or malformed.

    Raises:
        FileNotFoundError: the file vanished (its lab closed meanwhile).
    """
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as exc:
        _log.warning("netlab registry file %s is unreadable (%s); treating its lab as stale", path, exc)
        return None
    if not isinstance(data, dict):
        _log.warning("netlab registry file %s is malformed; treating its lab as stale", path)
        return None
    return data


def write_registry_locked(
    lab_id: str, *, subnet_index: int | None, bridge: str, netns: Sequence[str], links: Sequence[str]
) -> None:
    """Write (replace) the registry file of a lab; :func:`registry_lock` must be held."""
    pid = os.getpid()
    stat = proc_stat(pid)
    record = {
        "version": _REGISTRY_VERSION,
        "lab_id": lab_id,
        "owner_pid": pid,
        "owner_start_ticks": stat[1] if stat else None,
        "subnet_index": subnet_index,
        "bridge": bridge,
        "netns": list(netns),
        "links": list(links),
        "nft_tables": [{"netns": name, "table": f"inet {NFT_TABLE}"} for name in netns],
        "updated_at": time.time(),
    }
    _write_json_atomic(registry_path(lab_id), record)


def _str_list(value: object) -> list[str]:
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, str)]


def pick_subnet(live: dict[str, dict[str, Any]], *, requested: int | None, timeout: float) -> int:
    """The subnet index for a new lab: ``requested`` if it is free, else the lowest free one.

    Free means used by no live lab (``live``: their registry records) and overlapping no route or
    address of the root namespace.

    Raises:
        NetLabError: the requested subnet is in use, or none is free.
    """
    used = {rec.get("subnet_index") for rec in live.values()}
    nets = _root_ns_networks(timeout=timeout)

    def free(index: int) -> bool:
        net = subnet(index)
        return index not in used and not any(net.overlaps(other) for other in nets)

    if requested is not None:
        if not free(requested):
            raise NetLabError(f"subnet {subnet(requested)} is in use")
        return requested
    for index in range(MIN_SUBNET_INDEX, MAX_SUBNET_INDEX + 1):
        if free(index):
            return index
    raise NetLabError("no free 198.18.<k>.0/24 subnet for a new lab")


def pick_lab_id() -> str:
    """A random lab id (``ew`` + 4 hex digits) with no registry file, namespace or link yet.

    Raises:
        NetLabError: no unused id found.
    """
    netns = list_netns()
    links = list_links(timeout=DEFAULT_COMMAND_TIMEOUT)
    for _ in range(200):
        lab_id = f"ew{secrets.token_hex(2)}"
        if registry_path(lab_id).exists():
            continue
        if any(name.startswith(f"{lab_id}-") for name in netns):
            continue
        if any(name.startswith(lab_id) for name in links):
            continue
        return lab_id
    raise NetLabError("cannot find an unused lab id")


def remove_lab_resources(
    lab_id: str,
    *,
    netns: Iterable[str] = (),
    links: Iterable[str] = (),
    timeout: float = DEFAULT_COMMAND_TIMEOUT,
) -> list[str]:
    """Remove the namespaces and root-namespace links of one lab.

    Targets are the given names plus anything matching the lab's naming
    pattern (``<lab_id>-*`` namespaces, ``<lab_id>br`` / ``<lab_id>v<n>``
    links).  Processes inside the namespaces are SIGKILLed first; veths are
    deleted from the root side before their namespaces so nothing is left
    attached to the bridge even if a namespace outlives its name.  Missing
    objects are ignored.

    Returns:
        Names that still exist afterwards (empty on full success).
    """
    wanted_ns = set(netns)
    wanted_links = set(links)

    def ns_targets() -> set[str]:
        return {name for name in list_netns() if name in wanted_ns or name.startswith(f"{lab_id}-")}

    def link_targets() -> set[str]:
        found = set()
        for name in list_links(timeout=timeout):
            match = _LINK_NAME_RE.match(name)
            if name in wanted_links or (match is not None and match.group(1) == lab_id):
                found.add(name)
        return found

    namespaces = ns_targets()
    for name in sorted(namespaces):
        try:
            killed = kill_netns_processes(name, timeout=KILL_TIMEOUT)
        except NetLabError as exc:
            _log.error("netlab %s: %s", lab_id, exc)
        else:
            if killed:
                _log.debug("netlab %s: killed %d process(es) in netns %s", lab_id, killed, name)
    found_links = link_targets()
    bridges = sorted(name for name in found_links if name.endswith("br"))
    veths = sorted(found_links.difference(bridges))
    lines = [f"link del dev {name}" for name in veths]
    lines += [f"netns del {name}" for name in sorted(namespaces)]
    lines += [f"link del dev {name}" for name in bridges]
    if lines:
        proc = run_cmd(["ip", "-force", "-batch", "-"], input_text="\n".join(lines) + "\n", timeout=timeout, check=False)
        if proc.returncode != 0:
            _log.debug("netlab %s: ip batch cleanup reported: %s", lab_id, proc.stderr.strip())
    leftovers = sorted(ns_targets() | link_targets())
    if leftovers:
        _log.error("netlab %s: could not remove %s", lab_id, leftovers)
    return leftovers


def cleanup_stale_locked(*, timeout: float) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """Body of :meth:`NetLab.cleanup_stale`; the registry lock must be held.

    Returns:
        (ids of the labs removed, registry records of the labs still live).
    """
    removed: list[str] = []
    live: dict[str, dict[str, Any]] = {}
    for path in sorted(REGISTRY_DIR.glob("ew*.json")):
        lab_id = path.stem
        if not _LAB_ID_RE.fullmatch(lab_id):
            continue
        try:
            record = _read_registry(path)
        except FileNotFoundError:
            continue
        if record is not None and _owner_alive(record.get("owner_pid"), record.get("owner_start_ticks")):
            live[lab_id] = record
            continue
        _log.info(
            "netlab: removing stale lab %s (owner pid %s is gone)",
            lab_id,
            None if record is None else record.get("owner_pid"),
        )
        leftovers = remove_lab_resources(
            lab_id,
            netns=_str_list((record or {}).get("netns")),
            links=_str_list((record or {}).get("links")),
            timeout=timeout,
        )
        if leftovers:
            # Keep the file so that a later cleanup retries; keep its subnet reserved.
            live[lab_id] = record or {}
            continue
        path.unlink(missing_ok=True)
        removed.append(lab_id)

    orphan_ids: set[str] = set()
    for name in list_netns():
        if match := _NETNS_NAME_RE.match(name):
            orphan_ids.add(match.group(1))
    for name in list_links(timeout=timeout):
        if match := _LINK_NAME_RE.match(name):
            orphan_ids.add(match.group(1))
    for lab_id in sorted(orphan_ids):
        if lab_id in live or registry_path(lab_id).exists():
            continue
        _log.info("netlab: removing orphaned objects of unregistered lab %s", lab_id)
        if not remove_lab_resources(lab_id, timeout=timeout) and lab_id not in removed:
            removed.append(lab_id)
    return sorted(removed), live

"""Network lab: real Linux network namespaces for simulated edge nodes.

What it is for
--------------
Integration tests and the playground need edge "nodes" whose network can be
broken for real, so that edgewatch can be checked to tell a node that is cut
off from the cloud apart from a node that is dead.  :class:`NetLab` builds that
world out of kernel objects:

* one Linux bridge ``<labid>br`` in the **root** network namespace, carrying
  the *cloud address* ``198.18.<k>.1/24``.  The root namespace plays the cloud
  because the control plane and the test process run there;
* one network namespace ``<labid>-<host>`` per simulated host, holding the
  ``eth0`` end of a veth pair (address ``198.18.<k>.<i>/24``, ``i`` from 10 up)
  whose other end ``<labid>v<i>`` is a port of the bridge.  Cloud<->node and
  node<->node traffic therefore both cross the bridge;
* one nftables table ``inet edgewatch_lab`` inside every host namespace.  All
  faults are stateless ``drop`` rules in that table; the table of a host is
  rebuilt from the host's fault state on every change, so faults compose (a
  host can be cut from the cloud *and* lossy) and healing is a flush.

``198.18.0.0/15`` is the RFC 2544 benchmarking range, so the lab never
collides with real networks; ``k`` (1..250) is chosen so that it collides with
no other live lab and no existing route or address of the root namespace.

Crash cleanup
-------------
Before creating anything a lab writes ``/run/edgewatch-netlab/<labid>.json``
(owner pid and its start time, subnet index, names of every namespace and
link it is about to create).  :meth:`NetLab.cleanup_stale` removes every lab
whose owner process is gone, plus namespaces and links that match the lab
naming pattern (``ew????-*``, ``ew????br``, ``ew????v<n>``) but have no registry
file.  :meth:`NetLab.start` runs it automatically, and so does
``python -m edgewatch_lab.testing.netlab cleanup``.

Limits
------
* Linux only, needs root (``CAP_NET_ADMIN`` + ``CAP_SYS_ADMIN``), ``ip``
  (iproute2) and ``nft`` on ``PATH``.  IPv4 only (IPv6 address generation is
  disabled on all lab links).
* At most 245 hosts per lab and 250 concurrent labs per machine.
* Crash cleanup relies on every lab user sharing the same pid namespace and
  the same ``/run``; a lab created from another pid namespace looks dead.
* Faults are drops only (no latency, jitter, reordering or bandwidth limits)
  and act on IP packets: ARP keeps working, and traffic on a host's loopback is
  never affected.  The root namespace (the cloud) is never filtered; every
  fault is enforced inside the hosts' namespaces.
* Processes started in a host run through ``ip netns exec``: they get the
  host's network namespace and a private mount namespace with ``/sys``
  remounted, but share everything else (filesystem, pid namespace, users)
  with the caller.
* All methods are synchronous and serialise on an internal lock; call them
  from asyncio code through ``asyncio.to_thread`` if blocking for a few tens
  of milliseconds matters.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import dataclasses
import fcntl
import ipaddress
import json
import logging
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final, Literal

__all__ = [
    "CLOUD_HOST_OCTET",
    "NFT_TABLE",
    "REGISTRY_DIR",
    "Host",
    "HostFaults",
    "NetLab",
    "NetLabError",
    "main",
]

_log = logging.getLogger(__name__)

#: Directory holding one ``<labid>.json`` registry file per live lab.
REGISTRY_DIR: Final = Path("/run/edgewatch-netlab")
#: Directory where ``ip netns`` keeps its namespace bind mounts.
_NETNS_RUN_DIR: Final = Path("/run/netns")
#: Name of the nftables table (family ``inet``) created in every host netns.
NFT_TABLE: Final = "edgewatch_lab"
#: Last octet of the cloud address on the lab bridge.
CLOUD_HOST_OCTET: Final = 1
_FIRST_HOST_OCTET: Final = 10
_LAST_HOST_OCTET: Final = 254
_MIN_SUBNET_INDEX: Final = 1
_MAX_SUBNET_INDEX: Final = 250
_DEFAULT_COMMAND_TIMEOUT: Final = 10.0
_KILL_TIMEOUT: Final = 5.0
_REGISTRY_VERSION: Final = 1

_LAB_ID_RE: Final = re.compile(r"ew[0-9a-f]{4}")
_NETNS_NAME_RE: Final = re.compile(r"^(ew[0-9a-f]{4})-")
_LINK_NAME_RE: Final = re.compile(r"^(ew[0-9a-f]{4})(?:br|v[0-9]+)$")
_HOST_NAME_RE: Final = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?$")
_POOL_NAME_RE: Final = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,22}[a-z0-9])?$")


class NetLabError(RuntimeError):
    """A lab operation failed.

    Attributes:
        argv: the command that failed, when the failure was a command
            (``None`` otherwise).
        returncode: its exit status (``None`` if it did not run or timed out).
        stderr: its standard error, stripped (``""`` if not applicable).
    """

    def __init__(
        self,
        message: str,
        *,
        argv: Sequence[str] | None = None,
        returncode: int | None = None,
        stderr: str = "",
    ) -> None:
        super().__init__(message)
        self.argv = list(argv) if argv is not None else None
        self.returncode = returncode
        self.stderr = stderr


# --------------------------------------------------------------------------
# Small helpers around ip(8) / nft(8) and /proc.
# --------------------------------------------------------------------------


def _run_cmd(
    argv: Sequence[str],
    *,
    input_text: str | None = None,
    timeout: float = _DEFAULT_COMMAND_TIMEOUT,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run one command, capturing text output, always with a timeout.

    Args:
        argv: the command.
        input_text: text fed on stdin (e.g. an ``ip -batch -`` script).
        timeout: seconds before the command is killed.
        check: raise on a non-zero exit status.

    Returns:
        The completed process (``stdout``/``stderr`` as ``str``).

    Raises:
        NetLabError: the command could not start, timed out, or (``check``)
            exited non-zero; the message names the command and its stderr.
    """
    cmd = shlex.join(argv)
    try:
        proc = subprocess.run(
            list(argv),
            input=input_text,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise NetLabError(f"command timed out after {timeout:g}s: {cmd}", argv=argv) from exc
    except OSError as exc:
        raise NetLabError(f"cannot run {cmd}: {exc}", argv=argv) from exc
    if check and proc.returncode != 0:
        stderr = proc.stderr.strip()
        message = f"command failed with exit status {proc.returncode}: {cmd}: {stderr or '(no stderr)'}"
        if input_text:
            message += f"\n--- stdin ---\n{input_text.rstrip()}"
        raise NetLabError(message, argv=argv, returncode=proc.returncode, stderr=stderr)
    return proc


def _list_netns() -> set[str]:
    """Names of the namespaces known to ``ip netns`` (``/run/netns``)."""
    try:
        return {entry.name for entry in os.scandir(_NETNS_RUN_DIR)}
    except FileNotFoundError:
        return set()


def _list_links(*, timeout: float) -> set[str]:
    """Names of the network interfaces of the root (current) namespace."""
    proc = _run_cmd(["ip", "-j", "link", "show"], timeout=timeout)
    try:
        return {entry["ifname"] for entry in json.loads(proc.stdout or "[]")}
    except (ValueError, KeyError, TypeError) as exc:
        raise NetLabError(f"cannot parse `ip -j link show` output: {exc}") from exc


def _netns_pids(netns: str, *, timeout: float) -> set[int]:
    """Pids of the live (non-zombie) processes in ``netns``; empty if it is gone."""
    proc = _run_cmd(["ip", "netns", "pids", netns], timeout=timeout, check=False)
    if proc.returncode != 0:
        if netns not in _list_netns():
            return set()
        raise NetLabError(
            f"cannot list processes of netns {netns}: {proc.stderr.strip()}",
            argv=["ip", "netns", "pids", netns],
            returncode=proc.returncode,
            stderr=proc.stderr.strip(),
        )
    return {int(tok) for tok in proc.stdout.split() if tok.isdigit()}


def _kill_netns_processes(netns: str, *, timeout: float) -> int:
    """SIGKILL every process in ``netns`` until none is left.

    Returns:
        How many distinct processes were signalled.

    Raises:
        NetLabError: processes were still present after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    signalled: set[int] = set()
    own_pid = os.getpid()
    while True:
        pids = _netns_pids(netns, timeout=timeout) - {own_pid}
        if not pids:
            return len(signalled)
        if time.monotonic() > deadline:
            raise NetLabError(f"processes {sorted(pids)} in netns {netns} survived SIGKILL for {timeout:g}s")
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        signalled |= pids
        time.sleep(0.01)


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of ``pid``, or None if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw.rsplit(")", 1)[-1].split()
    try:
        return fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None


def _owner_alive(pid: object, start_ticks: object) -> bool:
    """Whether the process recorded as a lab owner still runs.

    A zombie counts as dead, and so does a process whose start time differs
    from the recorded one (the pid was reused).
    """
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    stat = _proc_stat(pid)
    if stat is None:
        return False
    state, ticks = stat
    if state in ("Z", "X", "x"):
        return False
    return not (isinstance(start_ticks, int) and start_ticks != ticks)


def _subnet(index: int) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(f"198.18.{index}.0/24")


def _root_ns_networks(*, timeout: float) -> list[ipaddress.IPv4Network]:
    """Every IPv4 route destination and address prefix of the root namespace."""
    nets: list[ipaddress.IPv4Network] = []
    routes = _run_cmd(["ip", "-j", "-4", "route", "show", "table", "all"], timeout=timeout)
    addrs = _run_cmd(["ip", "-j", "-4", "addr", "show"], timeout=timeout)
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
def _registry_lock() -> Iterator[None]:
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


def _str_list(value: object) -> list[str]:
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, str)]


def _remove_lab_resources(
    lab_id: str,
    *,
    netns: Iterable[str] = (),
    links: Iterable[str] = (),
    timeout: float = _DEFAULT_COMMAND_TIMEOUT,
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
        return {name for name in _list_netns() if name in wanted_ns or name.startswith(f"{lab_id}-")}

    def link_targets() -> set[str]:
        found = set()
        for name in _list_links(timeout=timeout):
            match = _LINK_NAME_RE.match(name)
            if name in wanted_links or (match is not None and match.group(1) == lab_id):
                found.add(name)
        return found

    namespaces = ns_targets()
    for name in sorted(namespaces):
        try:
            killed = _kill_netns_processes(name, timeout=_KILL_TIMEOUT)
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
        proc = _run_cmd(["ip", "-force", "-batch", "-"], input_text="\n".join(lines) + "\n", timeout=timeout, check=False)
        if proc.returncode != 0:
            _log.debug("netlab %s: ip batch cleanup reported: %s", lab_id, proc.stderr.strip())
    leftovers = sorted(ns_targets() | link_targets())
    if leftovers:
        _log.error("netlab %s: could not remove %s", lab_id, leftovers)
    return leftovers


def _cleanup_stale_locked(*, timeout: float) -> tuple[list[str], dict[str, dict[str, Any]]]:
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
        leftovers = _remove_lab_resources(
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
    for name in _list_netns():
        if match := _NETNS_NAME_RE.match(name):
            orphan_ids.add(match.group(1))
    for name in _list_links(timeout=timeout):
        if match := _LINK_NAME_RE.match(name):
            orphan_ids.add(match.group(1))
    for lab_id in sorted(orphan_ids):
        if lab_id in live or (REGISTRY_DIR / f"{lab_id}.json").exists():
            continue
        _log.info("netlab: removing orphaned objects of unregistered lab %s", lab_id)
        if not _remove_lab_resources(lab_id, timeout=timeout) and lab_id not in removed:
            removed.append(lab_id)
    return sorted(removed), live


def _as_name_list(names: str | Iterable[str]) -> list[str]:
    if isinstance(names, str):
        return [names]
    result = list(names)
    for name in result:
        if not isinstance(name, str):
            raise TypeError(f"host names must be str, got {name!r}")
    return result


# --------------------------------------------------------------------------
# Public data types.
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class HostFaults:
    """Snapshot of the faults applied to one host (see :meth:`NetLab.faults`).

    Attributes:
        cloud_cut: traffic between the host and the cloud address is dropped.
        loss_percent: per-packet, per-direction random drop rate, 0..100.
        blocked_peers: addresses of peers the host is split from (sorted).
        killed: the host is killed (processes SIGKILLed, link down).
    """

    cloud_cut: bool
    loss_percent: int
    blocked_peers: tuple[str, ...]
    killed: bool


@dataclasses.dataclass(frozen=True, slots=True)
class Host:
    """One simulated host: a network namespace with one ``eth0`` on the lab bridge.

    Instances are created by :meth:`NetLab.add_host` / :meth:`NetLab.add_pool`
    only.

    Attributes:
        name: host name, e.g. ``"a-1"``.
        pool: pool name, e.g. ``"a"``.
        netns: network namespace name, ``<labid>-<name>``.
        address: IPv4 address of ``eth0`` (``/24``, shared with the cloud).
        veth: name of the bridge-side veth in the root namespace.
    """

    name: str
    pool: str
    netns: str
    address: str
    veth: str
    _lab: NetLab = dataclasses.field(repr=False, compare=False)

    def wrap_argv(self, argv: Sequence[str]) -> list[str]:
        """Return ``argv`` prefixed with ``ip netns exec <netns>``.

        Use it to start processes yourself (e.g. with
        ``asyncio.create_subprocess_exec``).  Such processes are not tracked
        by the lab, but still die on :meth:`NetLab.kill` / :meth:`NetLab.close`
        because they live in the host's namespace.

        Raises:
            ValueError: ``argv`` is empty.
        """
        args = list(argv)
        if not args:
            raise ValueError("argv must not be empty")
        return ["ip", "netns", "exec", self.netns, *args]

    def popen(self, argv: Sequence[str], /, **popen_kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside the host's namespace and return its Popen.

        The lab remembers the process: :meth:`NetLab.kill` and
        :meth:`NetLab.close` SIGKILL and reap it.  ``ip netns exec`` execs
        ``argv`` in place, so ``Popen.pid`` is the pid of ``argv[0]`` itself.
        Pipes opened through ``popen_kwargs`` stay the caller's to close.

        Args:
            argv: program and arguments.
            **popen_kwargs: passed to :class:`subprocess.Popen` unchanged.

        Raises:
            NetLabError: the lab is not started or already closed.
            ValueError: ``argv`` is empty.
            OSError: as :class:`subprocess.Popen`.
        """
        return self._lab._popen(self, argv, popen_kwargs)

    def run(
        self,
        argv: Sequence[str],
        /,
        *,
        timeout: float,
        check: bool = False,
        input: str | None = None,  # noqa: A002 - mirrors subprocess.run
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` to completion inside the host's namespace.

        Output is captured as text.  The process is not tracked (it is over
        when this returns).

        Args:
            argv: program and arguments.
            timeout: seconds before the process is killed.
            check: raise :class:`subprocess.CalledProcessError` on a non-zero
                exit status.
            input: text fed on stdin.

        Returns:
            The completed process; ``stdout``/``stderr`` are ``str``.

        Raises:
            NetLabError: the lab is not started or already closed.
            subprocess.TimeoutExpired: ``timeout`` elapsed (the process was killed).
            subprocess.CalledProcessError: ``check`` and a non-zero exit status.
        """
        self._lab._require_started()
        return subprocess.run(
            self.wrap_argv(argv),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
        )


@dataclasses.dataclass(slots=True)
class _HostState:
    cloud_cut: bool = False
    loss_percent: int = 0
    killed: bool = False
    applied_ruleset: str = ""


# --------------------------------------------------------------------------
# The lab.
# --------------------------------------------------------------------------


class NetLab:
    """A set of simulated hosts on one bridge, with injectable network faults.

    Typical use::

        with NetLab.create() as lab:
            nodes = lab.add_pool("a", 3)          # a-1, a-2, a-3
            agent = nodes[0].popen([...])         # runs inside a-1's netns
            lab.cut_cloud(["a-1"])                # a-1 <-/-> cloud, peers fine
            lab.heal()

    Lifecycle: the constructor only validates; :meth:`start` (or
    :meth:`create`, or entering the context manager) builds the bridge;
    :meth:`close` removes everything and is safe to call twice and after a
    partial failure.  ``close`` is also registered with :mod:`atexit`.
    Handling SIGTERM is the caller's business.

    Fault model (all faults are nftables drops inside the host namespaces,
    loopback excluded, see the module docstring):

    * cloud cut - drop every packet between the host and the cloud address;
    * split - drop every packet between hosts placed on different sides;
    * loss - drop each packet entering or leaving the host with probability
      ``percent``/100, independently per direction, so a request/response
      round trip succeeds with probability ``(1 - percent/100) ** 2``;
    * kill - bridge port down (the address goes silent) and every process of
      the host SIGKILLed; the host keeps its other fault state.

    Faults compose per host; :meth:`heal` removes cuts, splits and loss but
    leaves killed hosts killed until :meth:`revive`.

    Methods taking ``names`` accept one host name or an iterable of names;
    every name is validated before anything changes.  Unknown hosts or
    pools raise :class:`KeyError`; command failures raise
    :class:`NetLabError`, after which the recorded fault state is the
    requested one and the next change re-applies it.
    """

    def __init__(
        self,
        *,
        subnet_index: int | None = None,
        command_timeout: float = _DEFAULT_COMMAND_TIMEOUT,
    ) -> None:
        """Prepare a lab without touching the system.

        Args:
            subnet_index: ``k`` in ``198.18.<k>.0/24`` (1..250); ``None``
                picks the lowest free one.
            command_timeout: seconds allowed to each ``ip``/``nft`` call.

        Raises:
            ValueError: ``subnet_index`` or ``command_timeout`` out of range.
        """
        if subnet_index is not None and not (_MIN_SUBNET_INDEX <= subnet_index <= _MAX_SUBNET_INDEX):
            raise ValueError(f"subnet_index must be in {_MIN_SUBNET_INDEX}..{_MAX_SUBNET_INDEX}, got {subnet_index}")
        if command_timeout <= 0:
            raise ValueError(f"command_timeout must be positive, got {command_timeout}")
        self._requested_subnet_index = subnet_index
        self._timeout = float(command_timeout)
        self._lock = threading.RLock()
        self._state: Literal["new", "started", "closed"] = "new"
        self._lab_id: str | None = None
        self._subnet_index: int | None = None
        self._hosts: dict[str, Host] = {}
        self._host_state: dict[str, _HostState] = {}
        self._splits: dict[str, tuple[frozenset[str], ...]] = {}
        self._procs: dict[str, list[subprocess.Popen[Any]]] = {}
        self._netns_names: list[str] = []
        self._link_names: list[str] = []
        self._next_octet = _FIRST_HOST_OCTET

    # ----------------------------------------------------------- lifecycle

    @classmethod
    def create(
        cls,
        *,
        subnet_index: int | None = None,
        command_timeout: float = _DEFAULT_COMMAND_TIMEOUT,
    ) -> NetLab:
        """Construct and :meth:`start` a lab (same arguments as the constructor).

        Raises:
            ValueError: bad arguments.
            NetLabError: the lab could not be built (anything half-built has
                been removed).
        """
        lab = cls(subnet_index=subnet_index, command_timeout=command_timeout)
        lab.start()
        return lab

    def start(self) -> None:
        """Clean up stale labs, reserve a subnet and create the bridge.

        Idempotent once started.

        Raises:
            NetLabError: not root, ``ip``/``nft`` missing, the lab was
                closed, the requested subnet is in use, no subnet is free, or
                a command failed (the partial lab has then been closed).
        """
        with self._lock:
            if self._state == "started":
                return
            if self._state == "closed":
                raise NetLabError("this NetLab is closed; create a new one")
            if os.geteuid() != 0:
                raise NetLabError("NetLab needs root (network namespaces, nftables)")
            for tool in ("ip", "nft"):
                if shutil.which(tool) is None:
                    raise NetLabError(f"NetLab needs `{tool}` on PATH")
            started = time.monotonic()
            with _registry_lock():
                removed, live = _cleanup_stale_locked(timeout=self._timeout)
                if removed:
                    _log.info("netlab: cleaned up stale labs %s", removed)
                self._subnet_index = self._pick_subnet(live)
                self._lab_id = self._pick_lab_id()
                self._link_names = [self.bridge]
                self._write_registry_locked()
            self._state = "started"
            atexit.register(self.close)
            try:
                bridge = self.bridge
                script = (
                    f"link add {bridge} type bridge stp_state 0 forward_delay 0 "
                    "nf_call_iptables 0 nf_call_ip6tables 0 nf_call_arptables 0\n"
                    f"link set dev {bridge} addrgenmode none\n"
                    f"addr add {self.cloud_address}/24 dev {bridge}\n"
                    f"link set dev {bridge} up\n"
                )
                _run_cmd(["ip", "-batch", "-"], input_text=script, timeout=self._timeout)
            except BaseException:
                self._close_after_failure()
                raise
            _log.info(
                "netlab %s started: bridge %s, cloud %s, in %.3fs",
                self._lab_id,
                bridge,
                self.cloud_address,
                time.monotonic() - started,
            )

    def close(self) -> None:
        """Remove every namespace, link and the registry file of this lab.

        Kills the processes started with :meth:`Host.popen` and every process
        left in the lab's namespaces first.  Safe to call twice, before
        :meth:`start` and after a partial failure.  Hosts become unusable.

        Raises:
            NetLabError: some objects could not be removed; the registry file
                is kept so that a later call or :meth:`cleanup_stale` retries.
        """
        with self._lock:
            if self._state == "new":
                self._state = "closed"
                return
            if self._state == "closed" and self._lab_id is None:
                return
            self._state = "closed"
            lab_id = self._lab_id
            assert lab_id is not None
            for procs in self._procs.values():
                self._kill_popens(procs)
            self._procs.clear()
            leftovers = _remove_lab_resources(
                lab_id, netns=self._netns_names, links=self._link_names, timeout=self._timeout
            )
            if leftovers:
                raise NetLabError(f"netlab {lab_id}: could not remove {leftovers}")
            with _registry_lock():
                self._registry_path.unlink(missing_ok=True)
            atexit.unregister(self.close)
            self._hosts.clear()
            self._host_state.clear()
            self._splits.clear()
            self._lab_id = None  # marks "fully closed"
            _log.info("netlab %s closed", lab_id)

    def _close_after_failure(self) -> None:
        try:
            self.close()
        except Exception:  # the original error matters more
            _log.exception("netlab: cleanup after a failed start also failed")

    def __enter__(self) -> NetLab:
        """Start the lab (if needed) and return it."""
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Close the lab."""
        self.close()

    def __repr__(self) -> str:
        return (
            f"NetLab(lab_id={self._lab_id!r}, subnet_index={self._subnet_index!r}, "
            f"state={self._state!r}, hosts={len(self._hosts)})"
        )

    @staticmethod
    def cleanup_stale() -> list[str]:
        """Remove labs whose owner process is gone, and unregistered lab objects.

        A lab is stale when the pid in its registry file is dead, a zombie,
        or reused by a process with a different start time; its namespaces
        (with every process inside them), veths, bridge (and with the
        namespaces their nftables tables) and registry file are removed.
        Namespaces and links matching ``ew????-*``, ``ew????br`` or
        ``ew????v<n>`` without a registry file are removed too.  Live labs,
        including this process's own, are never touched.

        Returns:
            Sorted ids of the labs removed.

        Raises:
            NetLabError: an ``ip`` command could not run.
            OSError: the registry directory is not usable.
        """
        with _registry_lock():
            removed, _ = _cleanup_stale_locked(timeout=_DEFAULT_COMMAND_TIMEOUT)
        return removed

    # ----------------------------------------------------------- properties

    @property
    def lab_id(self) -> str:
        """Lab id, ``ew`` + 4 hex digits.  Raises NetLabError before start/after close."""
        self._require_started()
        assert self._lab_id is not None
        return self._lab_id

    @property
    def subnet_index(self) -> int:
        """``k`` of ``198.18.<k>.0/24``.  Raises NetLabError before start."""
        if self._subnet_index is None:
            raise NetLabError("NetLab is not started")
        return self._subnet_index

    @property
    def subnet(self) -> str:
        """The lab subnet in CIDR notation, e.g. ``"198.18.7.0/24"``."""
        return str(_subnet(self.subnet_index))

    @property
    def cloud_address(self) -> str:
        """Cloud address on the bridge (root namespace), e.g. ``"198.18.7.1"``."""
        return f"198.18.{self.subnet_index}.{CLOUD_HOST_OCTET}"

    @property
    def bridge(self) -> str:
        """Name of the lab bridge in the root namespace, ``<labid>br``."""
        if self._lab_id is None:
            raise NetLabError("NetLab is not started")
        return f"{self._lab_id}br"

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._state == "closed"

    @property
    def hosts(self) -> tuple[Host, ...]:
        """Every host, in creation order."""
        with self._lock:
            return tuple(self._hosts.values())

    @property
    def _registry_path(self) -> Path:
        assert self._lab_id is not None
        return REGISTRY_DIR / f"{self._lab_id}.json"

    def host(self, name: str) -> Host:
        """Return the host called ``name``.

        Raises:
            KeyError: no such host.
        """
        with self._lock:
            try:
                return self._hosts[name]
            except KeyError:
                raise KeyError(f"no host named {name!r} in this lab") from None

    def pool_hosts(self, pool: str) -> list[Host]:
        """Hosts of ``pool`` in creation order.

        Raises:
            KeyError: the pool has no hosts.
        """
        with self._lock:
            found = [host for host in self._hosts.values() if host.pool == pool]
        if not found:
            raise KeyError(f"no pool named {pool!r} in this lab")
        return found

    # ----------------------------------------------------------- hosts

    def add_host(self, name: str, *, pool: str) -> Host:
        """Create one host (namespace, veth, address, nftables table).

        Args:
            name: host name: lowercase letters, digits and ``-``, 1-40 chars.
            pool: pool name: same alphabet, 1-24 chars.

        Returns:
            The new host, with ``eth0`` up at the next free address.

        Raises:
            ValueError: bad or duplicate name, bad pool name.
            NetLabError: lab not started/closed, the subnet is full, or a
                command failed (the half-built host has been removed).
        """
        with self._lock:
            return self._add_hosts([(name, pool)])[0]

    def add_pool(self, pool: str, count: int) -> list[Host]:
        """Create ``count`` hosts of ``pool`` in one batch.

        Hosts are named ``<pool>-<n>``, numbering from 1 for a new pool and
        continuing after the highest existing ``<pool>-<n>`` otherwise.

        Returns:
            The new hosts, in order.

        Raises:
            ValueError: ``count`` < 1 or bad pool name.
            NetLabError: as :meth:`add_host`.
        """
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        with self._lock:
            prefix = f"{pool}-"
            existing = [
                int(name[len(prefix) :])
                for name, host in self._hosts.items()
                if host.pool == pool and name.startswith(prefix) and name[len(prefix) :].isdigit()
            ]
            first = max(existing, default=0) + 1
            return self._add_hosts([(f"{pool}-{n}", pool) for n in range(first, first + count)])

    def _add_hosts(self, specs: list[tuple[str, str]]) -> list[Host]:
        self._require_started()
        assert self._lab_id is not None
        seen: set[str] = set()
        for name, pool in specs:
            if not isinstance(name, str) or not _HOST_NAME_RE.match(name):
                raise ValueError(f"bad host name {name!r}: use [a-z0-9-], 1-40 chars, no leading/trailing '-'")
            if not isinstance(pool, str) or not _POOL_NAME_RE.match(pool):
                raise ValueError(f"bad pool name {pool!r}: use [a-z0-9-], 1-24 chars, no leading/trailing '-'")
            if name in self._hosts or name in seen:
                raise ValueError(f"host {name!r} already exists")
            seen.add(name)
        if self._next_octet + len(specs) - 1 > _LAST_HOST_OCTET:
            raise NetLabError(f"subnet {self.subnet} is full (at most {_LAST_HOST_OCTET - _FIRST_HOST_OCTET + 1} hosts)")
        started = time.monotonic()
        hosts = []
        for name, pool in specs:
            octet = self._next_octet
            self._next_octet += 1
            hosts.append(
                Host(
                    name=name,
                    pool=pool,
                    netns=f"{self._lab_id}-{name}",
                    address=f"198.18.{self.subnet_index}.{octet}",
                    veth=f"{self._lab_id}v{octet}",
                    _lab=self,
                )
            )
        # Record the names before creating anything, for crash cleanup.
        self._netns_names.extend(host.netns for host in hosts)
        self._link_names.extend(host.veth for host in hosts)
        with _registry_lock():
            self._write_registry_locked()
        try:
            root_script = "".join(
                f"netns add {host.netns}\n"
                f"link add {host.veth} type veth peer name eth0 netns {host.netns}\n"
                f"link set dev {host.veth} addrgenmode none\n"
                f"link set dev {host.veth} master {self.bridge}\n"
                f"link set dev {host.veth} up\n"
                for host in hosts
            )
            _run_cmd(["ip", "-batch", "-"], input_text=root_script, timeout=self._timeout)
            table = (
                f"table inet {NFT_TABLE} {{\n"
                "  chain input { type filter hook input priority filter; policy accept; }\n"
                "  chain output { type filter hook output priority filter; policy accept; }\n"
                "}\n"
            )
            for host in hosts:
                ns_script = (
                    "link set dev lo up\n"
                    "link set dev eth0 addrgenmode none\n"
                    f"addr add {host.address}/24 dev eth0\n"
                    "link set dev eth0 up\n"
                )
                _run_cmd(["ip", "-n", host.netns, "-batch", "-"], input_text=ns_script, timeout=self._timeout)
                _run_cmd(host.wrap_argv(["nft", "-f", "-"]), input_text=table, timeout=self._timeout)
        except BaseException:
            self._rollback_hosts(hosts)
            raise
        for host in hosts:
            self._hosts[host.name] = host
            self._host_state[host.name] = _HostState()
        _log.info(
            "netlab %s: added %d host(s) %s in %.3fs",
            self._lab_id,
            len(hosts),
            [host.name for host in hosts],
            time.monotonic() - started,
        )
        return hosts

    def _rollback_hosts(self, hosts: list[Host]) -> None:
        assert self._lab_id is not None
        netns = [host.netns for host in hosts]
        links = [host.veth for host in hosts]
        try:
            existing_links = _list_links(timeout=self._timeout)
            lines = [f"link del dev {name}" for name in links if name in existing_links]
            lines += [f"netns del {name}" for name in netns if name in _list_netns()]
            if lines:
                _run_cmd(["ip", "-force", "-batch", "-"], input_text="\n".join(lines) + "\n", timeout=self._timeout, check=False)
            if set(netns) & _list_netns() or set(links) & _list_links(timeout=self._timeout):
                return  # leave them recorded: close() retries
        except NetLabError:
            _log.exception("netlab %s: rollback of a failed add_host failed", self._lab_id)
            return
        self._netns_names = [name for name in self._netns_names if name not in netns]
        self._link_names = [name for name in self._link_names if name not in links]
        with contextlib.suppress(OSError), _registry_lock():
            self._write_registry_locked()

    # ----------------------------------------------------------- processes

    def _popen(self, host: Host, argv: Sequence[str], popen_kwargs: dict[str, Any]) -> subprocess.Popen[Any]:
        with self._lock:
            self._require_started()
            if self._hosts.get(host.name) is not host:
                raise NetLabError(f"host {host.name!r} does not belong to this lab")
            procs = [proc for proc in self._procs.get(host.name, []) if proc.poll() is None]
            proc = subprocess.Popen(host.wrap_argv(argv), **popen_kwargs)
            procs.append(proc)
            self._procs[host.name] = procs
            _log.debug("netlab %s: started pid %d in %s: %s", self._lab_id, proc.pid, host.name, shlex.join(argv))
            return proc

    @staticmethod
    def _kill_popens(procs: Iterable[subprocess.Popen[Any]]) -> None:
        procs = list(procs)
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
        for proc in procs:
            try:
                proc.wait(timeout=_KILL_TIMEOUT)
            except subprocess.TimeoutExpired:
                _log.error("netlab: pid %d did not exit after SIGKILL", proc.pid)

    # ----------------------------------------------------------- faults

    def cut_cloud(self, names: str | Iterable[str]) -> None:
        """Drop all traffic between the given hosts and the cloud address.

        Both directions; peer traffic keeps flowing.  Idempotent.

        Raises:
            KeyError: unknown host.  NetLabError: nft failed or lab closed.
        """
        self._set_cloud_cut(_as_name_list(names), cut=True)

    def restore_cloud(self, names: str | Iterable[str]) -> None:
        """Undo :meth:`cut_cloud` for the given hosts.  Idempotent.

        Raises:
            KeyError: unknown host.  NetLabError: nft failed or lab closed.
        """
        self._set_cloud_cut(_as_name_list(names), cut=False)

    def cut_pool_cloud(self, pool: str) -> None:
        """:meth:`cut_cloud` for every current host of ``pool``.

        Raises:
            KeyError: unknown pool.  NetLabError: nft failed or lab closed.
        """
        with self._lock:
            self._set_cloud_cut([host.name for host in self.pool_hosts(pool)], cut=True)

    def restore_pool_cloud(self, pool: str) -> None:
        """:meth:`restore_cloud` for every current host of ``pool``.

        Raises:
            KeyError: unknown pool.  NetLabError: nft failed or lab closed.
        """
        with self._lock:
            self._set_cloud_cut([host.name for host in self.pool_hosts(pool)], cut=False)

    def _set_cloud_cut(self, names: list[str], *, cut: bool) -> None:
        with self._lock:
            self._require_started()
            for name in names:
                self.host(name)
            for name in names:
                self._host_state[name].cloud_cut = cut
            self._apply(names)

    def split(self, pool: str, sides: Sequence[Sequence[str]]) -> None:
        """Partition ``pool``: hosts on different sides cannot talk to each other.

        Packets are dropped by peer address, both directions.  Each side keeps
        the cloud (unless cut separately).  Hosts of the pool listed on no
        side are not partitioned from anyone.  A new split of the same pool
        replaces the previous one; splits of different pools are independent.

        Args:
            pool: the pool.
            sides: two or more disjoint, non-empty lists of host names of
                ``pool``.

        Raises:
            KeyError: unknown pool or host.
            ValueError: fewer than two sides, an empty side, a host listed
                twice or a host of another pool.
            NetLabError: nft failed or lab closed.
        """
        with self._lock:
            self._require_started()
            members = {host.name for host in self.pool_hosts(pool)}
            side_sets: list[frozenset[str]] = []
            seen: set[str] = set()
            if isinstance(sides, str) or len(sides) < 2:
                raise ValueError("split needs at least two sides")
            for side in sides:
                names = _as_name_list(side)
                if not names:
                    raise ValueError("split sides must not be empty")
                for name in names:
                    self.host(name)
                    if name not in members:
                        raise ValueError(f"host {name!r} is not in pool {pool!r}")
                    if name in seen:
                        raise ValueError(f"host {name!r} is listed on more than one side")
                    seen.add(name)
                side_sets.append(frozenset(names))
            self._splits[pool] = tuple(side_sets)
            self._apply(sorted(members))

    def unsplit(self, pool: str) -> None:
        """Remove the split of ``pool`` (no-op if it is not split).

        Raises:
            KeyError: unknown pool.  NetLabError: nft failed or lab closed.
        """
        with self._lock:
            self._require_started()
            members = [host.name for host in self.pool_hosts(pool)]
            if self._splits.pop(pool, None) is not None:
                self._apply(members)

    def loss(self, names: str | Iterable[str], percent: int) -> None:
        """Drop ``percent``% of all packets entering and leaving the given hosts.

        Implemented as ``numgen random mod 100 < percent drop`` in both the
        input and the output hook: each direction loses ``percent``%
        independently, so a round trip succeeds with probability
        ``(1 - percent/100) ** 2``.  Loopback is exempt.  ``percent=0``
        removes the loss; 100 drops everything.

        Raises:
            KeyError: unknown host.  ValueError: ``percent`` not in 0..100.
            NetLabError: nft failed or lab closed.
        """
        if isinstance(percent, bool) or not isinstance(percent, int) or not 0 <= percent <= 100:
            raise ValueError(f"percent must be an int in 0..100, got {percent!r}")
        names_list = _as_name_list(names)
        with self._lock:
            self._require_started()
            for name in names_list:
                self.host(name)
            for name in names_list:
                self._host_state[name].loss_percent = percent
            self._apply(names_list)

    def kill(self, name: str) -> None:
        """Kill host ``name``: bridge port down, then SIGKILL all its processes.

        The link goes down first so that the kernel's socket teardown (RST/FIN)
        never leaves the host: like a power loss, the address just goes
        silent.  Then every process in the namespace (``ip netns pids``) and
        every process started with :meth:`Host.popen` for it is SIGKILLed and
        tracked ones are reaped.  Idempotent (a second call kills whatever was
        started meanwhile).  Fault rules are kept.

        Raises:
            KeyError: unknown host.
            NetLabError: a command failed, a process survived SIGKILL, or the
                lab is closed.
        """
        with self._lock:
            self._require_started()
            host = self.host(name)
            _run_cmd(["ip", "link", "set", "dev", host.veth, "down"], timeout=self._timeout)
            self._host_state[name].killed = True
            self._kill_popens(self._procs.pop(name, []))
            count = _kill_netns_processes(host.netns, timeout=_KILL_TIMEOUT)
            _log.info("netlab %s: killed %s (%d process(es) in its netns)", self._lab_id, name, count)

    def revive(self, name: str) -> None:
        """Bring a killed host's link back up (restarting processes is the caller's job).

        Idempotent; a no-op for a host that is not killed.

        Raises:
            KeyError: unknown host.  NetLabError: a command failed or lab closed.
        """
        with self._lock:
            self._require_started()
            host = self.host(name)
            _run_cmd(["ip", "link", "set", "dev", host.veth, "up"], timeout=self._timeout)
            self._host_state[name].killed = False
            _log.info("netlab %s: revived %s", self._lab_id, name)

    def is_killed(self, name: str) -> bool:
        """Whether ``name`` is killed (and not revived since).

        Raises:
            KeyError: unknown host.
        """
        with self._lock:
            self.host(name)
            return self._host_state[name].killed

    def heal(self) -> None:
        """Remove every cloud cut, split and loss on every host.

        Killed hosts stay killed: use :meth:`revive`.

        Raises:
            NetLabError: nft failed or lab closed.
        """
        with self._lock:
            self._require_started()
            self._splits.clear()
            for state in self._host_state.values():
                state.cloud_cut = False
                state.loss_percent = 0
            self._apply(list(self._hosts))
            _log.info("netlab %s: healed", self._lab_id)

    def faults(self, name: str) -> HostFaults:
        """Snapshot of the faults currently applied to host ``name``.

        Raises:
            KeyError: unknown host.
        """
        with self._lock:
            self.host(name)
            state = self._host_state[name]
            return HostFaults(
                cloud_cut=state.cloud_cut,
                loss_percent=state.loss_percent,
                blocked_peers=tuple(self._blocked_peers(name)),
                killed=state.killed,
            )

    # ----------------------------------------------------------- internals

    def _require_started(self) -> None:
        if self._state != "started":
            raise NetLabError(f"NetLab is {'closed' if self._state == 'closed' else 'not started'}")

    def _blocked_peers(self, name: str) -> list[str]:
        blocked: set[str] = set()
        for sides in self._splits.values():
            own = [side for side in sides if name in side]
            if not own:
                continue
            for side in sides:
                if side is not own[0]:
                    blocked.update(self._hosts[peer].address for peer in side if peer in self._hosts)
        return sorted(blocked, key=ipaddress.IPv4Address)

    def _render_rules(self, name: str) -> str:
        state = self._host_state[name]
        table = f"inet {NFT_TABLE}"
        rules = [
            f'add rule {table} input iifname "lo" accept',
            f'add rule {table} output oifname "lo" accept',
        ]
        if state.cloud_cut:
            rules.append(f"add rule {table} input ip saddr {self.cloud_address} counter drop")
            rules.append(f"add rule {table} output ip daddr {self.cloud_address} counter drop")
        blocked = self._blocked_peers(name)
        if blocked:
            peers = "{ " + ", ".join(blocked) + " }"
            rules.append(f"add rule {table} input ip saddr {peers} counter drop")
            rules.append(f"add rule {table} output ip daddr {peers} counter drop")
        if state.loss_percent:
            # numgen's range is 0..99, so "< 100" is rejected: 100% is a plain drop.
            match = "" if state.loss_percent >= 100 else f"numgen random mod 100 < {state.loss_percent} "
            rules.append(f"add rule {table} input {match}counter drop")
            rules.append(f"add rule {table} output {match}counter drop")
        if len(rules) == 2:
            return ""  # no fault: empty chains
        return "\n".join(rules) + "\n"

    def _apply(self, names: Iterable[str]) -> None:
        """Rebuild the nft chains of every host whose rules changed (one atomic nft run per host)."""
        errors: list[str] = []
        for name in dict.fromkeys(names):
            state = self._host_state[name]
            rules = self._render_rules(name)
            if rules == state.applied_ruleset:
                continue
            script = f"flush chain inet {NFT_TABLE} input\nflush chain inet {NFT_TABLE} output\n{rules}"
            try:
                _run_cmd(self._hosts[name].wrap_argv(["nft", "-f", "-"]), input_text=script, timeout=self._timeout)
            except NetLabError as exc:
                errors.append(str(exc))
                state.applied_ruleset = "\0unknown"  # force a re-apply next time
                continue
            state.applied_ruleset = rules
            _log.debug("netlab %s: %s rules now:\n%s", self._lab_id, name, rules or "(none)")
        if errors:
            raise NetLabError("; ".join(errors))

    def _pick_subnet(self, live: dict[str, dict[str, Any]]) -> int:
        used = {rec.get("subnet_index") for rec in live.values()}
        nets = _root_ns_networks(timeout=self._timeout)

        def free(index: int) -> bool:
            net = _subnet(index)
            return index not in used and not any(net.overlaps(other) for other in nets)

        if self._requested_subnet_index is not None:
            if not free(self._requested_subnet_index):
                raise NetLabError(f"subnet {_subnet(self._requested_subnet_index)} is in use")
            return self._requested_subnet_index
        for index in range(_MIN_SUBNET_INDEX, _MAX_SUBNET_INDEX + 1):
            if free(index):
                return index
        raise NetLabError("no free 198.18.<k>.0/24 subnet for a new lab")

    @staticmethod
    def _pick_lab_id() -> str:
        netns = _list_netns()
        links = _list_links(timeout=_DEFAULT_COMMAND_TIMEOUT)
        for _ in range(200):
            lab_id = f"ew{secrets.token_hex(2)}"
            if (REGISTRY_DIR / f"{lab_id}.json").exists():
                continue
            if any(name.startswith(f"{lab_id}-") for name in netns):
                continue
            if any(name.startswith(lab_id) for name in links):
                continue
            return lab_id
        raise NetLabError("cannot find an unused lab id")

    def _write_registry_locked(self) -> None:
        assert self._lab_id is not None
        pid = os.getpid()
        stat = _proc_stat(pid)
        record = {
            "version": _REGISTRY_VERSION,
            "lab_id": self._lab_id,
            "owner_pid": pid,
            "owner_start_ticks": stat[1] if stat else None,
            "subnet_index": self._subnet_index,
            "bridge": self.bridge,
            "netns": list(self._netns_names),
            "links": list(self._link_names),
            "nft_tables": [{"netns": name, "table": f"inet {NFT_TABLE}"} for name in self._netns_names],
            "updated_at": time.time(),
        }
        _write_json_atomic(self._registry_path, record)


# --------------------------------------------------------------------------
# CLI: python -m edgewatch_lab.testing.netlab cleanup
# --------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m edgewatch_lab.testing.netlab``.

    Subcommands:
        cleanup: run :meth:`NetLab.cleanup_stale` and print the removed lab ids.

    Returns:
        Process exit status (0 success, 1 failure).
    """
    parser = argparse.ArgumentParser(
        prog="python -m edgewatch_lab.testing.netlab",
        description="Maintenance for edgewatch network labs.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log what is being done")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("cleanup", help="remove labs whose owner process is gone and unregistered lab objects")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    if args.command == "cleanup":
        if os.geteuid() != 0:
            print("cleanup needs root", file=sys.stderr)
            return 1
        try:
            removed = NetLab.cleanup_stale()
        except (NetLabError, OSError) as exc:
            print(f"cleanup failed: {exc}", file=sys.stderr)
            return 1
        print(f"removed {len(removed)} stale lab(s){': ' + ' '.join(removed) if removed else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

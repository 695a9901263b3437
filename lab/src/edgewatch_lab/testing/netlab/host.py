"""One simulated host of a network lab: :class:`Host` (a network namespace with one ``eth0`` on the
lab bridge), the rules for host and pool names, the ``ip``/``nft`` steps that build and delete
hosts' kernel objects, and :class:`ProcessTable`, the processes started in hosts.

A host ``<name>`` of lab ``<labid>`` is the namespace ``<labid>-<name>`` holding the ``eth0`` end of
a veth pair whose other end, ``<labid>v<octet>``, is a port of the bridge in the root namespace;
``eth0`` has ``198.18.<k>.<octet>/24`` and the namespace has the lab's (empty) fault table.
Naming, addresses and the bookkeeping (registry, rollback on failure) are
:class:`~edgewatch_lab.testing.netlab.NetLab`'s; this module only runs the commands.

Limits: processes started in a host run through ``ip netns exec``: they get the host's network
namespace and a private mount namespace with ``/sys`` remounted, but share everything else
(filesystem, pid namespace, users) with the caller.  IPv4 only (IPv6 address generation is
disabled on every lab link).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import subprocess
from collections.abc import Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final

from edgewatch_lab.testing.netlab.commands import KILL_TIMEOUT, list_links, list_netns, run_cmd
from edgewatch_lab.testing.netlab.faults import TABLE_SCRIPT

if TYPE_CHECKING:
    from edgewatch_lab.testing.netlab.lab import NetLab

_log = logging.getLogger(__package__)  # the package's logger, shared by every part of the lab

_HOST_NAME_RE: Final = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?$")
_POOL_NAME_RE: Final = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,22}[a-z0-9])?$")


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


def check_host_specs(specs: list[tuple[str, str]], existing: Collection[str]) -> None:
    """Validate (host name, pool name) pairs for new hosts.

    Raises:
        ValueError: a bad host or pool name, or a host that is in ``existing`` or listed twice.
    """
    seen: set[str] = set()
    for name, pool in specs:
        if not isinstance(name, str) or not _HOST_NAME_RE.match(name):
            raise ValueError(f"bad host name {name!r}: use [a-z0-9-], 1-40 chars, no leading/trailing '-'")
        if not isinstance(pool, str) or not _POOL_NAME_RE.match(pool):
            raise ValueError(f"bad pool name {pool!r}: use [a-z0-9-], 1-24 chars, no leading/trailing '-'")
        if name in existing or name in seen:
            raise ValueError(f"host {name!r} already exists")
        seen.add(name)


def build_hosts(hosts: Sequence[Host], *, bridge: str, timeout: float, traffic_script: str = "") -> None:
    """Create the namespaces, veths (ports of ``bridge``), addresses and fault tables of ``hosts``,
    and run ``traffic_script`` (the traffic table, ``traffic.render_traffic_table``) in each.

    Raises:
        NetLabError: a command failed (whatever was built is left for the caller to remove).
    """
    root_script = "".join(
        f"netns add {host.netns}\n"
        f"link add {host.veth} type veth peer name eth0 netns {host.netns}\n"
        f"link set dev {host.veth} addrgenmode none\n"
        f"link set dev {host.veth} master {bridge}\n"
        f"link set dev {host.veth} up\n"
        for host in hosts
    )
    run_cmd(["ip", "-batch", "-"], input_text=root_script, timeout=timeout)
    for host in hosts:
        ns_script = (
            "link set dev lo up\n"
            "link set dev eth0 addrgenmode none\n"
            f"addr add {host.address}/24 dev eth0\n"
            "link set dev eth0 up\n"
        )
        run_cmd(["ip", "-n", host.netns, "-batch", "-"], input_text=ns_script, timeout=timeout)
        run_cmd(host.wrap_argv(["nft", "-f", "-"]), input_text=TABLE_SCRIPT + traffic_script, timeout=timeout)


def delete_hosts(hosts: Sequence[Host], *, timeout: float) -> bool:
    """Delete the veths and namespaces of ``hosts`` that exist.

    Returns:
        Whether none of them is left.

    Raises:
        NetLabError: ``ip`` could not list the links.
    """
    netns = [host.netns for host in hosts]
    links = [host.veth for host in hosts]
    existing_links = list_links(timeout=timeout)
    lines = [f"link del dev {name}" for name in links if name in existing_links]
    lines += [f"netns del {name}" for name in netns if name in list_netns()]
    if lines:
        run_cmd(["ip", "-force", "-batch", "-"], input_text="\n".join(lines) + "\n", timeout=timeout, check=False)
    return not (set(netns) & list_netns() or set(links) & list_links(timeout=timeout))


class ProcessTable:
    """The processes started with :meth:`Host.popen`, per host name, so that they can be
    SIGKILLed and reaped when their host is killed or the lab closed.  Not thread-safe: the lab
    calls it under its lock."""

    def __init__(self) -> None:
        self._procs: dict[str, list[subprocess.Popen[Any]]] = {}

    def start(self, host: Host, argv: Sequence[str], popen_kwargs: dict[str, Any]) -> subprocess.Popen[Any]:
        """Start ``argv`` in ``host``'s namespace and remember it (forgetting exited ones)."""
        procs = [proc for proc in self._procs.get(host.name, []) if proc.poll() is None]
        proc = subprocess.Popen(host.wrap_argv(argv), **popen_kwargs)
        procs.append(proc)
        self._procs[host.name] = procs
        return proc

    def kill_host(self, name: str) -> None:
        """SIGKILL and reap the processes started in host ``name``, and forget them."""
        _kill_popens(self._procs.pop(name, []))

    def kill_all(self) -> None:
        """SIGKILL and reap every process started in any host, and forget them."""
        for procs in self._procs.values():
            _kill_popens(procs)
        self._procs.clear()


def _kill_popens(procs: Iterable[subprocess.Popen[Any]]) -> None:
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
    for proc in procs:
        try:
            proc.wait(timeout=KILL_TIMEOUT)
        except subprocess.TimeoutExpired:
            _log.error("netlab: pid %d did not exit after SIGKILL", proc.pid)

""":class:`NetLab`: a set of simulated hosts on one bridge, with injectable network faults.

NetLab owns the lifecycle (start: stale cleanup, subnet reservation, bridge; close: removal of
everything), the address plan (cloud ``198.18.<k>.1``, hosts from ``.10`` up) and the hosts, and
is the one public entry point.  It delegates the on-disk registry to
:mod:`~edgewatch_lab.testing.netlab.state`, the hosts' kernel objects and the processes started in
them to :mod:`~edgewatch_lab.testing.netlab.host`, and every fault (cut, split, loss, kill,
heal) to :class:`~edgewatch_lab.testing.netlab.faults.FaultController`.

Limits: Linux only, needs root (``CAP_NET_ADMIN`` + ``CAP_SYS_ADMIN``), ``ip`` and ``nft`` on
``PATH``; at most 245 hosts per lab.  All methods are synchronous and serialise on an internal
lock; call them from asyncio code through ``asyncio.to_thread`` if blocking for a few tens of
milliseconds matters.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final, Literal

from edgewatch_lab.testing.netlab import state
from edgewatch_lab.testing.netlab.commands import DEFAULT_COMMAND_TIMEOUT, NetLabError, run_cmd
from edgewatch_lab.testing.netlab.faults import FaultController, HostFaults
from edgewatch_lab.testing.netlab.host import Host, ProcessTable, build_hosts, check_host_specs, delete_hosts
from edgewatch_lab.testing.netlab.traffic import (
    TRAFFIC_TABLE,
    TrafficCounters,
    parse_counters,
    render_traffic_table,
)

_log = logging.getLogger(__package__)  # the package's logger, shared by every part of the lab

#: Last octet of the cloud address on the lab bridge.
CLOUD_HOST_OCTET: Final = 1
_FIRST_HOST_OCTET: Final = 10
_LAST_HOST_OCTET: Final = 254


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
    loopback excluded, see the package docstring):

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
        command_timeout: float = DEFAULT_COMMAND_TIMEOUT,
    ) -> None:
        """Prepare a lab without touching the system.

        Args:
            subnet_index: ``k`` in ``198.18.<k>.0/24`` (1..250); ``None``
                picks the lowest free one.
            command_timeout: seconds allowed to each ``ip``/``nft`` call.

        Raises:
            ValueError: ``subnet_index`` or ``command_timeout`` out of range.
        """
        if subnet_index is not None and not (state.MIN_SUBNET_INDEX <= subnet_index <= state.MAX_SUBNET_INDEX):
            raise ValueError(
                f"subnet_index must be in {state.MIN_SUBNET_INDEX}..{state.MAX_SUBNET_INDEX}, got {subnet_index}"
            )
        if command_timeout <= 0:
            raise ValueError(f"command_timeout must be positive, got {command_timeout}")
        self._requested_subnet_index = subnet_index
        self._timeout = float(command_timeout)
        self._lock = threading.RLock()
        self._state: Literal["new", "started", "closed"] = "new"
        self._lab_id: str | None = None
        self._subnet_index: int | None = None
        self._hosts: dict[str, Host] = {}
        self._faults = FaultController(self)
        self._procs = ProcessTable()
        self._netns_names: list[str] = []
        self._link_names: list[str] = []
        self._next_octet = _FIRST_HOST_OCTET

    # ----------------------------------------------------------- lifecycle

    @classmethod
    def create(
        cls,
        *,
        subnet_index: int | None = None,
        command_timeout: float = DEFAULT_COMMAND_TIMEOUT,
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
            with state.registry_lock():
                removed, live = state.cleanup_stale_locked(timeout=self._timeout)
                if removed:
                    _log.info("netlab: cleaned up stale labs %s", removed)
                self._subnet_index = state.pick_subnet(
                    live, requested=self._requested_subnet_index, timeout=self._timeout
                )
                self._lab_id = state.pick_lab_id()
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
                run_cmd(["ip", "-batch", "-"], input_text=script, timeout=self._timeout)
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
            self._procs.kill_all()
            leftovers = state.remove_lab_resources(
                lab_id, netns=self._netns_names, links=self._link_names, timeout=self._timeout
            )
            if leftovers:
                raise NetLabError(f"netlab {lab_id}: could not remove {leftovers}")
            with state.registry_lock():
                self._registry_path.unlink(missing_ok=True)
            atexit.unregister(self.close)
            self._hosts.clear()
            self._faults.clear()
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
        with state.registry_lock():
            removed, _ = state.cleanup_stale_locked(timeout=DEFAULT_COMMAND_TIMEOUT)
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
        return str(state.subnet(self.subnet_index))

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
        return state.registry_path(self._lab_id)

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
        check_host_specs(specs, self._hosts)
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
        with state.registry_lock():
            self._write_registry_locked()
        try:
            build_hosts(hosts, bridge=self.bridge, timeout=self._timeout,
                        traffic_script=render_traffic_table(cloud_address=self.cloud_address, subnet=self.subnet))
        except BaseException:
            self._rollback_hosts(hosts)
            raise
        for host in hosts:
            self._hosts[host.name] = host
            self._faults.add_host(host.name)
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
            if not delete_hosts(hosts, timeout=self._timeout):
                return  # leave them recorded: close() retries
        except NetLabError:
            _log.exception("netlab %s: rollback of a failed add_host failed", self._lab_id)
            return
        self._netns_names = [name for name in self._netns_names if name not in netns]
        self._link_names = [name for name in self._link_names if name not in links]
        with contextlib.suppress(OSError), state.registry_lock():
            self._write_registry_locked()

    def _write_registry_locked(self) -> None:
        assert self._lab_id is not None
        state.write_registry_locked(
            self._lab_id,
            subnet_index=self._subnet_index,
            bridge=self.bridge,
            netns=self._netns_names,
            links=self._link_names,
        )

    # ----------------------------------------------------------- processes

    def _popen(self, host: Host, argv: Sequence[str], popen_kwargs: dict[str, Any]) -> subprocess.Popen[Any]:
        with self._lock:
            self._require_started()
            if self._hosts.get(host.name) is not host:
                raise NetLabError(f"host {host.name!r} does not belong to this lab")
            proc = self._procs.start(host, argv, popen_kwargs)
            _log.debug("netlab %s: started pid %d in %s: %s", self._lab_id, proc.pid, host.name, shlex.join(argv))
            return proc

    # ----------------------------------------------------------- faults (faults.FaultController)

    def cut_cloud(self, names: str | Iterable[str]) -> None:
        """Drop all traffic between the given hosts and the cloud address (:meth:`FaultController.cut_cloud`)."""
        self._faults.cut_cloud(names)

    def restore_cloud(self, names: str | Iterable[str]) -> None:
        """Undo :meth:`cut_cloud` for the given hosts (:meth:`FaultController.restore_cloud`)."""
        self._faults.restore_cloud(names)

    def cut_pool_cloud(self, pool: str) -> None:
        """:meth:`cut_cloud` for every current host of ``pool`` (:meth:`FaultController.cut_pool_cloud`)."""
        self._faults.cut_pool_cloud(pool)

    def restore_pool_cloud(self, pool: str) -> None:
        """:meth:`restore_cloud` for every current host of ``pool`` (:meth:`FaultController.restore_pool_cloud`)."""
        self._faults.restore_pool_cloud(pool)

    def split(self, pool: str, sides: Sequence[Sequence[str]]) -> None:
        """Partition ``pool``: hosts on different sides cannot talk to each other (:meth:`FaultController.split`)."""
        self._faults.split(pool, sides)

    def unsplit(self, pool: str) -> None:
        """Remove the split of ``pool``, if any (:meth:`FaultController.unsplit`)."""
        self._faults.unsplit(pool)

    def loss(self, names: str | Iterable[str], percent: int) -> None:
        """Drop ``percent``% of the packets entering and leaving the given hosts (:meth:`FaultController.loss`)."""
        self._faults.loss(names, percent)

    def traffic(self, name: str) -> TrafficCounters:
        """What host ``name`` has sent since it was built, to its peers and to the cloud
        (:mod:`~edgewatch_lab.testing.netlab.traffic`), read now from its ``inet edgewatch_lab_traffic``
        table with ``nft -j list counters`` run in its namespace.

        Works for a killed host too: a kill leaves the namespace and its tables in place, and
        ``nft`` runs in the namespace whatever the state of its link.  Should the host's table be
        unreadable anyway (its namespace or table removed from outside the lab, ``nft`` hung), that
        is a :class:`NetLabError` like any other failed read.

        Subtract two snapshots with :meth:`TrafficCounters.delta` and turn the result into rates
        with :meth:`TrafficCounters.per_minute`.

        Raises:
            KeyError: unknown host.
            NetLabError: ``nft`` failed or timed out (the lab's command timeout), its output is not
                the counters, or the lab is not started or already closed.
        """
        with self._lock:
            self._require_started()
            host = self.host(name)
            argv = host.wrap_argv(["nft", "-j", "list", "counters", "table", "inet", TRAFFIC_TABLE])
            out = run_cmd(argv, timeout=self._timeout)
        try:
            return parse_counters(out.stdout)
        except ValueError as exc:
            raise NetLabError(f"host {name}: {exc}", argv=argv) from exc

    def kill(self, name: str) -> None:
        """Kill host ``name``: bridge port down, then SIGKILL all its processes (:meth:`FaultController.kill`)."""
        self._faults.kill(name)

    def revive(self, name: str) -> None:
        """Bring a killed host's link back up (:meth:`FaultController.revive`)."""
        self._faults.revive(name)

    def is_killed(self, name: str) -> bool:
        """Whether ``name`` is killed and not revived since (:meth:`FaultController.is_killed`)."""
        return self._faults.is_killed(name)

    def heal(self) -> None:
        """Remove every cloud cut, split and loss; killed hosts stay killed (:meth:`FaultController.heal`)."""
        self._faults.heal()

    def faults(self, name: str) -> HostFaults:
        """Snapshot of the faults currently applied to host ``name`` (:meth:`FaultController.faults`)."""
        return self._faults.faults(name)

    # ----------------------------------------------------------- internals

    def _require_started(self) -> None:
        if self._state != "started":
            raise NetLabError(f"NetLab is {'closed' if self._state == 'closed' else 'not started'}")

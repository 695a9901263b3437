"""Network faults of a lab's hosts: their state, the nftables rules that enforce it, and
:class:`FaultController`, which :class:`~edgewatch_lab.testing.netlab.NetLab` delegates its cloud
cuts, splits, loss, kill/revive and heal to.

Every host namespace holds one table ``inet edgewatch_lab`` with an ``input`` and an ``output``
chain (:data:`TABLE_SCRIPT`).  A host's chains are rebuilt from its fault state
(:func:`render_rules`, a pure function) whenever that state changes, in one atomic ``nft -f`` run
per host, so faults compose and healing is a flush.

A killed host has its bridge port down and every process SIGKILLed (the processes started
through the lab via its :class:`~edgewatch_lab.testing.netlab.host.ProcessTable`, then whatever
else runs in the namespace); its fault rules are kept.

Limits: faults are stateless IPv4 drops (no latency, jitter, reordering or bandwidth limits);
loopback is always exempt and ARP is never affected; the root namespace (the cloud) is never
filtered.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Final

from edgewatch_lab.testing.netlab.commands import KILL_TIMEOUT, NetLabError, kill_netns_processes, run_cmd

if TYPE_CHECKING:
    from edgewatch_lab.testing.netlab.host import Host
    from edgewatch_lab.testing.netlab.lab import NetLab

_log = logging.getLogger(__package__)  # the package's logger, shared by every part of the lab

#: Name of the nftables table (family ``inet``) created in every host netns.
NFT_TABLE: Final = "edgewatch_lab"
#: nft script creating a host's (empty) fault table.
TABLE_SCRIPT: Final = (
    f"table inet {NFT_TABLE} {{\n"
    "  chain input { type filter hook input priority filter; policy accept; }\n"
    "  chain output { type filter hook output priority filter; policy accept; }\n"
    "}\n"
)


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


@dataclasses.dataclass(slots=True)
class HostState:
    """The fault state of one host, and the rules last applied for it."""

    cloud_cut: bool = False
    loss_percent: int = 0
    killed: bool = False
    applied_ruleset: str = ""


def as_name_list(names: str | Iterable[str]) -> list[str]:
    """One host name or an iterable of names, as a list.

    Raises:
        TypeError: an item is not a ``str``.
    """
    if isinstance(names, str):
        return [names]
    result = list(names)
    for name in result:
        if not isinstance(name, str):
            raise TypeError(f"host names must be str, got {name!r}")
    return result


def blocked_peers(
    name: str, splits: Mapping[str, tuple[frozenset[str], ...]], hosts: Mapping[str, Host]
) -> list[str]:
    """Addresses of the hosts that the splits place on another side than ``name`` (sorted)."""
    blocked: set[str] = set()
    for sides in splits.values():
        own = [side for side in sides if name in side]
        if not own:
            continue
        for side in sides:
            if side is not own[0]:
                blocked.update(hosts[peer].address for peer in side if peer in hosts)
    return sorted(blocked, key=ipaddress.IPv4Address)


def render_rules(state: HostState, *, cloud_address: str, blocked: Sequence[str]) -> str:
    """The nft rules of one host's fault table (``""`` when the host has no fault)."""
    table = f"inet {NFT_TABLE}"
    rules = [
        f'add rule {table} input iifname "lo" accept',
        f'add rule {table} output oifname "lo" accept',
    ]
    if state.cloud_cut:
        rules.append(f"add rule {table} input ip saddr {cloud_address} counter drop")
        rules.append(f"add rule {table} output ip daddr {cloud_address} counter drop")
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


class FaultController:
    """The fault state of one lab's hosts, and its enforcement: the bodies of NetLab's fault
    methods (``lab.cut_cloud(...)`` calls ``FaultController.cut_cloud``; the fault model is
    described on :class:`NetLab`).

    Works under the lab's lock and looks hosts and pools up through the lab (:meth:`NetLab.host`,
    :meth:`NetLab.pool_hosts`), so unknown names raise :class:`KeyError` as there.
    """

    def __init__(self, lab: NetLab) -> None:
        self._lab = lab
        self.host_state: dict[str, HostState] = {}
        self.splits: dict[str, tuple[frozenset[str], ...]] = {}

    def add_host(self, name: str) -> None:
        """Start tracking a new host, with no fault."""
        self.host_state[name] = HostState()

    def clear(self) -> None:
        """Forget every host and split (the lab is closed)."""
        self.host_state.clear()
        self.splits.clear()

    # ----------------------------------------------------------- cloud cuts

    def cut_cloud(self, names: str | Iterable[str]) -> None:
        """Drop all traffic between the given hosts and the cloud address.

        Both directions; peer traffic keeps flowing.  Idempotent.

        Raises:
            KeyError: unknown host.  NetLabError: nft failed or lab closed.
        """
        self._set_cloud_cut(as_name_list(names), cut=True)

    def restore_cloud(self, names: str | Iterable[str]) -> None:
        """Undo :meth:`cut_cloud` for the given hosts.  Idempotent.

        Raises:
            KeyError: unknown host.  NetLabError: nft failed or lab closed.
        """
        self._set_cloud_cut(as_name_list(names), cut=False)

    def cut_pool_cloud(self, pool: str) -> None:
        """:meth:`cut_cloud` for every current host of ``pool``.

        Raises:
            KeyError: unknown pool.  NetLabError: nft failed or lab closed.
        """
        with self._lab._lock:
            self._set_cloud_cut([host.name for host in self._lab.pool_hosts(pool)], cut=True)

    def restore_pool_cloud(self, pool: str) -> None:
        """:meth:`restore_cloud` for every current host of ``pool``.

        Raises:
            KeyError: unknown pool.  NetLabError: nft failed or lab closed.
        """
        with self._lab._lock:
            self._set_cloud_cut([host.name for host in self._lab.pool_hosts(pool)], cut=False)

    def _set_cloud_cut(self, names: list[str], *, cut: bool) -> None:
        lab = self._lab
        with lab._lock:
            lab._require_started()
            for name in names:
                lab.host(name)
            for name in names:
                self.host_state[name].cloud_cut = cut
            self.apply(names)

    # ----------------------------------------------------------- splits and loss

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
        lab = self._lab
        with lab._lock:
            lab._require_started()
            members = {host.name for host in lab.pool_hosts(pool)}
            side_sets: list[frozenset[str]] = []
            seen: set[str] = set()
            if isinstance(sides, str) or len(sides) < 2:
                raise ValueError("split needs at least two sides")
            for side in sides:
                names = as_name_list(side)
                if not names:
                    raise ValueError("split sides must not be empty")
                for name in names:
                    lab.host(name)
                    if name not in members:
                        raise ValueError(f"host {name!r} is not in pool {pool!r}")
                    if name in seen:
                        raise ValueError(f"host {name!r} is listed on more than one side")
                    seen.add(name)
                side_sets.append(frozenset(names))
            self.splits[pool] = tuple(side_sets)
            self.apply(sorted(members))

    def unsplit(self, pool: str) -> None:
        """Remove the split of ``pool`` (no-op if it is not split).

        Raises:
            KeyError: unknown pool.  NetLabError: nft failed or lab closed.
        """
        lab = self._lab
        with lab._lock:
            lab._require_started()
            members = [host.name for host in lab.pool_hosts(pool)]
            if self.splits.pop(pool, None) is not None:
                self.apply(members)

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
        names_list = as_name_list(names)
        lab = self._lab
        with lab._lock:
            lab._require_started()
            for name in names_list:
                lab.host(name)
            for name in names_list:
                self.host_state[name].loss_percent = percent
            self.apply(names_list)

    # ----------------------------------------------------------- kill and revive

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
        lab = self._lab
        with lab._lock:
            lab._require_started()
            host = lab.host(name)
            run_cmd(["ip", "link", "set", "dev", host.veth, "down"], timeout=lab._timeout)
            self.host_state[name].killed = True
            lab._procs.kill_host(name)
            count = kill_netns_processes(host.netns, timeout=KILL_TIMEOUT)
            _log.info("netlab %s: killed %s (%d process(es) in its netns)", lab._lab_id, name, count)

    def revive(self, name: str) -> None:
        """Bring a killed host's link back up (restarting processes is the caller's job).

        Idempotent; a no-op for a host that is not killed.

        Raises:
            KeyError: unknown host.  NetLabError: a command failed or lab closed.
        """
        lab = self._lab
        with lab._lock:
            lab._require_started()
            host = lab.host(name)
            run_cmd(["ip", "link", "set", "dev", host.veth, "up"], timeout=lab._timeout)
            self.host_state[name].killed = False
            _log.info("netlab %s: revived %s", lab._lab_id, name)

    def is_killed(self, name: str) -> bool:
        """Whether ``name`` is killed (and not revived since).

        Raises:
            KeyError: unknown host.
        """
        lab = self._lab
        with lab._lock:
            lab.host(name)
            return self.host_state[name].killed

    # ----------------------------------------------------------- all hosts

    def heal(self) -> None:
        """Remove every cloud cut, split and loss on every host.

        Killed hosts stay killed: use :meth:`revive`.

        Raises:
            NetLabError: nft failed or lab closed.
        """
        lab = self._lab
        with lab._lock:
            lab._require_started()
            self.splits.clear()
            for state in self.host_state.values():
                state.cloud_cut = False
                state.loss_percent = 0
            self.apply(list(lab._hosts))
            _log.info("netlab %s: healed", lab._lab_id)

    def faults(self, name: str) -> HostFaults:
        """Snapshot of the faults currently applied to host ``name``.

        Raises:
            KeyError: unknown host.
        """
        lab = self._lab
        with lab._lock:
            lab.host(name)
            state = self.host_state[name]
            return HostFaults(
                cloud_cut=state.cloud_cut,
                loss_percent=state.loss_percent,
                blocked_peers=tuple(blocked_peers(name, self.splits, lab._hosts)),
                killed=state.killed,
            )

    def apply(self, names: Iterable[str]) -> None:
        """Rebuild the nft chains of every host whose rules changed (one atomic nft run per host)."""
        lab = self._lab
        errors: list[str] = []
        for name in dict.fromkeys(names):
            state = self.host_state[name]
            rules = render_rules(
                state, cloud_address=lab.cloud_address, blocked=blocked_peers(name, self.splits, lab._hosts)
            )
            if rules == state.applied_ruleset:
                continue
            script = f"flush chain inet {NFT_TABLE} input\nflush chain inet {NFT_TABLE} output\n{rules}"
            try:
                run_cmd(lab._hosts[name].wrap_argv(["nft", "-f", "-"]), input_text=script, timeout=lab._timeout)
            except NetLabError as exc:
                errors.append(str(exc))
                state.applied_ruleset = "\0unknown"  # force a re-apply next time
                continue
            state.applied_ruleset = rules
            _log.debug("netlab %s: %s rules now:\n%s", lab._lab_id, name, rules or "(none)")
        if errors:
            raise NetLabError("; ".join(errors))

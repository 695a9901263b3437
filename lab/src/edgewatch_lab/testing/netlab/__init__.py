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
  host can be cut from the cloud *and* lossy) and healing is a flush;
* a second table ``inet edgewatch_lab_traffic`` per host counting what it sends
  to its peers (any other lab address) and to the cloud address: packets,
  bytes and TCP connections opened, on the ``postrouting`` hook so that
  packets the fault table drops are not counted, loopback excluded.  It is
  created with the host and never rebuilt, so counters survive fault changes
  and kills (:meth:`NetLab.traffic`, :class:`TrafficCounters`).

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

Modules
-------
* :mod:`~edgewatch_lab.testing.netlab.lab`: :class:`NetLab`, lifecycle, address plan, hosts;
* :mod:`~edgewatch_lab.testing.netlab.host`: :class:`Host`, building and deleting hosts, the
  processes started in them;
* :mod:`~edgewatch_lab.testing.netlab.faults`: fault state, nftables rules, the fault controller;
* :mod:`~edgewatch_lab.testing.netlab.traffic`: the traffic counters' table
  (:func:`render_traffic_table`), reading them (:func:`parse_counters`) and
  :class:`TrafficCounters` (deltas, rates per minute);
* :mod:`~edgewatch_lab.testing.netlab.state`: registry files, subnet and lab-id reservation,
  stale-lab cleanup;
* :mod:`~edgewatch_lab.testing.netlab.commands`: ``ip``/``nft`` commands and ``/proc`` (and
  ``_run_cmd``, the seam tests patch on this package to inject command failures);
* :mod:`~edgewatch_lab.testing.netlab.cli`: ``python -m edgewatch_lab.testing.netlab cleanup``.

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

from edgewatch_lab.testing.netlab import commands as _commands
from edgewatch_lab.testing.netlab.cli import main
from edgewatch_lab.testing.netlab.commands import NetLabError
from edgewatch_lab.testing.netlab.faults import NFT_TABLE, HostFaults
from edgewatch_lab.testing.netlab.host import Host
from edgewatch_lab.testing.netlab.lab import CLOUD_HOST_OCTET, NetLab
from edgewatch_lab.testing.netlab.state import REGISTRY_DIR
from edgewatch_lab.testing.netlab.traffic import (
    TRAFFIC_TABLE,
    TrafficCounters,
    parse_counters,
    render_traffic_table,
)

__all__ = [
    "CLOUD_HOST_OCTET",
    "NFT_TABLE",
    "REGISTRY_DIR",
    "Host",
    "HostFaults",
    "NetLab",
    "NetLabError",
    "TRAFFIC_TABLE",
    "TrafficCounters",
    "main",
    "parse_counters",
    "render_traffic_table",
]

# Not in __all__: every command of the lab runs through this package attribute (commands.run_cmd
# looks it up at call time), so a test can replace it to inject failures.
_run_cmd = _commands._run_cmd

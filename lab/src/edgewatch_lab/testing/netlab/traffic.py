"""What each lab host sends, counted on its own link by nftables, the same way whatever runs there:
packets and bytes to its peers and to the cloud, and TCP connections it opens to each.

Every host namespace holds a second table, ``inet edgewatch_lab_traffic`` (:func:`render_table`),
apart from the fault table (whose chains are rebuilt on every fault change, which would reset
counters). Its one chain sits on the ``postrouting`` hook, after the fault table's ``output``
drops, so a packet is counted only if it really left the host: a cut-off host sends nothing to the
cloud by this count. Named counters:

- ``cloud``: IPv4 packets to the cloud address (the control plane);
- ``peers``: IPv4 packets to any other address of the lab subnet (edge hosts, coordinators);
- ``cloud_connections`` / ``peer_connections``: TCP segments with SYN and without ACK (connections
  opened; a retransmitted SYN counts again).

Limits: IPv4 only, like the lab; loopback traffic never reaches ``eth0`` and is not counted; what a
host receives is not counted (each host's sends add up to the lab's traffic); counters start at 0
when the host is built and are read whole with ``nft -j`` (:func:`parse_counters`).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Final

#: Name of the traffic table (family ``inet``) in every host namespace.
TRAFFIC_TABLE: Final = "edgewatch_lab_traffic"
_COUNTERS: Final = ("cloud", "peers", "cloud_connections", "peer_connections")


@dataclasses.dataclass(frozen=True, slots=True)
class TrafficCounters:
    """What one host has sent since it was built (packets, bytes, connections opened: counts)."""

    cloud_packets: int = 0
    cloud_bytes: int = 0
    cloud_connections: int = 0
    peer_packets: int = 0
    peer_bytes: int = 0
    peer_connections: int = 0

    def minus(self, earlier: TrafficCounters) -> TrafficCounters:
        """What was sent between ``earlier`` and this snapshot (fields subtracted one by one).

        Raises:
            ValueError: a field went down (the table was recreated in between).
        """
        fields = {f.name: getattr(self, f.name) - getattr(earlier, f.name) for f in dataclasses.fields(self)}
        if any(v < 0 for v in fields.values()):
            raise ValueError(f"counters went down between two snapshots: {earlier} -> {self}")
        return TrafficCounters(**fields)


def render_table(*, cloud_address: str, subnet: str) -> str:
    """The nft script creating a host's traffic table (run once, when the host is built).

    Args:
        cloud_address: the cloud's IPv4 address, e.g. ``"198.18.7.1"``.
        subnet: the lab subnet in CIDR, e.g. ``"198.18.7.0/24"``.
    """
    counters = "".join(f"  counter {name} {{ }}\n" for name in _COUNTERS)
    syn = "tcp flags & (syn | ack) == syn"
    return (
        f"table inet {TRAFFIC_TABLE} {{\n"
        f"{counters}"
        "  chain postrouting {\n"
        "    type filter hook postrouting priority filter; policy accept;\n"
        f"    ip daddr {cloud_address} {syn} counter name cloud_connections\n"
        f"    ip daddr {cloud_address} counter name cloud\n"
        f"    ip daddr {cloud_address} return\n"
        f"    ip daddr {subnet} {syn} counter name peer_connections\n"
        f"    ip daddr {subnet} counter name peers\n"
        "  }\n"
        "}\n"
    )


def parse_counters(nft_json: str) -> TrafficCounters:
    """The counters in the output of ``nft -j list counters table inet edgewatch_lab_traffic``.

    Raises:
        ValueError: not that output (not JSON, or a counter missing or malformed).
    """
    try:
        items = json.loads(nft_json)["nftables"]
        found = {}
        for item in items:
            counter = item.get("counter") if isinstance(item, dict) else None
            if counter is not None and counter.get("table") == TRAFFIC_TABLE:
                found[counter["name"]] = (int(counter["packets"]), int(counter["bytes"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"not nft's JSON list of counters: {exc}") from exc
    missing = [name for name in _COUNTERS if name not in found]
    if missing:
        raise ValueError(f"traffic counters missing: {', '.join(missing)}")
    return TrafficCounters(cloud_packets=found["cloud"][0], cloud_bytes=found["cloud"][1],
                           cloud_connections=found["cloud_connections"][0],
                           peer_packets=found["peers"][0], peer_bytes=found["peers"][1],
                           peer_connections=found["peer_connections"][0])

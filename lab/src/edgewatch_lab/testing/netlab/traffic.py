"""What each lab host sends, counted on its own link by nftables, the same way whatever runs there:
packets and bytes to its peers and to the cloud, and TCP connections it opens to each.  Used to
report messages per node per minute when comparing systems.

Every host namespace holds a second table, ``inet edgewatch_lab_traffic``
(:func:`render_traffic_table`), apart from the fault table ``inet edgewatch_lab`` (whose chains are
flushed and rebuilt on every fault change, which would reset counters kept there).  Its one chain
sits on the ``postrouting`` hook, which only sees packets that survived the fault table's
``output`` drops, so a packet is counted only if it really left the host: a host cut from the
cloud sends nothing to the cloud by this count.  Named counters (``packets`` and ``bytes`` each):

- ``cloud``: IPv4 packets to the cloud address (the control plane, the root namespace) on
  connections the host opened (and whatever it sends without one being opened by the cloud);
- ``cloud_answers``: IPv4 packets to the cloud address on connections the *cloud* opened
  (conntrack's reply direction): the answers to the lab's own reads of a host, such as the pool
  coordinator watch's ``/metrics`` reads every second or Prometheus' scrapes, which are measuring
  and would otherwise be charged to the system under test (they were: ~200 KiB a minute per node
  in the scenarios with a coordinator, 2026-11-27). Not in ``cloud``;
- ``peers``: IPv4 packets to any other address of the lab subnet (edge hosts, coordinators);
- ``cloud_connections`` / ``peer_connections``: TCP segments to the same destinations with SYN set
  and ACK clear, i.e. connections opened (a retransmitted SYN counts again).  A SYN is also counted
  in ``cloud`` / ``peers``.

Bytes are whole IPv4 packets (IP header included, no Ethernet header).  Elapsed times are seconds.

Limits: IPv4 only, like the lab; what leaves through loopback (``127.0.0.0/8`` and also the host's
own ``eth0`` address, which the kernel routes via ``lo``) is not counted; what a host receives is
not counted (the hosts' sends add up to the lab's traffic, the cloud's own sends are nobody's);
ARP is not counted (it is not IP); counters start at 0 when the host is built and are read whole
with ``nft -j`` (:func:`parse_counters`), not atomically with anything else.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Final

#: Name of the traffic table (family ``inet``) in every host namespace.
TRAFFIC_TABLE: Final = "edgewatch_lab_traffic"
#: The table's named counters, in the order of :func:`render_traffic_table`.
COUNTER_NAMES: Final = ("cloud", "peers", "cloud_connections", "peer_connections", "cloud_answers")


@dataclasses.dataclass(frozen=True, slots=True)
class TrafficCounters:
    """What one host has sent (since it was built, or between two snapshots: :meth:`delta`).

    Every field is a non-negative ``int`` count (:mod:`dataclasses.asdict` gives a flat
    ``{field: int}``).

    Attributes:
        cloud_packets: IPv4 packets to the cloud address, but answers on connections the cloud opened.
        cloud_bytes: bytes of those packets (IPv4 header included).
        cloud_connections: TCP connections opened to the cloud address (SYN without ACK).
        peer_packets: IPv4 packets to any other address of the lab subnet.
        peer_bytes: bytes of those packets (IPv4 header included).
        peer_connections: TCP connections opened to peers (SYN without ACK).
        cloud_answer_packets: IPv4 packets to the cloud address on connections the cloud opened
            (the lab's reads of the host: measuring, not the system's own traffic).
        cloud_answer_bytes: bytes of those packets (IPv4 header included).
    """

    cloud_packets: int = 0
    cloud_bytes: int = 0
    cloud_connections: int = 0
    peer_packets: int = 0
    peer_bytes: int = 0
    peer_connections: int = 0
    cloud_answer_packets: int = 0
    cloud_answer_bytes: int = 0

    def delta(self, earlier: TrafficCounters) -> TrafficCounters:
        """What was sent between snapshot ``earlier`` and this later one (``self - earlier``,
        field by field).

        Raises:
            ValueError: a field went down (the table was recreated in between, or the snapshots
                are swapped or of different hosts).
        """
        fields = {f.name: getattr(self, f.name) - getattr(earlier, f.name) for f in dataclasses.fields(self)}
        if any(v < 0 for v in fields.values()):
            raise ValueError(f"counters went down between two snapshots: {earlier} -> {self}")
        return TrafficCounters(**fields)

    def per_minute(self, elapsed_s: float) -> dict[str, float]:
        """Each field as a rate per minute, given that it accumulated over ``elapsed_s`` seconds
        (usually on a :meth:`delta`).

        Returns:
            ``{field name: count per minute}`` with the field names of this class, e.g.
            ``{"peer_packets": 60.0, ...}`` for 30 packets in ``elapsed_s=30.0``.  Not rounded.

        Raises:
            ValueError: ``elapsed_s`` is not a finite number > 0.
        """
        if isinstance(elapsed_s, bool) or not isinstance(elapsed_s, (int, float)):
            raise ValueError(f"elapsed_s must be a number of seconds, got {elapsed_s!r}")
        if not math.isfinite(elapsed_s) or elapsed_s <= 0:
            raise ValueError(f"elapsed_s must be finite and > 0 seconds, got {elapsed_s!r}")
        minutes = elapsed_s / 60.0
        return {f.name: getattr(self, f.name) / minutes for f in dataclasses.fields(self)}


def render_traffic_table(*, cloud_address: str, subnet: str) -> str:
    """The nft script creating a host's traffic table, run in the host's namespace when the host is
    built (``nft -f -``, one atomic transaction).

    Idempotent: running it on a host that has the table keeps the counters' values (declaring an
    existing counter is a no-op) and replaces the chain's rules with one copy (the chain is flushed
    first).

    Args:
        cloud_address: the cloud's IPv4 address, e.g. ``"198.18.7.1"``.
        subnet: the lab subnet in CIDR, e.g. ``"198.18.7.0/24"``.

    Returns:
        The script, newline-terminated.
    """
    table = f"inet {TRAFFIC_TABLE}"
    counters = "".join(f"  counter {name} {{ }}\n" for name in COUNTER_NAMES)
    syn = "tcp flags & (syn | ack) == syn"
    rules = [
        'oifname "lo" return',  # 127/8 and the host's own address: never leaves the host
        f"ip daddr {cloud_address} ct direction reply counter name cloud_answers",
        f"ip daddr {cloud_address} ct direction reply return",  # the cloud asked: the lab measuring
        f"ip daddr {cloud_address} {syn} counter name cloud_connections",
        f"ip daddr {cloud_address} counter name cloud",
        f"ip daddr {cloud_address} return",
        f"ip daddr {subnet} {syn} counter name peer_connections",
        f"ip daddr {subnet} counter name peers",
    ]
    return (
        f"table {table} {{\n"
        f"{counters}"
        "  chain postrouting { type filter hook postrouting priority filter; policy accept; }\n"
        "}\n"
        f"flush chain {table} postrouting\n"
        + "".join(f"add rule {table} postrouting {rule}\n" for rule in rules)
    )


def _count(counter: dict[str, Any], key: str) -> int:
    value = counter[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"counter {counter.get('name')!r}: {key} is {value!r}, not a count")
    return value


def parse_counters(nft_json: str) -> TrafficCounters:
    """The counters in the output of ``nft -j list counters table inet edgewatch_lab_traffic``.

    Args:
        nft_json: ``{"nftables": [{"metainfo": ...}, {"counter": {"family", "name", "table",
            "handle", "packets", "bytes"}}, ...]}``; counters of other tables are ignored.

    Raises:
        ValueError: not that output: not JSON, not that shape, a counter of the table missing,
            listed twice, or whose packets/bytes are not non-negative integers.
    """
    try:
        items = json.loads(nft_json)["nftables"]
        if not isinstance(items, list):
            raise TypeError(f"'nftables' is a {type(items).__name__}, not a list")
        found: dict[str, tuple[int, int]] = {}
        for item in items:
            counter = item.get("counter") if isinstance(item, dict) else None
            if counter is None:
                continue
            if not isinstance(counter, dict):
                raise TypeError(f"counter is a {type(counter).__name__}, not an object")
            if counter.get("table") != TRAFFIC_TABLE:
                continue
            name = counter["name"]
            if name in found:
                raise ValueError(f"counter {name!r} listed twice")
            found[name] = (_count(counter, "packets"), _count(counter, "bytes"))
    except (ValueError, KeyError, TypeError) as exc:  # json.JSONDecodeError is a ValueError
        raise ValueError(f"not nft's JSON list of the {TRAFFIC_TABLE} counters: {exc!r}") from exc
    missing = [name for name in COUNTER_NAMES if name not in found]
    if missing:
        raise ValueError(f"traffic counters missing: {', '.join(missing)}")
    return TrafficCounters(
        cloud_packets=found["cloud"][0],
        cloud_bytes=found["cloud"][1],
        cloud_connections=found["cloud_connections"][0],
        peer_packets=found["peers"][0],
        peer_bytes=found["peers"][1],
        peer_connections=found["peer_connections"][0],
        cloud_answer_packets=found["cloud_answers"][0],
        cloud_answer_bytes=found["cloud_answers"][1],
    )

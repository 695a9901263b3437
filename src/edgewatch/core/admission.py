"""Admission of inbound connections to the peer port: a bound on the connections open per source
and a shared bound for strangers, and the throttle of the log lines that report refusals.

The peer server (``edgewatch.agent.peerserver``) asks :class:`ConnectionLimits` once per accepted
connection, before it reads a byte, and tells it when the connection is gone. Sources are of two
kinds, decided by the caller:

- **known**: this node itself (loopback, its own address: the kubelet's probes of /healthz and
  /readyz come from there) and the members of its group (the peers, from the roster). Bounded per
  source only, so no stranger can crowd them out;
- **strangers**: everyone else (a Prometheus scraper, a pod, an attacker on the LAN). Bounded per
  source and, all together, by a shared total.

A source is an IP address; a stranger's IPv6 address counts as its /64 (:func:`source_key`), the
block one host or pod network usually holds, so an attacker cannot multiply its budget by picking
new addresses from its own prefix.

Pure: no clock but the ``now`` passed in (seconds on one monotonic clock), no I/O. Bounded: a
source is held only while it has open connections, and a refusal takes no memory.

Source: the per-client connection limits of nginx (``limit_conn``) and HAProxy (``maxconn``);
Go's ``http.Server.ReadTimeout`` for the read deadline that goes with them (in the peer server).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from enum import StrEnum

from edgewatch.core.checks import positive_int, positive_seconds

__all__ = ["ConnectionLimits", "Refusal", "ReportThrottle", "Ticket", "source_key"]


class Refusal(StrEnum):
    """Why a connection was refused (the metric label)."""

    PER_SOURCE = "per_source"
    """Its source already has ``per_source`` connections open."""
    TOTAL = "total"
    """A stranger, and strangers already have ``strangers`` connections open."""


@dataclass(frozen=True)
class Ticket:
    """An admitted connection: give it back to :meth:`ConnectionLimits.release` once closed."""

    source: str
    stranger: bool


def source_key(address: str, *, stranger: bool) -> str:
    """The key a source is counted under: the address itself (IPv4-mapped IPv6 as IPv4), or a
    stranger's IPv6 address as its /64 (``"2001:db8:1:2::/64"``). Anything that is not an IP
    address (a Unix socket, an unknown peer) is its own key, unchanged."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        if stranger:
            return str(ipaddress.IPv6Network(f"{ip}/64", strict=False))
    return str(ip)


class ConnectionLimits:
    """Open connections per source and of strangers in all.

    Args:
        per_source: most connections one source may hold open (>= 1).
        strangers: most connections all strangers together may hold open (>= 1).

    Raises:
        ValueError: a bound below 1 (or not an int).
    """

    def __init__(self, *, per_source: int, strangers: int) -> None:
        self.per_source = positive_int("per_source", per_source)
        self.strangers = positive_int("strangers", strangers)
        self._open: dict[str, int] = {}
        self._strangers_open = 0
        self._known_open = 0

    def admit(self, address: str, *, known: bool) -> Ticket | Refusal:
        """Count a new connection from ``address`` (``known``: this node or a group member), or
        say why not: the per-source bound first, then (strangers only) the total."""
        key = source_key(address, stranger=not known)
        if self._open.get(key, 0) >= self.per_source:
            return Refusal.PER_SOURCE
        if not known and self._strangers_open >= self.strangers:
            return Refusal.TOTAL
        self._open[key] = self._open.get(key, 0) + 1
        if known:
            self._known_open += 1
        else:
            self._strangers_open += 1
        return Ticket(source=key, stranger=not known)

    def release(self, ticket: Ticket) -> None:
        """Forget a closed connection (each ticket once; a second release is ignored)."""
        count = self._open.get(ticket.source, 0)
        if count <= 0:
            return
        if count == 1:
            del self._open[ticket.source]
        else:
            self._open[ticket.source] = count - 1
        if ticket.stranger:
            self._strangers_open -= 1
        else:
            self._known_open -= 1

    def open_from(self, address: str, *, known: bool) -> int:
        """Connections open now from ``address`` (counted under its :func:`source_key`)."""
        return self._open.get(source_key(address, stranger=not known), 0)

    @property
    def strangers_open(self) -> int:
        """Connections of strangers open now."""
        return self._strangers_open

    @property
    def known_open(self) -> int:
        """Connections of this node and its group members open now."""
        return self._known_open

    def __len__(self) -> int:
        """Sources with at least one connection open."""
        return len(self._open)


class ReportThrottle:
    """At most one report per kind of event every ``interval_s`` seconds, each saying how many
    events it stands for: a flood of refusals makes a log line a minute, not one per connection.

    Args:
        interval_s: seconds between two reports of one kind (> 0).
        max_kinds: kinds remembered (the least recently reported dropped first; a dropped kind
            reports again at once). The peer server's kinds are a few fixed strings.

    Raises:
        ValueError: ``interval_s`` not > 0 or ``max_kinds`` < 1.
    """

    def __init__(self, *, interval_s: float, max_kinds: int = 64) -> None:
        self.interval_s = positive_seconds("interval_s", interval_s)
        self.max_kinds = positive_int("max_kinds", max_kinds)
        self._last: dict[str, float] = {}  # kind -> when it was last reported
        self._pending: dict[str, int] = {}  # kind -> events since then (the reported one included)

    def note(self, kind: str, *, now: float) -> int | None:
        """Count one event of ``kind`` at ``now`` (seconds). Returns the number of events to
        report (this one and those held back since the last report) if a report is due, else
        None."""
        self._pending[kind] = self._pending.get(kind, 0) + 1
        last = self._last.get(kind)
        if last is not None and now - last < self.interval_s:
            return None
        count = self._pending.pop(kind)
        self._last.pop(kind, None)
        self._last[kind] = now
        while len(self._last) > self.max_kinds:
            oldest = next(iter(self._last))
            del self._last[oldest]
            self._pending.pop(oldest, None)
        return count

"""The HTTP server on the peer port (51005): the exchange (``edgewatch.agent.peers``) and the ops
endpoints (/healthz, /readyz, /metrics), kept whole against slow and flooding clients.

The port is a hostPort on the node network, so anyone on the LAN and any pod can open connections
to it. Before it reads a byte, and then on every request, the server bounds what a client can hold:

- **connections per source and in all** (:class:`edgewatch.core.admission.ConnectionLimits`): a
  new connection over its source's bound, or a stranger's over the strangers' shared bound, is
  answered ``503`` and closed at once. *Known* sources — this node itself (loopback and its own
  address, where the kubelet's probes come from) and the group's members (the roster) — are never
  counted against the strangers' bound, so a flood from many addresses cannot crowd out the peers
  or the kubelet's /healthz and /readyz probes. /metrics read by a stranger (a Prometheus) shares
  the strangers' budget: during such a flood it may be refused, never the probes or the exchange;
- **a deadline on reading a whole request**, headers and body, of ``request_timeout_s`` from its
  first byte (a new connection: from its opening). A connection that misses it is closed, whatever
  it was doing (trickling a body, a header line, or nothing at all);
- **an idle time between requests**, ``idle_timeout_s`` (aiohttp's own keep-alive timeout);
- **the body size** (``WireConfig.max_bytes``), checked by the exchange handler as before.

Each refusal and each closed connection is counted
(``edgewatch_agent_peer_connections_refused_total{reason}``,
``edgewatch_agent_peer_read_timeouts_total{phase}``; ``edgewatch_agent_peer_connections{source}``
shows what is open) and logged at most once a minute per kind, with the count it stands for.

How: aiohttp's server, with each accepted connection handed first to :class:`_Connection`, an
asyncio protocol placed in front of aiohttp's own: it admits or refuses the connection, keeps the
read deadline (``loop.call_at``) and passes every event through. A middleware tells it when a
request's headers are in and, through the body stream's ``on_eof``, when the whole request is.
aiohttp has no read deadline or connection limit of its own (its ``keepalive_timeout`` closes only
idle connections); asyncio's ``Server`` has neither.

Source: Go's ``http.Server.ReadTimeout``/``IdleTimeout``; nginx's ``limit_conn`` and
``client_body_timeout``; the slowloris attack (R. Hansen, 2009).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from edgewatch.agent.membership import Membership
from edgewatch.agent.metrics import AgentMetrics
from edgewatch.core.admission import ConnectionLimits, Refusal, ReportThrottle, Ticket
from edgewatch.core.checks import positive_int, positive_seconds

log = logging.getLogger(__name__)

REFUSED_ANSWER = (b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Type: text/plain\r\n"
                  b"Content-Length: 21\r\n\r\ntoo many connections\n")
"""What a refused connection gets before it is closed (no byte of its request is read)."""

REPORT_INTERVAL_S = 60.0
"""Seconds between two log lines of one kind of refusal."""


@dataclass(frozen=True, kw_only=True)
class PeerServerConfig:
    """Bounds of the peer port's server. Durations in seconds.

    Attributes:
        request_timeout_s: a whole request — headers and body — must arrive within this many
            seconds of its first byte (of the connection's opening, for its first request), or the
            connection is closed. Default 3 s: a LAN delivers an envelope (3-64 KiB) in
            milliseconds, and a peer gives up on its own request after its probe timeout (0.8 s)
            anyway; the kubelet's probes and a Prometheus scrape are one small GET. Short enough
            that a slow sender holds one of its few connections for seconds, not for ever.
        idle_timeout_s: a keep-alive connection without a request for this long is closed
            (aiohttp's ``keepalive_timeout``; its own default is an hour). Default 30 s: longer
            than the 15 s after which the peers' client (aiohttp's) closes an idle connection
            itself, so a peer never sends on a connection we are closing; a peer's connection is
            never idle that long anyway (one request a period, 1 s).
        max_connections_per_source: connections one source address may hold open (a stranger's
            IPv6 address counts as its /64). Default 8: a peer holds one (one request a period on
            a keep-alive connection; a timed-out probe's is replaced), the kubelet's probes one
            each, closed after the answer; 8 leaves room for restarts and a scraper sharing the
            address, and caps one host at about 8 x 200 KiB of buffers.
        max_stranger_connections: connections all *strangers* (neither this node nor a group
            member) may hold open together. Default 64: a scraper needs one or two; 64 caps a flood
            from many addresses at about 13 MiB of buffers (64 x 200 KiB worst case: a 64 KiB body
            read, aiohttp's read buffer) and 64 file descriptors, and the group's members and this
            node are never refused by it.

    Raises:
        ValueError: a value not > 0 (durations) or < 1 (counts).
    """

    request_timeout_s: float = 3.0
    idle_timeout_s: float = 30.0
    max_connections_per_source: int = 8
    max_stranger_connections: int = 64

    def __post_init__(self) -> None:
        positive_seconds("request_timeout_s", self.request_timeout_s)
        positive_seconds("idle_timeout_s", self.idle_timeout_s)
        positive_int("max_connections_per_source", self.max_connections_per_source)
        positive_int("max_stranger_connections", self.max_stranger_connections)


class KnownSources:
    """Which source addresses are *known* to the peer server: loopback, ``extra`` (the listen
    address) and every address of the group's roster and of this node (``membership``), re-read
    when the roster or the own Node changes (an O(group) rebuild, not per connection).

    Args:
        membership: the group and its addresses.
        extra: more addresses of this node (e.g. a specific listen address).
    """

    def __init__(self, *, membership: Membership, extra: tuple[str, ...] = ()) -> None:
        self._membership = membership
        self._extra = frozenset(canonical_address(a) for a in extra if a not in ("", "0.0.0.0", "::"))
        self._seen: tuple[object, object] = (None, None)
        self._addresses: frozenset[str] = self._extra

    def __call__(self, address: str) -> bool:
        """True if ``address`` is this node's or a group member's."""
        try:
            ip = ipaddress.ip_address(address.split("%", 1)[0])
        except ValueError:
            return False
        if ip.is_loopback or (isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None
                              and ip.ipv4_mapped.is_loopback):
            return True
        membership = self._membership
        if membership.roster is not self._seen[0] or membership.own is not self._seen[1]:  # replaced, not mutated
            self._seen = (membership.roster, membership.own)
            members = membership.roster.members.values() if membership.roster is not None else ()
            own = membership.own.address if membership.own is not None else None
            self._addresses = self._extra | {canonical_address(a) for a in (*members, own) if a}
        return canonical_address(address) in self._addresses


def canonical_address(address: str) -> str:
    """An address in one spelling (IPv4-mapped IPv6 as IPv4, IPv6 compressed, zone dropped);
    anything that is not an IP address unchanged. Who a peer is, over TCP or UDP, is read from it."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


class PeerServer:
    """The peer port's HTTP server: ``app``'s routes behind the connection bounds and the read
    deadline (module docstring).

    Args:
        app: the routes (not yet frozen; the server adds its middleware).
        config: the bounds.
        host: listen address; port: listen port.
        known: True for a source address of this node or a group member (:class:`KnownSources`).
        metrics: where to count refusals, timeouts and open connections.
    """

    def __init__(self, *, app: web.Application, config: PeerServerConfig, host: str, port: int,
                 known: Callable[[str], bool], metrics: AgentMetrics) -> None:
        self.app = app
        self.config = config
        self.host, self.port = host, port
        self.known = known
        self.metrics = metrics
        self.limits = ConnectionLimits(per_source=config.max_connections_per_source,
                                       strangers=config.max_stranger_connections)
        self._reports = ReportThrottle(interval_s=REPORT_INTERVAL_S)
        self._connections: dict[asyncio.BaseTransport, _Connection] = {}
        self._runner: web.AppRunner | None = None
        app.middlewares.append(self._track)
        for reason in Refusal:  # every series from the start, at 0
            metrics.peer_connections_refused.labels(reason=reason.value)
        for phase in ("headers", "body"):
            metrics.peer_read_timeouts.labels(phase=phase)
        for source in ("known", "stranger"):
            metrics.peer_connections.labels(source=source)

    async def start(self) -> None:
        """Listen. Raises OSError if the address cannot be bound."""
        runner = web.AppRunner(self.app, access_log=None, keepalive_timeout=self.config.idle_timeout_s)
        await runner.setup()
        self._runner = runner
        await _GatedSite(runner, self).start()

    async def close(self) -> None:
        """Stop listening and close every connection."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def open_connections(self) -> int:
        """Connections admitted and not yet closed."""
        return len(self._connections)

    # -- bookkeeping (called by _Connection) -------------------------------------------------------

    def admit(self, address: str, transport: asyncio.BaseTransport, conn: _Connection) -> Ticket | None:
        """Admit a new connection from ``address``, or count, log and return None."""
        known = self.known(address)
        decision = self.limits.admit(address, known=known)
        if isinstance(decision, Refusal):
            self.metrics.peer_connections_refused.labels(reason=decision.value).inc()
            self._report(decision.value, address)
            return None
        self._connections[transport] = conn
        self.metrics.peer_connections.labels(source="stranger" if decision.stranger else "known").inc()
        return decision

    def release(self, ticket: Ticket, transport: asyncio.BaseTransport) -> None:
        """A connection admitted with ``ticket`` is gone."""
        if self._connections.pop(transport, None) is None:
            return
        self.limits.release(ticket)
        self.metrics.peer_connections.labels(source="stranger" if ticket.stranger else "known").dec()

    def timed_out(self, address: str, *, phase: str) -> None:
        """A connection from ``address`` missed its read deadline in ``phase`` (``headers``:
        nothing or part of a request's head had come; ``body``: the head had, not the whole body)."""
        self.metrics.peer_read_timeouts.labels(phase=phase).inc()
        self._report(f"timeout_{phase}", address)

    def _report(self, kind: str, address: str) -> None:
        count = self._reports.note(kind, now=asyncio.get_running_loop().time())
        if count is None:
            return
        cfg = self.config
        why = {
            Refusal.PER_SOURCE.value: f"refused: its source already holds {cfg.max_connections_per_source} "
                                      "connections (--peer-max-connections-per-source)",
            Refusal.TOTAL.value: f"refused: strangers already hold {cfg.max_stranger_connections} connections "
                                 "(--peer-max-stranger-connections)",
        }.get(kind, f"closed: no whole request within {cfg.request_timeout_s:g} s "
                    f"({kind.removeprefix('timeout_')} incomplete; --peer-request-timeout)")
        log.warning("peer port: %d connection(s) %s; latest from %s (one line a minute at most)", count, why,
                    address, extra={"kind": "peer_connection_refused", "reason": kind, "remote": address,
                                    "count": count})

    @web.middleware
    async def _track(self, request: web.Request,
                     handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        """Tell the connection that this request's head is in, and (at the body's end) that all of
        it is: only then is its read deadline lifted."""
        conn = self._connections.get(request.transport) if request.transport is not None else None
        if conn is not None:
            conn.head_read()
            request.content.on_eof(conn.request_read)
        return await handler(request)


class _Connection(asyncio.Protocol):
    """One accepted connection, in front of aiohttp's protocol: admission, then the read deadline;
    every transport event is passed on to aiohttp's ``RequestHandler`` (``inner``)."""

    def __init__(self, server: PeerServer, factory: Callable[[], asyncio.Protocol]) -> None:
        self._server = server
        self._factory = factory
        self.inner: asyncio.Protocol | None = None
        self.transport: asyncio.Transport | None = None
        self.address = ""
        self._ticket: Ticket | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._head = False  # the current request's head has been read

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.address = str(peer[0]) if isinstance(peer, tuple) and peer else str(peer or "")
        self._ticket = self._server.admit(self.address, transport, self)
        if self._ticket is None:
            transport.write(REFUSED_ANSWER)
            transport.close()
            return
        self.inner = self._factory()
        self.inner.connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self.inner is None:
            return
        if self._deadline is None:
            self._arm()  # the first byte of a new request
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.inner is not None else None

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self.inner is None or self.transport is None:
            return
        if self._ticket is not None:
            self._server.release(self._ticket, self.transport)
            self._ticket = None
        self.inner.connection_lost(exc)

    # -- the read deadline ---------------------------------------------------------------------------

    def head_read(self) -> None:
        """The current request's head is in (its handler starts)."""
        self._head = True

    def request_read(self) -> None:
        """The current request has been read whole: lift its deadline."""
        self._head = False
        self._disarm()

    def _arm(self) -> None:
        loop = asyncio.get_running_loop()
        self._deadline = loop.call_at(loop.time() + self._server.config.request_timeout_s, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if self.transport is None or self.transport.is_closing():
            return
        self._server.timed_out(self.address, phase="body" if self._head else "headers")
        self.transport.abort()


class _GatedSite(web.BaseSite):
    """A TCP site whose connections go through :class:`_Connection` (aiohttp's ``TCPSite``
    otherwise: same listen options, backlog 128)."""

    __slots__ = ("_gate",)

    def __init__(self, runner: web.AppRunner, gate: PeerServer) -> None:
        super().__init__(runner)
        self._gate = gate

    @property
    def name(self) -> str:
        host = self._gate.host or "0.0.0.0"
        return f"http://[{host}]:{self._gate.port}" if ":" in host else f"http://{host}:{self._gate.port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        gate = self._gate
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _Connection(gate, server), gate.host, gate.port, backlog=self._backlog)

"""Host checks: TCP connects to the kubelet server port of an agent's neighbours, so that its dead
votes say whether they are confirmed (``edgewatch.core.hostalive``, the pure rule): a neighbour
whose edgewatch agent is down (a crash, a DaemonSet rollout: about 5-20 s) while its host and
kubelet run is still voted dead as the detector says, but named *unconfirmed* on this agent's
evidence Lease, so the controller does not fail it on an unanswered challenge.

The check: ``asyncio.open_connection`` to ``<InternalIP>:<port>`` (kubelet's server port 10250,
Kubernetes docs "Ports and Protocols") under ``asyncio.timeout``, closed at once after the
handshake; nothing is sent, so no credentials are needed and nothing is asked of the kubelet. The
source address is left to the kernel: the kubelet does not bind callers to an address (it
authenticates after the handshake), and a bound source that is not an address of this host would
only turn a live host into a failed check. Go's HTTP server (the kubelet's) may log a connection
that ends without a TLS ClientHello ("http: TLS handshake error from ...: EOF"): one line a
period per checking neighbour in that node's kubelet log while that node's agent is silent, and
one a minute per neighbour otherwise.

Which neighbours (:meth:`HostChecks.due`): every period, each neighbour the failure detector has not
seen ALIVE for at most :data:`SILENT_EVERY_PERIOD_S` (the caller also names one whose datagram is
missing again after a failed period: a suspicion, ``edgewatch.core.suspicion``, needs the check of
that very period); every :data:`REVERIFY_S`, each other one (the check works for that host, which
a confirmed dead vote or suspicion needs).

Cost: one TCP handshake (3 packets, then FIN; a SYN and an RST when refused, about 120 bytes) per
period per neighbour that went silent in the last 20 s (a detector starts SUSPECT, so also each
neighbour not yet heard after this agent starts), at most ``2 * rings`` (6) a period, and one a
minute per other neighbour, dead or alive.

Errors: a check never raises (refused, timed out, unreachable: counted and logged at debug level).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Final, Protocol

from edgewatch.agent.config import AgentConfig
from edgewatch.core.checks import positive_seconds
from edgewatch.core.hostalive import (
    HOST_VERIFY_S,
    confirms_dead,
    confirms_suspicion,
    host_known_alive,
    host_window_s,
)
from edgewatch.core.types import NodeName

__all__ = ["DEFAULT_TIMEOUT_S", "REVERIFY_S", "SILENT_EVERY_PERIOD_S", "HostCheckEvents", "HostChecks",
           "connect_once"]

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S: Final = 0.5
"""Bound of one connect, seconds (never longer than the peer probe timeout): a LAN completes a
handshake in milliseconds; a lost SYN is retransmitted only after 1 s (RFC 6298), so a longer bound
would not save that check, only delay the period's end."""


REVERIFY_S: Final = 60.0
"""How often a neighbour the detector sees ALIVE has its kubelet port checked, seconds: often enough
that the answer is at most a minute old when the neighbour dies (``HOST_VERIFY_S`` is 5 minutes),
cheap (one handshake a minute per neighbour)."""


SILENT_EVERY_PERIOD_S: Final = 20.0
"""How long a neighbour that stopped being ALIVE has its kubelet port checked every period, seconds:
past its suspicion (about 2 s), its DEAD verdict (about 6 s) and the controller's challenge (1.5 s
more), with room for a slow count; after that once every :data:`REVERIFY_S`, so a node dead for good costs its neighbours one
handshake a minute, not one a period."""


class HostCheckEvents(Protocol):
    """Where check results are counted (``edgewatch.agent.metrics.AgentMetrics``)."""

    def host_checked(self, result: str) -> None:
        """One connect ended with ``result``: ``open``, ``refused``, ``timeout`` or ``unreachable``."""
        ...


async def connect_once(*, host: str, port: int, timeout_s: float) -> str:
    """One TCP connect to ``host:port``, closed at once: ``open`` (the handshake completed within
    ``timeout_s`` seconds), ``refused`` (an RST: the host is up, nothing listens), ``timeout``, or
    ``unreachable`` (any other socket error, e.g. no route). Never raises (cancellation excepted)."""
    try:
        async with asyncio.timeout(timeout_s):
            _reader, writer = await asyncio.open_connection(host, port)
    except TimeoutError:
        return "timeout"
    except ConnectionRefusedError:
        return "refused"
    except OSError:
        return "unreachable"
    writer.close()
    try:
        async with asyncio.timeout(timeout_s):
            await writer.wait_closed()
    except (OSError, TimeoutError):
        pass  # the handshake completed: that is the answer
    return "open"


class HostChecks:
    """The kubelet-port checks of one agent's neighbours and when each last answered.

    Args (keyword-only):
        port: the peers' kubelet server port (``AgentConfig.peer_kubelet_port``, 10250; 0: off,
            no connect is made and no host is known alive).
        period_s: the exchange period, seconds; an answer counts
            ``edgewatch.core.hostalive.host_window_s(period_s)`` (3 periods).
        timeout_s: bound of one connect, seconds (> 0; default :data:`DEFAULT_TIMEOUT_S`).
        events: where each result is counted.
        clock: monotonic seconds (default ``time.monotonic``, the peer exchange's clock).

    Raises:
        ValueError: if ``port`` is not in 0..65535, or ``period_s`` or ``timeout_s`` is not > 0.
    """

    def __init__(self, *, port: int, period_s: float, events: HostCheckEvents,
                 timeout_s: float = DEFAULT_TIMEOUT_S, clock: Callable[[], float] = time.monotonic) -> None:
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 65536:
            raise ValueError(f"port must be 0 (off) .. 65535, got {port!r}")
        self.port = port
        self.window_s = host_window_s(period_s=period_s)
        self.timeout_s = positive_seconds("timeout_s", timeout_s)
        self._events = events
        self._clock = clock
        self._answered: dict[NodeName, float] = {}  # peer -> monotonic time its port last answered
        self._failed: dict[NodeName, float] = {}  # peer -> monotonic time a check of its port last failed
        self._tried: dict[NodeName, float] = {}  # peer -> monotonic time of its last once-a-minute check
        self._silent_since: dict[NodeName, float] = {}  # peer not ALIVE -> since when (monotonic s)
        self._unconfirmed: set[NodeName] = set()  # dead votes named unconfirmed at the last signing

    @classmethod
    def of_agent(cls, config: AgentConfig, *, events: HostCheckEvents) -> HostChecks:
        """The checks an agent with ``config`` makes: its ``peer_kubelet_port``, its exchange period,
        a connect bounded by :data:`DEFAULT_TIMEOUT_S` or its ``probe_timeout_s`` if shorter.

        Raises:
            ValueError: as the constructor (not for a valid ``AgentConfig``).
        """
        return cls(port=config.peer_kubelet_port, period_s=config.votes.exchange_period_s, events=events,
                   timeout_s=min(DEFAULT_TIMEOUT_S, config.probe_timeout_s))

    @property
    def enabled(self) -> bool:
        """Whether checks are made (a port is set)."""
        return self.port != 0

    def due(self, neighbours: Mapping[NodeName, tuple[str, bool]], *, now: float) -> dict[NodeName, str]:
        """The neighbours to check this period (``neighbours``: peer -> (its InternalIP, whether the
        detector sees it ALIVE); ``now``: monotonic s): each one not ALIVE, and each ALIVE one not
        checked for :data:`REVERIFY_S`. What is kept of peers no longer neighbours is dropped (memory
        stays bounded by the neighbours). Empty when off."""
        for gone in [p for p in (*self._answered, *self._failed, *self._tried, *self._silent_since)
                     if p not in neighbours]:
            self._answered.pop(gone, None)
            self._failed.pop(gone, None)
            self._tried.pop(gone, None)
            self._silent_since.pop(gone, None)
        if not self.enabled:
            return {}
        out = {}
        for peer, (address, alive) in neighbours.items():
            if alive:
                self._silent_since.pop(peer, None)
            elif now - self._silent_since.setdefault(peer, now) <= SILENT_EVERY_PERIOD_S:
                out[peer] = address
                continue
            if now - self._tried.get(peer, -REVERIFY_S) >= REVERIFY_S:
                self._tried[peer] = now
                out[peer] = address
        return out

    async def check(self, targets: Mapping[NodeName, str]) -> None:
        """Connect once, concurrently, to each target's kubelet port (``targets``: peer -> its
        InternalIP) and remember when each answered. Nothing when off. Never raises."""
        if not self.enabled or not targets:
            return
        peers = sorted(targets)
        results = await asyncio.gather(*(connect_once(host=targets[p], port=self.port, timeout_s=self.timeout_s)
                                         for p in peers))
        for peer, result in zip(peers, results, strict=True):
            self._events.host_checked(result)
            log.debug("kubelet port of %s (%s:%d): %s", peer, targets[peer], self.port, result,
                      extra={"kind": "host_check", "peer": peer, "result": result})
            if result == "open":
                self._answered[peer] = self._clock()
            else:
                self._failed[peer] = self._clock()

    def answered_at(self, peer: NodeName) -> float | None:
        """Monotonic time (seconds) ``peer``'s kubelet port last answered; None if never (or it is
        no longer a neighbour)."""
        return self._answered.get(peer)

    def alive(self, peer: NodeName, *, now: float) -> bool:
        """Whether ``peer``'s kubelet port answered within the window before ``now`` (monotonic s;
        ``edgewatch.core.hostalive.host_known_alive``)."""
        return host_known_alive(answered_at=self._answered.get(peer), now=now, window_s=self.window_s)

    def confirm_suspicions(self, suspected: Iterable[NodeName], *, now: float) -> frozenset[NodeName]:
        """Of the neighbours this agent suspects (``suspected``), those whose suspicion its checks
        confirm at ``now`` (monotonic s; ``edgewatch.core.hostalive.confirms_suspicion``): the port
        answered within :data:`HOST_VERIFY_S` and a check since has failed. Empty when off."""
        if not self.enabled:
            return frozenset()
        return frozenset(p for p in suspected if confirms_suspicion(
            answered_at=self._answered.get(p), failed_at=self._failed.get(p), now=now, window_s=self.window_s))

    def unconfirmed(self, dead: Iterable[NodeName], *, now: float) -> frozenset[NodeName]:
        """Of the neighbours this agent votes dead (``dead``), those whose death its checks do not
        confirm at ``now`` (monotonic s; ``edgewatch.core.hostalive.confirms_dead``): their kubelet
        port answers (agent down, host up), or never answered lately (the check cannot tell), or
        the checks are off. Logs at info level once per change."""
        dead = frozenset(dead)
        unsure = frozenset(p for p in dead if not self.enabled or not confirms_dead(
            answered_at=self._answered.get(p), now=now, window_s=self.window_s, verify_s=HOST_VERIFY_S))
        for peer in sorted(unsure - self._unconfirmed):
            why = ("its kubelet port answers: its agent is down, not its host" if self.alive(peer, now=now)
                   else "its kubelet port never answered lately: the check cannot tell")
            log.info("%s is silent to us (DEAD), unconfirmed: %s", peer, why,
                     extra={"kind": "dead_unconfirmed", "peer": peer, "port": self.port})
        for peer in sorted((self._unconfirmed - unsure) & dead):
            log.info("%s: its kubelet port stopped answering too; its death is confirmed", peer,
                     extra={"kind": "dead_confirmed", "peer": peer, "port": self.port})
        self._unconfirmed = set(unsure)
        return unsure

"""The server side of the peer exchange: ``POST /v1/exchange``, a peer's envelope taken in and
answered with ours (:class:`ExchangeServer`, around ``edgewatch.agent.peers.PeerExchange``).

Untrusted input: a request over the per-source rate (``wire.rate_per_source_s``, burst
``wire.rate_burst``) is answered 429 and logged once a minute per source; one over
``wire.max_bytes`` 413; a body not read whole in time 408. Every envelope goes through the
exchange's ``decode`` (size limit, MAC over the bytes before parsing, schema, receiver, sender bound
to its source address = the sender Node's InternalIP, reply binding, per-sender replay guard). A
rejection is a log line, a metric (``edgewatch_agent_messages_received_total{result=<reason>}``) and
a 400/403/413 answer; never a crash and never a state change. A request refused only by the replay
guard (``replayed`` or ``unconfirmed``: e.g. the first requests of a peer that just restarted) is
answered with 409 and our own envelope, so the requester's probe of us still succeeds while nothing
of its message is used.
"""

from __future__ import annotations

import logging
import secrets
import time

from aiohttp import web

from edgewatch.agent.httpbody import read_body
from edgewatch.agent.peers import REFUSED_HEADER, PeerExchange
from edgewatch.core.admission import ReportThrottle
from edgewatch.core.ratelimit import RateLimiter
from edgewatch.core.types import NodeName
from edgewatch.core.wire import Rejected, RejectReason

__all__ = ["ExchangeServer"]

log = logging.getLogger(__name__)

_FORBIDDEN = frozenset({RejectReason.BAD_SIGNATURE, RejectReason.UNKNOWN_KEY, RejectReason.UNSIGNED,
                        RejectReason.SENDER_MISMATCH, RejectReason.REPLAYED})
_GUARD_REASONS = frozenset({RejectReason.REPLAYED, RejectReason.UNCONFIRMED})


class ExchangeServer:
    """Answers peers' exchange requests for ``peers`` (see the module docstring); its
    :meth:`handle` is the route's handler.

    Args (keyword-only):
        peers: this agent's peer exchange (its config, its decoder, its statements, its metrics).
    """

    def __init__(self, *, peers: PeerExchange) -> None:
        self.peers = peers
        self.metrics = peers.metrics
        wire = peers.config.wire
        self.limiter = RateLimiter(rate_per_s=wire.rate_per_source_s, burst=wire.rate_burst)
        self._limited_reports = ReportThrottle(interval_s=60.0, max_kinds=1_000)  # a line a minute per source

    async def handle(self, request: web.Request) -> web.Response:
        """POST /v1/exchange: absorb the sender's envelope and answer with ours."""
        remote = request.remote or ""
        now = time.monotonic()
        if not self.limiter.allow(remote, now=now):
            self.metrics.messages.labels(result="rate_limited").inc()
            if (count := self._limited_reports.note(remote, now=now)) is not None:
                log.warning("peer requests from %s over %g/s: refusing them (429; %d since the last line)", remote,
                            self.peers.config.wire.rate_per_source_s, count, extra={"kind": "rate_limited", "remote": remote})
            return web.Response(status=429, text="rate limited\n")
        limit = self.peers.config.wire.max_bytes
        if request.content_length is not None and request.content_length > limit:
            return self._reject(request, "oversized", f"{request.content_length} bytes", status=413)
        try:
            raw = await read_body(request.content, limit)
        except ConnectionError:  # closed under us: by the client, or by the peer server's read deadline
            return web.Response(status=408, text="request not read in time\n")
        except web.RequestPayloadError as exc:  # e.g. a broken chunked encoding
            return self._reject(request, "malformed", f"body: {exc}"[:200], status=400)
        peer_address = request.remote or ""

        def bound(sender: NodeName) -> bool:
            # The sender must be a member of our group, talking from its own InternalIP.
            return sender in self.peers.group and self.peers.membership.address_of(sender) == peer_address

        try:
            env = self.peers.decode(raw, sender_allowed=bound)
        except Rejected as exc:
            if exc.answer_to is not None and exc.reason in _GUARD_REASONS and self.peers.own is not None:
                # Authentic and from the right address, refused only by the replay guard: answer
                # anyway (the sender's probe of us is genuine evidence for it), use nothing of it.
                self._count_refused(request, exc)
                sender, nonce = exc.answer_to
                answer = self.peers.envelope_for(sender, now_mono=time.monotonic(), nonce=secrets.token_hex(16),
                                           reply_to=nonce, version=exc.answer_version)
                return web.Response(status=409, body=answer, content_type="application/octet-stream",
                                    headers={REFUSED_HEADER: exc.reason.value})
            status = 403 if exc.reason in _FORBIDDEN else 400
            return self._reject(request, exc.reason.value, exc.detail, status=status)
        self.metrics.messages.labels(result="accepted").inc()
        self.peers.absorb(env, now_mono=time.monotonic(), direct=True)
        if self.peers.own is None:
            return web.Response(status=503, text="not ready")
        answer = self.peers.envelope_for(env.sender, now_mono=time.monotonic(), nonce=secrets.token_hex(16),
                                   reply_to=env.nonce, version=env.version)  # the request's: its sender reads it
        self.peers.cadence.told(env.sender, (self.peers.incarnation, self.peers.announced), beacon=self.peers.beacon.value,
                                now=time.monotonic(), theirs=env.own.incarnation)
        return web.Response(body=answer, content_type="application/octet-stream")

    def _count_refused(self, request: web.Request, exc: Rejected) -> None:
        # An unconfirmed epoch is the normal first second after a peer restarts: not a warning.
        level = logging.INFO if exc.reason is RejectReason.UNCONFIRMED else logging.WARNING
        log.log(level, "message from %s refused: %s (%s); answered", request.remote, exc.reason.value, exc.detail,
                extra={"kind": "rejected", "remote": request.remote, "reason": exc.reason.value})
        self.metrics.messages.labels(result=exc.reason.value).inc()

    def _reject(self, request: web.Request, reason: str, detail: str, *, status: int) -> web.Response:
        log.warning("message from %s rejected: %s (%s)", request.remote, reason, detail,
                    extra={"kind": "rejected", "remote": request.remote, "reason": reason})
        self.metrics.messages.labels(result=reason).inc()
        return web.Response(status=status, text=f"rejected: {reason}\n")

"""Does this node reach the cloud? The agent's own view of its link to kube-apiserver.

The agent asks the apiserver's ``/readyz`` every ``interval_s`` with a timeout. The link is
declared down only after ``down_after`` consecutive failures and up again only after
``up_after`` consecutive successes, so a single slow or lost request never counts as a cut and a
flapping link does not flap the state (hysteresis, the same idea as the peer failure detector).

The agent reports the state in its signed heartbeats (``cloud_ok``), which is how peers learn that
it needs its heartbeat carried (heartbeat delegation, docs/how-it-decides.md).

The probe the agent uses is :class:`ApiserverProbe` (``GET /readyz`` with the agent's own client,
without its token unless the apiserver refuses anonymous probes).
Who needs the state reads it (:class:`edgewatch.agent.ports.CloudLinkView`: ``monitor.up``); who
must act the moment it flips subscribes (:meth:`CloudLinkMonitor.subscribe`, a
:class:`edgewatch.agent.ports.CloudLinkListener`).

Limits: it measures the agent's path to the apiserver, which is the kubelet's path in every
deployment we know; a kubelet behind a different proxy than the agent could see another link.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from edgewatch.agent.ports import CloudLinkListener
from edgewatch.kube.api import AsyncClient
from edgewatch.kube.http import http_client_of

log = logging.getLogger(__name__)

__all__ = ["ANONYMOUS_REFUSED", "ApiserverProbe", "CloudLinkConfig", "CloudLinkMonitor", "LinkState", "apiserver_ready", "observe"]


@dataclass(frozen=True)
class CloudLinkConfig:
    """Cloud-link probing, in seconds and counts.

    Attributes:
        interval_s: time between probes (default 2 s: a cut is seen in about 3 probes, 6 s, well
            inside the kubelet's 40 s Lease, so a delegate takes over before the Lease expires).
        timeout_s: per-probe timeout (default 2 s; a slower answer counts as one failure).
        down_after: consecutive failures before the link is declared down (default 3: one slow
            request never counts as a cut).
        up_after: consecutive successes before it is declared up again (default 2).
    """

    interval_s: float = 2.0
    timeout_s: float = 2.0
    down_after: int = 3
    up_after: int = 2

    def __post_init__(self) -> None:
        if self.interval_s <= 0 or self.timeout_s <= 0 or self.down_after < 1 or self.up_after < 1:
            raise ValueError(f"invalid cloud link config: {self}")


@dataclass(frozen=True)
class LinkState:
    """Pure state of the link tracker: ``up`` and the current run of equal results."""

    up: bool = True
    failures: int = 0
    successes: int = 0


def observe(state: LinkState, *, ok: bool, config: CloudLinkConfig) -> LinkState:
    """Fold one probe result into the state (pure).

    Starts up (an agent that just started has no evidence of a cut); goes down after
    ``down_after`` consecutive failures; comes back after ``up_after`` consecutive successes.
    """
    if ok:
        successes = state.successes + 1
        up = state.up or successes >= config.up_after
        return LinkState(up=up, failures=0, successes=successes)
    failures = state.failures + 1
    up = state.up and failures < config.down_after
    return replace(state, up=up, failures=failures, successes=0)


ANONYMOUS_REFUSED = (401, 403)
"""The apiserver's answers to a request without credentials where anonymous requests are off
(``--anonymous-auth=false``) or ``/readyz`` is not granted to ``system:unauthenticated``."""


async def apiserver_ready(client: AsyncClient, *, anonymous: bool = False) -> int:
    """GET /readyz on the apiserver with the client's own TLS, and its credentials unless
    ``anonymous``; the HTTP status (200: ready).

    /readyz is readable by everyone by default (``system:public-info-viewer`` is bound to
    ``system:unauthenticated``) and costs the apiserver no etcd read, so probing it every 2 s from
    every node is cheap. Uses lightkube's underlying httpx client (its connection, kept alive).

    Raises:
        TypeError: ``client`` is not a lightkube ``AsyncClient`` (no HTTP client inside).
        httpx.HTTPError, OSError: the request failed (the monitor counts it as a failed probe).
    """
    http = http_client_of(client)
    if http is None:
        raise TypeError("the cloud link probe needs a lightkube AsyncClient")
    resp = await (http.get("/readyz", auth=None) if anonymous else http.get("/readyz"))
    return resp.status_code


class ApiserverProbe:
    """The agent's probe of its cloud link: :func:`apiserver_ready` with its own API client.

    Without credentials first: the agent's bearer token (a pod-bound ServiceAccount token, about
    1 KB) was most of a probe's bytes, sent 30 times a minute over a metered uplink for an answer
    anyone may read. If the apiserver refuses anonymous probes (:data:`ANONYMOUS_REFUSED`), the
    probe asks again at once with the token, and carries it from then on (logged once): the
    answer, and so the link state, is the same either way.

    Args (keyword-only):
        client: the agent's API client (a lightkube ``AsyncClient``; anything else makes every
            probe fail with ``TypeError``, i.e. the link goes down).
    """

    def __init__(self, *, client: AsyncClient) -> None:
        self._client = client
        self.anonymous = True

    async def __call__(self) -> bool:
        """One probe, without a timeout of its own (the monitor bounds it); True if /readyz
        answered 200."""
        status = await apiserver_ready(self._client, anonymous=self.anonymous)
        if self.anonymous and status in ANONYMOUS_REFUSED:
            self.anonymous = False
            log.info("the apiserver refuses anonymous /readyz (HTTP %d): the cloud link probe sends this "
                     "agent's token from now on", status, extra={"kind": "cloud_probe_authenticated"})
            status = await apiserver_ready(self._client, anonymous=False)
        return status == 200


class CloudLinkMonitor:
    """Runs the probe loop and keeps the current ``LinkState`` (a
    :class:`edgewatch.agent.ports.CloudLinkView`).

    Args (keyword-only):
        probe: async callable that raises (or returns False) when the apiserver does not answer
            healthily; it must enforce no timeout itself — the monitor wraps it in ``timeout_s``.
        config: see ``CloudLinkConfig``.
    """

    def __init__(self, *, probe: Callable[[], Awaitable[bool]], config: CloudLinkConfig) -> None:
        self._probe = probe
        self.config = config
        self.state = LinkState()
        self.changed_at = time.monotonic()  # local monotonic seconds of the last flip (or start)
        self._listeners: list[CloudLinkListener] = []

    def subscribe(self, listener: CloudLinkListener) -> None:
        """Tell ``listener`` of every flip from now on (``cloud_link_changed(up)``, in subscription
        order, synchronously inside the probe loop: it must not block; what it raises ends
        :meth:`run`)."""
        self._listeners.append(listener)

    @property
    def up(self) -> bool:
        """True while this node's own link to the apiserver is considered up."""
        return self.state.up

    async def check_once(self) -> bool:
        """Probe once and fold the result in; returns the probe result."""
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for returns the probe's result and
            # drops our cancellation when the probe completes as the agent stops; run() then
            # probes on for ever and the agent's shutdown hangs (the coordinator test's 600 s).
            async with asyncio.timeout(self.config.timeout_s):
                ok = bool(await self._probe())
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # any failure to get a healthy answer is a failed probe
            log.debug("cloud probe failed: %s", exc or type(exc).__name__)
            ok = False
        before = self.state.up
        self.state = observe(self.state, ok=ok, config=self.config)
        if self.state.up != before:
            self.changed_at = time.monotonic()
            log.warning("cloud link %s", "up" if self.state.up else "DOWN",
                        extra={"kind": "cloud_link", "up": self.state.up})
            for listener in self._listeners:
                listener.cloud_link_changed(self.state.up)
        return ok

    async def run(self) -> None:
        """Probe every ``interval_s`` until cancelled."""
        while True:
            started = time.monotonic()
            await self.check_once()
            await asyncio.sleep(max(0.0, self.config.interval_s - (time.monotonic() - started)))

"""Our own Lease after a cut: remove the stale delegate mark a carrier left on it.

While this node was cut off from the cloud, a peer (or the pool leader) renewed its Lease and marked
it (``edgewatch.kube.leases``: ``delegate-heartbeat`` and friends). Once our link is back the mark goes
stale — but only when our kubelet renews the Lease by itself (up to 10 s later), and peers may still
carry us until they see our link up. So, after the link comes back (and once at start), look every
``every_s`` for ``window_s`` seconds (two Lease durations) or until the mark is removed
(``edgewatch.kube.leases.clear_stale_mark``, which removes it only once it is stale).

What it is handed: this node's cloud link (:class:`edgewatch.agent.ports.CloudLinkView`), the API
client and this node's name.

Errors: each look is bounded by ``timeout_s``; an API error is logged (debug) and the next look
tried. Nothing here ends the agent.
"""

from __future__ import annotations

import asyncio
import logging
import time

from edgewatch.agent.ports import CloudLinkView
from edgewatch.core.types import NodeName
from edgewatch.kube.api import AsyncClient
from edgewatch.kube.errors import API_ERRORS
from edgewatch.kube.leases import clear_stale_mark

log = logging.getLogger(__name__)

__all__ = ["OwnMarkCleaner"]


class OwnMarkCleaner:
    """Removes the stale delegate mark from this node's own Lease after each outage.

    Args (keyword-only):
        client: the agent's API client.
        node: this node.
        link: this node's cloud link (nothing is looked at while it is down).
        timeout_s: bound of one look, seconds.
        every_s: time between two looks, seconds (default 2 s).
        window_s: how long to keep looking after the link came back, seconds (default 90 s: two
            Lease durations).
    """

    def __init__(self, *, client: AsyncClient, node: NodeName, link: CloudLinkView, timeout_s: float,
                 every_s: float = 2.0, window_s: float = 90.0) -> None:
        self._client = client
        self._node = node
        self._link = link
        self.timeout_s = timeout_s
        self.every_s = every_s
        self.window_s = window_s

    async def run(self) -> None:
        """Look after every outage (and once at start) until cancelled (see the module docstring)."""
        check_until: float | None = time.monotonic() + self.window_s
        while True:
            await asyncio.sleep(self.every_s)
            if not self._link.up:
                check_until = None  # start the window when the link is back
                continue
            now = time.monotonic()
            if check_until is None:
                check_until = now + self.window_s
            if now > check_until:
                continue
            try:
                async with asyncio.timeout(self.timeout_s):
                    removed = await clear_stale_mark(client=self._client, node=self._node)
            except API_ERRORS as exc:
                log.debug("checking our own Lease's mark failed: %s", exc or type(exc).__name__)
                continue
            if removed:
                log.info("removed the stale delegate mark from our own Lease")
                check_until = now  # done for this outage

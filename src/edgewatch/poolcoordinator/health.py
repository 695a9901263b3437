"""Whether the pool coordinator's etcd answers over TLS with the root certificate (docs/security.md): the
first half of ``/readyz`` (the second: the access control is reconciled for the current members,
``edgewatch.poolcoordinator.members``).

:class:`EtcdProbe` calls etcd's Maintenance ``Status`` every ``interval_s`` on a fresh channel to
``127.0.0.1:<port>`` (a new TLS handshake each time, so a rotated serving or root certificate is
what is checked), verifying etcd against the pool CA and presenting ``CN=root``; each call is
bounded by ``timeout_s``. :attr:`EtcdProbe.ok` is the last probe's outcome.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import grpc
from aetcd import rpc as etcd_rpc

__all__ = ["EtcdProbe", "etcd_answers"]

log = logging.getLogger(__name__)


async def etcd_answers(*, target: str, credentials: grpc.ChannelCredentials, timeout_s: float) -> str | None:
    """None if etcd at ``target`` (``host:port``) answers a Maintenance Status over TLS with
    ``credentials`` within ``timeout_s`` seconds, else why not (never raises for etcd errors)."""
    channel = etcd_rpc.secure_channel(target, credentials, options=[("grpc.enable_retries", 0)])
    try:
        await etcd_rpc.MaintenanceStub(channel).Status(etcd_rpc.StatusRequest(), timeout=timeout_s)
    except grpc.RpcError as exc:
        code = exc.code() if hasattr(exc, "code") else None
        details = exc.details() if hasattr(exc, "details") else str(exc)
        return f"{getattr(code, 'name', 'error')}: {details}"
    finally:
        await channel.close()
    return None


class EtcdProbe:
    """Probes etcd periodically (module docstring).

    Args (keyword-only):
        target: etcd's client endpoint, ``host:port``.
        credentials: makes the root TLS credentials (from the files now); may raise ``OSError``.
        interval_s: time between probes, seconds (default 2 s).
        timeout_s: bound of one probe, seconds (default 2 s).
        on_change: called with the new outcome when it flips; must not raise.
    """

    def __init__(self, *, target: str, credentials: Callable[[], grpc.ChannelCredentials], interval_s: float = 2.0,
                 timeout_s: float = 2.0, on_change: Callable[[bool], None] | None = None) -> None:
        self.target = target
        self._credentials = credentials
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._on_change = on_change
        self.ok = False
        self.reason = "not probed yet"

    async def probe(self) -> bool:
        """One probe; updates :attr:`ok` and :attr:`reason`."""
        try:
            reason = await etcd_answers(target=self.target, credentials=self._credentials(), timeout_s=self.timeout_s)
        except OSError as exc:
            reason = f"root certificate unreadable: {exc}"
        self._set(reason)
        return self.ok

    def invalidate(self, reason: str) -> None:
        """Forget the last outcome: etcd went away (``reason``), so it does not answer until a probe
        of the new process says so. Without this, ``/readyz`` said ready for up to ``interval_s``
        after etcd exited (seen: a client refused right after "ready" following a CA restart)."""
        self._set(reason)

    def _set(self, reason: str | None) -> None:
        """Record an outcome (``reason`` None: etcd answers); log and call ``on_change`` on a flip."""
        ok = reason is None
        if ok != self.ok:
            log.log(logging.INFO if ok else logging.WARNING, "etcd %s", "answers" if ok else f"does not answer: {reason}",
                    extra={"target": self.target})
            if self._on_change is not None:
                self._on_change(ok)
        self.ok, self.reason = ok, reason or ""

    async def run(self) -> None:
        """Probe every ``interval_s`` until cancelled."""
        while True:
            await self.probe()
            await asyncio.sleep(self.interval_s)

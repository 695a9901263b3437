"""Lease-based leader election for the controller's replicas (one active at a time), the
protocol of client-go's ``leaderelection`` with a ``coordination.k8s.io/v1`` Lease.

A candidate takes the Lease when it is free or expired (``renewTime + leaseDurationSeconds`` in
the past) and renews it every ``renew_s``; every write carries the resourceVersion it read, so two
candidates can never both win a round (409 Conflict). A leader that cannot renew within
``deadline_s`` gives up leading (its work is cancelled) before the Lease expires for the others, so
two leaders never act at once as long as clocks are within ``duration_s - deadline_s`` of each other.

Limits: wall clocks of replicas are compared through renewTime (as in client-go).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx2 as httpx
from lightkube import ApiError, AsyncClient
from lightkube.resources.coordination_v1 import Lease

from edgewatch.agent.delegation import format_micro_time

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ElectionConfig:
    """Leader election timings, seconds.

    Attributes:
        duration_s: leaseDurationSeconds (client-go default 15 s): how long others wait after the
            last renewal before taking over.
        renew_s: how often the leader renews (client-go retry period 2 s).
        deadline_s: a leader that has not renewed for this long stops leading (client-go 10 s);
            must be below ``duration_s``.
    """

    duration_s: int = 15
    renew_s: float = 2.0
    deadline_s: float = 10.0

    def __post_init__(self) -> None:
        if not 0 < self.renew_s < self.deadline_s < self.duration_s:
            raise ValueError("need 0 < renew_s < deadline_s < duration_s")


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def expired(lease: Lease, *, now: dt.datetime) -> bool:
    """True if the Lease has no holder or its holder's term ran out."""
    spec = lease.spec
    if spec is None or not spec.holderIdentity or spec.renewTime is None:
        return True
    return spec.renewTime + dt.timedelta(seconds=spec.leaseDurationSeconds or 0) < now


class LeaderElector:
    """Runs ``work`` only while this candidate holds the Lease ``namespace/name``.

    Args:
        client: API client (needs get/create/update on the Lease).
        namespace, name: the Lease.
        identity: this candidate (pod name).
        config: timings.
        on_change: called with True/False when leadership is gained/lost.
    """

    def __init__(self, *, client: AsyncClient, namespace: str, name: str, identity: str, config: ElectionConfig,
                 on_change: Callable[[bool], None] | None = None) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.config = config
        self.leading = False
        self._on_change = on_change or (lambda leading: None)

    async def try_acquire_or_renew(self) -> bool:
        """One election round; returns whether we hold the Lease afterwards."""
        now = _now()
        try:
            lease = await self.client.get(Lease, self.name, namespace=self.namespace)
        except ApiError as exc:
            if exc.status.code != 404:
                raise
            lease = Lease.from_dict({
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": self.config.duration_s,
                         "acquireTime": format_micro_time(now), "renewTime": format_micro_time(now),
                         "leaseTransitions": 0},
            })
            try:
                await self.client.create(lease)
                return True
            except ApiError as create_exc:
                if create_exc.status.code == 409:
                    return False
                raise
        spec = lease.spec
        if spec.holderIdentity != self.identity:
            if not expired(lease, now=now):
                return False
            spec.holderIdentity = self.identity
            spec.acquireTime = now
            spec.leaseTransitions = (spec.leaseTransitions or 0) + 1
        spec.renewTime = now
        spec.leaseDurationSeconds = self.config.duration_s
        try:
            await self.client.replace(lease)
        except ApiError as exc:
            if exc.status.code == 409:
                return False
            raise
        return True

    async def run(self, work: Callable[[], Awaitable[None]]) -> None:
        """Campaign forever; run ``work`` while leading, cancel it when leadership is lost."""
        while True:
            task: asyncio.Task[None] | None = None
            last_renew = time.monotonic()
            try:
                while True:
                    try:
                        held = await asyncio.wait_for(self.try_acquire_or_renew(), self.config.renew_s * 2)
                    except (ApiError, httpx.HTTPError, OSError, asyncio.TimeoutError) as exc:
                        log.info("leader election round failed: %s", exc or type(exc).__name__)
                        held = self.leading and time.monotonic() - last_renew < self.config.deadline_s
                    else:
                        if held:
                            last_renew = time.monotonic()
                    if held and not self.leading:
                        self._set(True)
                        task = asyncio.create_task(work())
                    elif not held and self.leading:
                        self._set(False)
                        break
                    if task is not None and task.done():
                        task.result()  # a crashed worker crashes the elector: let the supervisor restart us
                    await asyncio.sleep(self.config.renew_s)
            finally:
                if task is not None:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)

    def _set(self, leading: bool) -> None:
        self.leading = leading
        log.warning("%s leadership of %s/%s", "acquired" if leading else "LOST", self.namespace, self.name,
                    extra={"kind": "leader", "leading": leading})
        self._on_change(leading)

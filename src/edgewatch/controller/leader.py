"""Lease-based leader election for the controller's replicas (one active at a time), the protocol of
client-go's ``leaderelection`` with a ``coordination.k8s.io/v1`` Lease.

A candidate takes the Lease when it has no holder, or when the holder's record has not changed for
``leaseDurationSeconds`` *as this candidate observed it*: like client-go, it notes its own monotonic
time whenever the record (holder, renewTime, ...) changes, and judges expiry from that note, never by
comparing the holder's renewTime (the other replica's clock) with its own (docs/clock-skew.md). A
candidate that starts has no history, so it gives the holder a full duration from its first look.
The leader renews every ``renew_s``; every write carries the resourceVersion it read, so two
candidates can never both win a round (409 Conflict). A leader that cannot renew within
``deadline_s`` gives up leading (its work is cancelled) before the others may take over, so two
leaders never act at once as long as the replicas' clocks *run* at the same rate (no assumption on
what they read).

Limits: renewTime and acquireTime are written with this replica's clock, for people and for other
tools; nothing here reads them as times.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from edgewatch.kube.api import ApiError, AsyncClient, Lease
from edgewatch.timefmt import format_micro_time
from edgewatch.kube.errors import API_ERRORS, is_conflict, is_not_found

__all__ = ["ElectionConfig", "LeaderElector", "expired"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ElectionConfig:
    """Leader election timings, seconds.

    Attributes:
        duration_s: leaseDurationSeconds (client-go default 15 s): how long others wait after they
            last saw the record change before taking over.
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


def _record(lease: Lease) -> tuple[object, ...]:
    """What identifies one version of the leader record (any change of it is a sign of life)."""
    spec = lease.spec
    if spec is None:
        return ()
    return (spec.holderIdentity, spec.renewTime, spec.acquireTime, spec.leaseDurationSeconds, spec.leaseTransitions)


def expired(*, holder: str | None, observed_age_s: float, duration_s: float) -> bool:
    """True if the Lease is free: no holder, or the holder's record has not changed for more than
    ``duration_s`` seconds since this candidate saw it change (``observed_age_s``, its own clock).
    Pure; client-go's ``observedTime + leaseDuration < now``."""
    return not holder or observed_age_s > duration_s


class LeaderElector:
    """Runs ``work`` only while this candidate holds the Lease ``namespace/name``.

    Args:
        client: API client (needs get/create/update on the Lease).
        namespace, name: the Lease.
        identity: this candidate (pod name).
        config: timings.
        on_change: called with True/False when leadership is gained/lost.
        monotonic: the clock for observations and deadlines (seconds; injectable for tests).
    """

    def __init__(self, *, client: AsyncClient, namespace: str, name: str, identity: str, config: ElectionConfig,
                 on_change: Callable[[bool], None] | None = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.config = config
        self.leading = False
        self.reachable = False
        self._on_change = on_change or (lambda leading: None)
        self._monotonic = monotonic
        self._observed: tuple[object, ...] | None = None
        self._observed_at = 0.0

    def _observe(self, lease: Lease) -> float:
        """Note the record; returns seconds since it last changed, on our own clock."""
        now = self._monotonic()
        record = _record(lease)
        if record != self._observed:
            self._observed, self._observed_at = record, now
        return now - self._observed_at

    async def try_acquire_or_renew(self) -> bool:
        """One election round; returns whether we hold the Lease afterwards. Raises API errors."""
        now = dt.datetime.now(dt.timezone.utc)
        try:
            lease = await self.client.get(Lease, self.name, namespace=self.namespace)
        except ApiError as exc:
            if not is_not_found(exc):
                raise
            lease = Lease.from_dict({
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": self.config.duration_s,
                         "acquireTime": format_micro_time(now), "renewTime": format_micro_time(now),
                         "leaseTransitions": 0},
            })
            try:
                created = await self.client.create(lease)
            except ApiError as create_exc:
                if is_conflict(create_exc):
                    return False
                raise
            self._observe(created if isinstance(created, Lease) else lease)
            return True
        age = self._observe(lease)
        spec = lease.spec
        if spec.holderIdentity != self.identity:
            duration = spec.leaseDurationSeconds or self.config.duration_s
            if not expired(holder=spec.holderIdentity, observed_age_s=age, duration_s=duration):
                return False
            spec.holderIdentity = self.identity
            spec.acquireTime = now
            spec.leaseTransitions = (spec.leaseTransitions or 0) + 1
        spec.renewTime = now
        spec.leaseDurationSeconds = self.config.duration_s
        try:
            written = await self.client.replace(lease)
        except ApiError as exc:
            if is_conflict(exc):
                return False
            raise
        self._observe(written if isinstance(written, Lease) else lease)
        return True

    async def run(self, work: Callable[[], Awaitable[None]]) -> None:
        """Campaign forever; run ``work`` while leading, cancel it when leadership is lost. Every round
        has a timeout of ``2 * renew_s``."""
        while True:
            task: asyncio.Task[None] | None = None
            last_renew = self._monotonic()
            try:
                while True:
                    try:
                        # asyncio.timeout, not wait_for: on Python 3.11 wait_for drops a cancellation
                        # that lands as the round completes, and this loop would never end
                        async with asyncio.timeout(self.config.renew_s * 2):
                            held = await self.try_acquire_or_renew()
                        self.reachable = True
                    except API_ERRORS as exc:
                        log.info("leader election round failed: %s", exc or type(exc).__name__)
                        self.reachable = isinstance(exc, ApiError)  # the apiserver answered, with an error
                        held = self.leading and self._monotonic() - last_renew < self.config.deadline_s
                    else:
                        if held:
                            last_renew = self._monotonic()
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

"""How long carried renewals are admitted without this controller: the ``edgewatch.io/carry-until``
annotation on the group index (ConfigMap ``edgewatch-groups``), which the agents' carry policy
(``deploy/15-policy-agent.yaml``, ``edgewatch-agent-carry``) compares every carried renewTime with.

Why: carried renewTimes are bounded by the control plane's clock (kube-controller-manager's leader
Lease), so carrying goes on while no edgewatch controller runs — which is the point (a cut-off live
node keeps its pods through a controller outage). But the controller is also what counters a liar:
a carried renewal counts for it only with the carried node's own fresh signed statement, so one
compromised node that carries a dead peer gets that peer failed and its pods evicted. Without a
controller, kube-controller-manager counts every admitted carry, and that liar could keep a dead
node Ready for as long as the outage lasts. The window bounds that: the controller moves the
deadline to ``window_s`` past the control plane's clock every ``refresh_s``; once it stops, carries
are admitted for at most ``window_s`` more, then refused, and kube-controller-manager treats
cut-off nodes as it would without edgewatch. The same deadline caps how far ahead any carry can
be where the clock bound is off (a kube-controller-manager without leader election).

The deadline is written on the control plane's clock (the leader Lease's renewTime, which the
admission policy compares carries with), never this controller's own; if that Lease cannot be read,
on this controller's wall clock, with a warning (the skew between them then shortens or lengthens
the window).

Cost: one GET of one Lease and one update of one ConfigMap in the cloud every ``refresh_s`` (30 s);
no agent watches the group index.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable

from edgewatch.core.roster import GROUP_INDEX_NAME
from edgewatch.kube.api import ApiError, AsyncClient, ConfigMap, Lease
from edgewatch.kube.errors import API_ERRORS, is_conflict, is_not_found
from edgewatch.names import CARRY_UNTIL_ANNOTATION, CONTROL_PLANE_CLOCK_LEASE
from edgewatch.timefmt import format_micro_time

__all__ = ["CARRY_WINDOW_S", "CarryWindow", "carry_until"]

log = logging.getLogger(__name__)

#: How long carries stay admitted after the controller last moved the deadline, seconds: longer
#: than a controller rollout, a rescheduled replica or a bad image caught by its operator; short
#: enough that a dead node one liar carries is back to stock handling within minutes.
CARRY_WINDOW_S = 300.0


def carry_until(control_plane_now: dt.datetime, *, window_s: float = CARRY_WINDOW_S) -> str:
    """The annotation value: ``control_plane_now + window_s`` as a MicroTime (UTC).

    Raises:
        ValueError: a naive datetime or a window that is not positive.
    """
    if control_plane_now.tzinfo is None:
        raise ValueError("control_plane_now must be an aware datetime")
    if not window_s > 0:
        raise ValueError("window_s must be > 0 seconds")
    return format_micro_time(control_plane_now + dt.timedelta(seconds=window_s))


class CarryWindow:
    """Moves the group index's ``edgewatch.io/carry-until`` forward while this replica leads.

    Args (keyword-only):
        client: the controller's API client (get the leader Lease in kube-system; get and update
            ConfigMaps in ``namespace``).
        namespace: the controller's namespace (where the group index is).
        window_s: the deadline past the control plane's clock, seconds (default :data:`CARRY_WINDOW_S`).
        refresh_s: seconds between two moves (default 30).
        api_timeout_s: bound of every API call, seconds.
        wall: this machine's clock (aware UTC datetime), only if the leader Lease cannot be read.
        on_clock: called with whether that Lease was read at each move (the metric
            ``edgewatch_controller_control_plane_clock``).
    """

    def __init__(self, *, client: AsyncClient, namespace: str, window_s: float = CARRY_WINDOW_S,
                 refresh_s: float = 30.0, api_timeout_s: float = 10.0,
                 wall: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
                 on_clock: Callable[[bool], None] = lambda _readable: None) -> None:
        if not 0 < refresh_s < window_s:
            raise ValueError("need 0 < refresh_s < window_s (seconds)")
        self._client = client
        self._namespace = namespace
        self.window_s = window_s
        self.refresh_s = refresh_s
        self.api_timeout_s = api_timeout_s
        self._wall = wall
        self._on_clock = on_clock
        self.written: str | None = None
        self._clock_warned = False

    async def _control_plane_now(self) -> dt.datetime:
        namespace, name = CONTROL_PLANE_CLOCK_LEASE
        try:
            async with asyncio.timeout(self.api_timeout_s):
                lease = await self._client.get(Lease, name, namespace=namespace)
            renew = lease.spec.renewTime if lease.spec is not None else None
            if isinstance(renew, dt.datetime) and renew.tzinfo is not None:
                self._clock_warned = False
                self._on_clock(True)
                return renew
            problem = "it has no renewTime"
        except (*API_ERRORS, TimeoutError) as exc:
            problem = str(exc) or type(exc).__name__
        self._on_clock(False)
        if not self._clock_warned:
            log.warning("cannot read the control plane's clock (%s/%s: %s); the carry deadline is written on "
                        "this controller's clock", namespace, name, problem, extra={"kind": "carry_window"})
            self._clock_warned = True
        return self._wall()

    async def move(self) -> str | None:
        """One move of the deadline; returns the value written (None: not written, the group index
        does not exist yet or the write failed; retried next time). Raises nothing but cancellation."""
        until = carry_until(await self._control_plane_now(), window_s=self.window_s)
        try:
            async with asyncio.timeout(self.api_timeout_s):
                index = await self._client.get(ConfigMap, GROUP_INDEX_NAME, namespace=self._namespace)
                index.metadata.annotations = {**(index.metadata.annotations or {}), CARRY_UNTIL_ANNOTATION: until}
                await self._client.replace(index)  # with its resourceVersion: a 409 waits for the next move
        except ApiError as exc:
            if not (is_not_found(exc) or is_conflict(exc)):
                log.info("moving the carry deadline failed: %s", exc)
            return None
        except (*API_ERRORS, TimeoutError) as exc:
            log.info("moving the carry deadline failed: %s", exc or type(exc).__name__)
            return None
        self.written = until
        return until

    async def run(self) -> None:
        """Move the deadline every ``refresh_s`` until cancelled."""
        while True:
            await self.move()
            await asyncio.sleep(self.refresh_s)

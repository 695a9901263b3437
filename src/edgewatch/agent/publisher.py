"""Publishing verdicts where ``kubectl describe node`` shows them: the ``EdgeHealthy`` Node
condition (the edge view the controller reads).

One writer per node at a time (``edgewatch.core.duties``); it writes only on change or when the
last write is ``publish_refresh_s`` old, so a live writer never looks stale to the controller and a
quiet cluster costs one small write per node per refresh. The write is a strategic-merge patch of
``status.conditions`` keyed by type, so the kubelet's conditions are never touched.

Every write is bounded by ``timeout_s``, and the writes due in one round run concurrently, so one
slow subject never delays another (nor, since the agent runs this in its own loop, the Leases the
agent carries).

Condition: status True (healthy) / False (unhealthy) / Unknown; reason ``PeersSeeAlive`` /
``PeersSeeDead`` / ``NoMajority``; message like "4 of 5 peers see it alive (observed by a-2)";
lastHeartbeatTime = time of this write; lastTransitionTime kept while the status stays.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import httpx2 as httpx
from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Node

from edgewatch.agent.membership import Membership
from edgewatch.agent.metrics import AgentMetrics
from edgewatch.core.quorum import Decision
from edgewatch.core.types import NodeName, Verdict
from edgewatch.names import EDGE_CONDITION_TYPE
from edgewatch.timefmt import format_rfc3339 as _rfc3339

log = logging.getLogger(__name__)

_STATUS = {Verdict.HEALTHY: "True", Verdict.UNHEALTHY: "False", Verdict.UNKNOWN: "Unknown"}
_REASON = {Verdict.HEALTHY: "PeersSeeAlive", Verdict.UNHEALTHY: "PeersSeeDead", Verdict.UNKNOWN: "NoMajority"}


@dataclass(frozen=True)
class ConditionValue:
    """The part of the condition that, when it changes, must be written at once."""

    status: str
    reason: str
    message: str


def condition_value(decision: Decision, *, writer: NodeName) -> ConditionValue:
    """The EdgeHealthy condition for a decision (pure)."""
    return ConditionValue(status=_STATUS[decision.verdict], reason=_REASON[decision.verdict],
                          message=f"{decision.message} (published by {writer})")


class ConditionPublisher:
    """Writes the EdgeHealthy condition of the nodes this agent is the writer for.

    Args (keyword-only):
        client: API client.
        me: this node (named in the condition's message).
        membership: the node list (for the current condition's lastTransitionTime).
        metrics: ``condition_writes{result}`` (``ok``, ``failed``, ``timeout``).
        refresh_s: rewrite an unchanged condition this often, seconds.
        timeout_s: bound of one write, seconds.
    """

    def __init__(self, *, client: AsyncClient, me: NodeName, membership: Membership, metrics: AgentMetrics,
                 refresh_s: float, timeout_s: float = 5.0) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be > 0 seconds")
        self.client = client
        self.me = me
        self.membership = membership
        self.metrics = metrics
        self.refresh_s = refresh_s
        self.timeout_s = timeout_s
        self._written: dict[NodeName, tuple[ConditionValue, float]] = {}

    def due(self, subject: NodeName, value: ConditionValue, *, now: float) -> bool:
        """True if ``subject``'s condition must be written now (changed, or refresh time reached)."""
        last = self._written.get(subject)
        return last is None or last[0] != value or now - last[1] >= self.refresh_s

    async def publish(self, subjects: frozenset[NodeName], decisions: dict[NodeName, Decision]) -> None:
        """Write the condition of every subject that is due, concurrently, each within ``timeout_s``.
        Errors and timeouts are logged and counted, never raised."""
        now = time.monotonic()
        due: list[tuple[NodeName, ConditionValue]] = []
        for subject in sorted(subjects):
            decision = decisions.get(subject)
            if decision is None:
                continue
            value = condition_value(decision, writer=self.me)
            if self.due(subject, value, now=now):
                due.append((subject, value))
        if due:
            async with asyncio.TaskGroup() as tg:
                for subject, value in due:
                    tg.create_task(self._bounded_write(subject, value))

    async def _bounded_write(self, subject: NodeName, value: ConditionValue) -> None:
        try:
            async with asyncio.timeout(self.timeout_s):
                await self._write(subject, value)
        except TimeoutError:
            log.info("writing %s of %s took longer than %.1f s", EDGE_CONDITION_TYPE, subject, self.timeout_s)
            self.metrics.condition_writes.labels(result="timeout").inc()

    async def _write(self, subject: NodeName, value: ConditionValue) -> None:
        now = time.time()
        info = self.membership.nodes.get(subject)
        transition = _rfc3339(now)
        if info is not None and info.edge_condition is not None and info.edge_condition[0] == value.status:
            transition = info.edge_condition[1] or transition
        body = {"status": {"conditions": [{
            "type": EDGE_CONDITION_TYPE, "status": value.status, "reason": value.reason, "message": value.message,
            "lastHeartbeatTime": _rfc3339(now), "lastTransitionTime": transition,
        }]}}
        try:
            await self.client.patch(Node.Status, subject, body)
        except (ApiError, httpx.HTTPError, OSError) as exc:
            log.info("writing %s of %s failed: %s", EDGE_CONDITION_TYPE, subject, exc or type(exc).__name__)
            self.metrics.condition_writes.labels(result="failed").inc()
            return
        self._written[subject] = (value, time.monotonic())
        self.metrics.condition_writes.labels(result="ok").inc()
        log.info("published %s=%s for %s: %s", EDGE_CONDITION_TYPE, value.status, subject, value.message,
                 extra={"kind": "published", "subject": subject, "status": value.status})

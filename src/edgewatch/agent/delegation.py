"""Writing a cut-off node's heartbeat to the cloud on its behalf: renewing its Lease in
``kube-node-lease`` with the delegate mark (seeds 000/001/002).

Used by both delivery paths: a cloud-connected peer (the agent's peer path) and the pool
coordinator's leader. Only ``spec.renewTime`` and our annotations change; the holder, the duration
and everything else stay the node's own. The write is GET then UPDATE with the resourceVersion, so
a concurrent renewal by the node's own kubelet wins (409 Conflict); on conflict we re-read and stop
if the kubelet renewed by itself in the meantime.

The mark, level-triggered for the controller (``edgewatch.controller.decision``):
``delegate-heartbeat: "true"`` plus ``delegated-renew-time`` equal to the renewTime we wrote. Once
the kubelet renews again, renewTime moves on and no longer equals ``delegated-renew-time``: the
mark is stale even before the node's agent removes it (``clear_stale_mark``).

Limits: a node whose Lease does not exist is never given one (a delegate does not invent a node).
"""

from __future__ import annotations

import datetime as dt
import enum
import logging
from dataclasses import dataclass

import httpx2 as httpx
from lightkube import ApiError, AsyncClient
from lightkube.resources.coordination_v1 import Lease
from lightkube.types import PatchType

from edgewatch.names import (
    DELEGATE_HEARTBEAT_ANNOTATION,
    DELEGATED_BY_ANNOTATION,
    DELEGATED_RENEW_TIME_ANNOTATION,
    DELEGATED_VIA_ANNOTATION,
    NODE_LEASE_NAMESPACE,
)

log = logging.getLogger(__name__)

MARK_ANNOTATIONS = (DELEGATE_HEARTBEAT_ANNOTATION, DELEGATED_BY_ANNOTATION,
                    DELEGATED_RENEW_TIME_ANNOTATION, DELEGATED_VIA_ANNOTATION)


class RenewOutcome(enum.StrEnum):
    """What a delegated renewal did."""

    RENEWED = "renewed"            # renewTime written with the mark
    NODE_RENEWED_ITSELF = "self"   # the kubelet renewed in the meantime; nothing written
    NO_LEASE = "no_lease"          # the node has no Lease; nothing written
    NOT_DUE = "not_due"            # renewed recently enough (``min_age_s``); nothing written
    CONFLICT = "conflict"          # still conflicting after the retries
    FAILED = "failed"              # the API could not be reached or refused


def format_micro_time(when: dt.datetime) -> str:
    """Kubernetes MicroTime text (RFC 3339, microseconds, UTC)."""
    return when.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def is_marked(lease: Lease) -> bool:
    """True if the Lease carries a delegate mark that is still current (its renewTime is the one
    the delegate wrote, i.e. the kubelet has not renewed since)."""
    ann = (lease.metadata.annotations or {}) if lease.metadata else {}
    if ann.get(DELEGATE_HEARTBEAT_ANNOTATION) != "true" or lease.spec is None or lease.spec.renewTime is None:
        return False
    return ann.get(DELEGATED_RENEW_TIME_ANNOTATION) == format_micro_time(lease.spec.renewTime)


@dataclass(frozen=True)
class DelegatedRenewal:
    """Result of ``renew_on_behalf``: the outcome and, if renewed, the renewTime written."""

    outcome: RenewOutcome
    renew_time: dt.datetime | None = None
    detail: str = ""


async def renew_on_behalf(
    *,
    client: AsyncClient,
    node: str,
    delegate: str,
    via: str,
    alive_at: dt.datetime,
    max_conflict_retries: int = 3,
    min_age_s: float = 0.0,
) -> DelegatedRenewal:
    """Renew ``node``'s Lease with the delegate mark.

    Args:
        client: API client (its own request timeout applies to each call).
        node: the cut-off node whose Lease to renew.
        delegate: name of the node doing it (recorded in ``delegated-by``).
        via: "peer" or "coordinator" (recorded in ``delegated-via``).
        alive_at: when the node was last seen alive (its newest signed heartbeat, in UTC); written
            as renewTime, so the cloud never sees a fresher life sign than there was.
        max_conflict_retries: re-reads after a 409 Conflict.
        min_age_s: write only if the current renewTime is at least this many seconds older than
            ``alive_at`` (the controller's autonomy hold uses it so it never overwrites a renewal that
            just landed, e.g. the kubelet's own when the link comes back).

    Returns:
        A ``DelegatedRenewal``; never raises for API errors (they come back as FAILED).
    """
    for _attempt in range(max_conflict_retries + 1):
        try:
            lease = await client.get(Lease, node, namespace=NODE_LEASE_NAMESPACE)
        except ApiError as exc:
            if exc.status.code == 404:
                return DelegatedRenewal(RenewOutcome.NO_LEASE)
            return DelegatedRenewal(RenewOutcome.FAILED, detail=str(exc))
        except (httpx.HTTPError, OSError) as exc:
            return DelegatedRenewal(RenewOutcome.FAILED, detail=str(exc) or type(exc).__name__)
        current = lease.spec.renewTime if lease.spec else None
        if current is not None and current >= alive_at:
            # Nothing newer to report; if the kubelet wrote it, the node is back on its own.
            return DelegatedRenewal(RenewOutcome.NODE_RENEWED_ITSELF if not is_marked(lease) else RenewOutcome.RENEWED,
                                    renew_time=current)
        if current is not None and (alive_at - current).total_seconds() < min_age_s:
            return DelegatedRenewal(RenewOutcome.NOT_DUE, renew_time=current)
        text = format_micro_time(alive_at)
        lease.spec.renewTime = alive_at
        annotations = dict(lease.metadata.annotations or {})
        annotations.update({
            DELEGATE_HEARTBEAT_ANNOTATION: "true",
            DELEGATED_BY_ANNOTATION: delegate,
            DELEGATED_RENEW_TIME_ANNOTATION: text,
            DELEGATED_VIA_ANNOTATION: via,
        })
        lease.metadata.annotations = annotations
        try:
            await client.replace(lease)
            return DelegatedRenewal(RenewOutcome.RENEWED, renew_time=alive_at)
        except ApiError as exc:
            if exc.status.code != 409:
                return DelegatedRenewal(RenewOutcome.FAILED, detail=str(exc))
            log.debug("lease %s: conflict, re-reading", node)
        except (httpx.HTTPError, OSError) as exc:
            return DelegatedRenewal(RenewOutcome.FAILED, detail=str(exc) or type(exc).__name__)
    return DelegatedRenewal(RenewOutcome.CONFLICT)


async def clear_stale_mark(*, client: AsyncClient, node: str) -> bool:
    """Remove the delegate mark from ``node``'s Lease once its kubelet renews by itself.

    Called by the node's own agent when its cloud link is back. Removes the annotations only if
    the mark is stale (renewTime moved past ``delegated-renew-time``). Returns True if it removed
    them. Raises ApiError / httpx.HTTPError for the caller's retry loop.
    """
    lease = await client.get(Lease, node, namespace=NODE_LEASE_NAMESPACE)
    ann = (lease.metadata.annotations or {}) if lease.metadata else {}
    if not any(k in ann for k in MARK_ANNOTATIONS) or is_marked(lease):
        return False
    patch = {"metadata": {"annotations": {k: None for k in MARK_ANNOTATIONS if k in ann}}}
    await client.patch(Lease, node, patch, namespace=NODE_LEASE_NAMESPACE, patch_type=PatchType.MERGE)
    return True

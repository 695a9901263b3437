"""Node Leases in ``kube-node-lease`` as edgewatch reads and writes them: the delegate mark, a
cut-off node's heartbeat carried on its behalf (agents), the controller's autonomy hold, and
removing a stale mark.

Used by both sides: the agent's peer path and the pool coordinator's leader carry heartbeats
(:func:`renew_on_behalf`), the node's own agent removes its stale mark (:func:`clear_stale_mark`),
the controller holds a Lease during the autonomy time (:func:`hold_renewal`) and reads the mark
(:func:`mark_is_current`). Only ``spec.renewTime`` and our annotations are ever changed; the holder,
the duration and everything else stay the node's own. Every write carries the resourceVersion it
was decided on, so a concurrent write (the kubelet's own renewal, another delegate) wins with a 409
Conflict and we re-read and decide again.

The mark (OpenYurt's Yurt-Coordinator design): ``edgewatch.io/delegate-heartbeat: "true"`` plus
``edgewatch.io/delegated-renew-time`` naming the ``renewTime`` the delegate wrote (the same instant;
:mod:`edgewatch.leasemark`, where the mark's meaning lives), with ``delegated-by`` and
``delegated-via`` (``peer``, ``coordinator`` or ``autonomy``). The kubelet keeps annotations when it
renews, so once it renews by itself ``renewTime`` moves on and the mark is stale at once, before
anyone removes it. Comparing the two instants judges no clock.

Clock rule (docs/clock-skew.md): nothing here compares a time written by another machine with
this machine's clock, with one documented exception in :func:`renew_on_behalf` (agent side).

Limits: a node whose Lease does not exist is never given one (a delegate does not invent a node).
Every call is one or a few API requests; each has the client's request timeout.
"""

from __future__ import annotations

import datetime as dt
import enum
import logging
from collections.abc import Callable
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
from edgewatch.leasemark import MARK_ANNOTATIONS, mark_is_current
from edgewatch.timefmt import format_micro_time

__all__ = [
    "MARK_ANNOTATIONS",
    "DelegatedRenewal",
    "RenewOutcome",
    "clear_stale_mark",
    "hold_renewal",
    "is_marked",
    "lease_renew_text",
    "mark_is_current",
    "renew_on_behalf",
]

log = logging.getLogger(__name__)

class RenewOutcome(enum.StrEnum):
    """What a renewal on a node's behalf did."""

    RENEWED = "renewed"            # renewTime written with the mark
    NODE_RENEWED_ITSELF = "self"   # someone else (the kubelet) renewed in the meantime; nothing written
    NO_LEASE = "no_lease"          # the node has no Lease; nothing written
    NOT_DUE = "not_due"            # renewed recently enough; nothing written
    CARRIED_BY_ANOTHER = "other"   # a newer renewal marked as another carrier's; nothing written
    CONFLICT = "conflict"          # still conflicting after the retries
    FAILED = "failed"              # the API could not be reached or refused


@dataclass(frozen=True)
class DelegatedRenewal:
    """Result of a renewal on a node's behalf: the outcome and, if renewed, the renewTime written."""

    outcome: RenewOutcome
    renew_time: dt.datetime | None = None
    detail: str = ""


def lease_renew_text(lease: Lease) -> str | None:
    """The Lease's ``spec.renewTime`` as MicroTime text (the form the delegate mark records), or None."""
    renew = lease.spec.renewTime if lease.spec is not None else None
    return None if renew is None else format_micro_time(renew)


def is_marked(lease: Lease) -> bool:
    """:func:`mark_is_current` of a Lease object."""
    annotations = (lease.metadata.annotations or {}) if lease.metadata else {}
    return mark_is_current(annotations=annotations, renew_time=lease_renew_text(lease))


def _write_mark(lease: Lease, *, renew: dt.datetime, delegate: str, via: str) -> None:
    lease.spec.renewTime = renew
    annotations = dict(lease.metadata.annotations or {})
    annotations.update({
        DELEGATE_HEARTBEAT_ANNOTATION: "true",
        DELEGATED_BY_ANNOTATION: delegate,
        DELEGATED_RENEW_TIME_ANNOTATION: format_micro_time(renew),
        DELEGATED_VIA_ANNOTATION: via,
    })
    lease.metadata.annotations = annotations


def _failed(exc: BaseException) -> DelegatedRenewal:
    return DelegatedRenewal(RenewOutcome.FAILED, detail=str(exc) or type(exc).__name__)


async def _read_lease(client: AsyncClient, node: str) -> Lease | DelegatedRenewal:
    """The node's Lease, or the outcome that ends the attempt (NO_LEASE on 404, FAILED otherwise)."""
    try:
        return await client.get(Lease, node, namespace=NODE_LEASE_NAMESPACE)
    except ApiError as exc:
        if exc.status.code == 404:
            return DelegatedRenewal(RenewOutcome.NO_LEASE)
        return _failed(exc)
    except (httpx.HTTPError, OSError) as exc:
        return _failed(exc)


async def _renew_marked(*, client: AsyncClient, node: str, decide: Callable[[Lease], DelegatedRenewal | dt.datetime],
                        delegate: str, via: str, max_conflict_retries: int) -> DelegatedRenewal:
    """Read ``node``'s Lease, let ``decide`` end the attempt (an outcome) or name the renewTime to
    write with the mark, and replace it under the resourceVersion it read; a 409 Conflict (someone
    wrote in between) re-reads and decides again, up to ``max_conflict_retries`` times (then
    CONFLICT). Never raises for API errors (FAILED)."""
    for _attempt in range(max_conflict_retries + 1):
        lease = await _read_lease(client, node)
        if isinstance(lease, DelegatedRenewal):
            return lease
        decided = decide(lease)
        if isinstance(decided, DelegatedRenewal):
            return decided
        _write_mark(lease, renew=decided, delegate=delegate, via=via)
        try:
            await client.replace(lease)
            return DelegatedRenewal(RenewOutcome.RENEWED, renew_time=decided)
        except ApiError as exc:
            if exc.status.code != 409:
                return _failed(exc)
            log.debug("lease %s: conflict, re-reading", node)
        except (httpx.HTTPError, OSError) as exc:
            return _failed(exc)
    return DelegatedRenewal(RenewOutcome.CONFLICT)


async def renew_on_behalf(
    *,
    client: AsyncClient,
    node: str,
    delegate: str,
    via: str,
    alive_at: dt.datetime,
    max_conflict_retries: int = 3,
) -> DelegatedRenewal:
    """Renew ``node``'s Lease with the delegate mark (agents: peer path and pool coordinator).

    Args:
        client: API client (its own request timeout applies to each call).
        node: the cut-off node whose Lease to renew.
        delegate: name of the node doing it (recorded in ``delegated-by``).
        via: ``"peer"`` or ``"coordinator"`` (recorded in ``delegated-via``).
        alive_at: when the node was last seen alive (its newest heartbeat, aware datetime) on the
            control plane's clock as the delegate estimates it (``edgewatch.agent.cloudclock``); written
            as renewTime, so the cloud never sees a fresher life sign than there was, and within the
            apiserver's carry-clock bound (``deploy/15-policy-agent.yaml``) whatever the delegate's
            own clock says.
        max_conflict_retries: re-reads after a 409 Conflict.

    Returns:
        A :class:`DelegatedRenewal`; never raises for API errors (they come back as FAILED).

    Clock note (the one exception to docs/clock-skew.md, agent side): a current renewTime at or
    after ``alive_at`` is taken as "nothing newer to report" (NODE_RENEWED_ITSELF; RENEWED if it is
    a current mark naming ``delegate``; CARRIED_BY_ANOTHER if the mark names someone else, which is
    never counted as this delegate's success), which compares the Lease's renewTime (the kubelet's clock, or the
    control plane's as another delegate estimated it) with ``alive_at`` (the control plane's clock as this
    delegate estimates it): a node whose kubelet's clock is ahead of the control plane's is not carried
    until the control plane's clock passes its last renewTime.

    The apiserver refuses (403) a renewal without the mark naming ``delegate`` as the carrier, of a
    node outside the delegate's group, more than 5 s past the control plane's clock, or past the
    group index's carry deadline (``deploy/15-policy-agent.yaml``); that comes back as FAILED.
    """
    def decide(lease: Lease) -> DelegatedRenewal | dt.datetime:
        current = lease.spec.renewTime if lease.spec else None
        if current is not None and current >= alive_at:
            if not is_marked(lease):
                return DelegatedRenewal(RenewOutcome.NODE_RENEWED_ITSELF, renew_time=current)
            by = (lease.metadata.annotations or {}).get(DELEGATED_BY_ANNOTATION) if lease.metadata else None
            return DelegatedRenewal(RenewOutcome.RENEWED if by == delegate else RenewOutcome.CARRIED_BY_ANOTHER,
                                    renew_time=current, detail="" if by == delegate else f"marked as {by}'s")
        return alive_at

    return await _renew_marked(client=client, node=node, decide=decide, delegate=delegate, via=via,
                               max_conflict_retries=max_conflict_retries)


async def hold_renewal(
    *,
    client: AsyncClient,
    node: str,
    holder: str,
    expected_renew_time: str | None,
    now: dt.datetime,
    max_conflict_retries: int = 3,
) -> DelegatedRenewal:
    """The controller's autonomy hold: renew ``node``'s Lease, marked ``delegated-via: autonomy``,
    only if it still shows the renewal the controller decided on.

    The caller decides *when* (its own observation of the current renewal is old enough, measured on
    its monotonic clock); this function never judges a renewTime by a clock. It writes only while
    the Lease's renewTime text still equals ``expected_renew_time`` (else someone renewed since:
    NODE_RENEWED_ITSELF, nothing written), and writes ``max(now, current renewTime + 1 µs)``: our own
    clock (we are the writer), but always later than the current value, because stock
    kube-controller-manager counts a renewal only when renewTime increases, and the last one may have
    been written by a node whose clock is ahead of ours.

    Args:
        client: API client (its request timeout applies to each call).
        node: the node whose Lease to hold.
        holder: recorded in ``delegated-by`` (e.g. ``"edgewatch-controller"``).
        expected_renew_time: the renewTime (MicroTime text) the caller observed and decided on.
        now: the caller's current time (aware datetime).
        max_conflict_retries: re-reads after a 409 Conflict.

    Returns:
        A :class:`DelegatedRenewal`; never raises for API errors (they come back as FAILED).
    """
    def decide(lease: Lease) -> DelegatedRenewal | dt.datetime:
        current = lease.spec.renewTime if lease.spec else None
        if lease_renew_text(lease) != expected_renew_time:
            return DelegatedRenewal(RenewOutcome.NODE_RENEWED_ITSELF, renew_time=current)
        return now if current is None else max(now, current + dt.timedelta(microseconds=1))

    return await _renew_marked(client=client, node=node, decide=decide, delegate=holder, via="autonomy",
                               max_conflict_retries=max_conflict_retries)


async def clear_stale_mark(*, client: AsyncClient, node: str, max_conflict_retries: int = 3) -> bool:
    """Remove the delegate mark from ``node``'s Lease once its kubelet renews by itself.

    Called by the node's own agent when its cloud link is back. Removes the annotations only if the
    mark is stale (renewTime moved past ``delegated-renew-time``). The patch carries the
    resourceVersion it decided on (a JSON merge patch with ``metadata.resourceVersion`` is a
    precondition on the apiserver): a delegate that writes a current mark in between makes it fail
    with 409, and we re-read and decide again, so a current mark is never removed.

    Returns True if it removed the mark. Raises ApiError / httpx.HTTPError for the caller's retry
    loop (also a 409 that persists after ``max_conflict_retries`` re-reads).
    """
    for attempt in range(max_conflict_retries + 1):
        lease = await client.get(Lease, node, namespace=NODE_LEASE_NAMESPACE)
        annotations = (lease.metadata.annotations or {}) if lease.metadata else {}
        if not any(k in annotations for k in MARK_ANNOTATIONS) or is_marked(lease):
            return False
        patch = {"metadata": {"resourceVersion": lease.metadata.resourceVersion,
                              "annotations": {k: None for k in MARK_ANNOTATIONS if k in annotations}}}
        try:
            await client.patch(Lease, node, patch, namespace=NODE_LEASE_NAMESPACE, patch_type=PatchType.MERGE)
        except ApiError as exc:
            if exc.status.code != 409 or attempt == max_conflict_retries:
                raise
            log.debug("lease %s: conflict while clearing the mark, re-reading", node)
            continue
        return True
    return False  # not reached: the last attempt returns or raises

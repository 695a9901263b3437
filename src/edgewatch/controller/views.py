"""The two views of a node and TKE Edge's decision table: the cloud view from its Lease, the edge view from
the verdict the controller verified itself (:class:`~edgewatch.controller.model.VerifiedVerdict`),
and the state the two give together.

Every freshness judgement of the decision core is made here, and each is an *age on the
controller's own clock*: how long ago the controller observed the renewal (``observed_at``) or
counted the verdict (``counted_at``), never how old a remote timestamp looks (docs/clock-skew.md; as
kube-controller-manager's node lifecycle controller and client-go's leader election do). So a node or
agent whose clock is wrong by any amount is judged exactly like one whose clock is right.

Pure functions: no clock (``now`` is passed in), no I/O. Times in seconds.
"""

from __future__ import annotations

from edgewatch.controller.model import (
    ChallengeSnapshot,
    CloudView,
    ControllerConfig,
    EdgeView,
    LeaseSnapshot,
    NodeState,
    VerifiedVerdict,
)
from edgewatch.core.types import Verdict
from edgewatch.leasemark import mark_is_current
from edgewatch.names import DELEGATED_BY_ANNOTATION, DELEGATED_VIA_ANNOTATION

__all__ = [
    "challenge_deadline",
    "challenged_verdict",
    "cloud_view",
    "decide_state",
    "edge_unknown_since",
    "edge_view",
    "is_delegated",
    "is_fresh",
    "is_held_by_controller",
    "lease_grace_s",
    "own_renewal_overdue_at",
    "unproven_carry",
]


def is_fresh(*, observed_at: float | None, now: float, grace_s: float) -> bool:
    """True iff ``now - observed_at <= grace_s`` (all seconds, controller clock); None is never fresh.

    Fresh *at* the boundary, stale right after it.
    """
    if observed_at is None:
        return False
    return now <= observed_at + grace_s


def lease_grace_s(*, lease: LeaseSnapshot | None, config: ControllerConfig) -> float:
    """Seconds an observed Lease renewal stays fresh for the cloud view: one renew interval plus a slack.

    The kubelet renews its Lease every quarter of ``leaseDurationSeconds`` (10 s of 40 s; kubelet's
    ``renewInterval``), so a renewal the controller saw more than ``renew interval + overdue_slack_s``
    ago (12 s by default) is *overdue*: the cloud has missed a heartbeat. That, not the Lease's expiry
    (40 s), is when the cloud view stops being OK — one missed heartbeat alone never acts (the
    DISCONNECTED taint waits for ``confirm_s``, FAILED needs the peers' verdict as well), but a dead
    node is seen 28 s sooner. Never longer than the duration itself; the default duration applies
    when the Lease has none.
    """
    duration = float(config.default_lease_duration_s)
    if lease is not None and lease.duration_s is not None and lease.duration_s > 0:
        duration = float(lease.duration_s)
    return min(duration, duration / 4 + config.overdue_slack_s)


def is_delegated(lease: LeaseSnapshot | None) -> bool:
    """True iff the Lease's current renewal was made by a delegate on the node's behalf: how the
    controller first saw this renewal (``lease.carried``), else whether the delegate mark is current
    (``edgewatch.leasemark.mark_is_current``: ``delegate-heartbeat: "true"`` and
    ``delegated-renew-time`` the same instant as ``renewTime``). Once the kubelet renews by itself
    the instants differ and the renewal is the node's own."""
    if lease is None:
        return False
    if lease.carried is not None:
        return lease.carried
    return mark_is_current(annotations=lease.annotations, renew_time=lease.renew_time)


def is_held_by_controller(lease: LeaseSnapshot | None) -> bool:
    """True iff the Lease's current renewal is the controller's own autonomy hold
    (``edgewatch.io/delegated-via: autonomy`` on a current mark): it keeps kube-controller-manager
    from marking the node NotReady during the autonomy time, and is no evidence of life."""
    if lease is None or not is_delegated(lease):
        return False
    return lease.annotations.get(DELEGATED_VIA_ANNOTATION) == "autonomy"


def challenge_deadline(*, challenge: ChallengeSnapshot | None, lease: LeaseSnapshot | None) -> float | None:
    """When an unanswered challenge makes the node's cloud view LOST (controller clock, seconds), or
    None: no challenge, or it is answered, or the node's own renewal was seen at or after the challenge
    was issued (its kubelet answered it; ``lease.observed_at`` for an own renewal, else
    ``lease.own_observed_at``).

    The rule behind it: a beacon is random and recorded on the controller's clock before it is
    written (``edgewatch.core.beacon``), so only a node alive after ``issued_at`` can sign a statement
    naming it; the node's own Lease renewal proves life only up to when the controller saw it. A
    dead node's renewal stays fresh for up to one renew interval plus the slack (12 s,
    :func:`lease_grace_s`); a challenge ends that wait once the node has had
    ``ControllerConfig.challenge_timeout_s`` to answer. Pure."""
    if challenge is None or challenge.answered:
        return None
    if lease is not None and lease.observed_at is not None:
        own = lease.own_observed_at if is_delegated(lease) else lease.observed_at
        if own is not None and own >= challenge.issued_at:
            return None
    return challenge.deadline


def challenged_verdict(*, verdict: VerifiedVerdict | None, challenge: ChallengeSnapshot | None,
                       lease: LeaseSnapshot | None, seen_alive: bool, now: float,
                       grace_s: float) -> VerifiedVerdict | None:
    """The edge verdict the plan takes for a node under a challenge: UNHEALTHY since the peers
    accused it (``challenge.since``) while the challenge is in force (:func:`challenge_deadline` is
    not None: unanswered, no own renewal since) and no strict majority of its group directly names
    it alive (``seen_alive``, ``VerifiedEdge.seen_alive``: not the reach count's HEALTHY, which a
    silent node's own last statement can give it); else ``verdict``. So a suspicion the node does
    not refute counts as a dead vote (SWIM's suspicion subprotocol), and withdrawing it does not
    undo the challenge: only the node's answer, its own renewal or a majority seeing it alive does
    (a single liar who accused and then withdrew cannot flip a dead node back to normal).
    Freshness is the counted verdict's (``counted_at``).

    When: at once while the node's own last renewal is fresh (seen at most ``grace_s`` seconds
    before ``now``, controller clock) and was seen happen (not only at the controller's first look,
    which the plan may not trust): the cloud view then stays OK until the deadline, which the plan
    waits for. Otherwise (the renewal went overdue before or during the challenge, or is a first
    sight) only from the deadline on: with the cloud view LOST an UNHEALTHY verdict fails the node
    at once, and the node is owed its time to answer either way. Pure."""
    deadline = challenge_deadline(challenge=challenge, lease=lease)
    if challenge is None or challenge.since is None or seen_alive or deadline is None:
        return verdict
    if verdict is not None and verdict.verdict is Verdict.UNHEALTHY:
        return verdict
    overdue_at = own_renewal_overdue_at(lease=lease, grace_s=grace_s)
    if now < deadline and (overdue_at is None or now > overdue_at):
        return verdict
    return VerifiedVerdict(verdict=Verdict.UNHEALTHY, since=challenge.since,
                           counted_at=None if verdict is None else verdict.counted_at)


def own_renewal_overdue_at(*, lease: LeaseSnapshot | None, grace_s: float) -> float | None:
    """When the node's own latest renewal stops being fresh (controller clock, seconds): when the
    controller saw it happen plus ``grace_s``; ``lease.own_observed_at`` under a carried renewal.
    None: no own renewal seen happen (none, or only at the controller's first look, whose
    ``observed_at`` is the look, not the renewal: a node cut off for hours looks just renewed to a
    new leader). Pure."""
    if lease is None or lease.observed_at is None:
        return None
    if is_delegated(lease):
        own = lease.own_observed_at
    else:
        own = None if lease.first_sight else lease.observed_at
    return None if own is None else own + grace_s


def unproven_carry(*, node: str, lease: LeaseSnapshot | None, own_carrier: str | None) -> str | None:
    """Why the Lease's current carried renewal does not count, or None (it counts, or there is no
    carried renewal: no current mark, or the controller's own autonomy hold).

    A renewal by anyone but the node's kubelet counts only with the node's own fresh signed
    statement naming that carrier (docs/security.md; the apiserver makes every agent renewal name
    its writer in ``delegated-by``, deploy/15-policy-agent.yaml). ``own_carrier``: the carrier the
    node's own fresh statement names (``""``: none, its cloud link is up), None when the controller
    holds no fresh statement of the node. Pure.
    """
    if lease is None or not is_delegated(lease) or is_held_by_controller(lease):
        return None
    carrier = lease.annotations.get(DELEGATED_BY_ANNOTATION, "")
    if own_carrier is None:
        return (f"{node}'s Lease is renewed by {carrier or 'an unnamed carrier'}, but {node} has no fresh "
                "signed statement of its own")
    if not carrier or own_carrier != carrier:
        named = f"names {own_carrier} as its carrier" if own_carrier else "names no carrier (its cloud link is up)"
        return f"{node}'s Lease is renewed by {carrier or 'an unnamed carrier'}, but {node}'s own signed statement {named}"
    return None


def cloud_view(*, lease: LeaseSnapshot | None, now: float, grace_s: float,
               trust_first_sight: bool = True) -> CloudView:
    """The cloud view of a node from its Lease (``now`` and ``grace_s`` in seconds).

    LOST when there is no renewal, when the current renewal is the controller's own autonomy hold,
    or when the controller observed it more than ``grace_s`` ago. A renewal seen only at the
    controller's first look (``first_sight``) is taken as "just now", as kube-controller-manager does
    after a restart, unless ``trust_first_sight`` is False (the node has a recorded outage, see
    ``plan``): then an own renewal counts only once the controller has seen one happen. A current
    delegate mark is trusted either way (it says "cut off", not "back") — but only with the node's own
    fresh verified statement naming that carrier behind it (``lease.delegation_proven``, see
    :func:`unproven_carry`): an unproven mark (a compromised agent's, or one whose node went quiet)
    is LOST.

    OK, too, while the node's own renewal that a carried one followed is still fresh
    (``lease.own_observed_at`` within ``grace_s``): the node reached the cloud itself that recently,
    so it is not cut off. This is the end of a cut: the kubelet gets through first, while the agent
    still calls its link down for a few probes (``edgewatch.agent.cloudlink``'s hysteresis) and its
    peers carry one more renewal; without this rule a node back from a partition was judged cut off
    again, and FAILED while its peers' verdict had not caught up (pool-split, 2026-11-26).
    """
    if lease is None or lease.observed_at is None or is_held_by_controller(lease):
        return CloudView.LOST
    delegated = is_delegated(lease)
    if delegated and is_fresh(observed_at=lease.own_observed_at, now=now, grace_s=grace_s):
        return CloudView.OK
    if delegated and not lease.delegation_proven:
        return CloudView.LOST
    if lease.first_sight and not trust_first_sight and not delegated:
        return CloudView.LOST
    if not is_fresh(observed_at=lease.observed_at, now=now, grace_s=grace_s):
        return CloudView.LOST
    return CloudView.DELEGATED if delegated else CloudView.OK


def edge_view(*, verdict: VerifiedVerdict | None, now: float, ttl_s: float) -> EdgeView:
    """The edge view from the verified verdict (``now`` and ``ttl_s`` in seconds).

    A HEALTHY / UNHEALTHY verdict counts while the controller counted it at most ``ttl_s`` ago
    (fresh *at* the boundary); an UNKNOWN verdict, no verdict, or one never counted is unknown.
    """
    if verdict is None or verdict.verdict is Verdict.UNKNOWN:
        return EdgeView.UNKNOWN
    if not is_fresh(observed_at=verdict.counted_at, now=now, grace_s=ttl_s):
        return EdgeView.UNKNOWN
    return EdgeView.HEALTHY if verdict.verdict is Verdict.HEALTHY else EdgeView.UNHEALTHY


def edge_unknown_since(verdict: VerifiedVerdict | None, *, ttl_s: float) -> float | None:
    """Since when the edge view has been unknown (controller clock), or None if not derivable (no
    verdict, or one without the time needed): since the controller first counted an UNKNOWN verdict
    (``since``), or since a HEALTHY / UNHEALTHY verdict it last counted went stale (``counted_at +
    ttl_s``)."""
    if verdict is None:
        return None
    if verdict.verdict is Verdict.UNKNOWN:
        return verdict.since
    return None if verdict.counted_at is None else verdict.counted_at + ttl_s


def decide_state(cloud: CloudView, edge: EdgeView) -> NodeState:
    """TKE Edge's cloud x edge table: OK -> NORMAL; otherwise healthy -> DISCONNECTED, unhealthy -> FAILED,
    unknown -> UNKNOWN (resolved later by the unknown policy)."""
    if cloud is CloudView.OK:
        return NodeState.NORMAL
    if edge is EdgeView.HEALTHY:
        return NodeState.DISCONNECTED
    if edge is EdgeView.UNHEALTHY:
        return NodeState.FAILED
    return NodeState.UNKNOWN

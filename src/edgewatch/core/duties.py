"""Which duties fall to this agent in a period: publishing a node's verdict to the cloud, and
carrying a cut-off node's heartbeat (its Lease) to the cloud.

Both duties go to exactly one agent at a time, chosen deterministically among the *able* members
of the group: those the group judges HEALTHY and whose own newest heartbeat says their cloud link
is up (a cut-off agent can write nothing to the cloud). The choice is rendezvous hashing
(``edgewatch.core.assign``), so when the chosen agent dies or is cut off, the duty moves to the next
one as soon as the group's view of it changes, and nothing else moves (takeover).

A node is carried only while (a) its own newest heartbeat is fresh and says its cloud link is down
and (b) the group's verdict on it is HEALTHY — the moment the verdict changes, the carrying stops
(issue: "it stops at once when the verdict is no longer healthy"). Sources: seeds 000/001
(delegation by a connected peer), seed 003 (the vote decides).

Limits: pure; agents whose views differ for a period may both act; the writes they do are
idempotent, and a carried Lease's renewTime never runs ahead of the node's last life sign.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from edgewatch.core.assign import choose
from edgewatch.core.types import NodeName, Verdict


@dataclass(frozen=True, kw_only=True)
class PeerReport:
    """What the newest fresh heartbeat of a member says about itself (None = no fresh one)."""

    cloud_ok: bool
    kubelet_ok: bool


@dataclass(frozen=True, kw_only=True)
class Duties:
    """This agent's duties for the period.

    Attributes:
        publish: members whose EdgeHealthy condition this agent writes.
        carry: members whose Lease this agent renews on their behalf (peer path).
        able: the members able to write to the cloud (for status and logs).
    """

    publish: frozenset[NodeName]
    carry: frozenset[NodeName]
    able: frozenset[NodeName]


def able_members(
    *,
    group: frozenset[NodeName],
    verdicts: Mapping[NodeName, Verdict],
    reports: Mapping[NodeName, PeerReport | None],
) -> frozenset[NodeName]:
    """Members judged HEALTHY whose own fresh heartbeat reports a working cloud link."""
    able = set()
    for member in group:
        report = reports.get(member)
        if verdicts.get(member) == Verdict.HEALTHY and report is not None and report.cloud_ok:
            able.add(member)
    return frozenset(able)


def needs_carrying(
    member: NodeName, *, verdicts: Mapping[NodeName, Verdict], reports: Mapping[NodeName, PeerReport | None]
) -> bool:
    """True if ``member`` is HEALTHY by the vote and its own fresh heartbeat says it is cut off."""
    report = reports.get(member)
    return verdicts.get(member) == Verdict.HEALTHY and report is not None and not report.cloud_ok


def assign_duties(
    *,
    me: NodeName,
    group: frozenset[NodeName],
    verdicts: Mapping[NodeName, Verdict],
    reports: Mapping[NodeName, PeerReport | None],
    carry_enabled: bool = True,
) -> Duties:
    """Compute this agent's duties (pure).

    Args:
        me: this agent's node.
        group: the members of its group (including ``me``).
        verdicts: the group's verdict on each member (missing = UNKNOWN).
        reports: each member's newest fresh self-report (missing/None = none fresh).
        carry_enabled: False when another path (the pool coordinator's leader) carries
            heartbeats, so the peer path stands back.

    Returns:
        ``Duties``; empty when ``me`` is not itself able (a cut-off agent has no cloud duties).
    """
    able = able_members(group=group, verdicts=verdicts, reports=reports)
    if me not in able:
        return Duties(publish=frozenset(), carry=frozenset(), able=able)
    publish = frozenset(s for s in group if choose(subject=s, candidates=able) == me)
    carry: frozenset[NodeName] = frozenset()
    if carry_enabled:
        carry = frozenset(
            s for s in group
            if s != me and needs_carrying(s, verdicts=verdicts, reports=reports)
            and choose(subject=s, candidates=able - {s}) == me
        )
    return Duties(publish=publish, carry=carry, able=able)

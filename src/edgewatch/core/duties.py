"""Who carries a cut-off node's heartbeat (its Lease) and signed statement to the cloud.

The cut-off node chooses (docs/scaling.md: this must work in groups of 1,000, where no agent knows the
whole group's view). A node whose own cloud link is down names one *carrier* in its signed
heartbeat (:func:`choose_carrier`): among the neighbours its own detector sees alive whose own fresh
heartbeat says their cloud link and kubelet are up, the rendezvous-hash winner
(``edgewatch.core.assign``). When that carrier dies or loses its link, the next one wins and nothing
else moves (takeover). Only the node itself knows all its neighbours' states first hand, and its
choice is signed, so every neighbour agrees on who carries without any exchange among them.

A neighbour carries a node (:func:`assign_duties`) while

* its own cloud link is up (a cut-off agent can write nothing to the cloud);
* the node's newest heartbeat is fresh, says its cloud link is down and its kubelet healthy, and
  names this agent as carrier;
* its own detector sees the node alive (direct evidence, not hearsay);
* the local verdict on the node is not UNHEALTHY (the moment peers judge it dead, carrying stops).

Sources: OpenYurt's Yurt-Coordinator (delegation by a connected node of the pool), TKE Edge (the vote
decides), Rapid and memberlist (a node's state is spread by those who observe it directly).

Limits: pure. Two neighbours may both carry for a period when they hold different heartbeats of
the node (one older); the writes are idempotent and a carried Lease's renewTime never runs ahead
of the node's last life sign. The cloud controller checks the carried statements itself (docs/security.md),
so a carrier that lies gains nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from edgewatch.core.assign import choose
from edgewatch.core.types import NodeName, Verdict

__all__ = ["Duties", "PeerReport", "assign_duties", "choose_carrier"]


@dataclass(frozen=True, kw_only=True)
class PeerReport:
    """What the newest fresh heartbeat of a member says about itself (None = no fresh one)."""

    cloud_ok: bool
    kubelet_ok: bool
    carrier: str = ""
    """The carrier it named ("" = none)."""


@dataclass(frozen=True, kw_only=True)
class Duties:
    """This agent's duties for the period.

    Attributes:
        carry: members whose Lease this agent renews on their behalf (peer path; empty when another
            path carries Leases).
        statements: members whose signed statements this agent puts into its evidence Lease (the
            controller needs the node's own word whichever path carries the Lease).
        able: whether this agent can write to the cloud at all.
    """

    carry: frozenset[NodeName]
    statements: frozenset[NodeName]
    able: bool


def choose_carrier(
    *,
    me: NodeName,
    cloud_ok: bool,
    reachable: frozenset[NodeName],
    reports: Mapping[NodeName, PeerReport | None],
    leader: NodeName | None = None,
) -> NodeName | None:
    """The carrier this node names in its heartbeat: None while its own cloud link is up; else the
    pool leader when its pool coordinator carries heartbeats (``leader``: the leader's name while
    the coordinator covers delegation, never this node itself); else the rendezvous winner among
    ``reachable`` peers (its detector sees them alive) whose fresh report says cloud link and
    kubelet up (None if there is none). The controller counts a carried Lease renewal only when the
    node's own statement names the node that wrote it (``edgewatch.controller.views.unproven_carry``)."""
    if cloud_ok:
        return None
    if leader is not None and leader != me:
        return leader
    able = [p for p in reachable
            if p != me and (r := reports.get(p)) is not None and r.cloud_ok and r.kubelet_ok]
    return choose(subject=me, candidates=able)


def assign_duties(
    *,
    me: NodeName,
    cloud_ok: bool,
    reachable: frozenset[NodeName],
    verdicts: Mapping[NodeName, Verdict],
    reports: Mapping[NodeName, PeerReport | None],
    carry_enabled: bool = True,
) -> Duties:
    """This agent's duties (pure; see the module docstring).

    Args:
        me: this agent's node.
        cloud_ok: this agent's own cloud link.
        reachable: the peers its detector sees alive.
        verdicts: its local verdicts (missing = UNKNOWN).
        reports: each member's newest fresh self-report (missing/None = none fresh).
        carry_enabled: False when another path (the pool coordinator's leader) carries Leases, so
            the peer path stands back (statements are still carried).
    """
    if not cloud_ok:
        return Duties(carry=frozenset(), statements=frozenset(), able=False)
    named = frozenset(
        p for p in reachable
        if p != me and (r := reports.get(p)) is not None and not r.cloud_ok and r.kubelet_ok
        and r.carrier == me and verdicts.get(p) is not Verdict.UNHEALTHY
    )
    return Duties(carry=named if carry_enabled else frozenset(), statements=named, able=True)

"""The role state machine of a pool member, pure: ``Role``, ``RoleDecision`` and ``decide_role``
(tested exhaustively; the session, the election and the step-down watch ask it)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Role", "RoleDecision", "decide_role"]


class Role(enum.StrEnum):
    """Role of this agent in its pool (as in OpenYurt's Yurt-Coordinator)."""

    PENDING = "pending"     # coordinator unreachable: no pool features
    FOLLOWER = "follower"   # not elected, or own cloud link down
    LEADER = "leader"       # elected and own cloud link up: forwards delegated heartbeats


@dataclass(frozen=True)
class RoleDecision:
    """What ``decide_role`` says to be and to do.

    Attributes:
        role: the role to report.
        campaign: try to create the leader key now.
        release: give the leader key up now (revoke its lease).
    """

    role: Role
    campaign: bool = False
    release: bool = False


def decide_role(*, reachable: bool, elected: bool, leader_present: bool, cloud_ok: bool) -> RoleDecision:
    """The role state machine, pure.

    Args:
        reachable: the coordinator answers.
        elected: this node holds the leader key (implies a leader is present).
        leader_present: some node holds the leader key.
        cloud_ok: this node's own cloud link is up.

    Rules: unreachable -> PENDING, nothing to do (a held lease expires by itself); elected with the
    cloud -> LEADER; elected without it -> FOLLOWER and release at once; not elected -> FOLLOWER,
    campaigning only if nobody leads and the own cloud link is up (a cut-off agent cannot forward,
    so it must never lead).
    """
    if not reachable:
        return RoleDecision(Role.PENDING)
    if elected:
        return RoleDecision(Role.LEADER) if cloud_ok else RoleDecision(Role.FOLLOWER, release=True)
    return RoleDecision(Role.FOLLOWER, campaign=cloud_ok and not leader_present)

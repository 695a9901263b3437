"""Which etcd users and roles a pool coordinator needs, and the steps to get there (pure).

What it is for
    etcd authenticates a client by the CN of its certificate (``--client-cert-auth`` with auth
    enabled) and authorizes it by the roles of the user of that name. A pool's etcd has one user
    per member node, each with one role ``edgewatch-node-<node>`` carrying exactly
    :func:`edgewatch.poolkeys.node_grants`: read the pool, write its own heartbeat, candidacy,
    sync key and cache area (a member over its write quota: less, :class:`Suspensions`).
    :func:`plan_acl` diffs that with what etcd has and returns the steps,
    in an order that never leaves a user with more than its own rights: grants are revoked before
    others are added, and a departed node's user is deleted (it can no longer authenticate) before
    its role.

Limits
    Pure, no I/O. Users and roles not named ``edgewatch-node-*`` (``root``, an operator's own)
    are never touched. etcd's ``root`` user is reserved: a node named ``root`` gets nothing (the
    controller refuses to sign its certificate too).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from edgewatch.poolkeys import Grant, PoolKeys, node_grants

__all__ = ["NO_SUSPENSIONS", "ROLE_PREFIX", "RESERVED_USERS", "AclStep", "Suspensions", "plan_acl", "role_name"]

ROLE_PREFIX = "edgewatch-node-"
RESERVED_USERS = frozenset({"root"})


def role_name(node: str) -> str:
    """The etcd role of ``node``."""
    return f"{ROLE_PREFIX}{node}"


@dataclass(frozen=True)
class Suspensions:
    """Members over their write quota (``edgewatch.pooletcd.quota``): ``read_only`` may only read;
    ``no_area`` may write everything but their ``nodes/<node>/`` area."""

    read_only: frozenset[str] = frozenset()
    no_area: frozenset[str] = frozenset()

    def of(self, members: frozenset[str]) -> Suspensions:
        """The suspensions of ``members`` only."""
        return Suspensions(read_only=self.read_only & members, no_area=self.no_area & members)


NO_SUSPENSIONS = Suspensions()


@dataclass(frozen=True)
class AclStep:
    """One change to etcd's access control.

    Attributes:
        op: ``add_role``, ``grant``, ``revoke``, ``add_user``, ``grant_role``, ``revoke_role``,
            ``delete_user``, ``delete_role``.
        name: the role (``add_role``, ``grant``, ``revoke``, ``delete_role``) or the user.
        role: the role given to or taken from the user (``grant_role``, ``revoke_role``: a node's
            user has exactly its own role).
        grant: the permission (``grant``, ``revoke``).
    """

    op: str
    name: str
    role: str = ""
    grant: Grant | None = None


def plan_acl(*, keys: PoolKeys, members: Iterable[str], roles: Mapping[str, tuple[Grant, ...]],
             users: Mapping[str, tuple[str, ...]], suspended: Suspensions = NO_SUSPENSIONS) -> list[AclStep]:
    """The steps from etcd's current ``roles`` (name -> grants) and ``users`` (name -> roles) to
    one user and role per member of the pool (empty when nothing is to change).

    Args:
        keys: the pool's key layout.
        members: the pool's nodes now (e.g. from its roster); reserved names are skipped.
        roles: every role etcd has, with its grants.
        users: every user etcd has, with its roles.
        suspended: members over their write quota now (``edgewatch.pooletcd.quota``): their
            write grants (or their area's) are revoked, to be granted again once they are no longer
            named there.
    """
    wanted = {n for n in members if n not in RESERVED_USERS}
    steps: list[AclStep] = []
    # Departed nodes first: their user goes (no more authentication), then their role.
    for user in sorted(users):
        if user not in wanted and role_name(user) in users[user]:
            steps.append(AclStep("delete_user", user))
    for role in sorted(roles):
        if role.startswith(ROLE_PREFIX) and role[len(ROLE_PREFIX):] not in wanted:
            steps.append(AclStep("delete_role", role))
    for node in sorted(wanted):
        role = role_name(node)
        want = set(node_grants(keys, node, writes=node not in suspended.read_only,
                               area=node not in suspended.no_area))
        have = set(roles.get(role, ()))
        if role not in roles:
            steps.append(AclStep("add_role", role))
        steps += [AclStep("revoke", role, grant=g) for g in sorted(have - want)]
        steps += [AclStep("grant", role, grant=g) for g in sorted(want - have)]
        if node not in users:
            steps.append(AclStep("add_user", node))
        extra = sorted(set(users.get(node, ())) - {role})
        steps += [AclStep("revoke_role", node, role=r) for r in extra]
        if role not in users.get(node, ()):
            steps.append(AclStep("grant_role", node, role=role))
    return steps

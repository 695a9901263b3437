"""The pool coordinator's key layout, who may write which key, and who leads (docs/security.md).

What it is for
    One place that says where everything lives in a pool's etcd, shared by the agent's coordinator
    client (``edgewatch.agent.coordinator``), the pool cache (``edgewatch.poolcache``) and the
    coordinator's access control (``edgewatch.pooletcd``). Every key a node writes is under a name
    that carries that node's name, so etcd's own role-based access control can let each node write
    only its own keys (one etcd user per node: the CN of its client certificate)::

        /edgewatch/pools/<pool>/
            heartbeats/<node>             the node's heartbeat (its own lease, 40 s)
            leader/election/<node>        the node's candidacy (its leader lease, 5 s)
            leader/sync/<node>            leader-informer-sync of the node's term as leader
            leader/disqualified/<node>    the create revision of the node's candidacy that may never
                                          lead (written by the coordinator only: root)
            nodes/<node>/cache/...        the pool cache the node wrote while it led
                                          (layout: edgewatch.poolcache.layout)

Who leads (:func:`leader_of`)
    The candidate with the lowest create revision among the live candidacies: etcd's own election
    recipe (``concurrency.Election``), with one key per node instead of one shared key. A newer
    candidacy always has a higher revision, so the leader stays the leader until its key goes (its
    lease expired or was revoked). Readers act on, and serve, only what the current leader wrote:
    its sync key and its ``nodes/<leader>/`` area. A node that is not the leader can write none of
    those (etcd refuses), so it cannot forge what the pool serves or hold the election.

No queue
    etcd's recipe lets a candidate wait in line, but edgewatch's agents stand only when nobody
    leads and withdraw at once when they lose, so a candidacy *standing* behind a leader is a member
    trying to be next in line (a compromised one: under a long lease it would lead after the next
    routine leader change and never step down). The coordinator (``edgewatch.pooletcd.janitor``),
    following the election in revision order, disqualifies such a candidacy, and one whose lease is
    longer than :data:`MAX_LEADER_TTL_S`: ``leader/disqualified/<node>``, a key only it can write,
    which every agent reads with the election and obeys (a disqualified candidacy never leads). It
    also deletes every key of a node that left the pool.

Limits: pure, no I/O. Pool names are DNS-1123 labels and node names DNS-1123 subdomains (checked
by callers), so no name can contain ``/`` and one node's keys never nest inside another's.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from edgewatch.core.types import is_dns1123_subdomain

__all__ = ["KEY_ROOT", "MAX_LEADER_TTL_S", "Access", "Candidate", "Grant", "PoolKeys", "leader_of", "node_grants",
           "prefix_end"]

KEY_ROOT = "/edgewatch/pools/"
#: The longest lease a candidacy may have, seconds: three times the agents' 5 s leader lease. A longer
#: one would outlive its holder's death by that much (a 30-day lease: for good); the coordinator
#: revokes it.
MAX_LEADER_TTL_S = 15


def prefix_end(prefix: bytes) -> bytes:
    """The etcd ``range_end`` that makes ``[prefix, range_end)`` every key starting with ``prefix``
    (etcd's ``clientv3.GetPrefixRangeEnd``: the prefix with its last byte below 0xff incremented).

    Raises:
        ValueError: ``prefix`` is empty or all 0xff (it would mean "every key").
    """
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        raise ValueError("a prefix of only 0xff bytes (or none) has no range end")
    return stripped[:-1] + bytes([stripped[-1] + 1])


@dataclass(frozen=True)
class PoolKeys:
    """The keys of one pool (``pool`` a DNS-1123 label; not checked here)."""

    pool: str

    @property
    def prefix(self) -> str:
        """Everything of the pool: ``/edgewatch/pools/<pool>/``."""
        return f"{KEY_ROOT}{self.pool}/"

    @property
    def heartbeats(self) -> bytes:
        """Prefix of every node's heartbeat."""
        return f"{self.prefix}heartbeats/".encode()

    def heartbeat(self, node: str) -> bytes:
        """``node``'s heartbeat key."""
        return self.heartbeats + node.encode()

    @property
    def leadership(self) -> bytes:
        """Prefix of the candidacies and the sync keys (one watch follows the election)."""
        return f"{self.prefix}leader/".encode()

    @property
    def candidates(self) -> bytes:
        """Prefix of the candidacies."""
        return self.leadership + b"election/"

    def candidate(self, node: str) -> bytes:
        """``node``'s candidacy key."""
        return self.candidates + node.encode()

    @property
    def syncs(self) -> bytes:
        """Prefix of the sync keys."""
        return self.leadership + b"sync/"

    def sync(self, node: str) -> bytes:
        """``leader-informer-sync`` of ``node``'s term as leader."""
        return self.syncs + node.encode()

    @property
    def disqualifications(self) -> bytes:
        """Prefix of the candidacies that may never lead (written by the coordinator only)."""
        return self.leadership + b"disqualified/"

    def disqualified(self, node: str) -> bytes:
        """The key naming ``node``'s disqualified candidacy (its create revision, in decimal)."""
        return self.disqualifications + node.encode()

    def writer(self, node: str) -> str:
        """The area only ``node`` writes, where it keeps the pool cache while it leads."""
        return f"{self.prefix}nodes/{node}/"

    def writer_of(self, key: bytes) -> str | None:
        """The node whose role lets it write ``key`` (:func:`node_grants`: its heartbeat,
        candidacy, sync key or ``nodes/<node>/`` area), or None for a key no node writes (a
        disqualification, anything outside the layout)."""
        for prefix in (self.heartbeats, self.candidates, self.syncs):
            if key.startswith(prefix):
                name = key[len(prefix):]
                return name.decode(errors="replace") if name and b"/" not in name else None
        area = f"{self.prefix}nodes/".encode()
        if key.startswith(area):
            name, slash, _rest = key[len(area):].partition(b"/")
            return name.decode(errors="replace") if name and slash else None
        return None


class Access(enum.Enum):
    """etcd permission types (``authpb.Permission.Type``)."""

    READ = 0
    WRITE = 1
    READWRITE = 2


@dataclass(frozen=True, order=True)
class Grant:
    """One etcd permission: ``access`` to ``key`` alone (``range_end`` empty) or to
    ``[key, range_end)``."""

    key: bytes
    range_end: bytes
    access: Access


def node_grants(keys: PoolKeys, node: str, *, writes: bool = True, area: bool = True) -> tuple[Grant, ...]:
    """What ``node``'s etcd role allows: read the whole pool; write its heartbeat, its candidacy,
    its sync key and its own area; nothing else (sorted, for comparing with what etcd has).
    A member over its write quota (``edgewatch.pooletcd.quota``) gets less: ``area=False``
    without its area, ``writes=False`` the read alone."""
    writer = keys.writer(node).encode()
    pool = keys.prefix.encode()
    grants = [Grant(pool, prefix_end(pool), Access.READ)]
    if writes:
        grants += [Grant(keys.heartbeat(node), b"", Access.READWRITE),
                   Grant(keys.candidate(node), b"", Access.READWRITE),
                   Grant(keys.sync(node), b"", Access.READWRITE)]
        if area:
            grants.append(Grant(writer, prefix_end(writer), Access.READWRITE))
    return tuple(sorted(grants))


@dataclass(frozen=True)
class Candidate:
    """A candidacy as read from etcd: the key's lease and create revision."""

    lease: int
    create_revision: int


def leader_of(candidates: Mapping[str, Candidate]) -> str | None:
    """The leader: the valid candidacy with the lowest create revision (ties, impossible in etcd,
    go to the smaller name). A candidacy without a lease (it would never expire) or under a name
    that is not a DNS-1123 subdomain is not valid: it is ignored, never obeyed. None if no valid
    candidacy."""
    valid = [(c.create_revision, name) for name, c in candidates.items()
             if c.lease != 0 and c.create_revision > 0 and is_dns1123_subdomain(name)]
    return min(valid)[1] if valid else None


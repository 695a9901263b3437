"""The monitoring topology: which members of a group check each other directly.

What it is for
    All-to-all checking costs every node 2(n-1) messages per period (SuperEdge edge-health, and
    edgewatch before its ring protocol, docs/scaling.md). Here every node checks only its *neighbours*
    in ``k`` pseudo-random rings over the group (Rapid's K-ring expander, Suresh et al. 2018): in ring
    ``r`` the members are ordered by ``blake2b(r, name)``, and each member's neighbours are its
    predecessor and successor. The union of ``k`` random Hamiltonian cycles is an expander: every node
    has at most ``2k`` neighbours whatever ``n`` is, the graph is connected with every ring alone, and
    isolating a live node takes the failure of all its (up to ``2k``) edges at once.

    Groups of at most ``2k + 1`` members are a full mesh (every peer is a neighbour), so small
    groups (the 5-node pools of the lab) check exactly as before.

Contract
    :func:`neighbours` is a pure function of the member *set* and ``k``: every agent and the cloud
    controller compute the same graph from the same group, with no coordination. The relation is
    symmetric (``b in out[a]`` iff ``a in out[b]``), irreflexive, and every member has between
    ``min(2, n - 1)`` and ``min(2k, n - 1)`` neighbours. Adding or removing one member changes at
    most ``2k`` pairs per ring position it touches (about ``4k`` edges), so membership churn moves
    little evidence (Rapid's stability argument).

Limits
    The rings are keyed by names only: a node cannot choose its neighbours, but anyone can compute
    them (no secrecy is needed — the verdict rule in :mod:`edgewatch.core.reach` never trusts one
    neighbour alone). Cost: ``k`` sorts of ``n`` hashed names, about 3 ms at n = 1,000 and k = 3;
    callers cache the result per member set.

Sources
    Rapid (Suresh et al., USENIX ATC 2018, section 4.1: K rings of pseudo-random permutations,
    observers/subjects); Hamiltonian-cycle unions as expanders (Friedman, "A proof of Alon's second
    eigenvalue conjecture", for random regular graphs).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

from edgewatch.core.types import NodeName

__all__ = ["DEFAULT_RINGS", "full_mesh_max", "neighbours", "ring_order"]

DEFAULT_RINGS = 3
"""Default ``k``: 3 rings, at most 6 neighbours, so 12 messages per node per period (6 requests sent,
6 answers sent) at any group size. Rapid uses 10 observers because one observer's report alone is
acted on after 9 agree; here a verdict needs a majority of the whole group (edgewatch.core.reach),
and 6 edges keep a live node connected unless all 6 fail together (docs/scaling.md)."""


def full_mesh_max(k: int) -> int:
    """The largest group that is a full mesh with ``k`` rings: ``2k + 1`` members."""
    return 2 * k + 1


def ring_order(members: Iterable[NodeName], ring: int) -> list[NodeName]:
    """The members in the order of ring ``ring`` (sorted by a 64-bit BLAKE2b of ``"<ring>/<name>"``,
    ties by name)."""
    def key(name: NodeName) -> tuple[bytes, str]:
        return hashlib.blake2b(f"{ring}/{name}".encode(), digest_size=8).digest(), name
    return sorted(set(members), key=key)


def neighbours(members: Iterable[NodeName], *, k: int = DEFAULT_RINGS) -> Mapping[NodeName, frozenset[NodeName]]:
    """Every member's neighbours in the ``k``-ring topology (see the module docstring).

    Args:
        members: the group (duplicates are ignored; order does not matter).
        k: the number of rings, >= 1.

    Returns:
        ``{member: frozenset of neighbours}`` for every member (a group of one: no neighbours).

    Raises:
        ValueError: ``k`` is not an int >= 1.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1, got {k!r}")
    group = sorted(set(members))
    n = len(group)
    if n <= full_mesh_max(k):
        everyone = frozenset(group)
        return {m: everyone - {m} for m in group}
    out: dict[NodeName, set[NodeName]] = {m: set() for m in group}
    for r in range(k):
        order = ring_order(group, r)
        for i, m in enumerate(order):
            succ = order[(i + 1) % n]
            out[m].add(succ)
            out[succ].add(m)
    return {m: frozenset(peers) for m, peers in out.items()}

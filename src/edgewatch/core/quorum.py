"""The vote rule: how a group's observations of a node become one verdict.

What it is for
    Every agent publishes, once per exchange period, a :class:`Vote`: the set
    of group members its failure detector sees alive and the set it sees
    dead (suspect members are in neither: the observer abstains on them). A
    node's own vote lists itself alive iff its own kubelet is healthy (the
    caller's business). :func:`decide` turns the fresh votes of a group into
    a :class:`Decision` on one node:

    * only votes whose observer is a member of the group, and whose
      ``observed_at`` is at most ``vote_ttl_s`` seconds from ``now``, count;
    * HEALTHY   iff ``alive_count > len(group) / 2``;
    * UNHEALTHY iff ``dead_count  > len(group) / 2``;
    * otherwise UNKNOWN.

    The majority is of the *group's size*, not of the votes received: a
    minority that can only hear itself can never out-vote the rest. Hence,
    when a group splits into two sides that each see only themselves, the
    strictly larger side is HEALTHY, the smaller side UNHEALTHY, and an even
    split leaves everyone UNKNOWN (the cloud view decides then) — the
    guarantee of TKE Edge's design that the larger side is never judged abnormal.
    Each observer counts once, so HEALTHY and UNHEALTHY can never both hold.

Limits
    No I/O, no clocks: ``now`` and ``observed_at`` must be on the same clock
    (the agent uses the local receipt time of the heartbeat that carried the
    vote, see :class:`edgewatch.core.wire.HeartbeatBook`, so no cross-node
    clock comparison is needed). A group of one node (grouping on, no label)
    can only ever be HEALTHY (its own vote) or UNKNOWN; a group of two can
    never be UNHEALTHY while the subject's own vote is fresh. Votes cannot be
    weighed; every member counts the same.

Sources
    TKE Edge / SuperEdge edge-health (nodes check each other, vote,
    a majority decides, the larger side of a split is never abnormal);
    Rapid (Suresh et al. 2018: multiple observers, high-fidelity agreement
    thresholds); SuperEdge's flapping caused by a vote expiry equal to the
    exchange period (hence :func:`validate_timing`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from edgewatch.core.types import Health, NodeName, Verdict

__all__ = [
    "MIN_TTL_PERIODS",
    "Decision",
    "Vote",
    "VoteConfig",
    "decide",
    "decide_all",
    "decision_from_counts",
    "fresh_votes",
    "is_fresh",
    "majority",
    "validate_timing",
]

MIN_TTL_PERIODS = 3
"""A vote must live at least this many exchange periods (:func:`validate_timing`)."""


def _finite_seconds(name: str, value: object, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number of seconds, got {value!r}")
    if positive and value <= 0:
        raise ValueError(f"{name} must be > 0 seconds, got {value}")
    return float(value)


def validate_timing(*, exchange_period_s: float, vote_ttl_s: float) -> None:
    """Check that votes outlive enough exchange periods not to flap.

    A vote is refreshed once per exchange period. If it expired after one
    period (SuperEdge edge-health did exactly this), any late or lost
    message made the vote vanish and the verdict flip to UNKNOWN and back.
    With ``vote_ttl_s >= 3 * exchange_period_s`` a vote survives two
    consecutive lost or late exchanges: with independent loss ``p`` the
    chance of a spurious expiry falls from ``p`` to about ``p**3``.

    Raises:
        ValueError: a value is not finite and > 0 seconds, or
            ``vote_ttl_s < 3 * exchange_period_s``.
    """
    period = _finite_seconds("exchange_period_s", exchange_period_s, positive=True)
    ttl = _finite_seconds("vote_ttl_s", vote_ttl_s, positive=True)
    if ttl < MIN_TTL_PERIODS * period:
        raise ValueError(
            f"vote_ttl_s ({ttl} s) must be >= {MIN_TTL_PERIODS} * exchange_period_s "
            f"({MIN_TTL_PERIODS * period} s): a vote that expires within "
            f"{MIN_TTL_PERIODS} periods makes verdicts flap on every lost message"
        )


@dataclass(frozen=True, kw_only=True)
class VoteConfig:
    """Timing of vote exchange. All durations in seconds.

    Raises:
        ValueError: on construction, via :func:`validate_timing`.
    """

    exchange_period_s: float = 1.0
    """Seconds between two heartbeats (votes) of one agent. Default 1.0 s,
    memberlist's probe interval: fast enough to detect a dead node in a few
    seconds, cheap because each node exchanges only with its (at most 6)
    neighbours (:mod:`edgewatch.core.topology`)."""

    vote_ttl_s: float = 5.0
    """Seconds a vote counts after it was received. Default 5.0 s (5
    periods): survives four lost exchanges in a row, yet a vanished
    observer stops counting about as fast as the detector declares a node
    DEAD (``dead_timeout_s`` 5 s). Must be >= 3 * ``exchange_period_s``.
    Neighbours exchange directly every period at any group size, so it
    does not grow with the group."""

    def __post_init__(self) -> None:
        validate_timing(exchange_period_s=self.exchange_period_s, vote_ttl_s=self.vote_ttl_s)


@dataclass(frozen=True, kw_only=True)
class Vote:
    """One observer's observation set at one time.

    ``observed_at`` is in seconds on the same clock as the ``now`` given to
    :func:`decide` (the agent uses local receipt time). Members in neither
    set are suspect: the observer abstains on them.

    Raises:
        ValueError: ``alive`` and ``dead`` overlap, or ``observed_at`` is not
            a finite number.
    """

    observer: NodeName
    observed_at: float
    alive: frozenset[NodeName]
    dead: frozenset[NodeName]

    def __post_init__(self) -> None:
        _finite_seconds("observed_at", self.observed_at, positive=False)
        if not isinstance(self.alive, frozenset) or not isinstance(self.dead, frozenset):
            raise ValueError("alive and dead must be frozensets")
        both = self.alive & self.dead
        if both:
            raise ValueError(f"a vote cannot see a node both alive and dead: {sorted(both)[:5]}")

    def view_of(self, subject: NodeName) -> Health:
        """ALIVE, DEAD, or SUSPECT (abstains) for ``subject``."""
        if subject in self.alive:
            return Health.ALIVE
        if subject in self.dead:
            return Health.DEAD
        return Health.SUSPECT


def majority(group_size: int) -> int:
    """Smallest count that is a strict majority of ``group_size``
    (``group_size // 2 + 1``). Raises ValueError if ``group_size < 1``."""
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be an int >= 1, got {group_size!r}")
    return group_size // 2 + 1


def is_fresh(vote: Vote, *, now: float, vote_ttl_s: float) -> bool:
    """Whether ``vote`` still counts at ``now``: ``|now - observed_at| <=
    vote_ttl_s`` seconds.

    Votes from the future are tolerated up to the same TTL (callers mixing
    clocks get a bounded skew allowance) and no further, so a vote can never
    count for longer than ``2 * vote_ttl_s``. Raises ValueError if ``now`` or
    ``vote_ttl_s`` is not finite (``vote_ttl_s`` must also be > 0).
    """
    t = _finite_seconds("now", now, positive=False)
    ttl = _finite_seconds("vote_ttl_s", vote_ttl_s, positive=True)
    return abs(t - vote.observed_at) <= ttl


@dataclass(frozen=True, kw_only=True)
class Decision:
    """The group's verdict on one node and the counts behind it."""

    subject: NodeName
    verdict: Verdict
    alive_count: int
    """Fresh member votes that see the subject alive."""
    dead_count: int
    """Fresh member votes that see the subject dead."""
    group_size: int
    """Members of the group (the majority is computed from this)."""
    votes_counted: int
    """Fresh member votes (including those abstaining on the subject)."""

    @property
    def majority(self) -> int:
        """Votes needed for HEALTHY or UNHEALTHY (strict majority)."""
        return majority(self.group_size)

    @property
    def message(self) -> str:
        """A one-line human explanation, e.g. ``"healthy: 4 of 5 peers see it
        alive, 1 dead, 0 no view (majority 3)"``."""
        undecided = self.group_size - self.alive_count - self.dead_count
        return (
            f"{self.verdict.value}: {self.alive_count} of {self.group_size} peers see it alive, "
            f"{self.dead_count} dead, {undecided} no view (majority {self.majority})"
        )


def fresh_votes(
    *,
    group: frozenset[NodeName],
    votes: Mapping[NodeName, Vote],
    now: float,
    vote_ttl_s: float,
) -> list[Vote]:
    """The votes that count at ``now``: those of members of ``group`` that are fresh
    (:func:`is_fresh`).

    Raises:
        ValueError: a key of ``votes`` differs from its vote's observer; ``now``/``vote_ttl_s``
            not finite, or ``vote_ttl_s <= 0``.
    """
    _finite_seconds("now", now, positive=False)
    _finite_seconds("vote_ttl_s", vote_ttl_s, positive=True)
    counted: list[Vote] = []
    for key, vote in votes.items():
        if key != vote.observer:
            raise ValueError(f"votes must be keyed by observer: key {key!r} holds a vote of {vote.observer!r}")
        if vote.observer in group and is_fresh(vote, now=now, vote_ttl_s=vote_ttl_s):
            counted.append(vote)
    return counted


def decision_from_counts(subject: NodeName, *, alive: int, dead: int, group_size: int,
                         votes_counted: int) -> Decision:
    """The verdict for ``alive`` and ``dead`` votes in a group of ``group_size`` (TKE Edge's rule):
    HEALTHY iff alive is a strict majority of the group, UNHEALTHY iff dead is, else UNKNOWN.

    Raises:
        ValueError: ``group_size < 1``.
    """
    needed = majority(group_size)
    if alive >= needed:
        verdict = Verdict.HEALTHY
    elif dead >= needed:
        verdict = Verdict.UNHEALTHY
    else:
        verdict = Verdict.UNKNOWN
    return Decision(subject=subject, verdict=verdict, alive_count=alive, dead_count=dead, group_size=group_size,
                    votes_counted=votes_counted)


def _decide_from(subject: NodeName, *, group_size: int, counted: list[Vote]) -> Decision:
    alive = sum(1 for v in counted if subject in v.alive)
    dead = sum(1 for v in counted if subject in v.dead)
    return decision_from_counts(subject, alive=alive, dead=dead, group_size=group_size, votes_counted=len(counted))



def decide(
    subject: NodeName,
    *,
    group: frozenset[NodeName],
    votes: Mapping[NodeName, Vote],
    now: float,
    vote_ttl_s: float,
) -> Decision:
    """Decide on ``subject`` from the fresh votes of ``group``'s members.

    Args:
        subject: the node to judge; must be a member of ``group``.
        group: the subject's group (:mod:`edgewatch.core.grouping`).
        votes: observer -> its latest vote. Votes of non-members and votes
            older (or newer) than ``vote_ttl_s`` seconds are ignored.
        now: current time, seconds, same clock as ``Vote.observed_at``.
        vote_ttl_s: seconds a vote counts (> 0).

    Raises:
        ValueError: ``subject`` not in ``group``; a key of ``votes`` differs
            from its vote's ``observer``; ``now``/``vote_ttl_s`` not finite or
            ``vote_ttl_s <= 0``.
    """
    if subject not in group:
        raise ValueError(f"subject {subject!r} is not a member of the group")
    counted = fresh_votes(group=group, votes=votes, now=now, vote_ttl_s=vote_ttl_s)
    return _decide_from(subject, group_size=len(group), counted=counted)


def decide_all(
    *,
    group: frozenset[NodeName],
    votes: Mapping[NodeName, Vote],
    now: float,
    vote_ttl_s: float,
) -> dict[NodeName, Decision]:
    """:func:`decide` for every member of ``group`` (same arguments and
    errors, minus ``subject``). Returns member -> decision; empty for an
    empty group."""
    counted = fresh_votes(group=group, votes=votes, now=now, vote_ttl_s=vote_ttl_s)
    return {m: _decide_from(m, group_size=len(group), counted=counted) for m in sorted(group)}

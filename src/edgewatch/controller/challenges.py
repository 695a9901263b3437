"""Challenges through the beacon: detection of a dead node that does not wait for its kubelet's
renew interval.

Why
    The kubelet renews its Lease every 10 s, so a node that dies right after a renewal looks alive
    to the cloud for up to 12 s (``edgewatch.controller.views.lease_grace_s``), while its peers
    judge it dead in about 6 s. Failing it on the peers' word alone would fail a node cut off only
    from its LAN, alive and connected to the cloud. So the controller asks the node itself: it
    names the node on a new beacon (``edgewatch.io/challenge`` on the beacon Lease, which every agent
    already watches), and a live agent signs a statement naming that beacon at once and writes it to
    its evidence Lease over its own cloud link. A beacon is random and recorded on the controller's
    clock before it is written (``edgewatch.core.beacon``), so no statement naming it can predate the
    challenge: an answer proves the node alive *after* its peers' verdict. Unanswered within
    ``ControllerConfig.challenge_timeout_s``, the cloud view is LOST
    (:func:`edgewatch.controller.views.challenge_deadline`) and the table fails the node.

Who is challenged
    A node not yet failed whose plan has the cloud view OK, or LOST because its own renewal went
    overdue at most :data:`RECENTLY_OVERDUE_S` before its peers accused it (a kill in the last
    seconds before a kubelet renewal: without a challenge its detection would wait for the dead
    votes), and that a strict majority of its peers vote dead or
    *suspect* (``edgewatch.io/suspects`` on their evidence Leases, ``edgewatch.core.suspicion``:
    about 2 s of silence, where a dead vote takes 5 s), once per such episode and at most once per
    :data:`BACKOFF_S`, and only if (:meth:`Challenges.eligible`):

    * its agent answers challenges, and so does every member of its group that has a statement:
      the mark ``edgewatch.io/answers-challenges: v1:<incarnation>`` on each evidence Lease (only
      its own agent writes it) names the incarnation of the member's newest verified statement. An
      agent of an earlier release never answers nor confirms its dead votes (a node restarting its
      agent beside it would be failed), and one that kept the mark after a rollback signs another
      incarnation;
    * no peer names it on its evidence Lease as a dead vote it cannot confirm
      (``edgewatch.io/unconfirmed-dead``: its kubelet's port answers, so its agent is down, not its
      host; or the check cannot tell, ``edgewatch.core.hostalive``). Such a claim only keeps the
      node on the Lease path (failed once its renewal is overdue, as before), so one liar can slow
      detection back to the kubelet's bound, never keep a dead node in;
    * at most a third of its group (at least one node: itself) is suspected at once (an unhealthy-zone rule,
      as kube-controller-manager's ``--unhealthy-zone-threshold``): a LAN-wide fault, a firewall
      change, is not met with a storm of challenges whose stragglers would be failed.

    Unanswered, the suspicions count as the suspecting peers' dead votes
    (``VerifiedEdge.verdict(count_suspicions=True)``): the node is failed about 2 s + the timeout
    after its death, not 5 s + the timeout. Answered, they count for nothing.

    An answer, once verified, stands for the challenge (a later statement saying the kubelet is
    sick does not undo it); a claim of an unconfirmed dead vote counts as an answer.

Cost
    One extra beacon Lease write per challenge (challenges asked within one beacon's write share
    it; at most :data:`MAX_PER_BEACON` names each) and one watch event per agent; one evidence write
    by the challenged node. Nothing while no node is suspected.

State is in memory, on the leader: a new leader challenges again (a fresh episode). Single-threaded
(one event loop); times in seconds on the controller's clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Final

from edgewatch.controller.model import ChallengeSnapshot, CloudView, EdgeView, NodePlan, NodeState
from edgewatch.core.evidence import Statement
from edgewatch.core.types import is_decimal, is_node_name

__all__ = ["BACKOFF_S", "MAX_NAMES", "MAX_PER_BEACON", "RECENTLY_OVERDUE_S", "Challenges", "parse_mark",
           "parse_names"]

MAX_PER_BEACON: Final = 100
"""Most nodes one beacon challenges (about 3 KB of names); more wait for the next beacon."""

BACKOFF_S: Final = 60.0
"""Shortest time between two challenges of one node, seconds: a node whose verdict flaps (its agent
silent, its kubelet port opened and closed) costs at most one beacon a minute."""

RECENTLY_OVERDUE_S: Final = 5.0
"""Longest time, seconds, between a node's own renewal going overdue and its peers' accusation for
the node to be challenged with its cloud view LOST. A kill's suspicions land 1.5-3.5 s after it, so
a kill in the last seconds before a renewal finds that renewal overdue by up to about 3.5 s. A node
overdue for longer is cut off from the cloud (or long dead): the challenge reaches an agent only
over its own cloud link, so it could not answer, and a suspicion (wrong once in a thousand runs)
must not stand in for the dead votes (once in a million) that fail a cut-off node. Nor one never
seen renewing, nor one whose Lease a peer carries (cloud view DELEGATED)."""

MAX_NAMES: Final = 64
"""Most names read from one evidence Lease's ``edgewatch.io/unconfirmed-dead`` (an agent votes on at
most its 6 neighbours and a few contacts); more are ignored."""


def parse_mark(text: str | None) -> int | None:
    """The incarnation an ``edgewatch.io/answers-challenges`` mark names (``v1:<decimal>``), or None
    for anything else (absent, another version, malformed, over 20 digits)."""
    if not text or not text.startswith("v1:"):
        return None
    digits = text[3:]
    if not 0 < len(digits) <= 20 or not is_decimal(digits):
        return None
    return int(digits)


def parse_names(text: str | None) -> frozenset[str]:
    """The node names of an ``edgewatch.io/unconfirmed-dead`` annotation: comma-separated, valid
    names only, at most :data:`MAX_NAMES` (the rest ignored)."""
    if not text:
        return frozenset()
    return frozenset(n for n in text.split(",", MAX_NAMES)[:MAX_NAMES] if is_node_name(n))


@dataclass
class _Challenge:
    episode: float | None  # the UNHEALTHY verdict's since it was asked for
    issued_at: float | None = None  # beacon recorded (None: waiting for a beacon)
    deadline: float | None = None
    answered: bool = False  # an answer was verified (it stands)
    outcome: str | None = None  # answered / unanswered, as last counted


class Challenges:
    """The controller's open challenges (see the module docstring).

    Args (keyword-only):
        timeout_s: how long a challenged node has to answer once the beacon is written, seconds
            (``ControllerConfig.challenge_timeout_s``; 0: no challenges).
        on_due: called with a node whose plan must be made again (its challenge was issued, or its
            answer came): the reconciler's queue.
        on_result: called with ``issued``, ``answered`` or ``unanswered`` per challenge (the metric
            ``edgewatch_controller_challenges_total{result}``).
        incarnation_of: the incarnation of a node's newest verified statement (None: none held;
            ``VerifiedEdge.newest``).
        group_of: a node's group (None: unknown; ``VerifiedEdge.group_of``).
    """

    def __init__(self, *, timeout_s: float, on_due: Callable[[str], None],
                 on_result: Callable[[str], None] = lambda _r: None,
                 incarnation_of: Callable[[str], int | None] = lambda _n: None,
                 group_of: Callable[[str], Collection[str] | None] = lambda _n: None) -> None:
        self.timeout_s = timeout_s
        self.on_due = on_due
        self.on_result = on_result
        self.incarnation_of = incarnation_of
        self.group_of = group_of
        self.wanted = asyncio.Event()  # set while a challenge waits for a beacon
        self._open: dict[str, _Challenge] = {}
        self._answering: dict[str, int] = {}  # node -> the incarnation its answers-challenges mark names
        self._unconfirmed: dict[str, frozenset[str]] = {}  # writer -> the dead votes it cannot confirm
        self._suspected: set[str] = set()  # nodes that could be challenged, voted dead or suspected
        self._last_issued: dict[str, float] = {}  # node -> when it was last challenged

    # -- inputs --------------------------------------------------------------------------------------

    def answers(self, node: str, *, mark: str | None) -> None:
        """``node``'s evidence Lease's ``edgewatch.io/answers-challenges`` mark (None: none)."""
        incarnation = parse_mark(mark)
        if incarnation is None:
            self._answering.pop(node, None)
        else:
            self._answering[node] = incarnation

    def unconfirmed(self, writer: str, text: str | None) -> None:
        """``writer``'s evidence Lease's ``edgewatch.io/unconfirmed-dead`` (None: none)."""
        names = parse_names(text)
        if names:
            self._unconfirmed[writer] = names
        else:
            self._unconfirmed.pop(writer, None)

    def eligible(self, node: str) -> bool:
        """Whether ``node`` may be challenged now (see the module docstring): it and every member
        of its group with a statement carry a current answers-challenges mark, no peer names it an
        unconfirmed dead vote, and at most a third of its group (at least one node) is suspected."""
        group = set(self.group_of(node) or ()) | {node}
        for member in group:
            incarnation = self.incarnation_of(member)
            if (member == node or incarnation is not None) and (
                    incarnation is None or self._answering.get(member) != incarnation):
                return False
        if self.vouched(node):
            return False
        return len(self._suspected & group) <= max(1, len(group) // 3)

    def vouched(self, node: str) -> bool:
        """Whether a peer names ``node`` a dead vote it cannot confirm."""
        return any(node in names for names in self._unconfirmed.values())

    def consider(self, node: str, plan: NodePlan, *, episode: float | None, now: float,
                 accused: bool = False, overdue_at: float | None = None) -> None:
        """Look at ``node``'s new plan at ``now`` (controller clock, seconds): ask for a challenge when
        its peers see it dead, or suspect it (``accused``: ``VerifiedEdge.accused``, SWIM's
        suspicion; ``episode``: since when), while it is not failed and its cloud view is OK, or LOST
        with its own renewal overdue since ``overdue_at`` at most :data:`RECENTLY_OVERDUE_S` before
        the episode (``views.own_renewal_overdue_at``; None: never seen), and it is :meth:`eligible`;
        forget it once it is neither."""
        suspected = accused or plan.edge is EdgeView.UNHEALTHY
        recently_lost = (plan.cloud is CloudView.LOST and overdue_at is not None and episode is not None
                         and episode - overdue_at <= RECENTLY_OVERDUE_S)
        open_question = plan.state is not NodeState.FAILED and (plan.cloud is CloudView.OK or recently_lost)
        if suspected and open_question:  # failed ones no longer count
            self._suspected.add(node)
        else:
            self._suspected.discard(node)
        if not suspected:
            self._drop(node)
            return
        held = self._open.get(node)
        if held is not None and held.episode == episode:
            return
        if (open_question and self.timeout_s > 0
                and now - self._last_issued.get(node, -BACKOFF_S) >= BACKOFF_S and self.eligible(node)):
            self._open[node] = _Challenge(episode=episode)
            self.wanted.set()

    def statement_came(self, node: str) -> None:
        """A new verified statement of ``node`` came in: if it is challenged, plan it again."""
        if node in self._open and self._open[node].issued_at is not None:
            self.on_due(node)

    def forget(self, node: str) -> None:
        """``node`` is gone."""
        self._drop(node)
        self._answering.pop(node, None)
        self._unconfirmed.pop(node, None)
        self._suspected.discard(node)
        self._last_issued.pop(node, None)

    def _drop(self, node: str) -> None:
        self._open.pop(node, None)
        if not self.waiting():
            self.wanted.clear()

    # -- the beacon's side ---------------------------------------------------------------------------

    def waiting(self) -> list[str]:
        """The nodes to name on the next beacon (at most :data:`MAX_PER_BEACON`, by name)."""
        names = sorted(n for n, c in self._open.items() if c.issued_at is None)
        return names[:MAX_PER_BEACON]

    def issued(self, nodes: Iterable[str], *, recorded_at: float, written_at: float) -> None:
        """The beacon naming ``nodes`` was recorded at ``recorded_at`` and its write returned at
        ``written_at``: their deadlines run from then; each is planned again."""
        for node in nodes:
            held = self._open.get(node)
            if held is None or held.issued_at is not None:
                continue
            held.issued_at, held.deadline = recorded_at, written_at + self.timeout_s
            self._last_issued[node] = recorded_at
            self.on_result("issued")
            self.on_due(node)
        if not self.waiting():
            self.wanted.clear()

    # -- the plan's side -----------------------------------------------------------------------------

    def snapshot(self, node: str, *, own: Statement | None, now: float) -> ChallengeSnapshot | None:
        """``node``'s challenge as the plan takes it (None: none issued). ``own``: the node's newest
        verified statement (``VerifiedEdge.newest``); it answers if it names the challenging beacon
        or a later one (its beacon time at or after ``issued_at``), whatever it says of its kubelet:
        its agent is alive, so its host is, and a kubelet restarting (its Lease renewals pause for a
        few seconds) is left to the Lease path, as a node whose agent is down is. An answer stands
        once seen; a peer's claim that the node's death is unconfirmed counts as one
        (:meth:`vouched`)."""
        held = self._open.get(node)
        if held is None or held.issued_at is None or held.deadline is None:
            return None
        if own is not None and own.at >= held.issued_at:
            held.answered = True
        answered = held.answered or self.vouched(node)
        outcome = "answered" if answered else "unanswered" if now >= held.deadline else None
        if outcome is not None and held.outcome != outcome:
            held.outcome = outcome
            self.on_result(outcome)
        return ChallengeSnapshot(issued_at=held.issued_at, deadline=held.deadline, answered=answered,
                                 since=held.episode)

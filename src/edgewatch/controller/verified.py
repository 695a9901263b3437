"""The edge view the controller checked itself: verdicts counted from signed statements, not read
from a condition anyone with an agent token could write (docs/security.md).

State kept here, fed by the controller's informers (``edgewatch.controller.evidence``):

* every node's published public keys (``edgewatch-nodes/<node>`` ConfigMaps);
* the beacons this controller issued, with its own clock reading at issue
  (:class:`edgewatch.core.beacon.BeaconLog`);
* the newest verified statement of every node, timed by its beacon
  (:class:`edgewatch.core.evidence.EvidenceBook`), from the evidence Leases;
* the covered nodes' labels and the grouping switches, to know every node's group exactly as the
  agents do (:func:`edgewatch.core.grouping.groups`).

From it, :meth:`VerifiedEdge.verdict` gives the decision core its edge input, a
:class:`~edgewatch.controller.model.VerifiedVerdict` (verdict, since when, last counted);
:meth:`VerifiedEdge.counted` gives the full count (votes, message) that the reconciler shows in the
``EdgeHealthy`` condition (``edgewatch.controller.edgecondition``: output only, never read back); and
:meth:`VerifiedEdge.own_life` says whether a node's own signed word proves it alive (needed before a
delegated Lease renewal counts).

Single-threaded (one event loop). Times in seconds on the controller's clock. A group's verdicts
are recounted in full over its monitoring topology (:func:`edgewatch.core.reach.decide_reach`:
O(group size x rings), about 10 ms for 1,000 nodes); a group is recounted when one of its
statements changed, or once a statement of it may count differently by time alone: the count
depends on ``now`` only through which statements are fresh (:func:`edgewatch.core.quorum.is_fresh`),
so until the group's earliest such boundary (:func:`_next_change`) it would come out the same.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from edgewatch.controller.model import VerifiedVerdict
from edgewatch.core.beacon import BeaconLog
from edgewatch.core.evidence import EvidenceBook, Statement, decode_evidence, verified_decisions
from edgewatch.core.grouping import GroupingConfig, groups
from edgewatch.core.identity import KeyRecordError, PublicKeys
from edgewatch.core.quorum import Decision, Vote, is_fresh, majority
from edgewatch.core.topology import neighbours
from edgewatch.core.types import NodeName, Verdict, is_node_name
from edgewatch.core.wire import Rejected, RejectReason

__all__ = ["CountedVerdict", "VerifiedEdge"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CountedVerdict:
    """A node's last count: the decision (verdict, vote counts, message) and since when its verdict
    holds (controller clock; new counts behind the same verdict keep ``since``)."""

    decision: Decision
    since: float


class VerifiedEdge:
    """The controller's verified edge view.

    Args (keyword-only):
        ttl_s: a statement counts while its beacon was issued at most this long ago (seconds;
            default 30 s: three of the agents' 10 s evidence refreshes, plus a 5 s beacon period).
        on_result: called with a result label per statement or record looked at (``new``,
            ``older``, ``duplicate``, ``unknown_beacon``, a ``RejectReason`` value, ``bad_key_record``,
            ``bad_key_proof``, ``key_conflict``): the metric ``edgewatch_controller_evidence_total{result}``.

    The monitoring topology's rings come with the grouping switches (ConfigMap key
    ``monitoringRings``, :meth:`set_grouping`), as the agents read them.
    """

    def __init__(self, *, ttl_s: float = 30.0, on_result: Callable[[str], None] = lambda _r: None) -> None:
        if ttl_s <= 0:
            raise ValueError("ttl_s must be > 0 seconds")
        self.ttl_s = ttl_s
        self._rings: dict[frozenset[NodeName], dict[NodeName, frozenset[NodeName]]] = {}
        # group -> when its count may next change by time alone (a statement's freshness boundary)
        self._horizon: dict[frozenset[NodeName], float] = {}
        self.on_result = on_result
        self.keys = PublicKeys()
        self.beacons = BeaconLog()
        self.book = EvidenceBook(beacon_time=self.beacons.issued_at)
        self.grouping = GroupingConfig()
        self._labels: dict[NodeName, dict[str, str]] = {}
        self._groups: dict[NodeName, frozenset[NodeName]] | None = None
        self._verdicts: dict[NodeName, CountedVerdict] = {}
        self._dirty: set[NodeName] = set()  # nodes whose group must be recounted
        # writer -> (incarnation, seq) of the own statement its suspicions were written with, and them
        self._suspicions: dict[NodeName, tuple[tuple[int, int] | None, frozenset[NodeName]]] = {}
        self._accused: dict[NodeName, float] = {}  # node -> since when a majority claims it dead or suspects it
        self._seen_alive: set[NodeName] = set()  # nodes a majority of others directly name alive
        self._last_recount: float | None = None

    # -- inputs ------------------------------------------------------------------------------------

    def set_grouping(self, config: GroupingConfig) -> None:
        """The grouping switches of the ConfigMap (regroups every node)."""
        if config != self.grouping:
            self.grouping = config
            self._regroup()

    def set_node(self, name: str, labels: Mapping[str, str] | None) -> None:
        """A covered node and its labels (None: deleted or no longer covered).

        The groups change, and every group is recounted, only when a node joins or leaves or, with
        grouping on, its group label changes (:func:`edgewatch.core.grouping.groups` reads nothing
        else). Any other label change — kube-controller-manager adding ``beta.kubernetes.io/os`` to
        every new Node, a feature labeller — is only kept: at 1,000 nodes each regrouping costs a
        new monitoring topology and a full recount (about 30 ms), once a second while such labels
        roll in (bench/api_scale.py)."""
        if not is_node_name(name):
            return
        node = NodeName(name)
        if labels is None:
            if self._labels.pop(node, None) is not None:
                self._verdicts.pop(node, None)
                self._accused.pop(node, None)
                self._seen_alive.discard(node)
                self._suspicions.pop(node, None)
                self.book.forget(node)
                self._regroup()
            return
        old, new = self._labels.get(node), dict(labels)
        if old == new:
            return
        self._labels[node] = new
        if old is None or self._group_label(old) != self._group_label(new):
            self._regroup()

    def _group_label(self, labels: Mapping[str, str]) -> str | None:
        """What of a node's labels places it in a group (nothing while grouping is off)."""
        return labels.get(self.grouping.label_key) if self.grouping.enabled else None

    def _regroup(self) -> None:
        self._groups = None
        self._rings.clear()
        self._horizon.clear()
        self._dirty.update(self._labels)

    def apply_keys(self, node: str, record: str | None) -> None:
        """A node's published key record (None: deleted). Refusals (``bad_key_record``,
        ``bad_key_proof``: a key without a valid proof of possession for ``node``, ``key_conflict``)
        are logged and counted, never raised; the node's previous keys stay."""
        if not is_node_name(node):
            return
        if record is None:
            self.keys.remove(NodeName(node))
            return
        try:
            self.keys.update(NodeName(node), record)
        except KeyRecordError as exc:
            log.warning("refusing the key record of %s (%s): %s", node, exc.reason, exc,
                        extra={"kind": "key_rejected", "node": node, "reason": exc.reason})
            self.on_result(exc.reason)

    def apply_evidence(self, writer: str, text: str | None) -> list[str]:
        """Verify and take in an evidence Lease written by ``writer`` (None or "": nothing).
        Returns the result label per statement (also given to ``on_result``)."""
        if not text or not is_node_name(writer):
            return []
        try:
            accepted, refused = decode_evidence(text, writer=NodeName(writer), verifier=self.keys)
        except Rejected as exc:
            if exc.reason is RejectReason.VERSION:  # an agent of a release this one does not read
                log.warning("evidence of %s refused: %s", writer, exc.detail,
                            extra={"kind": "evidence_version", "node": writer, "reason": exc.reason.value})
            self.on_result(exc.reason.value)
            return [exc.reason.value]
        results = [r.reason.value for r in refused]
        for refusal in refused:
            if refusal.reason is RejectReason.VERSION:
                log.warning("a statement carried by %s refused: %s", writer, refusal.detail,
                            extra={"kind": "evidence_version", "node": writer, "reason": refusal.reason.value})
        for hb in accepted:
            result = self.book.offer(hb, carrier=NodeName(writer))
            results.append(result)
            if result == "new":
                self._dirty.add(hb.origin)
        for result in results:
            self.on_result(result)
        return results

    def set_suspicions(self, writer: str, names: frozenset[str]) -> bool:
        """The neighbours ``writer`` suspects dead, from its own evidence Lease's
        ``edgewatch.io/suspects`` (empty: none; ``edgewatch.core.suspicion``), taken after that
        Lease's statements (:meth:`apply_evidence`): they are bound to ``writer``'s newest statement
        then, and count in :meth:`accused` only while that statement is its newest and fresh (a
        writer cut off since, whose Lease keeps its last annotation, stops counting when a peer
        carries a newer statement of it, or when its own goes stale). Returns whether they changed
        (then its group is recounted at the next :meth:`recount`)."""
        if not is_node_name(writer):
            return False
        node = NodeName(writer)
        new = frozenset(NodeName(n) for n in names if is_node_name(n) and n != writer)
        entry = (self._statement_key(node), new) if new else None
        if self._suspicions.get(node) == entry:
            return False
        if entry is not None:
            self._suspicions[node] = entry
        else:
            self._suspicions.pop(node, None)
        self._dirty.add(node)
        return True

    def _statement_key(self, node: NodeName) -> tuple[int, int] | None:
        held = self.book.get(node)
        return None if held is None else (held.heartbeat.incarnation, held.heartbeat.seq)

    def _accusations(self, group: frozenset[NodeName], votes: Mapping[NodeName, Vote], *,
                     now: float) -> tuple[dict[NodeName, int], dict[NodeName, int]]:
        """Per member of ``group``: how many *other* members with a fresh statement name it dead in
        that statement or suspect it in the Lease write that carried it, and how many name it alive
        without suspecting it (direct claims only, never the reach count's components: one liar and
        one honest suspicion are two, not a majority; and a silent node's own last statement does
        not make the neighbours it names reach it)."""
        counts: dict[NodeName, int] = {}
        alive: dict[NodeName, int] = {}
        for member in group:
            vote = votes.get(member)
            if vote is None or not is_fresh(vote, now=now, vote_ttl_s=self.ttl_s):
                continue
            named = set(vote.dead)
            held = self._suspicions.get(member)
            if held is not None and held[0] == self._statement_key(member):
                named |= held[1]
            for subject in named & group - {member}:
                counts[subject] = counts.get(subject, 0) + 1
            for subject in vote.alive & group - named - {member}:
                alive[subject] = alive.get(subject, 0) + 1
        return counts, alive

    # -- outputs -----------------------------------------------------------------------------------

    def group_of(self, node: NodeName) -> frozenset[NodeName] | None:
        """``node``'s group (None: not a covered node known here)."""
        if self._groups is None:
            self._groups = groups(node_labels=self._labels, enabled=self.grouping.enabled,
                                  label_key=self.grouping.label_key)
        return self._groups.get(node)

    def recount(self, *, now: float) -> set[NodeName]:
        """Recount the groups with changed statements, and every group a statement of which may
        count differently by now (expired, or come into its TTL); returns the nodes whose verified
        status or counts changed."""
        subjects: set[NodeName] = set()
        for node in self._dirty:
            group = self.group_of(node)
            if group is not None:
                subjects |= group
        self._dirty.clear()
        for node, held in self._verdicts.items():
            if held.decision.verdict is not Verdict.UNKNOWN or held.decision.votes_counted:
                group = self.group_of(node)
                if group is None or now >= self._horizon.get(group, -math.inf):
                    subjects.add(node)  # a counted statement may have expired since
        subjects |= set(self._labels) - set(self._verdicts)
        votes = self.book.votes()
        counted: dict[frozenset[NodeName], dict[NodeName, Decision]] = {}
        accused: dict[frozenset[NodeName], tuple[dict[NodeName, int], dict[NodeName, int]]] = {}
        changed: set[NodeName] = set()
        for node in subjects:
            group = self.group_of(node)
            if group is None:
                continue
            if group not in counted:
                ring = self._rings.get(group)
                if ring is None:
                    ring = self._rings[group] = dict(neighbours(group, k=self.grouping.rings))
                counted[group] = verified_decisions(group=group, votes=votes, now=now, ttl_s=self.ttl_s, ring=ring)
                accused[group] = self._accusations(group, votes, now=now)
                self._horizon[group] = _next_change(group, votes, now=now, ttl_s=self.ttl_s)
            claims, alive = accused[group]
            if (alive.get(node, 0) >= majority(len(group))) != (node in self._seen_alive):
                self._seen_alive ^= {node}
                changed.add(node)
            if claims.get(node, 0) >= majority(len(group)):
                if node not in self._accused:
                    self._accused[node] = now
                    changed.add(node)
            elif self._accused.pop(node, None) is not None:
                changed.add(node)
            decision = counted[group][node]
            held = self._verdicts.get(node)
            if held is None or held.decision != decision:
                since = now if held is None or held.decision.verdict is not decision.verdict else held.since
                self._verdicts[node] = CountedVerdict(decision=decision, since=since)
                changed.add(node)
        return changed

    def counted(self, node: str) -> CountedVerdict | None:
        """The last count of ``node`` (None before the first recount), with its votes and message."""
        return self._verdicts.get(NodeName(node))

    def verdict(self, node: str) -> VerifiedVerdict | None:
        """``node``'s verified verdict as the decision core takes it (None before the first count):
        its ``counted_at`` is the last :meth:`recount_all`, when every statement behind the verdict
        passed the evidence TTL (None if only :meth:`recount` ran: never counts as fresh)."""
        held = self._verdicts.get(NodeName(node))
        if held is None:
            return None
        return VerifiedVerdict(verdict=held.decision.verdict, since=held.since, counted_at=self._last_recount)

    def accused(self, node: str) -> float | None:
        """Since when (controller clock, seconds) a strict majority of ``node``'s group, other
        members with a fresh statement, each name it dead or suspect it (:meth:`set_suspicions`);
        None: not so (as of the last recount). Such a node is challenged
        (``edgewatch.controller.challenges``); direct claims only, so in a ring group larger than
        ``2 * rings + 1`` only the dead votes' reach count gets a node challenged."""
        return self._accused.get(NodeName(node))

    def seen_alive(self, node: str) -> bool:
        """Whether a strict majority of ``node``'s group, others with a fresh statement, each name it
        alive (and do not suspect it) directly, as of the last recount: a challenge that ``node``
        does not answer then does not fail it (cut off from the cloud, alive on its LAN)."""
        return NodeName(node) in self._seen_alive

    def recount_all(self, *, now: float) -> set[NodeName]:
        """:meth:`recount` and remember when (the freshness of every verdict it gave)."""
        changed = self.recount(now=now)
        self._last_recount = now
        return changed

    def newest(self, node: str) -> Statement | None:
        """``node``'s newest verified statement, fresh or not (None: none held)."""
        return self.book.get(NodeName(node))

    def incarnation_of(self, node: str) -> int | None:
        """The incarnation of ``node``'s newest verified statement (None: none held)."""
        st = self.book.get(NodeName(node))
        return None if st is None else st.heartbeat.incarnation

    def own_life(self, node: str, *, now: float) -> Statement | None:
        """``node``'s own fresh signed statement with a working kubelet (its proof of life, which a
        carried Lease renewal needs), or None."""
        return self.book.own_life(NodeName(node), now=now, ttl_s=self.ttl_s)


def _next_change(group: frozenset[NodeName], votes: Mapping[NodeName, Vote], *, now: float, ttl_s: float) -> float:
    """The earliest moment from which a statement of ``group`` may count differently than at
    ``now`` by time alone (seconds, controller clock; inf: never): a fresh one goes stale right after
    ``at + ttl_s``, one from the future (``at > now + ttl_s``) becomes fresh at ``at - ttl_s``
    (:func:`edgewatch.core.quorum.is_fresh`: fresh iff ``|now - at| <= ttl_s``). Before it, with the
    same statements, :func:`~edgewatch.core.evidence.verified_decisions` gives the same decisions."""
    horizon = math.inf
    for origin in group:
        vote = votes.get(origin)
        if vote is None:
            continue
        at = vote.observed_at
        if abs(now - at) <= ttl_s:
            horizon = min(horizon, at + ttl_s)
        elif at - ttl_s > now:
            horizon = min(horizon, at - ttl_s)
    return horizon

"""Signed evidence: what an agent writes for the controller, and how the controller turns it into
verdicts it checked itself.

Each agent writes one object of its own, the Lease ``edgewatch-nodes/<node>`` (the apiserver lets
only that node's agent write it, ``deploy/15-policy-agent.yaml``), with the annotation
``edgewatch.io/evidence``: a JSON list of heartbeats exactly as their origins signed them
(:class:`edgewatch.core.wire.Heartbeat`)::

    [<the writer's own heartbeat>, <a cut-off peer's own heartbeat it carries>, ...]

That bare list is evidence v4 (release 0.1.0, and what this release writes:
:data:`~edgewatch.core.protocol.EVIDENCE_WRITE_VERSION`). Evidence v5 wraps the same list with its
version and the writer's supported range, so a reader tells formats apart before reading
statements::

    {"v": 5, "versions": [4, 5], "statements": [<own>, <carried>, ...]}

The controller reads both and counts their statements alike (the statements have one format in
both); any other ``v`` is refused with the reason ``version``.

A heartbeat is a statement "at beacon B, I see these members alive and these dead, my kubelet is
(not) OK, my cloud link is (not) up", signed with its origin's own key. The controller:

1. verifies every signature with the origin's published key, and that the key is the origin's
   (:func:`decode_evidence`; the first must be the writer's own: nobody else writes that object);
2. times each statement by its *beacon* (:mod:`edgewatch.core.beacon`): the controller's own
   clock reading when it issued the value the statement names. A statement whose beacon is not one
   the controller issued is refused; one whose beacon is older than the newest held statement of
   the same origin is a replay and ignored (:class:`EvidenceBook`);
3. counts the votes of the group itself (:func:`edgewatch.core.quorum.decide`, with the beacon time
   as ``observed_at``): a strict majority of the group's members, each counted once.

So a verdict that evicts pods rests on statements signed by a majority of the group, and "this node
is alive although cut off" rests on the node's own recent statement: one compromised node (or a
stolen agent token) can add only its own vote, and cannot make a dead node's statement fresher
than the beacon it names.

Pure: no clock (``now`` and beacon times are passed in), no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from edgewatch.core.protocol import EVIDENCE_WRITE_VERSION, SUPPORTED_VERSIONS
from edgewatch.core.quorum import Decision, Vote
from edgewatch.core.reach import decide_reach
from edgewatch.core.signing import Verifier, canonical_json
from edgewatch.core.topology import DEFAULT_RINGS
from edgewatch.core.types import NodeName
from edgewatch.core.wire import Heartbeat, Rejected, RejectReason, decode_heartbeat
from edgewatch.core.wireschema import check_version

__all__ = [
    "MAX_EVIDENCE_BYTES",
    "MAX_STATEMENTS",
    "EvidenceBook",
    "Statement",
    "decode_evidence",
    "encode_evidence",
    "verified_decision",
    "verified_decisions",
]

MAX_EVIDENCE_BYTES: Final = 200_000
"""Largest evidence annotation accepted or written, bytes (the apiserver allows 256 KiB for all of
an object's annotations together)."""

MAX_STATEMENTS: Final = 64
"""Most heartbeats in one evidence list (the writer's own plus the ones it carries)."""


def encode_evidence(own: Heartbeat, carried: Iterable[Heartbeat] = (), *,
                    version: int = EVIDENCE_WRITE_VERSION) -> str:
    """The evidence annotation: canonical JSON of ``[own, *carried]`` (carried ones de-duplicated by
    origin, never the writer's own again); ``version`` 4 writes that list as release 0.1.0 does,
    5 wraps it (see the module).

    Raises:
        ValueError: more than :data:`MAX_STATEMENTS` heartbeats, or over
            :data:`MAX_EVIDENCE_BYTES` bytes (carry fewer).
    """
    items = [own.to_wire()]
    seen = {own.origin}
    for hb in carried:
        if hb.origin not in seen:
            seen.add(hb.origin)
            items.append(hb.to_wire())
    if len(items) > MAX_STATEMENTS:
        raise ValueError(f"{len(items)} statements; at most {MAX_STATEMENTS}")
    if version not in (4, 5):
        raise ValueError(f"evidence version must be 4 or 5, got {version!r}")
    document: object = items if version == 4 else {"v": 5, "versions": list(SUPPORTED_VERSIONS), "statements": items}
    text = canonical_json(document).decode("utf-8")
    if len(text.encode("utf-8")) > MAX_EVIDENCE_BYTES:
        raise ValueError(f"evidence over {MAX_EVIDENCE_BYTES} bytes")
    return text


@dataclass(frozen=True)
class Refusal:
    """One refused statement: its index in the list and why."""

    index: int
    reason: RejectReason
    detail: str


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate key")
    return dict(pairs)


def _statements(document: object) -> object:
    """The statement list of parsed evidence of either version (VERSION: a version this release
    does not read; MALFORMED: neither shape)."""
    if isinstance(document, list):
        return document  # v4
    if not isinstance(document, dict):
        raise Rejected(RejectReason.MALFORMED, "evidence must be a list (v4) or an object (v5)")
    version = document.get("v")
    check_version(version, "evidence")
    if version == 4:
        raise Rejected(RejectReason.MALFORMED, "evidence v4 is a bare list, not an object")
    if isinstance(version, bool) or version != 5 or set(document) != {"v", "versions", "statements"}:
        raise Rejected(RejectReason.MALFORMED, "evidence v5 must be {v: 5, versions: [min, max], statements: [...]}")
    versions = document["versions"]
    if (not isinstance(versions, list) or len(versions) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in versions)
            or not versions[0] <= 5 <= versions[1]):
        raise Rejected(RejectReason.MALFORMED, "evidence v5: versions must be [min, max] holding 5")
    return document["statements"]


def _no_constants(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def decode_evidence(text: object, *, writer: NodeName, verifier: Verifier) -> tuple[list[Heartbeat], list[Refusal]]:
    """Verify an untrusted evidence annotation written by ``writer``.

    Reads evidence v4 (a list, as release 0.1.0 writes it) and v5 (the wrapped list).

    Returns ``(accepted heartbeats, refusals)``. The size is checked before anything is parsed;
    each statement is verified on its own (a bad one never drops the others), except that the
    first must be ``writer``'s own: if it is not, or the list is not a list, everything is refused.

    Raises:
        Rejected: OVERSIZED, VERSION (evidence of a version older than N-1 or newer than N), or
            MALFORMED (not a JSON list of at most :data:`MAX_STATEMENTS`
            objects, or a first statement that is not the writer's own).
    """
    if not isinstance(text, str):
        raise Rejected(RejectReason.MALFORMED, "evidence is not text")
    if len(text) > MAX_EVIDENCE_BYTES or len(text.encode("utf-8", "replace")) > MAX_EVIDENCE_BYTES:
        raise Rejected(RejectReason.OVERSIZED, f"evidence over {MAX_EVIDENCE_BYTES} bytes")
    try:
        items = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    except (ValueError, RecursionError) as exc:
        raise Rejected(RejectReason.MALFORMED, f"evidence is not JSON: {exc}") from None
    items = _statements(items)
    if not isinstance(items, list) or not items or len(items) > MAX_STATEMENTS:
        raise Rejected(RejectReason.MALFORMED, f"evidence must be a list of 1-{MAX_STATEMENTS} heartbeats")
    accepted: list[Heartbeat] = []
    refused: list[Refusal] = []
    for index, item in enumerate(items):
        try:
            hb = decode_heartbeat(item, keyring=verifier)
        except Rejected as exc:
            if index == 0:
                raise Rejected(exc.reason, f"the writer's own statement: {exc.detail}") from None
            refused.append(Refusal(index=index, reason=exc.reason, detail=exc.detail))
            continue
        if index == 0 and hb.origin != writer:
            raise Rejected(RejectReason.SENDER_MISMATCH, f"first statement is from {hb.origin}, written by {writer}")
        if index > 0 and hb.origin == writer:
            refused.append(Refusal(index=index, reason=RejectReason.MALFORMED, detail="the writer's own, twice"))
            continue
        accepted.append(hb)
    return accepted, refused


@dataclass(frozen=True)
class Statement:
    """A verified heartbeat as the controller holds it: ``at`` is the issue time of the beacon it
    names (seconds, controller clock), ``carrier`` who wrote it (its origin, or the peer that
    carried it)."""

    heartbeat: Heartbeat
    at: float
    carrier: NodeName

    def vote(self) -> Vote:
        """The statement as a vote observed at its beacon time."""
        return self.heartbeat.vote(observed_at=self.at)


class EvidenceBook:
    """The newest verified statement of every origin, timed by beacon. Single-threaded.

    :meth:`offer` keeps a statement if its beacon is known and it is newer than the held one: a
    later beacon, or the same beacon and a larger ``(incarnation, seq)``. A statement naming an
    older beacon is a replay (or a slow path) and changes nothing, so neither a replay nor a
    carrier's delay can make an origin look fresher than it is.
    """

    def __init__(self, *, beacon_time: Callable[[str], float | None], max_origins: int = 10_000) -> None:
        self._beacon_time = beacon_time
        self._max = max_origins
        self._held: dict[NodeName, Statement] = {}

    def __len__(self) -> int:
        return len(self._held)

    def get(self, origin: NodeName) -> Statement | None:
        """The held statement of ``origin``."""
        return self._held.get(origin)

    def offer(self, heartbeat: Heartbeat, *, carrier: NodeName) -> str:
        """Consider a verified heartbeat; returns ``new``, ``older``, ``duplicate``,
        ``unknown_beacon`` or ``full``."""
        at = self._beacon_time(heartbeat.beacon) if heartbeat.beacon else None
        if at is None:
            return "unknown_beacon"
        held = self._held.get(heartbeat.origin)
        if held is not None:
            if (at, heartbeat.order) == (held.at, held.heartbeat.order):
                return "duplicate"
            if at < held.at or (at == held.at and heartbeat.order <= held.heartbeat.order):
                return "older"
        elif len(self._held) >= self._max:
            return "full"
        self._held[heartbeat.origin] = Statement(heartbeat=heartbeat, at=at, carrier=carrier)
        return "new"

    def forget(self, origin: NodeName) -> None:
        """Drop ``origin``'s statement (its node is gone)."""
        self._held.pop(origin, None)

    def votes(self) -> dict[NodeName, Vote]:
        """Every held statement as a vote (the caller's TTL decides which count)."""
        return {origin: st.vote() for origin, st in self._held.items()}

    def own_life(self, node: NodeName, *, now: float, ttl_s: float) -> Statement | None:
        """``node``'s own statement if it is fresh (beacon at most ``ttl_s`` seconds before ``now``)
        and says its kubelet is OK: the node's own evidence of life, whoever carried it."""
        st = self._held.get(node)
        if st is None or not st.heartbeat.kubelet_ok or now - st.at > ttl_s:
            return None
        return st


def verified_decisions(*, group: frozenset[NodeName], votes: Mapping[NodeName, Vote], now: float, ttl_s: float,
                       ring: Mapping[NodeName, frozenset[NodeName]] | None = None,
                       rings: int = DEFAULT_RINGS) -> dict[NodeName, Decision]:
    """The group's verdict on every member from verified statements (TKE Edge's majority rule over who
    reaches whom, :func:`edgewatch.core.reach.decide_reach`, counted by the controller): strict
    majority of ``group``'s size, statements younger than ``ttl_s`` seconds by their beacon.
    ``ring``: the group's topology if cached, else computed with ``rings`` rings (the agents'
    ``rings`` setting).

    Raises:
        ValueError: see :func:`edgewatch.core.reach.decide_reach`.
    """
    return decide_reach(group=group, votes=votes, now=now, vote_ttl_s=ttl_s, ring=ring, k=rings)


def verified_decision(subject: NodeName, *, group: frozenset[NodeName], votes: Mapping[NodeName, Vote],
                      now: float, ttl_s: float) -> Decision:
    """:func:`verified_decisions` for one ``subject``.

    Raises:
        ValueError: ``subject`` not in ``group``, or as :func:`verified_decisions`.
    """
    if subject not in group:
        raise ValueError(f"subject {subject!r} is not a member of the group")
    return decide_reach(group=group, votes=votes, now=now, vote_ttl_s=ttl_s, subjects=(subject,))[subject]

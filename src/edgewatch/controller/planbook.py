"""The reconciler's memory of its plans, one entry per covered node:

* the node's last plan (``NodePlan``): for the quiet path (``edgewatch.controller.quiet.only_renewed``),
  the logs and the state gauge;
* for a *settled* plan — one the API already matched when it was made: nothing written, no Event, no
  autonomy hold, no evictions — what it was made from (``edgewatch.controller.quiet.PlanInputs``) and
  its next deadline (``due_at``, controller clock, seconds): a look that finds the same inputs before
  that deadline reuses the plan instead of planning again (``quiet.still_holds``; the 30 s resync of
  an idle node costs no plan);
* how many nodes are in each enforced state, kept as plans come and go: the gauge used to be
  recounted over every plan on every reconcile, O(n) per reconcile and, with the 30 s resync, the
  larger part of the controller's CPU at 1,000 nodes (a profile of bench/api_scale.py's load).

A reused plan is not logged again: its state change and warnings were logged when it was made.

Single-threaded (one event loop). No clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from edgewatch.controller.model import LeaseSnapshot, NodePlan, NodeState
from edgewatch.controller.quiet import PlanInputs, renewed, still_holds

__all__ = ["PlanBook"]


@dataclass(frozen=True)
class _Entry:
    plan: NodePlan
    inputs: PlanInputs | None = None  # None: not settled, the next look plans again
    due_at: float | None = None  # controller clock; None: nothing time-driven pending


class PlanBook(Mapping[str, NodePlan]):
    """node name -> its last plan (a read-only mapping), with the skip memo and the state counts."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._counts: dict[NodeState, int] = dict.fromkeys(NodeState, 0)

    def __getitem__(self, name: str) -> NodePlan:
        return self._entries[name].plan

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def counts(self) -> Mapping[NodeState, int]:
        """Nodes by enforced state (``NodePlan.effective_state``); every state present."""
        return self._counts

    def put(self, name: str, plan: NodePlan) -> None:
        """``plan`` is ``name``'s plan now, not (yet) settled."""
        old = self._entries.get(name)
        if old is not None:
            self._counts[old.plan.effective_state] -= 1
        self._entries[name] = _Entry(plan=plan)
        self._counts[plan.effective_state] += 1

    def settle(self, name: str, *, inputs: PlanInputs, due_at: float | None) -> None:
        """``name``'s current plan was made from ``inputs`` and the API matched it already; it holds
        until ``due_at`` (controller clock; None: until the inputs change)."""
        entry = self._entries.get(name)
        if entry is not None:
            self._entries[name] = _Entry(plan=entry.plan, inputs=inputs, due_at=due_at)

    def pop(self, name: str) -> None:
        """Forget ``name`` (deleted, or no longer covered)."""
        entry = self._entries.pop(name, None)
        if entry is not None:
            self._counts[entry.plan.effective_state] -= 1

    def holds(self, name: str, inputs: PlanInputs, now: float) -> bool:
        """True iff ``name``'s settled plan is still its plan for ``inputs`` at ``now``."""
        entry = self._entries.get(name)
        return (entry is not None and entry.inputs is not None
                and still_holds(made=entry.inputs, due_at=entry.due_at, inputs=inputs, now=now))

    def due_in(self, name: str, now: float) -> float | None:
        """Seconds from ``now`` until ``name``'s plan's next deadline (None: none)."""
        entry = self._entries.get(name)
        return None if entry is None or entry.due_at is None else entry.due_at - now

    def renewed(self, name: str, *, before: LeaseSnapshot, after: LeaseSnapshot, due_at: float) -> None:
        """The quiet path took ``name``'s own renewal ``before`` -> ``after``: its settled plan now
        holds for ``after`` until ``due_at``, the new heartbeat deadline (or is unsettled if it was
        not made from ``before``)."""
        entry = self._entries.get(name)
        if entry is None or entry.inputs is None:
            return
        inputs = renewed(entry.inputs, before=before, after=after)
        self._entries[name] = _Entry(plan=entry.plan, inputs=inputs, due_at=due_at if inputs is not None else None)

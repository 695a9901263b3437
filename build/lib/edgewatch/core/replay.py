"""Clock-free replay protection of agent-to-agent requests: per sender, its epoch (one run of its
agent), whether an answer confirmed it, and an RFC 4303 sequence-number window.

Used by :func:`edgewatch.core.wire.decode_envelope` (see its module docstring for the whole
freshness argument: answers are fresh by their nonce, requests by this guard). Pure and
single-threaded; bounded memory (least recently accepted senders are evicted first).

Sources: RFC 4303 section 3.4.3 and RFC 6479 (anti-replay window); SWIM/memberlist incarnation
numbers.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from edgewatch.core.checks import positive_int
from edgewatch.core.rejection import Rejected, RejectReason
from edgewatch.core.types import NodeName

__all__ = ["ReplayGuard", "SenderState"]



@dataclass(frozen=True, kw_only=True)
class SenderState:
    """What a :class:`ReplayGuard` remembers of one sender.

    ``epoch`` is its current epoch, ``confirmed`` whether an answer has
    proved that epoch, ``high`` the highest seq accepted in it, ``seen`` a
    bitmap (bit i set: seq ``high - i`` was accepted) and ``retired_marks``
    its earlier epochs with the highest seq accepted in each, oldest first
    (a retired epoch that an answer brings back keeps its watermark: every
    seq up to it counts as seen, so nothing accepted before is accepted
    again).
    """

    epoch: int
    confirmed: bool
    high: int
    seen: int
    retired_marks: tuple[tuple[int, int], ...]

    @property
    def retired(self) -> tuple[int, ...]:
        """The retired epochs, oldest first."""
        return tuple(epoch for epoch, _ in self.retired_marks)


class ReplayGuard:
    """Per-sender anti-replay state: epochs, confirmation and a sequence window.

    Rules of :meth:`admit` (see the module docstring for why):

    * ``proven`` (an answer to our own request, matched by ``reply_to``):
      always accepted; its epoch becomes the sender's confirmed current
      epoch (un-retiring it if an attacker had displaced it, with every seq
      up to the highest accepted before counted as seen).
    * otherwise, a sender never heard of: accepted, epoch unconfirmed (the
      receiver-restart trade-off: at most one such request per epoch);
    * an epoch in the sender's retired list: REPLAYED;
    * the current epoch: REPLAYED if the seq was already accepted or lies
      ``window`` or more below the highest; else UNCONFIRMED while the epoch
      is unconfirmed; else accepted;
    * a larger epoch than the current one (a restart): accepted once,
      unconfirmed, the current one retired;
    * a smaller, never-seen epoch: REPLAYED (until an answer proves it).

    Bounded: at most ``max_senders`` senders (least recently accepted
    evicted first), ``retired_epochs`` retired epochs each. Pure: no clock;
    mutated only when :meth:`admit` accepts.

    Raises:
        ValueError: on construction, ``window`` or ``max_senders`` < 1 or
            ``retired_epochs`` < 0.
    """

    __slots__ = ("_max_senders", "_retired_epochs", "_states", "_window")

    def __init__(self, *, window: int = 64, max_senders: int = 5_000, retired_epochs: int = 8) -> None:
        self._window = positive_int("window", window)
        self._max_senders = positive_int("max_senders", max_senders)
        self._retired_epochs = positive_int("retired_epochs", retired_epochs, 0)
        self._states: OrderedDict[str, SenderState] = OrderedDict()

    def __len__(self) -> int:
        return len(self._states)

    def state_of(self, sender: str) -> SenderState | None:
        """What is remembered of ``sender`` (None if nothing)."""
        return self._states.get(sender)

    def _retire(self, state: SenderState, *, keep_out: int) -> tuple[tuple[int, int], ...]:
        if self._retired_epochs == 0:
            return ()
        marks = [m for m in (*state.retired_marks, (state.epoch, state.high)) if m[0] != keep_out]
        return tuple(marks[-self._retired_epochs:])

    def _fresh(self, epoch: int, seq: int, *, confirmed: bool,
               retired: tuple[tuple[int, int], ...]) -> SenderState:
        return SenderState(epoch=epoch, confirmed=confirmed, high=seq, seen=1, retired_marks=retired)

    def _revive(self, state: SenderState, epoch: int, seq: int) -> SenderState:
        """The state after an answer proves ``epoch``, which is not the current one: fresh, or a
        retired epoch brought back with every seq up to its watermark counted as seen."""
        watermark = dict(state.retired_marks).get(epoch)
        retired = self._retire(state, keep_out=epoch)
        if watermark is None:
            return self._fresh(epoch, seq, confirmed=True, retired=retired)
        full = (1 << self._window) - 1
        back = SenderState(epoch=epoch, confirmed=True, high=watermark, seen=full, retired_marks=retired)
        return self._mark(back, seq, confirmed=True)

    def _seen(self, state: SenderState, seq: int) -> bool:
        if seq > state.high:
            return False
        distance = state.high - seq
        return distance >= self._window or bool(state.seen >> distance & 1)

    def _mark(self, state: SenderState, seq: int, *, confirmed: bool) -> SenderState:
        mask = (1 << self._window) - 1
        if seq > state.high:
            shift = seq - state.high
            seen = ((state.seen << shift) | 1) & mask if shift < self._window else 1
            high = seq
        elif state.high - seq < self._window:
            seen, high = state.seen | (1 << (state.high - seq)), state.high
        else:
            seen, high = state.seen, state.high
        return SenderState(epoch=state.epoch, confirmed=confirmed, high=high, seen=seen,
                           retired_marks=state.retired_marks)

    def _store(self, sender: str, state: SenderState) -> None:
        self._states[sender] = state
        self._states.move_to_end(sender)
        while len(self._states) > self._max_senders:
            self._states.popitem(last=False)

    def admit(self, *, sender: str, epoch: int, seq: int, proven: bool, nonce: str = "") -> None:
        """Accept (and remember) envelope ``(epoch, seq)`` of ``sender``, or
        raise.

        Args:
            sender: the authenticated sender.
            epoch, seq: the envelope's counters (ints >= 0).
            proven: True for an answer whose ``reply_to`` matched our own
                request's nonce (fresh by construction).
            nonce: the envelope's nonce, only to let a refused request be
                answered (:attr:`Rejected.answer_to`).

        Raises:
            Rejected: REPLAYED or UNCONFIRMED (see the class docstring); the
                state is then unchanged.
        """
        state = self._states.get(sender)
        answer_to = (NodeName(sender), nonce) if nonce else None
        if proven:
            if state is None:
                self._store(sender, self._fresh(epoch, seq, confirmed=True, retired=()))
            elif state.epoch != epoch:
                self._store(sender, self._revive(state, epoch, seq))
            else:
                self._store(sender, self._mark(state, seq, confirmed=True))
            return
        if state is None:
            self._store(sender, self._fresh(epoch, seq, confirmed=False, retired=()))
            return
        if epoch in state.retired:
            raise Rejected(RejectReason.REPLAYED, f"{sender}: epoch {epoch} is an earlier run of that sender",
                           answer_to=answer_to)
        if epoch == state.epoch:
            if self._seen(state, seq):
                raise Rejected(RejectReason.REPLAYED,
                               f"{sender}: seq {seq} already seen (highest {state.high}, window {self._window})",
                               answer_to=answer_to)
            if not state.confirmed:
                raise Rejected(RejectReason.UNCONFIRMED,
                               f"{sender}: epoch {epoch} not yet confirmed by an answer to our probe",
                               answer_to=answer_to)
            self._store(sender, self._mark(state, seq, confirmed=True))
            return
        if epoch > state.epoch:
            self._store(sender, self._fresh(epoch, seq, confirmed=False,
                                            retired=self._retire(state, keep_out=epoch)))
            return
        raise Rejected(RejectReason.REPLAYED,
                       f"{sender}: epoch {epoch} is older than its current epoch {state.epoch} and unproven",
                       answer_to=answer_to)
